"""Disaggregated decode pools in the step model's fit (calibration/pd_fit.py): the TPOT row a
decode pool's counted events give, how far it carries from the costs it was counted at, the
unit costs pinned for a left-out judge, SGLang's exchange as a unit cost of its own, and the
regimes that leave disaggregated pools out with their single instances."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from calibration.fit_judges import pd_regime_frame, regime_tests
from calibration.fit_unit_costs import Design, fit
from calibration.pd_fit import PDDesign, in_fit, pd_counts, pd_tpot_row
from calibration.published_events import PointRows, seconds
from calibration.published_pd import pd_scenario
from sim.costs.catalog import HardwareSpec
from sim.costs.step_events import catalog_unit_costs, pinned_unit_costs, prior
from sim.costs.unit_keys import unit_key
from sim.simulate import simulate


def _row(**fields: Any) -> SimpleNamespace:
    """A small disaggregated row: DeepSeek-R1 on GB200 with wide EP in an 8-GPU decode pool."""
    base = dict(
        model_key="dsr1", precision="fp4", gpu="gb200", framework="dynamo-sglang",
        framework_version="lmsysorg/sglang:v0.5.2", disagg=True, spec_decoding="none",
        isl=256, osl=24, conc=16, random_range_ratio=0.8,
        prefill_tp=1, prefill_ep=1, prefill_dp_attention=True, prefill_workers=1,
        num_prefill_gpu=4, decode_tp=1, decode_ep=1, decode_dp_attention=True,
        decode_workers=1, num_decode_gpu=8, tput_per_gpu=1000.0, tpot_mean_s=0.02,
        ttft_mean_s=0.5, ttft_median_s=0.5, ttft_p99_s=1.0,
    )  # fmt: skip
    return SimpleNamespace(**(base | fields))


def _tpot(row: SimpleNamespace, costs: dict[str, float]) -> float:
    with pinned_unit_costs(costs):
        result = next(iter(simulate(pd_scenario(row, waves=2)).variants.values()))
    return float(result.summary()["tpot_mean_s"])


def test_sglang_exchanges_experts_by_a_unit_cost_of_its_own() -> None:
    hw = HardwareSpec.model_validate(
        {"name": "gb200", "tensor_parallel": 1, "data_parallel": 8, "expert_parallel": 8}
    )
    assert unit_key("dispatch_s", hw, "sglang") == "dispatch_s@nvidia/sglang"
    assert unit_key("dispatch_s", hw, "trt-llm") == "dispatch_s@nvidia"
    assert unit_key("allreduce_s", hw, "sglang") == "allreduce_s@nvidia"
    assert prior("dispatch_s@nvidia/sglang") == prior("dispatch_s@nvidia")


def test_pinned_unit_costs_price_scenarios_inside_the_block_only() -> None:
    row = _row(conc=4)
    shipped = catalog_unit_costs()
    slow = dict(shipped) | {"dispatch_s@nvidia/sglang": 4 * prior("dispatch_s@nvidia/sglang")}
    before = _tpot(row, shipped)
    with pinned_unit_costs(slow):
        assert catalog_unit_costs()["dispatch_s@nvidia/sglang"] == slow["dispatch_s@nvidia/sglang"]
    assert catalog_unit_costs() is shipped or catalog_unit_costs() == shipped
    assert _tpot(row, slow) > before * 1.2  # 58 layers x 2 exchanges a step, each 4x slower
    assert _tpot(row, shipped) == before


def test_a_decode_pools_tpot_row_carries_to_other_unit_costs() -> None:
    row = _row()
    at = dict(catalog_unit_costs())
    counts = pd_counts(row, at)
    assert counts is not None
    tpot_row = pd_tpot_row(row, counts)
    # exact where counted: the time outside the decode steps is the constant
    assert seconds(tpot_row, at) == pytest.approx(counts.simulated_tpot_s, rel=1e-9)
    assert 0.0 <= tpot_row["const"] < 0.2 * counts.simulated_tpot_s
    assert "dispatch_s@nvidia/sglang" in tpot_row
    # a slower exchange and slower kernels: the row predicts the new simulation's TPOT
    moved = at | {
        "dispatch_s@nvidia/sglang": 3 * at.get("dispatch_s@nvidia/sglang", 6e-5),
        "kernel_s@blackwell": 1.5 * at["kernel_s@blackwell"],
    }
    simulated = _tpot(row, moved)
    assert simulated > counts.simulated_tpot_s * 1.1
    assert seconds(tpot_row, moved) == pytest.approx(simulated, rel=0.05)


def test_only_disaggregated_points_without_speculation_enter_the_fit() -> None:
    assert in_fit(_row())
    assert not in_fit(_row(spec_decoding="mtp"))
    assert not in_fit(_row(disagg=False))
    assert not in_fit(_row(framework="vllm-disagg"))


def test_a_regime_left_out_takes_its_disaggregated_pools_with_it() -> None:
    singles = pd.DataFrame({
        "config_id": [0, 0, 1], "conc": [4, 64, 8], "tp": [8, 8, 4],
        "gpu": ["b200", "b200", "h200"], "framework": ["sglang", "sglang", "trt"],
        "model_key": ["dsr1", "dsr1", "llama70b"],
    })  # fmt: skip
    pools = pd.DataFrame({
        "config_id": [0, 0, 1], "conc": [16, 256, 32], "decode_tp": [1, 1, 8],
        "gpu": ["gb200", "gb200", "mi355x"],
        "framework": ["dynamo-sglang", "dynamo-sglang", "dynamo-trt"],
        "model_key": ["dsr1", "dsr1", "dsr1"],
    })  # fmt: skip
    frame = pd_regime_frame(pools)
    tests = dict(regime_tests(singles))
    assert list(tests["engine sglang"](frame)) == [True, True, False]
    assert list(tests["GPU generation Blackwell"](frame)) == [True, True, False]
    assert list(tests["the highest concurrency of every configuration"](frame)) == [
        False, True, True]  # fmt: skip
    assert list(tests["tensor parallelism 8 (every 8-GPU layout)"](frame)) == [False, False, True]
    assert list(tests["model MoE (DeepSeek-R1)"](frame)) == [True, True, True]


def test_the_fit_moves_a_unit_cost_only_the_decode_pools_see_towards_their_tpot() -> None:
    key = "dispatch_s@nvidia/sglang"
    single = PointRows({"kernel_s@hopper": 1000.0}, {"kernel_s@hopper": 10.0}, {}, 1000, 1)
    points = pd.DataFrame({"tput_per_gpu": [1.0 / prior("kernel_s@hopper")],
                           "tpot_mean_s": [10.0 * prior("kernel_s@hopper")],
                           "ttft_mean_s": [1.0], "config_id": [0]})  # fmt: skip
    keys = ["kernel_s@hopper", key]
    design = Design(points, [single], keys)
    # two pools whose TPOT is 100 exchanges: measured at twice the prior
    pool_rows = [{key: 100.0, "const": 0.001}] * 2
    pools = pd.DataFrame({"tpot_mean_s": [100 * 2 * prior(key) + 0.001] * 2,
                          "config_id": [0, 1]})  # fmt: skip
    pd_design = PDDesign(pools, pool_rows, keys)
    everything = np.ones(1, bool)
    without = fit(design, everything)
    with_pools = fit(design, everything, None, pd_design)
    values = design.values(with_pools)
    assert design.values(without)[1] == pytest.approx(prior(key))
    assert 1.6 * prior(key) < values[1] <= 2.0 * prior(key)
    # one pool left out: the other still carries it
    held = fit(design, everything, None, pd_design, np.array([False, True]))
    assert design.values(held)[1] > 1.5 * prior(key)
