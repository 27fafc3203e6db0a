"""One clock for a whole fleet: every instance's next step end or wake-up, the arrivals and
SimPy's own events, merged in one order.

`Clock` is a SimPy environment (the autoscaler's ticks, provisioning, KV transfers, scrapes and
closed-loop turns stay SimPy processes and timeouts: rare events, well served by it) that also
keeps two things SimPy would otherwise carry as events:

* **dues**: when each instance next needs the clock (the end of its run in flight, a wake-up,
  the end of a cold start), a plain heap entry `(time, priority, id, instance)`, not a SimPy
  process resumed by a `Timeout` and cut by an `Interrupt`. An instance is a state machine
  (`sim.core.instance.Instance.fire`): stepped when its entry comes up, it plans and applies
  runs until it must wait for something outside it, and leaves one entry; a cut run replaces
  its entry (the old one, stale, is skipped when met);
* **arrivals**: a fleet's known arrivals (`sim.core.arrivals.ArrivalFeed`) dispatched as they
  come, with no event per arrival.

The three are merged by SimPy's own key (time, then priority: URGENT before NORMAL, then the id
drawn from the environment's counter when each was scheduled), drawn at the moments a SimPy
process would have scheduled the same events, so the order at equal times, and hence every
schedule and route, is the one the processes gave (`benchmarks/fleet_hashes.py` checks it on
every shipped fleet and router). Times are reached as SimPy reaches them (`now + delay`), to
the bit.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any, Protocol

import simpy
from simpy.core import NORMAL, URGENT, EmptySchedule

from sim.core.request import Request

__all__ = ["NORMAL", "URGENT", "Clock", "Due", "Feed"]

FOREVER_S = float("inf")


class Due(Protocol):
    """What the clock steps: an instance (`sim.core.instance.Instance`)."""

    def fire(self, token: int) -> None:
        """The entry `token` came up (stale unless it is the instance's latest)."""
        ...


class Feed(Protocol):
    """Known arrivals in order (`sim.core.arrivals.ArrivalFeed`)."""

    @property
    def next_s(self) -> float: ...

    def take(self, submit: Callable[[Request], object]) -> None:
        """Dispatch the next arrival."""
        ...


class Clock(simpy.Environment):
    """A SimPy environment that also steps instances' dues and pulls arrivals (see the module
    docstring)."""

    def __init__(self, initial_time: float = 0.0) -> None:
        super().__init__(initial_time)
        self._dues: list[tuple[float, int, int, Due]] = []
        self._feed: Feed | None = None
        self._dispatch: Callable[[Request], object] | None = None
        self._feed_key: tuple[float, int, int] | None = None  # the next arrival's key
        self._feed_started = False  # the key is an arrival's, not the feed's first look

    def due(self, who: Due, delay: float, priority: int = NORMAL) -> int:
        """Step `who` after `delay` seconds (as a SimPy timeout would come up); the entry's
        token, which `who` keeps to know its latest entry."""
        token = next(self._eid)
        heappush(self._dues, (self._now + delay, priority, token, who))
        return token

    def pull(self, feed: Feed, dispatch: Callable[[Request], object]) -> None:
        """Dispatch `feed`'s arrivals as they come (from now: the first is looked at now, URGENT,
        as an arrival process started now would)."""
        self._feed = feed
        self._dispatch = dispatch
        self._feed_key = (self._now, URGENT, next(self._eid))
        self._feed_started = False

    def peek(self) -> float:
        """The time of the next entry of any kind (stale dues included: an early answer only
        makes an instance wait where it could have run ahead)."""
        soonest = self._queue[0][0] if self._queue else FOREVER_S
        if self._dues and self._dues[0][0] < soonest:
            soonest = self._dues[0][0]
        key = self._feed_key
        if key is not None and key[0] < soonest:
            soonest = key[0]
        return soonest

    def step(self) -> None:
        """Process the next entry: a due, the next arrivals, or a SimPy event."""
        queue, dues, key = self._queue, self._dues, self._feed_key
        first: Any = queue[0] if queue else None
        if dues and (first is None or dues[0] < first):
            first = dues[0]
        if key is not None and (first is None or key < first):
            self._arrivals(key[0])
            return
        if first is None:
            raise EmptySchedule()
        if dues and first is dues[0]:
            heappop(dues)
            self._now = first[0]
            first[3].fire(first[2])
            return
        super().step()

    def _arrivals(self, at: float) -> None:
        """Every arrival due at `at`, in order, as an arrival process resumed at `at` would
        dispatch them; then the next one's key."""
        feed, dispatch = self._feed, self._dispatch
        assert feed is not None and dispatch is not None
        self._now = at
        if self._feed_started:  # the arrival this key was drawn for
            feed.take(dispatch)
        self._feed_started = True
        while feed.next_s <= at:  # and those at the same instant, with no key of their own
            feed.take(dispatch)
        t = feed.next_s
        if t == FOREVER_S:
            self._feed_key = None
        else:
            self._feed_key = (self._now + (t - self._now), URGENT, next(self._eid))
