"""Mixture-of-experts instances run end to end: data-parallel ranks, expert parallelism, the
expert terms priced per step, and multi-token prediction as a speculative method."""

from __future__ import annotations

from typing import Any

import pytest
from scenario_factory import run, scenario

from sim.errors import ScenarioError
from sim.scenario.load import load_scenario_dict

MOE = dict(
    name="small-moe", num_parameters=4_000_000_000, num_layers=16, hidden_size=2048,
    num_attention_heads=16, num_kv_heads=4, head_dim=128, max_model_len=8192, num_experts=32,
    experts_per_token=4, moe_intermediate_size=1024,
)  # fmt: skip
GPU = dict(
    name="gpu-x", memory_bytes=80 * 2**30, hbm_bandwidth_bytes_per_s=3e12, peak_flops=1e15,
    interconnect_bandwidth_bytes_per_s=900e9, usd_per_gpu_hour=2.0, tdp_w=700.0,
)  # fmt: skip
POLICY = {"name": "continuous", "max_num_seqs": 64}


def moe_run(hardware: dict[str, Any], rate: float | None = None) -> Any:
    raw = scenario(policy=POLICY, model=MOE, hardware=hardware)
    raw["profile"] = "roofline"
    raw["workload"]["num_requests"] = 60
    if rate is not None:
        raw["workload"]["arrival"]["rate"] = rate
    return run(raw)


def test_data_parallel_ranks_serve_every_request_and_bill_every_gpu() -> None:
    one = moe_run(GPU)
    ranks = moe_run(GPU | {"data_parallel": 4, "expert_parallel": 4})
    for res in (one, ranks):
        assert res.summary()["num_requests"] == 60
    # four GPUs rent four times the price
    per_hour = ranks.summary()["fleet_usd_per_hour"]
    assert per_hour == pytest.approx(4 * one.summary()["fleet_usd_per_hour"])


def test_expert_parallel_exchange_slows_a_single_stream() -> None:
    # one request at a time: each step reads few experts, but pays the all-to-all latency
    tp = moe_run(GPU | {"tensor_parallel": 4}, rate=0.05)
    ep = moe_run(GPU | {"data_parallel": 4, "expert_parallel": 4}, rate=0.05)
    assert ep.summary()["tpot_p50_s"] > tp.summary()["tpot_p50_s"]


def test_mtp_needs_a_model_with_a_prediction_module() -> None:
    spec = {"method": "mtp", "num_speculative_tokens": 2, "acceptance": {"rate": [0.8, 0.6]}}
    raw = scenario(policy=POLICY | {"speculative": spec}, model=MOE, hardware=GPU)
    with pytest.raises(ScenarioError, match=r"policy\.speculative\.method.*has none"):
        load_scenario_dict(raw)
    raw["model"] = MOE | {"num_mtp_layers": 1}
    raw["profile"] = "roofline"
    raw["workload"]["num_requests"] = 40
    with_mtp = run(raw)
    raw["policy"] = POLICY
    without = run(raw)
    assert with_mtp.summary()["num_requests"] == without.summary()["num_requests"] == 40
    # accepted tokens cut the decode steps per token: TPOT falls
    assert with_mtp.summary()["tpot_p50_s"] < without.summary()["tpot_p50_s"]


def test_mtp_takes_no_draft_model() -> None:
    spec = {"method": "mtp", "num_speculative_tokens": 1, "acceptance": {"rate": 0.8},
            "draft_model": "llama-2-7b"}  # fmt: skip
    raw = scenario(policy=POLICY | {"speculative": spec}, model=MOE | {"num_mtp_layers": 1},
                   hardware=GPU)  # fmt: skip
    with pytest.raises(ScenarioError, match="draft_model is for method draft, not mtp"):
        load_scenario_dict(raw)


def test_sliding_windows_for_too_many_sequences_are_refused_with_the_arithmetic() -> None:
    policy = {"name": "continuous", "max_num_seqs": 4096}
    raw = scenario(policy=policy, model="llama-4-scout", hardware="mi355x")
    raw["profile"] = "roofline"
    with pytest.raises(ScenarioError, match=r"policy\.max_num_seqs: .*sliding-window layers keep"):
        load_scenario_dict(raw)
    raw["policy"]["max_num_seqs"] = 16
    load_scenario_dict(raw)  # fits
