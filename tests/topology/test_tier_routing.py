"""KV tiers seen by routing and by disaggregation.

Routing: an instance's cached prefix (`Instance.cached_prefix_tokens`) counts what its KV tiers
hold: a block in its own DRAM only there, a block in the shared store everywhere. On a 2-instance
cluster where a prefix computed on instance 0 has left its GPU, the prefix-affinity router
therefore keeps the prefix on instance 0 with a DRAM tier and balances by load with a store.
Known gap (a strict expected failure): an instance reads the store as of its own last step, so
one idle since before the store got a block does not see it.

P/D through the store (`disaggregation.link.via: store`): the prefill instance writes the KV to
`kv_tiers.remote` and the decode instance reads it, each at its own path's figures, and the
prefill instance's blocks are free once the write is done. Exact times on tiny cases.
"""

from __future__ import annotations

import copy
from typing import Any
from unittest import mock

import numpy as np
import pytest
from fuzz_corpus_tiers import PD_BASE, TIER_BASE
from helpers_cluster import check_invariants, run_with_cluster
from helpers_prefix import COEFFS
from helpers_sim import instruments_engine
from scenario_factory import UNIT, scenario, tiny_hardware, tiny_model

from sim import load_scenario_dict
from sim.errors import ScenarioError
from sim.topology.router import ROUTERS, Router, Signals
from sim.workload import RequestArrays
from sim.workload.arrays import Content, Sessions

BS = 4  # tokens per block and per content id
GPU_TOKENS = 20  # 5 blocks per instance
# 1,073 bytes: room for every block of these cases (8 bytes each)
TIER = {"capacity_gb": 1e-6}
TIERS: dict[str, dict[str, Any]] = {"none": {}, "dram": {"dram": TIER}, "remote": {"remote": TIER}}


def _arrays(rows: list[tuple[float, list[int], int, int, int]]) -> RequestArrays:
    """Requests from (arrival, content ids, prompt tokens, output tokens, session) rows."""
    n = len(rows)
    tokens = np.asarray([r[2] for r in rows], dtype=np.int64)
    content = Content(
        ids=np.asarray([i for r in rows for i in r[1]], dtype=np.int64),
        offsets=np.cumsum([0, *(len(r[1]) for r in rows)]).astype(np.int64),
        unit=BS,
        tokens=tokens,
    )
    return RequestArrays(
        arrival_s=np.asarray([r[0] for r in rows], dtype=float),
        prompt_tokens=tokens,
        output_tokens=np.asarray([r[3] for r in rows], dtype=np.int64),
        class_index=np.zeros(n, dtype=np.int64),
        class_names=("default",),
        content=content,
        sessions=Sessions(np.asarray([r[4] for r in rows], dtype=np.int64)),
    )


# A (session 1) computes a 16-token prefix on instance 0 and leaves. X (session 2) arrives while
# A runs and goes to the idle instance 1, where it decodes for a while (so instance 1 has stepped
# since A's blocks reached the store: see the expected failure below). B (session 3) finds both
# idle and goes to instance 0, where its 5 blocks evict all 4 of A's. C (session 1, A's content)
# arrives while B runs: of its 16 tokens, the first 12 (3 blocks) could be cached.
A, X, B, C = range(4)
ROWS = [
    (0.0, [1, 2, 3, 4], 16, 1, 1),
    (0.001, [20, 21], 8, 10, 2),
    (10.0, [5, 6, 7, 8, 9], 17, 2, 3),
    (10.001, [1, 2, 3, 4], 16, 1, 1),
]


def _route(router: str, tiers: dict[str, Any], rows: list[Any] = ROWS) -> tuple[Any, list[Any]]:
    """Run the cluster; also each routing decision's hit fractions, instance by instance."""
    raw = scenario(
        policy={"name": "continuous", "max_num_seqs": 4, "max_num_batched_tokens": 64,
                "block_size": BS, "watermark": 0.0, "prefix_caching": True},
        coefficients=COEFFS, model=tiny_model(), hardware=tiny_hardware(GPU_TOKENS),
        cluster={"router": router, "router_options": {"hit_weight": 3.0},
                 "instances": [{"count": 2}]},
    )  # fmt: skip
    if tiers:
        raw["kv_tiers"] = tiers
    seen: list[Any] = []
    cls = ROUTERS[router]
    pick = cls.pick

    def spy(self: Router, s: Signals) -> int:
        seen.append([s.hit(i) for i in range(s.num_instances)])
        return pick(self, s)

    with mock.patch.object(cls, "pick", spy):
        res, cluster = run_with_cluster(raw, _arrays(rows))
    req = res.requests
    assert req["finish_s"].notna().all()
    # every prompt token computed once, or taken from a cache
    prefilled = int(res.steps["num_prefill_tokens"].sum())
    assert prefilled + req["num_cached_tokens"].sum() == req["num_prompt_tokens"].sum()
    assert all(inst.pool.num_used == 0 for inst in cluster.instances)
    return req.set_index("id"), seen


