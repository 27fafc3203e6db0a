"""The gateway's load index (`sim.topology.load_index`): its choice is the full scan's.

At every routing decision of whole runs (least-load routers over every policy, an autoscaled
fleet, a P/D prefill pool) the index's candidate is the one `min` over every candidate's exact
number gives; and a property test drives the index by hand through rises, runs that lower loads
within their bounds, and candidate subsets."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from helpers_autoscale import DAY
from helpers_cluster import LEAST_LOAD_ROUTERS as ROUTERS
from helpers_cluster import LOAD_POLICIES as POLICIES
from helpers_sim import instruments_engine, uses_stand_ins
from hypothesis import given, settings
from hypothesis import strategies as st
from scenario_factory import run, scenario, tiny_hardware, tiny_model

from sim.topology.load_index import FOREVER_S, LoadIndex

WORKLOAD = {
    "num_requests": 300,
    "arrival": {"process": "poisson", "rate": 40.0},
    "prompt_tokens": {"dist": "uniform", "low": 10, "high": 180},
    "output_tokens": {"dist": "uniform", "low": 1, "high": 60},
}


def exact(index: LoadIndex, instance: Any) -> float:
    """The number the index ranks by, read exactly (KV settled, as the full scan reads it)."""
    if index.kv:
        return float(instance.kv_fraction())
    return float(instance.work_left() if index.tokens else instance.num_outstanding())


class Checked:
    """Wraps `LoadIndex.best`: each answer is compared with the scan of exact numbers."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.decisions = 0
        self.exact_reads = 0
        best = LoadIndex.best
        checker = self

        def checked(index: LoadIndex, candidates: Any) -> int:
            watched = [i for i, x in enumerate(index.instances) if x is not None]
            pool = watched if candidates is None else sorted(candidates)
            read = index.instances
            scan = min(pool, key=lambda i: exact(index, read[i]))
            chosen = best(index, candidates)
            assert chosen == scan, (index.env.now if index.env else 0, chosen, scan)  # type: ignore[union-attr]
            checker.decisions += 1
            return chosen

        monkeypatch.setattr(LoadIndex, "best", checked)


def cluster(policy: str, router: str, count: int = 5) -> dict[str, Any]:
    return scenario(
        policy=POLICIES[policy],
        workload=WORKLOAD,
        model=tiny_model(300),
        hardware=tiny_hardware(1200),
        cluster={"router": router, "instances": [{"count": count}]},
    )


