"""Engine effects priced on top of a profile: CUDA-graph padding, token padding, CPU overhead
(with and without overlap), hand cases exact, runs still exact, off by default."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scenario_factory import chunked, lognormal, poisson, scenario

from sim import ScenarioError, load_scenario_dict, simulate
from sim.core.plan import StepFeatures
from sim.costs.cost_model import CostModel
from sim.costs.knobs import VLLM_CAPTURE_SIZES, KnobbedPricer, PricingSpec, merge_pricing
from sim.costs.pricer import make_cost_model
from sim.costs.profile import Profile
from sim.metrics.summary import expand_steps

T_MEM, T_FLOP, T_KV, T_ATTN = 0.005, 2e-5, 1e-7, 1e-9


def profile(**extra: Any) -> Profile:
    return Profile.model_validate(
        {
            "schema_version": 1,
            "name": "t",
            "source": "inline",
            "model_form": "extended",
            "coefficients": {
                "t_mem_s": T_MEM,
                "t_flop_s_per_token": T_FLOP,
                "t_kv_s_per_token": T_KV,
                "t_attn_s_per_token2": T_ATTN,
            },
        }
        | extra
    )


def decode(b: int, ctx: int, repeated: bool = False) -> StepFeatures:
    return StepFeatures(b, b, 0, b, b * (ctx + 1), 0, b if repeated else 0, b, 0, ())


def prefill(n: int) -> StepFeatures:
    return StepFeatures(1, n, n, 0, n, n * n, 0, 1, 0, ((n, 0),))


def knobbed(**pricing: Any) -> KnobbedPricer:
    cost = make_cost_model(profile(), PricingSpec.model_validate(pricing))
    assert isinstance(cost, KnobbedPricer)
    return cost


def test_vllm_capture_sizes() -> None:
    assert VLLM_CAPTURE_SIZES[:5] == (1, 2, 4, 8, 16)
    assert VLLM_CAPTURE_SIZES[VLLM_CAPTURE_SIZES.index(248) + 1 :][:3] == (256, 272, 288)
    assert VLLM_CAPTURE_SIZES[-1] == 512 and len(VLLM_CAPTURE_SIZES) == 3 + 31 + 17


def test_cuda_graph_padding_prices_a_decode_at_the_next_captured_size() -> None:
    cost = knobbed(cuda_graph_capture_sizes="vllm")
    # 5 decodes over 100 cached tokens each run the graph of 8: three padded slots compute a
    # token each and read no KV
    first, increment = cost.run_times(decode(5, 100, repeated=True))
    assert first == pytest.approx(T_MEM + 8 * T_FLOP + T_KV * 5 * 101, rel=1e-15)
    assert increment == pytest.approx(5 * T_KV, rel=1e-15)
    assert cost.run_times(decode(8, 100))[0] == pytest.approx(T_MEM + 8 * T_FLOP + T_KV * 808)
    assert cost.run_times(decode(300, 10))[0] == pytest.approx(T_MEM + 304 * T_FLOP + T_KV * 3300)
    # above the largest captured size the step runs eagerly, unpadded
    assert cost.run_times(decode(600, 10))[0] == pytest.approx(T_MEM + 600 * T_FLOP + T_KV * 6600)
    # a prefill (or mixed) step is never graph-padded
    assert cost.run_times(prefill(5))[0] == pytest.approx(
        T_MEM + 5 * T_FLOP + 5 * T_KV + 25 * T_ATTN
    )
    # a custom list
    custom = knobbed(cuda_graph_capture_sizes=[4, 1, 32])
    assert custom.padded(decode(3, 0)) == (4, 4)
    assert custom.padded(decode(5, 0)) == (32, 32)
    assert custom.padded(decode(33, 0)) == (33, 33)


def test_token_padding_rounds_other_steps_up() -> None:
    cost = knobbed(pad_tokens_to=8)
    assert cost.run_times(prefill(13))[0] == pytest.approx(
        T_MEM + 16 * T_FLOP + 13 * T_KV + 169 * T_ATTN, rel=1e-15
    )
    assert cost.run_times(prefill(16))[0] == pytest.approx(
        T_MEM + 16 * T_FLOP + 16 * T_KV + 256 * T_ATTN, rel=1e-15
    )
    both = knobbed(pad_tokens_to=8, cuda_graph_capture_sizes=[1, 2, 4, 16])
    assert both.padded(decode(5, 0)) == (16, 16)  # the graph size, not the multiple of 8
    assert both.padded(prefill(13)) == (16, 1)


def test_cpu_overhead_is_added_to_a_synchronous_step() -> None:
    cost = knobbed(cpu_overhead={"per_step_s": 0.002, "per_seq_s": 1e-5})
    gpu = T_MEM + 8 * T_FLOP + T_KV * 8 * 101
    first, increment = cost.run_times(decode(8, 100, repeated=True))
    assert first == pytest.approx(gpu + 0.002 + 8e-5, rel=1e-15)
    assert increment == pytest.approx(8 * T_KV, rel=1e-15)
    assert cost.cpu_overhead_s(decode(8, 100)) == pytest.approx(0.002 + 8e-5, rel=1e-15)
    assert cost.linear_steps(decode(8, 100, repeated=True)) > 10**12


def test_overlapped_cpu_overhead_takes_the_longer_side_and_cuts_the_run_at_the_crossing() -> None:
    # GPU: 5 ms + 20 us + 0.1 us per cached token read; CPU: 6.00005 ms. One decode over L
    # tokens: gpu(L) = 0.00502 + 1e-7 * (L + 1), which passes the CPU time after L + 1 = 9800
    cpu = 0.00600005
    cost = knobbed(cpu_overhead={"per_step_s": cpu, "overlap": True})
    start = decode(1, 9000, repeated=True)
    first, increment = cost.run_times(start)
    assert (first, increment) == (cpu, 0.0)  # CPU-bound: the GPU time hides behind it
    steps = cost.linear_steps(start)
    gpu = [T_MEM + T_FLOP + T_KV * (9001 + j) for j in range(steps + 1)]
    assert max(gpu[:steps]) <= cpu < gpu[steps]
    assert steps == 800  # L = 9000..9799
    first, increment = cost.run_times(decode(1, 9000 + steps, repeated=True))
    assert first == pytest.approx(gpu[steps], rel=1e-12) and increment == pytest.approx(T_KV)
    assert cost.linear_steps(decode(1, 9000 + steps, repeated=True)) > 10**12
    # without overlap the two add up
    serial = knobbed(cpu_overhead={"per_step_s": cpu})
    assert serial.run_times(start)[0] == pytest.approx(gpu[0] + cpu, rel=1e-15)


def test_knobs_are_off_by_default_and_merge_scenario_over_profile() -> None:
    assert isinstance(make_cost_model(profile()), CostModel)
    assert not PricingSpec().active
    assert not PricingSpec(cpu_overhead={"per_step_s": 0.0}).active
    own = PricingSpec(pad_tokens_to=8, cuda_graph_capture_sizes="vllm")
    scenario = PricingSpec(cuda_graph_capture_sizes=None)  # switched off for this scenario
    merged = merge_pricing(own, scenario)
    assert merged.pad_tokens_to == 8 and merged.cuda_graph_capture_sizes is None
    assert merge_pricing(own, None) == own
    assert isinstance(make_cost_model(profile(pricing={"pad_tokens_to": 8})), KnobbedPricer)
    with pytest.raises(ValueError, match="non-empty"):
        PricingSpec(cuda_graph_capture_sizes=[])


def knob_scenario(**engine: Any) -> dict[str, Any]:
    """Chunked prefill on the model's roofline (no engine effects of its own); `engine` is the
    scenario's engine block."""
    return scenario(
        seed=5,
        workload=poisson(120, 8.0, lognormal(300, 0.8, 2000), lognormal(100, 0.8, 800)),
        policy=chunked(max_num_batched_tokens=512),
        profile="roofline",
        engine=engine,
    )


