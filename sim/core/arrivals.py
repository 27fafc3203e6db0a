"""Arrivals: a workload's requests reach the instances at their arrival times.

`Source` pushes them with SimPy events of URGENT priority (so requests arriving at t are queued
before any instance plans the step that starts at t); a lone instance instead pulls them as an
`ArrivalFeed` from its own step loop, and never waits on SimPy while busy. Both deliver the same
requests in the same order at the same instants (tests/core/test_arrival_feed.py).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy
from simpy.events import Event

from sim.core.request import Request
from sim.core.urgent import UrgentTimeout
from sim.workload.arrays import RequestArrays

FOREVER_S = float("inf")
ARRIVAL_BLOCK = 1 << 14  # arrivals turned into Python objects at a time


class Source:
    """Feeds a workload's requests to a dispatch function at their arrival times (URGENT), or,
    for a lone instance, hands them over as a feed its loop pulls (`pulled`, `ArrivalFeed`).

    Known arrivals are turned into `Request`s a block at a time, so a workload of millions never
    exists as Python objects all at once. A closed-loop session's later turn has no arrival time
    in advance: `turn_finished` (the engine's finish hook) schedules it a think time after the
    previous turn finished.

    `frontend_s` (`engine.frontend_s`) is the serving front end's share of every request: it
    reaches the scheduler that long after its arrival (tokenization and the hand-off to the engine
    core), while its latencies still count from the arrival."""

    def __init__(
        self,
        env: simpy.Environment,
        requests: RequestArrays,
        dispatch: Callable[[Request], object],
        *,
        push: bool = True,  # False: no SimPy process; a lone instance pulls them (`pulled`)
        frontend_s: float = 0.0,  # a request reaches the scheduler this long after it arrives
    ) -> None:
        self.env = env
        self.frontend_s = frontend_s
        self.requests = requests
        self.dispatch = dispatch
        assert requests.tier_index is not None
        # tier names by index; a block's tiers are looked up as it is built (no column of
        # Python objects as long as the workload)
        self.tier_names = np.asarray(requests.tier_names, dtype=object)
        self.tier_index = requests.tier_index
        self.content = requests.content
        sessions = requests.sessions
        self.session = sessions.session if sessions is not None else None
        self.next_turn = sessions.next_turn if sessions is not None else None
        self.think_s = sessions.think_s if sessions is not None else None
        known = requests.arrival_s
        self.num_known = int((~np.isnan(known)).sum()) if self.next_turn is not None else len(known)
        self.process = env.process(self._feed()) if push else None

    def make(self, i: int, arrival_s: float | None = None) -> Request:
        r = self.requests
        assert r.predicted_output_tokens is not None
        content = self.content
        return Request(
            i,
            float(r.arrival_s[i]) if arrival_s is None else arrival_s,
            int(r.prompt_tokens[i]),
            int(r.output_tokens[i]),
            self.tier_names[self.tier_index[i]],
            int(r.predicted_output_tokens[i]),
            session=int(self.session[i]) if self.session is not None else -1,
            content=content.of(i) if content is not None else (),
            content_unit=content.unit if content is not None else 0,
            content_tokens=int(content.tokens[i]) if content is not None else 0,
        )

    def block(self, first: int, last: int) -> list[list[Any]]:
        """Request arguments after the id of arrivals first..last-1, column by column: arrival,
        prompt, output, tier, predicted output."""
        r = self.requests
        assert r.predicted_output_tokens is not None
        return [
            r.arrival_s[first:last].tolist(),
            r.prompt_tokens[first:last].tolist(),
            r.output_tokens[first:last].tolist(),
            self.tier_names[self.tier_index[first:last]].tolist(),
            r.predicted_output_tokens[first:last].tolist(),
        ]

    def turn_finished(self, req: Request) -> None:
        """A session's turn finished: its next turn arrives a think time later."""
        assert self.next_turn is not None and self.think_s is not None
        nxt = int(self.next_turn[req.id])
        if nxt < 0:
            return
        at = req.finish_s + float(self.think_s[nxt])
        event = UrgentTimeout(self.env, at + self.frontend_s - self.env.now)

        def arrive(_: simpy.Event) -> None:
            self.dispatch(self.make(nxt, at))

        event.callbacks.append(arrive)

    def pulled(self) -> ArrivalFeed:
        """The arrivals as a feed that one instance's loop pulls (`Instance.feed`), instead of
        this source's SimPy process: for a lone instance with known arrivals (no closed-loop
        sessions), where nothing else could see an arrival before that instance's next step."""
        assert self.process is None and self.session is None
        return ArrivalFeed(self)

    def _feed(self) -> Generator[Event, Any, None]:
        env = self.env
        r = self.requests
        n = self.num_known
        delay = self.frontend_s
        if self.content is not None or self.session is not None:
            for i in range(n):  # requests with content: built one by one
                t = float(r.arrival_s[i]) + delay
                if t > env.now:
                    yield UrgentTimeout(env, t - env.now)
                self.dispatch(self.make(i))
            return
        for first in range(0, n, ARRIVAL_BLOCK):
            block = self.block(first, min(n, first + ARRIVAL_BLOCK))
            for offset, args in enumerate(zip(*block, strict=True)):
                t = args[0] + delay
                if t > env.now:
                    yield UrgentTimeout(env, t - env.now)
                self.dispatch(Request(first + offset, *args))


class ArrivalFeed:
    """A lone instance's arrivals, pulled by its step loop (`Instance.feed`).

    Same order and times as the `Source` process: at each schedule, and when a run ends, every
    arrival at or before that instant is queued first (arrivals at t are visible to a schedule at
    t), and a run an arrival could join ends at the step boundary at or after the next arrival,
    where a pushed arrival would have cut it. The loop then never waits on SimPy while busy: a
    run of steps costs no event at all, and an arrival costs none unless the instance is idle."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.one_by_one = source.content is not None  # requests with content: `Source.make`
        self._next = 0  # index of the next arrival
        self.delay = source.frontend_s  # when an arrival reaches the scheduler
        self._block: list[tuple[Any, ...]] = []  # Request arguments after the id, from _first
        self._first = 0
        self.next_s = FOREVER_S
        self._load()

    def _load(self) -> None:
        """Turn the next block of known arrivals into tuples of Request arguments."""
        src, first = self.source, self._next
        last = min(src.num_known, first + ARRIVAL_BLOCK)
        if self.one_by_one:  # only the arrival times: `Source.make` builds each request
            columns = [src.requests.arrival_s[first:last].tolist()]
        else:
            columns = src.block(first, last)
        self._block = list(zip(*columns, strict=True))
        self._first = first
        self.next_s = self._block[0][0] + self.delay if self._block else FOREVER_S

    def pull(self, until_s: float, submit: Callable[[Request], bool]) -> None:
        """Queue every arrival at or before `until_s`, in order."""
        while self.next_s <= until_s:
            i = self._next
            args = self._block[i - self._first]
            submit(self.source.make(i) if self.one_by_one else Request(i, *args))
            self._next = i + 1
            k = i + 1 - self._first
            if k < len(self._block):
                self.next_s = self._block[k][0] + self.delay
            else:
                self._load()