@instruments_engine
@pytest.mark.parametrize(
    ("kind", "reported", "instance"),
    [
        ("none", [0.0, 0.0], 1),  # nothing cached anywhere: the idle instance
        ("dram", [0.75, 0.0], 0),  # 3 * 0.75 - 1 (busy) beats 0 on the idle instance
        ("remote", [0.75, 0.75], 1),  # equal hits: the load decides
    ],
)
def test_prefix_affinity_sees_own_dram_and_the_shared_store(
    kind: str, reported: list[float], instance: int
) -> None:
    req, seen = _route("prefix_affinity", TIERS[kind])
    assert req["instance"].tolist() == [0, 1, 0, instance]
    assert seen[A] == seen[X] == seen[B] == [0.0, 0.0]
    assert seen[C] == reported  # 12 of C's 16 tokens, where each instance could load them
    # C starts from those 12 tokens wherever it went (loaded from the tier), or from none
    assert req.loc[C, "num_cached_tokens"] == (0 if kind == "none" else 12)
    assert req.loc[[A, X, B], "num_cached_tokens"].tolist() == [0, 0, 0]


@instruments_engine
def test_an_idle_instance_sees_what_the_store_got_after_its_last_step() -> None:
    # without X, instance 1 never steps: it reads the store as of the routing decision, not as
    # of its own last step
    _, seen = _route("prefix_affinity", TIERS["remote"], [ROWS[A], ROWS[B], ROWS[C]])
    assert seen[-1] == [0.75, 0.75]


@instruments_engine
@pytest.mark.parametrize("kind", ["none", "dram", "remote"])
def test_session_sticky_sends_a_turn_home_where_its_tiers_serve_it(kind: str) -> None:
    req, seen = _route("session_sticky", TIERS[kind])
    # A's session started on instance 0: C goes there though B keeps it busy, and with the
    # store though the idle instance 1 could load C's history as well
    assert req["instance"].tolist() == [0, 1, 0, 0]
    assert seen[C] == {"none": [0.0, 0.0], "dram": [0.75, 0.0], "remote": [0.75, 0.75]}[kind]
    # B evicted A's blocks from instance 0's GPU: only a tier gives C its history back
    assert req.loc[C, "num_cached_tokens"] == (0 if kind == "none" else 12)


# -- P/D through the shared store ---------------------------------------------------------------

PROMPT, OUTPUT = 10, 3
# the store: 2 B/s written, 1 B/s read, 0.5 s per transfer; the direct link: 1 B/s, 0.25 s
STORE = {"capacity_gb": 1e-6, "write_gb_per_s": 2e-9, "read_gb_per_s": 1e-9, "latency_s": 0.5}
LINK = {"bandwidth_gb_per_s": 1e-9, "latency_s": 0.25}


