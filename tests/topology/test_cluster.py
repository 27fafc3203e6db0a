"""Colocated clusters: instances behind a router, and the invariants every cluster run keeps.

`check_invariants` is shared with the disaggregation tests: every request finishes exactly once
or is rejected, emitted tokens add up step by step, an instance never runs two step groups at
once and never holds more KV blocks than its pool, and the pools are empty at the end.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers_cluster import (
    TIMES,
    WORKLOAD,
    arrays_of,
    assert_same_times,
    check_invariants,
    run_with_cluster,
)
from scenario_factory import run, scenario, tiny_hardware, tiny_model

from sim import simulate
from sim.errors import ScenarioError
from sim.io.plots import timeline_figure, total_kv_blocks
from sim.scenario.load import load_scenario_dict

POLICY = {"name": "continuous", "max_num_seqs": 32, "max_num_batched_tokens": 4096}


def colocated(router: str, **extra: Any) -> dict[str, Any]:
    return scenario(
        policy=POLICY,
        workload=WORKLOAD,
        cluster={"router": router, "instances": [{"count": 3}]},
        **extra,
    )


def test_round_robin_cluster_keeps_the_invariants_and_spreads_evenly() -> None:
    res, cluster = run_with_cluster(colocated("round_robin"))
    check_invariants(res, cluster)
    assert len(cluster.instances) == 3
    counts = res.requests.groupby("instance").size()
    assert sorted(counts.index) == [0, 1, 2]
    assert counts.max() - counts.min() <= 1
    # request i goes to instance i mod 3
    assert (res.requests["instance"] == res.requests["id"] % 3).all()
    table = res.instance_summary()
    assert table["role"].tolist() == ["serve"] * 3
    assert table["group"].tolist() == ["group0"] * 3
    assert table["requests"].tolist() == counts.tolist()
    assert (table["num_steps"] > 0).all()


@pytest.mark.parametrize(
    "router", ["least_outstanding_requests", "least_outstanding_tokens", "least_kv", "random"]
)
def test_every_router_keeps_the_invariants(router: str) -> None:
    res, cluster = run_with_cluster(colocated(router))
    check_invariants(res, cluster)
    counts = res.requests.groupby("instance").size()
    assert len(counts) == 3 and counts.min() > 0.15 * len(res.requests)


def test_named_groups_of_different_sizes_get_their_own_rows() -> None:
    raw = scenario(
        policy=POLICY,
        workload=WORKLOAD,
        cluster={
            "router": "round_robin",
            "instances": [
                {"count": 1, "name": "big"},
                {"count": 2, "name": "small", "policy": {**POLICY, "max_num_seqs": 4}},
            ],
        },
    )
    res, cluster = run_with_cluster(raw)
    check_invariants(res, cluster)
    table = res.instance_summary()
    assert table["group"].tolist() == ["big", "small", "small"]
    assert [i.policy.max_num_seqs for i in cluster.instances] == [32, 4, 4]
    assert res.steps.loc[res.steps["instance"] > 0, "num_seqs"].max() <= 4


def test_requests_arriving_at_once_are_spread_in_id_order() -> None:
    raw = scenario(policy=POLICY, cluster={"router": "round_robin", "instances": [{"count": 3}]})
    res, _ = run_with_cluster(raw, arrays_of([0.0] * 7, [100] * 7, [5] * 7))
    assert res.requests["instance"].tolist() == [0, 1, 2, 0, 1, 2, 0]
    # instances 1 and 2 got identical work (two requests each): identical timestamps
    by = res.requests.set_index("id")
    assert by.loc[1, "finish_s"] == by.loc[2, "finish_s"] == by.loc[4, "finish_s"]
    assert by.loc[0, "finish_s"] > by.loc[1, "finish_s"]  # instance 0 batches three


@pytest.mark.parametrize(
    "router",
    [
        "round_robin",
        "least_outstanding_requests",
        "random",
        "least_outstanding_tokens",
        "least_kv",
    ],
)
def test_coalescing_decode_steps_does_not_change_a_cluster_run(router: str) -> None:
    fast, _ = run_with_cluster(colocated(router))
    slow, _ = run_with_cluster(colocated(router, engine={"coalesce_decode_steps": False}))
    assert_same_times(fast.requests, slow.requests, TIMES)
    assert fast.steps["num_steps"].max() > 1 and slow.steps["num_steps"].max() == 1


def test_a_heterogeneous_clusters_kv_use_is_its_blocks_over_all_its_blocks() -> None:
    # a small (64-token) and a large (1024-token) instance: KV % is blocks used over the
    # cluster's blocks, never instance 0's capacity times the instance count
    raw = scenario(
        policy={"name": "continuous", "max_num_seqs": 8, "block_size": 4},
        workload={
            "num_requests": 60,
            "arrival": {"process": "poisson", "rate": 50.0},
            "prompt_tokens": {"dist": "fixed", "value": 20},
            "output_tokens": {"dist": "fixed", "value": 30},
        },
        model=tiny_model(),
        hardware=tiny_hardware(64),
        cluster={
            "router": "round_robin",
            "instances": [{"count": 1}, {"count": 1, "hardware": tiny_hardware(1024)}],
        },
    )
    res = simulate(load_scenario_dict(raw))["default"]
    assert res.instances["kv_blocks_total"].tolist() == [16, 256]
    assert total_kv_blocks(res) == 272
    fig = timeline_figure(res.steps.assign(variant="default"), {"default": total_kv_blocks(res)})
    kv = np.asarray(fig.get_axes()[2].get_lines()[0].get_ydata(), dtype=float)
    # the large instance alone holds up to 8 requests x 13 blocks: far above 2 x 16 blocks
    assert res.steps["kv_blocks_used"].max() > 32
    assert 0 < np.nanmax(kv) <= 100.0


def test_kv_bytes_per_token_count_the_replicated_kv_heads_everywhere() -> None:
    # 2-way tensor parallelism of a model with one KV head: each GPU keeps a copy of it, so a
    # token's KV takes twice the model's bytes on the instance, for the pool as for transfers
    model = {**tiny_model(), "num_attention_heads": 2, "hidden_size": 2}
    hardware = {
        **tiny_hardware(400),
        "tensor_parallel": 2,
        "interconnect_bandwidth_bytes_per_s": 1e9,
    }
    raw = scenario(
        policy={"name": "continuous", "max_num_seqs": 4, "block_size": 1},
        workload={
            "num_requests": 3,
            "arrival": {"process": "constant", "rate": 1.0},
            "prompt_tokens": {"dist": "fixed", "value": 10},
            "output_tokens": {"dist": "fixed", "value": 3},
        },
        model=model,
        hardware=hardware,
        disaggregation={
            "prefill": {"count": 1},
            "decode": {"count": 1},
            "link": {"bandwidth_gb_per_s": 1e-6, "latency_s": 0.0},
        },
    )
    res = simulate(load_scenario_dict(raw))["default"]
    per_token = 2 * 1 * 2 * 1 * 1.0  # K and V, 1 layer, 2 replicated heads, head_dim 1, 1 byte
    assert res.instances["kv_bytes_per_token"].tolist() == [per_token, per_token]
    # 10 prompt tokens of KV over a 1000 B/s link
    transfer = res.requests["transfer_s"].to_numpy()
    np.testing.assert_allclose(transfer, 10 * per_token / 1e3, rtol=1e-12)


def test_kv_capacity_can_be_stated_in_blocks() -> None:
    # the memory arithmetic gives a100-80g + llama-2-7b thousands of blocks; a stated count
    # replaces it, and the instance table says which figure the run used
    stated = run(scenario(policy={"name": "continuous", "num_gpu_blocks": 40, "block_size": 16}))
    derived = run(scenario(policy={"name": "continuous", "block_size": 16}))
    a, b = stated.instance_summary().iloc[0], derived.instance_summary().iloc[0]
    assert (a["kv_blocks"], a["kv_capacity"]) == (40, "stated")
    assert b["kv_capacity"] == "memory" and b["kv_blocks"] > 1000
    assert stated.context.kv_blocks_total == 40
    # 40 blocks of 16 hold 640 tokens: the 110-token requests cannot all run together
    assert stated.summary()["kv_utilization_peak"] > 0.5
    with pytest.raises(ScenarioError, match="num_gpu_blocks"):
        run(scenario(policy={"name": "continuous", "num_gpu_blocks": 0}))
