"""`slo_headroom`'s TTFT index (`sim.topology.ttft_index`): its choice is the full scan's.

At every routing decision of whole runs (every policy, with and without prefix caching and a
KV tier, an autoscaled fleet, two instance groups on different hardware) the index's choice is
the least of every candidate's predicted TTFT, ties to the lowest index; a property test drives
the index by hand through runs that start, cut and end, idle instances, clocks running ahead and
candidate subsets; and the prefill floor is the suffix minimum whatever the cost's shape."""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from helpers_autoscale import DAY
from helpers_cluster import LOAD_POLICIES as POLICIES
from helpers_sim import instruments_engine, uses_stand_ins
from hypothesis import given, settings
from hypothesis import strategies as st
from scenario_factory import run, scenario, tiny_hardware, tiny_model

from sim.core.plan import StepFeatures
from sim.core.prefill_curve import PREFILL_CHUNK_TOKENS, PrefillCurve
from sim.core.request import Request
from sim.core.step_times import StepTimes, steps_before
from sim.topology.gateway import Gateway
from sim.topology.ttft_index import TtftIndex

WORKLOAD = {
    "num_requests": 300,
    "arrival": {"process": "poisson", "rate": 40.0},
    "prompt_tokens": {"dist": "uniform", "low": 10, "high": 180},
    "output_tokens": {"dist": "uniform", "low": 1, "high": 60},
}
SHARED = {"num_prefixes": 3, "length": {"dist": "fixed", "value": 32}}


class Checked:
    """Wraps `Gateway._fastest`: each answer is compared with the scan of every candidate's
    prediction, and the predictions the index made are counted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.decisions = 0
        self.scanned = 0  # predictions a scan makes
        self.made = 0  # predictions the index path made
        fastest = Gateway._fastest
        best = TtftIndex.best
        checker = self

        def counted(
            index: TtftIndex, candidates: Any, floor_s: float, predict: Any, *a: Any
        ) -> int:
            def one(i: int) -> float:
                checker.made += 1
                return predict(i)

            return best(index, candidates, floor_s, one, *a)

        def checked(
            gw: Gateway,
            req: Request,
            candidates: Sequence[int] | None,
            ttft: Callable[[int], float],
        ) -> int:
            chosen = fastest(gw, req, candidates, ttft)
            pool = range(len(gw.instances)) if candidates is None else sorted(candidates)
            scan = min(pool, key=lambda i: (ttft(i), i))
            assert chosen == scan, (gw.instances[0].env.now, chosen, scan)
            checker.decisions += 1
            checker.scanned += len(pool)
            return chosen

        monkeypatch.setattr(TtftIndex, "best", counted)
        monkeypatch.setattr(Gateway, "_fastest", checked)


def cluster(policy: str, caching: bool, count: int = 5) -> dict[str, Any]:
    workload = dict(WORKLOAD)
    pol = dict(POLICIES[policy])
    if caching:
        workload["shared_prefix"] = SHARED
        pol.update(prefix_caching=True, block_size=16)
    return scenario(
        policy=pol,
        workload=workload,
        model=tiny_model(300),
        hardware=tiny_hardware(1200),
        cluster={"router": "slo_headroom", "instances": [{"count": count}]},
        slo={"ttft_s": 0.5},
    )


@instruments_engine
@pytest.mark.parametrize("caching", [False, True])
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_the_index_chooses_what_the_scan_chooses(
    policy: str, caching: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if caching and policy == "static":
        pytest.skip("static batching keeps no prefix cache")
    check = Checked(monkeypatch)
    res = run(cluster(policy, caching))
    assert res.summary()["num_requests"] == WORKLOAD["num_requests"]
    assert check.decisions == WORKLOAD["num_requests"]
    assert res.requests["instance"].nunique() == 5
    if not caching:  # nothing predicted up front: the index predicts near the least only
        # (a static batch's instances idle with a queue between batches: more are near it)
        assert check.made < (0.7 if policy == "static" else 0.35) * check.scanned


@instruments_engine
def test_the_index_chooses_with_a_kv_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = cluster("chunked", True)
    raw["kv_tiers"] = {"dram": {"capacity_gb": 0.0001}}
    check = Checked(monkeypatch)
    res = run(raw)
    assert check.decisions == WORKLOAD["num_requests"]
    assert res.requests["num_cached_tokens"].sum() > 0


@instruments_engine
def test_the_index_follows_an_autoscaled_fleet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Instances launched and drained during the run: candidates change under the index."""
    doc = copy.deepcopy(DAY)
    doc["workload"]["duration_s"] = 900
    doc["cluster"] = {
        "router": "slo_headroom",
        "instances": [{"count": 1, "autoscale": {
            "signal": "running", "target": 4, "min": 1, "max": 6, "interval_s": 5,
            "scale_out_cooldown_s": 10, "scale_in_cooldown_s": 30,
            "provisioning": {"scheduling_s": 2, "load_bandwidth_gb_per_s": 8, "warmup_s": 3},
        }}],
    }  # fmt: skip
    check = Checked(monkeypatch)
    res = run(doc)
    assert {"launch", "drain"} <= set(res.fleet_events["event"])
    assert check.decisions > 0.9 * len(res.requests)  # a lone serving instance: no decision


