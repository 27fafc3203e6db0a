"""Routers read an instance's queues and outstanding tokens without applying the run in flight
(`Instance.work_load`): the figures equal what settling that run would show, and a cluster
routes every request where settled loads would send it. Routers that rank by one number read
only it (`work_left`, `num_outstanding`), held to the same."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers_cluster import LEAST_LOAD_ROUTERS as ROUTERS
from helpers_cluster import LOAD_POLICIES as POLICIES
from helpers_sim import instruments_engine
from scenario_factory import run, scenario, tiny_hardware, tiny_model

from sim.core.instance import Instance, WorkLoad
from sim.topology.gateway import Gateway
from sim.topology.load_index import LoadIndex

WORKLOAD = {
    "num_requests": 240,
    "arrival": {"process": "poisson", "rate": 30.0},
    "prompt_tokens": {"dist": "uniform", "low": 10, "high": 180},
    "output_tokens": {"dist": "uniform", "low": 1, "high": 60},
}


def cluster(policy: str, router: str) -> dict[str, Any]:
    # a small pool and model: requests are preempted; three instances behind the router
    return scenario(
        policy=POLICIES[policy],
        workload=WORKLOAD,
        model=tiny_model(300),
        hardware=tiny_hardware(1200),
        cluster={"router": router, "instances": [{"count": 3}]},
    )


def settled(instance: Instance) -> WorkLoad:
    load = instance.load()  # applies the steps that ended by now
    return WorkLoad(load.num_waiting, load.num_running, load.outstanding_tokens)


@instruments_engine
@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("router", ROUTERS)
def test_work_load_equals_the_settled_load(
    policy: str, router: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each unsettled read (the whole load, the one number a router ranks by, or the load
    index's bound where it says the bound is that number) equals the settled figure."""
    mid_run = []
    reads = {
        "work_load": lambda w: w,
        "work_left": lambda w: w.outstanding_tokens,
        "num_outstanding": lambda w: w.num_waiting + w.num_running,
        "load_floor": lambda w: w.outstanding_tokens,
    }

    def checked(name: str) -> Any:
        unsettled = getattr(Instance, name)

        def read(self: Instance, *args: Any) -> Any:
            seen = unsettled(self, *args)
            if name == "load_floor" and not (args[0] and seen[2]):  # not an exact token count
                return seen
            before = len(self.engine.steps)
            number = seen[0] if name == "load_floor" else seen
            assert number == reads[name](settled(self)), name
            # settling applied steps: a look mid-run
            mid_run.append(len(self.engine.steps) > before)
            return seen

        return read

    for name in reads:
        monkeypatch.setattr(Instance, name, checked(name))
    res = run(cluster(policy, router))
    assert res.summary()["num_requests"] == WORKLOAD["num_requests"]
    if policy != "speculative":  # speculative steps run one at a time
        assert sum(mid_run) > 10, "no look fell inside a run"


