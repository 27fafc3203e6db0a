"""Prefill/decode disaggregation: KV transfers over the link, backpressure, conservation.

Exact cases use the unit profile (every step 1 s), so that the only non-integer times are the
transfers: `prompt_tokens * kv_bytes_per_token / (bandwidth_gb_per_s * 1e9) + latency_s`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers_cluster import (
    TIMES,
    arrays_of,
    assert_same_times,
    check_invariants,
    pd_scenario,
    run_with_cluster,
)
from scenario_factory import UNIT, scenario, tiny_hardware, tiny_model, unit_trace

from sim import load_scenario_dict, simulate
from sim.costs.catalog import MODELS
from sim.metrics.results import VariantResult

CONT = {"name": "continuous", "max_num_seqs": 8, "max_num_batched_tokens": 4096}
KV_BYTES = MODELS["llama-2-7b"].kv_bytes_per_token


def disagg(link: dict[str, Any] | None = None, **pools: Any) -> dict[str, Any]:
    return {
        "prefill": {"count": 1, **pools.get("prefill", {})},
        "decode": {"count": 1, **pools.get("decode", {})},
        "link": link or {},
    }


def run_trace(tmp_path: Path, rows: list[tuple[float, int, int]], d: dict[str, Any]) -> Any:
    raw = unit_trace(tmp_path, rows, CONT, disaggregation=d)
    res = simulate(load_scenario_dict(raw, base_dir=tmp_path))["default"]
    return res, res.requests.set_index("id")


def transfer_s(prompt: int, bandwidth_gb_per_s: float, latency_s: float) -> float:
    return prompt * KV_BYTES / (bandwidth_gb_per_s * 1e9) + latency_s


def test_one_request_prefills_transfers_then_decodes(tmp_path: Path) -> None:
    link = {"bandwidth_gb_per_s": 25.0, "latency_s": 0.001}
    res, req = run_trace(tmp_path, [(0.0, 1000, 3)], disagg(link))
    x = transfer_s(1000, 25.0, 0.001)
    assert KV_BYTES == 2 * 32 * 32 * 128 * 2
    assert x == pytest.approx(0.02097152 + 0.001, rel=1e-12)
    r = req.loc[0]
    assert r["instance"] == 0 and r["decode_instance"] == 1
    assert r["first_token_s"] == 1.0 and r["ttft_s"] == 1.0  # the prefill instance's token
    assert r["handoff_s"] == 1.0 and r["transfer_start_s"] == 1.0
    assert r["transfer_end_s"] == pytest.approx(1.0 + x, rel=1e-12)
    assert r["transfer_s"] == pytest.approx(x, rel=1e-12)
    # the decode instance's two steps: the second token waits for the transfer
    assert r["finish_s"] == pytest.approx(3.0 + x, rel=1e-12)
    assert r["max_itl_s"] == pytest.approx(1.0 + x, rel=1e-12)
    assert r["tpot_s"] == pytest.approx((2.0 + x) / 2, rel=1e-12)
    steps = res.steps
    assert steps["instance"].tolist() == [0, 1]
    assert steps["num_prefill_tokens"].tolist() == [1000, 0]
    assert steps["num_decode_tokens"].tolist() == [0, 1] and steps["num_steps"].tolist() == [1, 2]
    assert steps["start_s"].tolist()[1] == pytest.approx(1.0 + x, rel=1e-12)
    s = res.summary()
    assert s["num_kv_transfers"] == 1
    assert s["kv_transfer_p50_s"] == pytest.approx(x, rel=1e-12)
    assert s["kv_transfer_queue_p50_s"] == 0.0
    assert s["link_utilization"] == pytest.approx(x / (3.0 + x), rel=1e-12)
    table = res.instance_summary()
    assert table["role"].tolist() == ["prefill", "decode"]
    assert table["group"].tolist() == ["prefill", "decode"]
    assert table["requests"].tolist() == [1, 1]


def test_transfers_on_one_link_are_fifo(tmp_path: Path) -> None:
    rows = [(0.0, 1000, 2), (0.0, 500, 2)]
    _, req = run_trace(tmp_path, rows, disagg({"bandwidth_gb_per_s": 10.0, "latency_s": 0.01}))
    x0, x1 = transfer_s(1000, 10.0, 0.01), transfer_s(500, 10.0, 0.01)
    assert req["handoff_s"].tolist() == [1.0, 1.0]  # both prompts completed in one step
    assert req.loc[0, "transfer_start_s"] == 1.0
    assert req.loc[1, "transfer_start_s"] == req.loc[0, "transfer_end_s"]
    assert req.loc[1, "transfer_end_s"] == pytest.approx(1.0 + x0 + x1, rel=1e-12)
    assert req.loc[1, "transfer_queue_s"] == pytest.approx(x0, rel=1e-12)
    # r0's one decode step starts when it lands; r1 lands during it and waits for its end
    assert x1 < 1.0
    assert req.loc[0, "finish_s"] == pytest.approx(2.0 + x0, rel=1e-12)
    assert req.loc[1, "finish_s"] == pytest.approx(3.0 + x0, rel=1e-12)


def test_two_links_let_transfers_overlap(tmp_path: Path) -> None:
    rows = [(0.0, 1000, 2), (0.0, 500, 2)]
    link = {"bandwidth_gb_per_s": 10.0, "latency_s": 0.01, "num_links": 2}
    res, req = run_trace(tmp_path, rows, disagg(link))
    x0, x1 = transfer_s(1000, 10.0, 0.01), transfer_s(500, 10.0, 0.01)
    assert req["transfer_start_s"].tolist() == [1.0, 1.0]
    assert req["transfer_end_s"].tolist() == pytest.approx([1.0 + x0, 1.0 + x1], rel=1e-12)
    assert req["transfer_queue_s"].tolist() == [0.0, 0.0]
    s = res.summary()
    span = float(req["finish_s"].max())
    assert s["link_utilization"] == pytest.approx((x0 + x1) / (2 * span), rel=1e-12)


def test_decode_pool_with_two_instances_takes_transfers_by_its_router(tmp_path: Path) -> None:
    rows = [(0.0, 100, 5), (0.0, 100, 5), (0.0, 100, 5)]
    d = disagg({"bandwidth_gb_per_s": 10.0}, decode={"count": 2, "router": "round_robin"})
    res, req = run_trace(tmp_path, rows, d)
    assert req["decode_instance"].tolist() == [1, 2, 1]
    assert res.instance_summary()["requests"].tolist() == [3, 2, 1]


# --- backpressure: a tiny decode pool (tiny model: 2 bytes of KV per token) -------------------


def tiny_disagg(decode_kv_tokens: int, **extra: Any) -> dict[str, Any]:
    return scenario(
        policy={
            "name": "continuous",
            "max_num_seqs": 8,
            "max_num_batched_tokens": 256,
            "block_size": 16,
        },
        model=tiny_model(),
        hardware=tiny_hardware(10_000),
        profile=UNIT,
        disaggregation=disagg(
            {"bandwidth_gb_per_s": 1e-9, "latency_s": 0.0},  # 1 byte/s: 2 s per token of KV
            decode={"hardware": tiny_hardware(decode_kv_tokens)},
        ),
        **extra,
    )


def test_backpressure_keeps_kv_on_the_prefill_instance_until_decode_frees_blocks() -> None:
    # decode pool: 48 tokens = 3 blocks. r0 (30 + 10) lands in 2 blocks and grows to 3;
    # r1's 30-token KV needs 2 blocks: it waits on the prefill instance until r0 finishes.
    # r2 has one output token: no transfer. r3 (40 + 10 > 48) could never land: rejected.
    arrays = arrays_of([0.0, 0.0, 0.0, 0.0], [30, 30, 8, 40], [10, 10, 1, 10])
    res, cluster = run_with_cluster(tiny_disagg(48), arrays)
    check_invariants(res, cluster)
    req = res.requests.set_index("id")
    assert req["rejected"].tolist() == [False, False, False, True]
    assert req["instance"].tolist()[3] == -1  # refused by the cluster, before any instance
    assert "decode instance" in req["reject_reason"].tolist()[3]
    assert res.summary()["num_rejected"] == 1
    x = 30 * 2.0  # seconds per 30-token transfer at 1 byte/s
    assert req.loc[0, "transfer_start_s"] == 1.0 and req.loc[0, "transfer_end_s"] == 1.0 + x
    assert req.loc[0, "finish_s"] == 1.0 + x + 9
    # the KV stayed on the prefill instance until r0 had finished and freed its blocks
    assert req.loc[1, "handoff_s"] == 1.0
    assert req.loc[1, "transfer_start_s"] == req.loc[0, "finish_s"]
    assert req.loc[1, "transfer_end_s"] == req.loc[0, "finish_s"] + x
    assert req.loc[1, "finish_s"] == req.loc[1, "transfer_end_s"] + 9
    assert req.loc[2, "finish_s"] == 1.0 and req.loc[2, "decode_instance"] == -1
    # the prefill instance's KV use shows the held blocks while nothing runs there
    prefill_steps = res.steps[res.steps["instance"] == 0]
    assert prefill_steps["kv_blocks_used"].tolist() == [2 + 2 + 1]
    s = res.summary()
    assert s["num_kv_transfers"] == 2 == int((req["num_output_tokens"] >= 2).sum())
    assert s["num_finished"] == 3 and s["num_preemptions"] == 0
    assert s["kv_transfer_queue_p50_s"] == pytest.approx((0 + x + 9) / 2)


def test_transfers_queue_behind_a_blocked_head_even_if_they_would_fit() -> None:
    # two links. r1 (30 tokens, 2 blocks) cannot land while r0 decodes; r2 (8 tokens, 1 block)
    # would fit the one free block on the free link, but transfers start in FIFO order
    arrays = arrays_of([0.0, 0.0, 0.0], [30, 30, 8], [10, 10, 3])
    raw = tiny_disagg(48)
    raw["disaggregation"]["link"]["num_links"] = 2
    res, cluster = run_with_cluster(raw, arrays)
    check_invariants(res, cluster)
    req = res.requests.set_index("id")
    assert req.loc[0, "finish_s"] == 70.0
    assert req["transfer_start_s"].tolist() == [1.0, 70.0, 70.0]
    assert req["transfer_end_s"].tolist() == [61.0, 130.0, 86.0]
    assert req.loc[2, "finish_s"] == 88.0 and req.loc[1, "finish_s"] == 139.0
    assert req["num_preemptions"].tolist() == [0, 0, 0]


def test_a_reservation_can_force_a_local_recompute() -> None:
    # one link: r2's KV lands after r1's, but its reservation (at t=130) takes the block r1
    # needs for its 33rd token at t=132: r1 preempts itself and is recomputed on the decode
    # instance once r2 finishes
    arrays = arrays_of([0.0, 0.0, 0.0], [30, 30, 8], [10, 10, 3])
    res, cluster = run_with_cluster(tiny_disagg(48), arrays)
    check_invariants(res, cluster)
    req = res.requests.set_index("id")
    assert req["transfer_start_s"].tolist() == [1.0, 70.0, 130.0]
    assert req["num_preemptions"].tolist() == [0, 1, 0]
    assert req.loc[1, "num_recomputed_tokens"] == 32
    assert req.loc[2, "finish_s"] == 148.0
    assert req.loc[1, "finish_s"] == 155.0  # recompute [148, 149), then 6 decode steps
    assert res.steps.loc[res.steps["instance"] == 1, "num_prefill_tokens"].sum() == 33


def test_every_preemption_shows_in_the_steps_table() -> None:
    arrays = arrays_of([0.0, 0.0, 0.0], [30, 30, 8], [10, 10, 3])
    res, _ = run_with_cluster(tiny_disagg(48), arrays)
    assert int(res.steps["num_preempted"].sum()) == int(res.requests["num_preemptions"].sum())


# --- conservation on a few hundred random requests ------------------------------------------


def test_disaggregated_run_keeps_the_invariants() -> None:
    res, cluster = run_with_cluster(pd_scenario())
    check_invariants(res, cluster)
    req = res.requests
    two_plus = req["num_output_tokens"] >= 2
    assert res.summary()["num_kv_transfers"] == int(two_plus.sum())
    assert (req.loc[two_plus, "decode_instance"].isin([2, 3])).all()
    assert (req.loc[~two_plus, "decode_instance"] == -1).all()
    assert (req["instance"].isin([0, 1])).all()
    counts = req.groupby("instance").size()
    assert counts.max() - counts.min() <= 1  # round robin over the prefill pool
    moved = req[two_plus]
    assert (moved["handoff_s"] == moved["first_token_s"]).all()
    assert (moved["transfer_start_s"] >= moved["handoff_s"]).all()
    assert (moved["transfer_end_s"] > moved["transfer_start_s"]).all()
    assert (moved["finish_s"] > moved["transfer_end_s"]).all()
    steps = res.steps
    prefill, decode = steps[steps["instance"] < 2], steps[steps["instance"] >= 2]
    assert prefill["num_decode_tokens"].sum() == 0  # prefill instances never decode
    assert decode["num_prefill_tokens"].sum() == 0  # no preemption: nothing recomputed
    table = res.instance_summary()
    assert table["role"].tolist() == ["prefill", "prefill", "decode", "decode"]
    assert table["requests"].tolist()[:2] == counts.tolist()
    assert sum(table["requests"].tolist()[2:]) == int(two_plus.sum())
    assert (table["num_steps"] > 0).all()


def _pd(res: VariantResult) -> list[str]:
    return [*TIMES, "handoff_s", "transfer_start_s", "transfer_end_s"]


@pytest.mark.parametrize(
    "decode_router",
    [
        "round_robin",
        "least_outstanding_requests",
        "least_kv",
    ],
)
def test_coalescing_decode_steps_does_not_change_a_disaggregated_run(decode_router: str) -> None:
    def raw(**extra: Any) -> dict[str, Any]:
        out = pd_scenario(**extra)
        out["disaggregation"]["decode"]["router"] = decode_router
        return out

    fast, _ = run_with_cluster(raw())
    slow, _ = run_with_cluster(raw(engine={"coalesce_decode_steps": False}))
    assert_same_times(fast.requests, slow.requests, _pd(fast))
    assert (fast.requests["decode_instance"] == slow.requests["decode_instance"]).all()
    assert fast.steps["num_steps"].max() > 1 and slow.steps["num_steps"].max() == 1


def test_a_reservation_during_a_decode_run_is_exact() -> None:
    # decode pool 4 blocks of 16. r0 (1 + 60) lands at t=3 and decodes in one run planned on 3
    # free blocks; r1's 20-token KV reserves 2 of them at t=26 while r0 is mid-run and lands
    # at t=66. Step by step r0 is preempted at its 33rd token (recomputed locally).
    arrays = arrays_of([0.0, 25.0], [1, 20], [60, 5])
    link = {"bandwidth_gb_per_s": 1e-9, "latency_s": 0.0, "num_links": 2}
    out = []
    for coalesce in (False, True):
        raw = tiny_disagg(64, engine={"coalesce_decode_steps": coalesce})
        raw["disaggregation"]["link"] = link
        res, cluster = run_with_cluster(raw, arrays)
        check_invariants(res, cluster)
        out.append(res)
    slow, fast = out
    assert slow.requests.loc[0, "num_preemptions"] == 1
    assert_same_times(fast.requests, slow.requests, _pd(fast))
