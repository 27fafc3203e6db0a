"""Price and power in the catalog, and the fleet metrics of a summary: dollars per hour and per
million output tokens, mean power and energy per output token (the model of
sim/costs/prices.py, checked against hand arithmetic on the run's own busy time)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from scenario_factory import continuous, poisson, scenario, uniform

import sim
from sim.costs.catalog import HARDWARE, HardwareSpec
from sim.costs.prices import DEFAULT_ECONOMICS, IDLE_FRACTION, PRICES_AS_OF
from sim.errors import ScenarioError
from sim.metrics.fleet import FLEET_METRICS
from sim.metrics.summary import expand_steps


def test_every_catalog_gpu_has_a_price_and_board_power() -> None:
    assert set(DEFAULT_ECONOMICS) == set(HARDWARE)
    assert PRICES_AS_OF[:4].isdigit()
    for name, hw in HARDWARE.items():
        figures = hw.economics
        assert figures == DEFAULT_ECONOMICS[name]
        assert 0 < figures.usd_per_gpu_hour < 20 and 100 <= figures.tdp_w <= 1400  # MI355X
        assert figures.idle_w == pytest.approx(IDLE_FRACTION * figures.tdp_w)
    # a newer, faster GPU of a family costs more and draws more
    h100, a100 = HARDWARE["h100-sxm"].economics, HARDWARE["a100-80g"].economics
    assert h100.usd_per_gpu_hour > a100.usd_per_gpu_hour and h100.tdp_w > a100.tdp_w
    assert HARDWARE["h100-sxm"].economics.tdp_w == 700.0


def test_price_and_power_are_overridable_and_checked() -> None:
    hw = HardwareSpec.model_validate({"name": "h200", "usd_per_gpu_hour": 2.5, "tdp_w": 600})
    assert (hw.economics.usd_per_gpu_hour, hw.economics.tdp_w) == (2.5, 600)
    assert hw.economics.idle_w == pytest.approx(IDLE_FRACTION * 600)  # follows the given TDP
    custom = HardwareSpec.model_validate(
        {
            "name": "my-gpu",
            "memory_bytes": 10**10,
            "hbm_bandwidth_bytes_per_s": 1e12,
            "peak_flops": 1e14,
        }
    )
    assert all(math.isnan(x) for x in vars(custom.economics).values())
    with pytest.raises(ValueError, match="idle_w"):
        HardwareSpec.model_validate({"name": "a100-80g", "idle_w": 500})


def fleet_scenario(**extra: Any) -> dict[str, Any]:
    """Llama-3-8B on priced H100 pairs; `extra` sets (or replaces) top-level keys."""
    raw = scenario(
        name="fleet",
        seed=4,
        workload=poisson(200, 8.0, uniform(50, 400), uniform(5, 80)),
        model="llama-3-8b",
        hardware={"name": "h100-sxm", "tensor_parallel": 2, "usd_per_gpu_hour": 3.0},
        policy=continuous(max_num_seqs=32),
        profile=None,
    )
    raw.update(extra)
    return raw


def test_fleet_metrics_follow_the_stated_model() -> None:
    raw = fleet_scenario(
        cluster={"instances": [{"count": 2}, {"count": 1, "hardware": "a100-80g"}]}
    )
    variant = sim.simulate(raw)["default"]
    s = variant.summary()
    assert s["num_gpus"] == 2 * 2 + 1
    assert s["fleet_usd_per_hour"] == pytest.approx(2 * 2 * 3.0 + 1.79)
    per_token_usd = s["fleet_usd_per_hour"] / 3600 / s["output_tokens_per_s"] * 1e6
    assert s["usd_per_million_output_tokens"] == pytest.approx(per_token_usd)
    # idle power throughout the run, plus the dynamic part weighted by each instance's share of
    # the run it spent running steps (one row per step group here: sum the groups' times)
    steps = expand_steps(variant.steps)
    span = steps["end_s"].max() - variant.requests["arrival_s"].min()
    busy = steps.groupby("instance")["duration_s"].sum() / span
    power = sum(2 * (140 + 560 * busy[i]) for i in (0, 1)) + (80 + 320 * busy[2])
    assert busy.min() > 0.05 and busy.max() < 1
    assert s["fleet_power_w"] == pytest.approx(power, rel=1e-9)
    assert s["energy_per_output_token_j"] == pytest.approx(power / s["output_tokens_per_s"])
    # a streamed run folds the same totals
    streamed = sim.simulate(raw, tables=False)["default"].summary()
    for key in FLEET_METRICS:
        assert streamed[key] == pytest.approx(s[key], rel=1e-9), key


def test_disaggregated_pools_are_both_priced() -> None:
    raw = fleet_scenario(
        disaggregation={"prefill": {"count": 1}, "decode": {"count": 2, "hardware": "a100-80g"}}
    )
    s = sim.simulate(raw)["default"].summary()
    assert s["num_gpus"] == 2 + 2
    assert s["fleet_usd_per_hour"] == pytest.approx(2 * 3.0 + 2 * 1.79)


def test_a_gpu_without_a_price_has_no_fleet_cost_but_still_runs() -> None:
    gpu = {
        "name": "my-gpu",
        "memory_bytes": 80 * 2**30,
        "hbm_bandwidth_bytes_per_s": 2e12,
        "peak_flops": 3e14,
    }
    s = sim.simulate(fleet_scenario(hardware=gpu))["default"].summary()
    assert s["num_gpus"] == 1 and math.isnan(s["usd_per_million_output_tokens"])
    assert set(FLEET_METRICS) <= set(s)
    priced = sim.simulate(fleet_scenario(hardware={**gpu, "usd_per_gpu_hour": 1.0, "tdp_w": 300}))
    assert priced["default"].summary()["fleet_usd_per_hour"] == 1.0


def test_bad_figures_are_one_line_errors() -> None:
    with pytest.raises(ScenarioError, match=r"hardware: idle_w \(900\) cannot exceed tdp_w"):
        sim.load_scenario_dict(fleet_scenario(hardware={"name": "h200", "idle_w": 900}))
    with pytest.raises(ScenarioError, match=r"hardware\.usd_per_gpu_hour"):
        sim.load_scenario_dict(fleet_scenario(hardware={"name": "h200", "usd_per_gpu_hour": -1}))