@instruments_engine
def test_the_index_bounds_groups_on_different_hardware(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two groups, one twice as fast: two prefill curves, the floor is the faster's."""
    raw = cluster("chunked", False)
    raw["cluster"]["instances"] = [
        {"count": 3},
        {"count": 2, "hardware": {**tiny_hardware(1200), "name": "fast-gpu", "peak_flops": 2e14,
                                  "hbm_bandwidth_bytes_per_s": 2e12}},
    ]
    check = Checked(monkeypatch)
    res = run(raw)
    assert check.decisions == WORKLOAD["num_requests"]
    assert res.requests["instance"].nunique() == 5


# -- the prefill floor ---------------------------------------------------------------------------


class Bumpy:
    """A cost whose prefill step is not monotone in its tokens (a table's measured wiggles)."""

    def __init__(self, bumps: list[float]) -> None:
        self.bumps = bumps

    def run_times(self, features: StepFeatures) -> tuple[float, float]:
        n = features.num_tokens
        return 0.001 + 1e-5 * n + self.bumps[n % len(self.bumps)], 0.0


@uses_stand_ins
@settings(max_examples=40, deadline=None)
@given(
    bumps=st.lists(st.floats(0.0, 0.01), min_size=1, max_size=9),
    asks=st.lists(st.integers(-2, PREFILL_CHUNK_TOKENS + 40), min_size=1, max_size=6),
)
def test_the_floor_is_the_least_prefill_of_as_many_tokens_or_more(
    bumps: list[float], asks: list[int]
) -> None:
    curve = PrefillCurve(Bumpy(bumps))
    top = PREFILL_CHUNK_TOKENS + 60
    for n in asks:  # in any order: the suffix grows downward as asked
        least = min(curve.seconds(m) for m in range(max(1, n), top))
        assert curve.floor(n) == least


# -- by hand -------------------------------------------------------------------------------------


class Clock:
    now = 0.0


class Flat:
    """A prefill curve of a fixed rate."""

    def __init__(self, per_token_s: float) -> None:
        self.per_token_s = per_token_s

    def seconds(self, n: int) -> float:
        return self.per_token_s * n if n > 0 else 0.0

    def floor(self, n: int) -> float:
        return self.seconds(max(1, n))


class Fake:
    """An instance with runs of steps, a prefill backlog and a clock that may run ahead."""

    def __init__(self, index: int, env: Clock, curve: Flat) -> None:
        self.index = index
        self.env = env
        self.curve = curve
        self.run: tuple[StepTimes, int] | None = None
        self.clock = 0.0
        self.backlog = 0
        self.told: Any = None

    def step_grid(self) -> tuple[float, float, float, int]:
        if self.run is None:
            return (self.clock, 0.0, 0.0, 0)
        times, n = self.run
        return (times.start_s, times.first_duration_s, times.increment_s, n)

    def prefill_curve(self) -> Flat:
        return self.curve

    def step_end_s(self) -> float:  # as `Instance.step_end_s` reads it
        now = self.env.now
        if self.run is None:
            return max(now, self.clock)
        times, n = self.run
        done = steps_before(times, n, now) - 1
        return max(now, (times.after(done) if done > 0 else times).end(1))

    def predict(self, prompt: int) -> float:
        wait = max(0.0, self.step_end_s() - self.env.now)
        return wait + self.curve.seconds(self.backlog + prompt)

    def catch_up(self, index: TtftIndex, durations: list[float]) -> None:
        """Runs that ended by now end (the instance tells); the next starts or it idles."""
        k = 0
        while self.run is not None:
            times, n = self.run
            end = times.end(n)
            if end > self.env.now:
                return
            self.clock = end
            d = durations[k % len(durations)]
            k += 1
            self.run = (StepTimes(end, d, d / 50), 1 + k % 7) if k % 3 else None
            index.changed(self)


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("time"), st.integers(0, 7), st.floats(0.0, 0.05)),
        st.tuples(st.just("start"), st.integers(0, 7), st.floats(0.001, 0.02)),
        st.tuples(st.just("ahead"), st.integers(0, 7), st.floats(0.0, 0.03)),
        st.tuples(st.just("queue"), st.integers(0, 7), st.floats(0.0, 1.0)),
        st.tuples(st.just("cut"), st.integers(0, 7), st.just(0.0)),
        st.tuples(st.just("decide"), st.integers(0, 255), st.floats(0.0, 1.0)),
    ),
    max_size=150,
)