def test_knobs_from_the_scenario_change_times_and_keep_runs_exact() -> None:
    pricing = {
        "cuda_graph_capture_sizes": "vllm",
        "pad_tokens_to": 16,
        "cpu_overhead": {"per_step_s": 0.012, "per_seq_s": 2e-5, "overlap": True},
    }
    plain = simulate(load_scenario_dict(knob_scenario()))["default"]
    fast = simulate(load_scenario_dict(knob_scenario(pricing=pricing)))["default"]
    slow_raw = knob_scenario(pricing=pricing, coalesce_decode_steps=False)
    slow = simulate(load_scenario_dict(slow_raw))["default"]
    assert fast.summary()["tpot_p50_s"] > plain.summary()["tpot_p50_s"]
    for col in ("first_token_s", "finish_s", "max_itl_s"):
        np.testing.assert_allclose(fast.requests[col], slow.requests[col], rtol=1e-9, err_msg=col)
    expanded = expand_steps(fast.steps)
    assert len(expanded) == len(slow.steps)
    # the 12 ms CPU floor shows in the steps: none is shorter
    assert slow.steps["duration_s"].min() >= 0.012 - 1e-12
    # the host time is reported: 12 ms per step plus 20 us per sequence in it, coalesced or not
    steps = slow.steps
    cpu = 0.012 * len(steps) + 2e-5 * float(steps["num_seqs"].sum())
    assert slow.summary()["cpu_overhead_s"] == pytest.approx(cpu, rel=1e-9)
    assert fast.summary()["cpu_overhead_s"] == pytest.approx(cpu, rel=1e-9)
    assert "cpu_overhead_s" not in plain.summary()  # no knob, no metric


def test_bad_pricing_is_a_scenario_error() -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario_dict(knob_scenario(pricing={"pad_tokens_to": 0}))
    assert info.value.path == "engine.pricing.pad_tokens_to"
