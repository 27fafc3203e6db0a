"""The fleet's clock (`sim.core.clock.Clock`): instances' entries, arrivals and SimPy's own events
in SimPy's order (time, URGENT before NORMAL, then the order they were scheduled in), stale
entries skipped, arrivals at one instant dispatched together, and a fleet's schedule the same
whether its arrivals are pulled by the clock or pushed by a SimPy process."""

from __future__ import annotations

import importlib
from typing import Any

import pandas as pd
import pytest
from scenario_factory import continuous, poisson, run, scenario, uniform

from sim.core.arrivals import FOREVER_S
from sim.core.clock import NORMAL, URGENT, Clock
from sim.core.request import Request
from sim.core.urgent import UrgentTimeout

RUN = importlib.import_module("sim.simulate.run")


class Recorder:
    """A stand-in instance: records when each of its entries came up; `token` is its latest."""

    def __init__(self, clock: Clock, name: str, seen: list[tuple[str, float]]) -> None:
        self.clock, self.name, self.seen = clock, name, seen
        self.token = -1

    def at(self, delay: float, priority: int = NORMAL) -> None:
        self.token = self.clock.due(self, delay, priority)

    def fire(self, token: int) -> None:
        if token == self.token:
            self.seen.append((self.name, self.clock.now))


class Feed:
    """Known arrivals at the given times (`sim.core.arrivals.ArrivalFeed`'s face)."""

    def __init__(self, times: list[float]) -> None:
        self.times = list(times)
        self.next_s = self.times[0] if self.times else FOREVER_S
        self.count = 0

    def take(self, submit: Any) -> None:
        submit(Request(self.count, self.times.pop(0), 10, 5))
        self.count += 1
        self.next_s = self.times[0] if self.times else FOREVER_S


def test_entries_and_simpy_events_come_in_simpys_order() -> None:
    clock = Clock()
    seen: list[tuple[str, float]] = []
    a, b = Recorder(clock, "a", seen), Recorder(clock, "b", seen)
    a.at(1.0)  # scheduled first: first among the NORMAL ones at 1.0
    clock.timeout(1.0).callbacks.append(lambda _: seen.append(("simpy", clock.now)))
    b.at(1.0)
    UrgentTimeout(clock, 1.0).callbacks.append(lambda _: seen.append(("urgent", clock.now)))
    b.at(0.5, URGENT)  # replaces b's entry at 1.0, which is then stale
    clock.run()
    assert seen == [("b", 0.5), ("urgent", 1.0), ("a", 1.0), ("simpy", 1.0)]


def test_arrivals_at_one_instant_come_together_before_the_steps_that_end_then() -> None:
    clock = Clock()
    seen: list[tuple[str, float]] = []
    step = Recorder(clock, "step", seen)
    step.at(2.0)  # a run that ends when two requests arrive
    feed = Feed([1.0, 2.0, 2.0, 3.0])

    def dispatch(req: Request) -> None:
        seen.append((f"arrival {req.id}", clock.now))

    clock.pull(feed, dispatch)
    assert clock.peek() == 0.0  # the feed's first look, as a process started now
    clock.run()
    assert seen == [
        ("arrival 0", 1.0), ("arrival 1", 2.0), ("arrival 2", 2.0), ("step", 2.0),
        ("arrival 3", 3.0),
    ]  # fmt: skip


def test_a_stale_entry_changes_nothing_and_peek_sees_the_earliest() -> None:
    clock = Clock()
    seen: list[tuple[str, float]] = []
    a = Recorder(clock, "a", seen)
    a.at(5.0)
    a.at(3.0)  # cut: the entry at 5.0 is stale
    clock.timeout(4.0)
    assert clock.peek() == 3.0
    clock.run()
    assert seen == [("a", 3.0)] and clock.now == 5.0  # the stale one still moves the clock


FLEET = scenario(
    policy=continuous(max_num_seqs=8),
    workload=poisson(400, 40.0, uniform(20, 200), uniform(5, 80)),
    cluster={"router": "least_outstanding_tokens", "instances": [{"count": 3}]},
)


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding_tokens", "least_kv"])
def test_a_fleet_pulled_by_the_clock_gives_the_pushed_schedule(
    router: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clock dispatches a fleet's known arrivals itself; pushed by the source's SimPy
    process instead (as closed-loop turns are), every route and timestamp is the same."""
    raw = {**FLEET, "cluster": {**FLEET["cluster"], "router": router}}
    pulled = run(raw)

    monkeypatch.setattr(RUN, "clock_pulls", lambda workload: False)
    pushed = run(raw)
    assert pulled.requests["instance"].nunique() == 3
    pd.testing.assert_frame_equal(pulled.requests, pushed.requests)
    pd.testing.assert_frame_equal(pulled.steps, pushed.steps)