@uses_stand_ins
@settings(max_examples=200, deadline=None)
@given(ops=OPS, rates=st.lists(st.sampled_from([1e-4, 2e-4, 5e-5]), min_size=8, max_size=8))
def test_the_index_is_the_scan_under_any_runs(ops: list[Any], rates: list[float]) -> None:
    env = Clock()
    index = TtftIndex()
    curves = {r: Flat(r) for r in set(rates)}
    fakes = [Fake(i, env, curves[rates[i]]) for i in range(8)]
    for fake in fakes:
        index.watch(fake)
    durations = [0.004, 0.011, 0.0025]
    for op, i, x in ops:
        fake = fakes[i % 8]
        if op == "time":  # time passes: runs that ended end
            env.now += x
            for f in fakes:
                f.catch_up(index, durations)
        elif op == "start" and fake.run is None and fake.clock <= env.now:
            fake.run = (StepTimes(env.now, x, x / 40 if i % 2 else 0.0), 1 + i * 3)
            index.changed(fake)
        elif op == "ahead" and fake.run is None:  # its clock runs ahead of SimPy's
            fake.clock = max(fake.clock, env.now + x)
            index.changed(fake)
        elif op == "queue":  # a request joins: the backlog grows, it tells
            fake.backlog += int(x * 400)
            index.changed(fake)
        elif op == "cut" and fake.run is not None:  # a run cut at its step under way
            times, n = fake.run
            fake.run = (times, max(1, min(n, steps_before(times, n, env.now))))
            index.changed(fake)
        elif op == "decide":
            chosen = [j for j in range(8) if i >> j & 1]
            candidates = None if i == 255 else chosen
            if candidates == []:
                continue
            prompt = 1 + int(x * 900)
            pool = range(8) if candidates is None else candidates
            predict = functools.partial(lambda n, j: fakes[j].predict(n), prompt)
            scan = min(pool, key=lambda j: (predict(j), j))
            floor_s = index.floor(prompt)
            got = index.best(candidates, floor_s, predict)
            assert got == scan


def test_an_empty_index_says_so() -> None:
    index = TtftIndex()
    index.env = Clock()
    with pytest.raises(ValueError, match="no candidate"):
        index.best(None, 0.0, lambda i: math.inf)
