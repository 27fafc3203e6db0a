"""Routers' picks on crafted instance states, driven without SimPy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import get_args

import numpy as np
import pytest
from helpers_cluster import StandIn

from sim.core.instance import Load
from sim.core.kv.pool import KVPool
from sim.core.request import Request
from sim.scenario.schema import RouterName
from sim.topology.router import ROUTERS, Loads, Router, make_router


@dataclass
class FakePolicy:
    """What a router reads of an instance: its KV pool, queue lengths and outstanding work."""

    used_blocks: int = 0
    total_blocks: int = 100
    num_waiting: int = 0
    num_running: int = 0
    tokens: int = 0
    kv: KVPool = field(init=False)

    def __post_init__(self) -> None:
        self.kv = KVPool(self.total_blocks, 16)
        self.kv.take(self.used_blocks)

    def outstanding_tokens(self) -> int:
        return self.tokens


def load(p: FakePolicy) -> Load:
    return Load(p.num_waiting, p.num_running, p.outstanding_tokens(), p.kv.num_used, p.kv.num_total)


def pick(r: Router, pols: list[FakePolicy], candidates: list[int] | None = None) -> int:
    return r.pick(Loads(len(pols), candidates, lambda i: load(pols[i])))


def router(name: str, seed: int = 0) -> Router:
    return make_router(name, np.random.default_rng(seed))


def test_round_robin_cycles_in_index_order() -> None:
    r = router("round_robin")
    pols = [FakePolicy(num_running=9), FakePolicy(), FakePolicy()]  # load is ignored
    assert [pick(r, pols) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_round_robin_with_candidates_takes_the_next_candidate_in_turn() -> None:
    r = router("round_robin")
    pols = [FakePolicy() for _ in range(4)]
    assert pick(r, pols) == 0
    assert pick(r, pols, [0, 2]) == 2  # 1 is next in turn but not a candidate
    assert pick(r, pols) == 3  # the turn continues after the last pick
    assert pick(r, pols, [1, 3]) == 1  # wraps around
    assert pick(r, pols, [3]) == 3  # a single candidate is returned as is
    assert pick(r, pols) == 2  # ... without moving the turn


def test_least_outstanding_requests_counts_waiting_and_running() -> None:
    r = router("least_outstanding_requests")
    pols = [
        FakePolicy(num_waiting=2, num_running=1),
        FakePolicy(num_waiting=0, num_running=2),
        FakePolicy(num_waiting=1, num_running=0),
    ]
    assert pick(r, pols) == 2
    assert pick(r, pols, [0, 1]) == 1
    pols[2].num_running = 1  # 3, 2, 2: tie goes to the lowest index
    assert pick(r, pols) == 1
    same = [FakePolicy(num_running=1) for _ in range(3)]
    assert pick(r, same) == 0 and pick(r, same, [1, 2]) == 1


def test_least_outstanding_tokens_reads_outstanding_tokens() -> None:
    r = router("least_outstanding_tokens")
    pols = [
        FakePolicy(tokens=500, num_running=0),
        FakePolicy(tokens=100, num_running=9),
        FakePolicy(tokens=300),
    ]
    assert pick(r, pols) == 1  # fewest tokens, however many requests
    assert pick(r, pols, [0, 2]) == 2
    pols[0].tokens = 100
    assert pick(r, pols) == 0  # tie: lowest index


def test_least_kv_compares_fractions_of_each_pool() -> None:
    r = router("least_kv")
    pols = [
        FakePolicy(used_blocks=30, total_blocks=100),  # 0.30
        FakePolicy(used_blocks=50, total_blocks=200),  # 0.25: more blocks used, lower fraction
        FakePolicy(used_blocks=10, total_blocks=20),  # 0.50
    ]
    assert pick(r, pols) == 1
    assert pick(r, pols, [0, 2]) == 0
    tied = [FakePolicy(used_blocks=5, total_blocks=10), FakePolicy(used_blocks=10, total_blocks=20)]
    assert pick(r, tied) == 0


def test_random_is_reproducible_and_only_picks_candidates() -> None:
    pols = [FakePolicy() for _ in range(5)]
    a, b = router("random", seed=7), router("random", seed=7)
    seq_a = [pick(a, pols, [1, 3, 4]) for _ in range(200)]
    seq_b = [pick(b, pols, [1, 3, 4]) for _ in range(200)]
    assert seq_a == seq_b
    assert set(seq_a) == {1, 3, 4}  # every candidate, and nothing else
    other = router("random", seed=8)
    assert [pick(other, pols, [1, 3, 4]) for _ in range(200)] != seq_a
    full = [pick(a, pols) for _ in range(200)]
    assert set(full) == set(range(5))


@pytest.mark.parametrize(
    "name", ["least_outstanding_requests", "least_outstanding_tokens", "least_kv"]
)
def test_ties_go_to_the_lowest_index_whatever_the_candidates_order(name: str) -> None:
    same = [FakePolicy(num_running=1, tokens=5, used_blocks=3) for _ in range(3)]
    assert pick(router(name), same, [2, 1]) == 1


@pytest.mark.parametrize(
    ("prompt", "output", "computed", "emitted", "expected"),
    [(100, 10, 0, 0, 110), (100, 10, 40, 0, 70), (100, 10, 103, 4, 6), (100, 10, 109, 10, 0)],
)
def test_remaining_work(
    prompt: int, output: int, computed: int, emitted: int, expected: int
) -> None:
    req = Request(0, 0.0, prompt, output)
    req._computed, req._output = computed, emitted  # progress as the engine would leave it
    assert req.remaining_work == expected


def _ranked(p: FakePolicy, rank: str | None) -> float:
    if rank == "kv":
        return load(p).kv_blocks_used / max(1, load(p).kv_blocks_total)
    return p.num_waiting + p.num_running if rank == "requests" else p.tokens


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("least_outstanding_requests", "requests"),
        ("least_outstanding_tokens", "tokens"),
        ("session_sticky", "tokens"),
        ("least_kv", "kv"),
        ("prefix_affinity", None),
        ("round_robin", None),
    ],
)
def test_a_router_ranks_by_one_number_read_directly_as_by_whole_loads(
    name: str, rank: str | None
) -> None:
    """`ranks_by` names the one number a load-balancing router reads; read directly
    (`Signals.number`, as the gateway reads it), the router picks exactly what it picks from
    whole loads (ties to the lowest index too)."""
    assert router(name).ranks_by == rank
    rng = np.random.default_rng(4)
    for _ in range(200):
        pols = [
            FakePolicy(
                used_blocks=int(rng.integers(0, 100)),
                num_waiting=int(rng.integers(0, 3)),
                num_running=int(rng.integers(0, 3)),
                tokens=int(rng.integers(0, 4)) * 100,
            )
            for _ in range(int(rng.integers(1, 7)))
        ]
        candidates = None if rng.random() < 0.5 else sorted(
            set(rng.integers(0, len(pols), size=3).tolist())
        )  # fmt: skip
        by_loads = router(name).pick(Loads(len(pols), candidates, lambda i, p=pols: load(p[i])))
        assert router(name).pick(Direct(pols, candidates)) == by_loads
        if rank is not None:  # the number alone suffices
            assert router(name).pick(Direct(pols, candidates, whole=False)) == by_loads


class Direct(StandIn):
    """Signals that read the one number directly (as the gateway does), and whole loads only
    where `whole`."""

    def __init__(self, pols: list[FakePolicy], candidates: list[int] | None, whole: bool = True):
        super().__init__(len(pols), candidates, (lambda i: load(pols[i])) if whole else None)
        self.pols = pols

    def number(self, i: int, by: str) -> float:
        return _ranked(self.pols[i], by)


def test_the_table_builds_every_router_of_the_schema() -> None:
    names = set(get_args(RouterName))
    assert set(ROUTERS) == names
    for name in names:
        r = make_router(name, np.random.default_rng(0))
        assert r.name == name and isinstance(r, Router)
    with pytest.raises(ValueError, match="unknown router 'nearest'"):
        make_router("nearest", np.random.default_rng(0))


@pytest.mark.parametrize(
    ("name", "reads", "index"),
    [
        ("round_robin", set(), None),
        ("random", set(), None),
        ("least_outstanding_requests", {"load"}, "requests"),
        ("least_outstanding_tokens", {"load"}, "tokens"),
        ("session_sticky", {"load"}, "tokens"),
        ("least_kv", {"load", "kv"}, "kv"),
        ("prefix_affinity", {"load", "prefixes"}, "tokens"),
        ("slo_headroom", {"load", "prefixes", "ttft"}, "ttft"),
    ],
)
def test_each_router_declares_what_it_reads_and_the_index_it_keeps(
    name: str, reads: set[str], index: str | None
) -> None:
    r = make_router(name, np.random.default_rng(0))
    flags = {"load": r.reads_load, "kv": r.reads_kv, "prefixes": r.reads_prefixes,
             "ttft": r.reads_ttft}  # fmt: skip
    assert {k for k, v in flags.items() if v} == reads
    assert r.index == index


def test_prefix_affinity_without_load_weight_keeps_no_index() -> None:
    r = make_router("prefix_affinity", np.random.default_rng(0), load_weight=0.0)
    assert r.index is None