@instruments_engine
@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("router", (*ROUTERS, "least_kv"))
def test_the_index_chooses_what_the_scan_chooses(
    policy: str, router: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    check = Checked(monkeypatch)
    res = run(cluster(policy, router))
    assert res.summary()["num_requests"] == WORKLOAD["num_requests"]
    assert check.decisions >= WORKLOAD["num_requests"] // 2  # session_sticky: first turns
    assert res.requests["instance"].nunique() == 5


@instruments_engine
def test_the_index_follows_an_autoscaled_fleet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Instances launched and drained during the run: candidates change under the index."""
    doc = copy.deepcopy(DAY)
    doc["workload"]["duration_s"] = 900
    doc["cluster"] = {
        "router": "least_outstanding_tokens",
        "instances": [{"count": 1, "autoscale": {
            "signal": "running", "target": 4, "min": 1, "max": 6, "interval_s": 5,
            "scale_out_cooldown_s": 10, "scale_in_cooldown_s": 30,
            "provisioning": {"scheduling_s": 2, "load_bandwidth_gb_per_s": 8, "warmup_s": 3},
        }}],
    }  # fmt: skip
    check = Checked(monkeypatch)
    res = run(doc)
    events = res.fleet_events
    assert {"launch", "drain"} <= set(events["event"])
    assert check.decisions == len(res.requests)


@instruments_engine
@pytest.mark.parametrize("router", ["least_outstanding_tokens", "least_kv"])
def test_the_index_routes_a_prefill_pool(router: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A prefill instance frees a handed-off prompt's blocks when its KV has left: it tells."""
    raw = scenario(
        policy={"name": "continuous", "max_num_seqs": 8, "max_num_batched_tokens": 256},
        workload=WORKLOAD,
        model=tiny_model(),
        hardware=tiny_hardware(10_000),
        disaggregation={
            "prefill": {"count": 3, "router": router},
            "decode": {"count": 2},
            "link": {"bandwidth_gb_per_s": 1.0, "latency_s": 0.001},
        },
    )
    check = Checked(monkeypatch)
    res = run(raw)
    assert res.requests["finish_s"].notna().all()
    assert check.decisions == WORKLOAD["num_requests"]
    assert res.requests["instance"].nunique() == 3


# -- by hand -------------------------------------------------------------------------------------


class Clock:
    now = 0.0


class Fake:
    """An instance whose number may fall, once it has told, down to its bound and no lower."""

    def __init__(self, index: int, env: Clock) -> None:
        self.index = index
        self.env = env
        self.value = 0
        self.drop = 0  # how far it may still fall before it next tells
        self.until = FOREVER_S  # a timed run: its number holds until then, then a step falls
        self.told: Any = None

    def num_outstanding(self) -> int:
        return self.value

    def work_left(self) -> int:
        return self.value

    def load_floor(self, tokens: bool) -> tuple[int, float, bool, int]:
        if self.until < FOREVER_S:  # the number now, exact until its next step ends
            return self.value, self.until, True, self.value - self.drop
        return self.value - self.drop, FOREVER_S, self.drop == 0, self.value - self.drop

    def kv_fraction(self) -> float:
        return self.value / 8

    def kv_floor(self) -> tuple[float, bool]:
        return (self.value - self.drop) / 8, self.drop == 0


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("rise"), st.integers(0, 7), st.integers(0, 5)),
        st.tuples(st.just("run"), st.integers(0, 7), st.integers(0, 5)),
        st.tuples(st.just("step"), st.integers(0, 7), st.integers(0, 5)),
        st.tuples(st.just("finish"), st.integers(0, 7), st.just(0)),
        st.tuples(st.just("timed"), st.integers(0, 7), st.integers(0, 5)),
        st.tuples(st.just("tick"), st.integers(0, 7), st.integers(0, 5)),
        st.tuples(st.just("decide"), st.integers(0, 255), st.just(0)),
    ),
    max_size=120,
)


@uses_stand_ins
@settings(max_examples=200, deadline=None)
@given(ops=OPS, rank=st.sampled_from(["requests", "tokens", "kv"]))
def test_the_index_is_the_scan_under_any_rises_and_falls(ops: list[Any], rank: str) -> None:
    env = Clock()
    env.now = 0.0
    index = LoadIndex(rank)
    fakes = [Fake(i, env) for i in range(8)]
    for fake in fakes:
        index.watch(fake)
    for op, i, k in ops:
        fake = fakes[i % 8]
        if op == "rise":  # a request queued: it tells
            fake.value += k
            index.changed(fake)
        elif op == "run":  # a run starts: it may fall by k, and tells
            fake.drop = min(fake.value, k)
            index.changed(fake)
        elif op == "step":  # a step of the run: falls within its bound, silently (a bound that
            # was exact when read stays exact: drop 0, nothing falls)
            fall = min(k, fake.drop)
            fake.value -= fall
            fake.drop -= fall
        elif op == "finish":
            fake.drop = 0
            fake.until = FOREVER_S
            index.changed(fake)
        elif op == "timed":  # a run whose steps end on the clock: it tells at its start only
            fake.drop = min(fake.value, k)
            fake.until = env.now + 1.0
            index.changed(fake)
        elif op == "tick":  # time passes: each timed run's step under way ends and falls
            env.now += 1.0
            for timed in fakes:
                if timed.until <= env.now:
                    fall = min(k, timed.drop)
                    timed.value -= fall
                    timed.drop -= fall
                    timed.until = env.now + 1.0
        else:
            chosen = [j for j in range(8) if i >> j & 1]
            candidates = None if i == 255 else chosen
            if candidates == []:
                continue
            pool = range(8) if candidates is None else candidates
            assert index.best(candidates) == min(pool, key=lambda j: fakes[j].value)


def test_an_index_ranks_by_requests_tokens_or_kv() -> None:
    with pytest.raises(ValueError, match="requests, tokens or kv"):
        LoadIndex("bytes")
    with pytest.raises(ValueError, match="no candidate"):
        LoadIndex("tokens").best(None)