def _pd(via: str, prefill_tokens: int = 10_000, decode_hw: dict[str, Any] | None = None,
        model: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    return scenario(
        policy={"name": "continuous", "max_num_seqs": 8, "max_num_batched_tokens": 256,
                "block_size": BS, "prefix_caching": True},
        model=model or tiny_model(), hardware=tiny_hardware(prefill_tokens), profile=UNIT,
        kv_tiers={"remote": STORE},
        disaggregation={"prefill": {"count": 1},
                        "decode": {"count": 1, "hardware": decode_hw or tiny_hardware(10_000)},
                        "link": {**LINK, "via": via}},
    )  # fmt: skip


def _times(via: str, rows: list[tuple[float, int, int]], **kw: Any) -> Any:
    arrival, prompt, output = zip(*rows, strict=True)
    arrays = RequestArrays(
        arrival_s=np.asarray(arrival, dtype=float),
        prompt_tokens=np.asarray(prompt, dtype=np.int64),
        output_tokens=np.asarray(output, dtype=np.int64),
        class_index=np.zeros(len(rows), dtype=np.int64),
        class_names=("default",),
    )
    res, cluster = run_with_cluster(_pd(via, **kw), arrays)
    check_invariants(res, cluster)
    return res, res.requests.set_index("id")


def test_a_transfer_through_the_store_is_a_write_then_a_read() -> None:
    _, direct = _times("direct", [(0.0, PROMPT, OUTPUT)])
    res, store = _times("store", [(0.0, PROMPT, OUTPUT)])
    nbytes = PROMPT * 2  # the tiny model: 2 bytes of KV per token
    link_s = 0.25 + nbytes / 1.0
    store_s = (0.5 + nbytes / 2.0) + (0.5 + nbytes / 1.0)  # 10.5 s written, 20.5 s read
    for req, x in ((direct, link_s), (store, store_s)):
        r = req.loc[0]
        assert r["handoff_s"] == 1.0 and r["transfer_start_s"] == 1.0  # the prefill step: 1 s
        assert r["transfer_s"] == pytest.approx(x, rel=1e-12)
        assert r["finish_s"] == pytest.approx(1.0 + x + OUTPUT - 1, rel=1e-12)
    assert store_s == 31.0 and link_s == 20.25
    s = res.summary()
    assert s["num_kv_transfers"] == 1
    assert s["link_utilization"] == pytest.approx(store_s / (1.0 + store_s + 2), rel=1e-12)


def test_the_prefill_instance_frees_its_blocks_once_the_store_has_them() -> None:
    # the prefill pool holds 4 blocks: r1 (10 tokens, 3 blocks) waits for r0's KV to leave,
    # which is its landing over the link but the end of its write to the store
    rows = [(0.0, PROMPT, OUTPUT), (0.0, PROMPT, OUTPUT)]
    _, direct = _times("direct", rows, prefill_tokens=16)
    res_s, store = _times("store", rows, prefill_tokens=16)
    written = 1.0 + 0.5 + 20 / 2.0
    assert direct.loc[1, "first_token_s"] == pytest.approx(1.0 + 20.25 + 1.0, rel=1e-12)
    assert store.loc[1, "first_token_s"] == pytest.approx(written + 1.0, rel=1e-12)
    # one link: r1's transfer starts when r0's read ends, and takes the same 31 s
    assert store.loc[1, "transfer_start_s"] == pytest.approx(1.0 + 31.0, rel=1e-12)
    assert store.loc[1, "transfer_end_s"] == pytest.approx(1.0 + 62.0, rel=1e-12)
    prefill = res_s.steps[res_s.steps["instance"] == 0]
    assert prefill["start_s"].tolist() == pytest.approx([0.0, written], rel=1e-12)


def test_each_side_moves_its_own_bytes_over_its_own_path() -> None:
    # the decode instance: 2-way tensor parallelism of a model with one KV head, so a token
    # takes twice the bytes there, read over two GPUs' paths at once
    model = {**tiny_model(), "num_attention_heads": 2, "hidden_size": 2}
    decode = {**tiny_hardware(10_000), "tensor_parallel": 2,
              "interconnect_bandwidth_bytes_per_s": 1e9}  # fmt: skip
    res, req = _times("store", [(0.0, PROMPT, OUTPUT)], decode_hw=decode, model=model)
    assert res.instances["kv_bytes_per_token"].tolist() == [2.0, 4.0]
    write_s = 0.5 + PROMPT * 2.0 / 2.0
    read_s = 0.5 + PROMPT * 4.0 / (1.0 * 2)
    assert req.loc[0, "transfer_s"] == pytest.approx(write_s + read_s, rel=1e-12)


def _via(raw: dict[str, Any]) -> str:
    d = load_scenario_dict(raw).variants[0].spec.disaggregation
    assert d is not None
    return d.link.via


def test_via_store_needs_the_shared_store() -> None:
    raw = _pd("store")
    raw["kv_tiers"] = {"dram": STORE}
    with pytest.raises(ScenarioError) as info:
        load_scenario_dict(raw)
    assert "disaggregation.link.via: store needs kv_tiers.remote" in str(info.value)
    assert "\n" not in str(info.value)
    assert _via(_pd("direct")) == "direct"
    # the default is the direct link
    raw = _pd("direct")
    del raw["disaggregation"]["link"]["via"]
    assert _via(raw) == "direct"


def test_the_tier_fuzz_cases_edit_valid_scenarios() -> None:
    # each case of tests/fuzz_corpus_tiers.py breaks one thing of these: they load as they are
    for raw in (TIER_BASE, PD_BASE):
        resolved = load_scenario_dict(copy.deepcopy(raw)).variants
        assert [v.spec.kv_tiers is not None for v in resolved] == [True, True]
    assert _via(PD_BASE) == "store"
