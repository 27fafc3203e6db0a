"""Pipeline parallelism: an instance of pp stages runs as pp virtual engines, each with 1/pp of
the KV blocks, priced as the whole model on one stage's GPUs plus the hand-overs between stages
(sim/costs/pipeline.py)."""

from __future__ import annotations

from typing import Any

import pytest
from scenario_factory import run, scenario

from sim.costs.catalog import HARDWARE, MODELS, HardwareSpec, kv_capacity_blocks
from sim.costs.pipeline import pipeline_terms
from sim.costs.profile import ROOFLINE_LINK_EFFICIENCY, allreduce_latency_for, roofline_profile
from sim.errors import ScenarioError
from sim.scenario.load import load_scenario_dict

MODEL = "llama-3-70b"
POLICY = {"name": "continuous", "max_num_seqs": 64}


def _run(hardware: dict[str, Any], rate: float, n: int = 80) -> Any:
    raw = scenario(policy=POLICY, model=MODEL, hardware=hardware)
    raw["profile"] = "roofline"
    raw["workload"] = {
        "num_requests": n,
        "arrival": {"process": "poisson", "rate": rate},
        "prompt_tokens": {"dist": "fixed", "value": 500},
        "output_tokens": {"dist": "fixed", "value": 100},
    }
    return run(raw)


def test_a_step_is_the_whole_model_on_one_stage_plus_the_hand_overs() -> None:
    model = MODELS[MODEL]
    stage = HARDWARE["h100-sxm"].with_tensor_parallel(4)
    piped = HardwareSpec.model_validate(stage.model_dump() | {"pipeline_parallel": 2})
    plain, two = roofline_profile(model, stage), roofline_profile(model, piped)
    latency = allreduce_latency_for(piped)[0]  # the node's measured small-message latency
    assert latency == pytest.approx(38e-6)
    per_step, per_token = pipeline_terms(model, piped, ROOFLINE_LINK_EFFICIENCY, latency)
    assert per_step == pytest.approx(latency)  # one hand-over
    assert per_token == pytest.approx(8192 * 2 / (900e9 / 2 * ROOFLINE_LINK_EFFICIENCY))
    c, d = plain.coefficients, two.coefficients
    assert d.t_mem_s == pytest.approx(c.t_mem_s + per_step)
    assert d.t_flop_s_per_token == pytest.approx(c.t_flop_s_per_token + per_token)
    assert d.t_kv_s_per_token == c.t_kv_s_per_token
    # sixteen GPUs over two nodes: the hand-over crosses the scale-out NIC
    wide = HardwareSpec.model_validate(piped.model_dump() | {"pipeline_parallel": 4,
                                                              "tensor_parallel": 4})  # fmt: skip
    _, token4 = pipeline_terms(model, wide, ROOFLINE_LINK_EFFICIENCY, 31e-6)
    assert token4 == pytest.approx(3 * 8192 * 2 / (50e9 * ROOFLINE_LINK_EFFICIENCY))


def test_virtual_engines_share_the_instances_blocks_and_bill_its_gpus() -> None:
    hw = {"name": "h100-sxm", "tensor_parallel": 2, "pipeline_parallel": 2}
    res = _run(hw, rate=2.0)
    instances = res.instances
    assert len(instances) == 2  # two virtual engines of one instance
    total = kv_capacity_blocks(
        MODELS[MODEL], HardwareSpec.model_validate(hw), 16, None, POLICY["max_num_seqs"]
    )
    assert list(instances["kv_blocks_total"]) == [total // 2, total // 2]
    assert set(instances["hardware"]) == {"h100-sxmx4 pp2"}
    single = _run({"name": "h100-sxm", "tensor_parallel": 4}, rate=2.0)
    summary = res.summary()
    assert summary["num_requests"] == 80
    # four GPUs either way: the same rent
    assert summary["fleet_usd_per_hour"] == pytest.approx(single.summary()["fleet_usd_per_hour"])


def test_a_lone_request_gains_nothing_from_stages_a_full_pipeline_gains_throughput() -> None:
    stage = {"name": "h100-sxm", "tensor_parallel": 2}
    one_stage_2x = {"name": "h100-sxm", "tensor_parallel": 2, "pipeline_parallel": 2}
    lone = _run(one_stage_2x, rate=0.02, n=10).summary()
    lone_stage = _run(stage, rate=0.02, n=10).summary()
    # one request at a time: one engine, every stage in turn, plus a hand-over
    assert lone["tpot_p50_s"] > lone_stage["tpot_p50_s"]
    assert lone["tpot_p50_s"] == pytest.approx(lone_stage["tpot_p50_s"], rel=0.01)
    # past one stage-set's capacity, two engines in flight carry about twice the load
    busy = _run(one_stage_2x, rate=12.0, n=400).summary()
    busy_stage = _run(stage, rate=12.0, n=400).summary()
    assert busy["output_tokens_per_s"] > 1.5 * busy_stage["output_tokens_per_s"]


def test_pipeline_stages_need_layers_and_links_and_do_not_take_tiers() -> None:
    raw = scenario(policy=POLICY, model="llama-2-7b",
                   hardware={"name": "h100-sxm", "pipeline_parallel": 33})  # fmt: skip
    raw["profile"] = "roofline"
    with pytest.raises(ScenarioError, match="exceeds llama-2-7b's 32 layers"):
        load_scenario_dict(raw)
    raw["hardware"] = {"name": "a40", "pipeline_parallel": 16}
    with pytest.raises(ScenarioError, match="scaleout_bandwidth_bytes_per_s is required"):
        load_scenario_dict(raw)
    raw["hardware"] = {"name": "h100-sxm", "pipeline_parallel": 2}
    raw["policy"] = POLICY | {"prefix_caching": True}
    raw["kv_tiers"] = {"dram": {"capacity_gb": 64}}
    with pytest.raises(ScenarioError, match=r"hardware\.pipeline_parallel: .*not modelled"):
        load_scenario_dict(raw)