@instruments_engine
@pytest.mark.parametrize("policy", ["continuous", "chunked", "preempting"])
def test_routing_on_work_loads_matches_routing_on_settled_loads(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = run(cluster(policy, "least_outstanding_tokens"))

    def scan(index: LoadIndex, candidates: Any) -> int:  # every candidate, settled
        pool = [i for i, x in enumerate(index.instances) if x is not None]
        pool = pool if candidates is None else sorted(candidates)
        return min(pool, key=lambda i: settled(index.instances[i]).outstanding_tokens)

    monkeypatch.setattr(Gateway, "_work_load", lambda self, i: settled(self.instances[i]))
    monkeypatch.setattr(LoadIndex, "best", scan)
    slow = run(cluster(policy, "least_outstanding_tokens"))
    a, b = fast.requests, slow.requests
    assert (a["instance"].to_numpy() == b["instance"].to_numpy()).all()
    for column in ("ttft_s", "finish_s"):
        np.testing.assert_allclose(a[column], b[column], rtol=1e-12)
    # the same steps, fewer records: no outside look splits a run
    for frame in (fast.steps, slow.steps):
        frame["tokens"] = frame["num_tokens"] * frame["num_steps"]
    assert fast.steps["num_steps"].sum() == slow.steps["num_steps"].sum()
    assert fast.steps["tokens"].sum() == slow.steps["tokens"].sum()
    assert len(fast.steps) < len(slow.steps)


def settle_on_read(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """Make each named read of `Instance` settle the instance first."""
    for name in names:
        unsettled = getattr(Instance, name)

        def read(self: Instance, *args: Any, _unsettled: Any = unsettled) -> Any:
            self.settle()
            return _unsettled(self, *args)

        monkeypatch.setattr(Instance, name, read)


def assert_same_routes(fast: Any, slow: Any) -> None:
    """Every request on the same instance, with prefix hits, at the same times."""
    a, b = fast.requests, slow.requests
    assert (a["instance"].to_numpy() == b["instance"].to_numpy()).all()
    assert a["num_cached_tokens"].sum() > 0
    for column in ("ttft_s", "finish_s"):
        np.testing.assert_allclose(a[column], b[column], rtol=1e-12)


PREFIX_WORKLOAD = {
    "num_requests": 240,
    "arrival": {"process": "poisson", "rate": 30.0},
    "prompt_tokens": {"dist": "uniform", "low": 40, "high": 180},
    "output_tokens": {"dist": "uniform", "low": 1, "high": 60},
    "shared_prefix": {"num_prefixes": 3, "length": {"dist": "fixed", "value": 32}},
}


@instruments_engine
@pytest.mark.parametrize("router", ["prefix_affinity", "slo_headroom"])
@pytest.mark.parametrize("policy", ["continuous", "chunked"])
def test_prefix_routers_route_as_on_settled_instances(
    router: str, policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prefix hits, backlogs and step ends read without settling a run that could not change
    them send every request where reads of settled instances would, and split fewer runs."""
    raw = cluster(policy, router)
    raw["workload"] = PREFIX_WORKLOAD
    raw["policy"] = {**raw["policy"], "prefix_caching": True, "block_size": 16}
    raw["slo"] = {"ttft_s": 0.5}
    fast = run(raw)
    reads = ("cached_prefix_tokens", "prefill_backlog", "step_end_s", "work_left")
    settle_on_read(monkeypatch, *reads)
    slow = run(raw)
    assert_same_routes(fast, slow)
    assert len(fast.steps) < len(slow.steps)


SESSION_WORKLOAD = {  # later turns resend earlier outputs: content known past the prompt
    "sessions": {
        "arrival": {"process": "poisson", "rate": 12.0},
        "num_sessions": 40,
        "turns": {"dist": "uniform", "low": 1, "high": 4},
        "first_prompt": {"dist": "uniform", "low": 4, "high": 60},
        "user_tokens": {"dist": "uniform", "low": 4, "high": 40},
        "output_tokens": {"dist": "uniform", "low": 1, "high": 30},
        "think_time": {"dist": "fixed", "value_s": 0.05},
    }
}


@instruments_engine
@pytest.mark.parametrize("workload", ["prefixes", "sessions"])
@pytest.mark.parametrize("tiers", [None, {"dram": {"capacity_gb": 0.0001}}])
@pytest.mark.parametrize("policy", ["continuous", "chunked", "preempting", "speculative"])
def test_prefix_affinity_reads_hits_only_where_one_may_be(
    policy: str, tiers: Any, workload: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prefix affinity on exact loads scores only the instances that may hold the request's
    first block (`Instance.may_cache_prefix`) and the least loaded one: every request goes
    where scoring every candidate on settled instances sends it, under KV pressure, preemption,
    speculation, a DRAM tier, shared prefixes and sessions whose short first prompts cache
    their first block as they decode; and where requests share no prefix across sessions, it
    reads far fewer hits (3 shared prefixes are soon on every instance: each may hit)."""
    raw = cluster(policy, "prefix_affinity")
    raw["workload"] = PREFIX_WORKLOAD if workload == "prefixes" else SESSION_WORKLOAD
    raw["policy"] = {**raw["policy"], "prefix_caching": True, "block_size": 16}
    if tiers is not None:
        raw["kv_tiers"] = tiers
    reads = {"n": 0}
    exact = Instance.cached_prefix_tokens

    def counted(self: Instance, req: Any) -> int:
        reads["n"] += 1
        return exact(self, req)

    monkeypatch.setattr(Instance, "cached_prefix_tokens", counted)
    fast = run(raw)
    fast_reads, reads["n"] = reads["n"], 0
    settle_on_read(monkeypatch, "cached_prefix_tokens", "work_left")
    monkeypatch.setattr(Instance, "may_cache_prefix", lambda self, req: True)
    slow = run(raw)
    assert_same_routes(fast, slow)
    assert reads["n"] == 3 * len(fast.requests)  # every candidate, at every decision
    if workload == "sessions" and policy != "speculative":  # a speculative run may hit
        assert fast_reads < reads["n"] * 0.6
