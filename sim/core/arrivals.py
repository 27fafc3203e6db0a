"""Arrivals: a workload's requests reach the instances at their arrival times.

Known arrivals are an `ArrivalFeed`: a fleet's clock pulls it (`sim.core.clock.Clock.pull`,
URGENT, so requests arriving at t are queued before any instance plans the step that starts at
t), or a lone instance pulls it from its own step loop and never waits on the clock while busy.
Both deliver the same requests in the same order at the same instants
(tests/core/test_arrival_feed.py). A closed-loop session's later turns, known only as earlier
ones end, are pushed by `Source` with SimPy events of URGENT priority.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Generator, Iterator
from typing import Any

import numpy as np
import simpy
from simpy.events import Event

from sim.core.request import Request
from sim.core.urgent import UrgentTimeout
from sim.workload.arrays import RequestArrays
from sim.workload.stream import Workload

FOREVER_S = float("inf")
ARRIVAL_BLOCK = 1 << 14  # arrivals turned into Python objects at a time


class ChunkWindow:
    """The chunks of a run's workload (`Workload.chunks`) that the run still needs, pulled in
    id order as arrivals are built (`at`). With `release`, a chunk is dropped once every one of
    its requests has been taken for the requests table (`take`): a streamed run then holds the
    chunks of the requests in flight and no more, whatever the workload's length."""

    def __init__(self, chunks: Iterator[tuple[int, RequestArrays]], release: bool) -> None:
        self._chunks = chunks
        self.release = release
        self.starts: list[int] = []  # first ids of the chunks held, ascending
        # first id: columns, one past their last id, how many are left to take (a chunk's
        # extent is read once, as it is pulled)
        self.held: dict[int, tuple[RequestArrays, int, list[int]]] = {}
        self.end = 0  # one past the last id pulled
        self._current: tuple[int, int, RequestArrays] = (0, 0, _EMPTY)  # no id in [0, 0)
        if not self._pull():
            raise ValueError("a workload has at least one chunk")
        first = self.held[self.starts[0]][0] if self.starts else _EMPTY
        self.has_content = first.content is not None  # every chunk alike

    def at(self, i: int) -> tuple[int, RequestArrays]:
        """The chunk holding request `i`: its first id and its columns."""
        start, _, arrays = self.chunk(i)
        return start, arrays

    def chunk(self, i: int) -> tuple[int, int, RequestArrays]:
        """The chunk holding request `i`: its first id, one past its last, its columns."""
        current = self._current
        if current[0] <= i < current[1]:
            return current
        while i >= self.end:
            if not self._pull():
                raise IndexError(f"request {i} is past the workload's {self.end} requests")
        k = bisect.bisect_right(self.starts, i) - 1
        start = self.starts[k] if k >= 0 else -1
        arrays, stop, _ = self.held[start] if k >= 0 else (_EMPTY, start, [])
        if not start <= i < stop:  # every request of that chunk was taken
            raise IndexError(f"request {i}'s chunk was released")
        self._current = (start, stop, arrays)
        return self._current

    def _pull(self) -> bool:
        try:
            start, arrays = next(self._chunks)
        except StopIteration:
            return False
        if start != self.end:
            raise ValueError(f"a chunk starts at request {start}, expected {self.end}")
        size = len(arrays)
        self.end = start + size
        if size:
            self.starts.append(start)
            self.held[start] = (arrays, start + size, [size])
        return True

    def take(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """The workload's columns of requests `ids` for the requests table: prompt, output
        and predicted output tokens, tier, and where the workload has them source ids and
        session labels; with `release`, each chunk whose requests have all been taken goes."""
        if len(ids):
            self.chunk(int(ids.max()))  # pulled up to the last of them
        if not self.starts:  # a workload of no requests
            return _columns(_EMPTY, ids[:0])
        out: dict[str, np.ndarray] = {}
        single = len(self.starts) == 1
        for start in list(self.starts):
            arrays, stop, left = self.held[start]
            if single:
                inside = None  # every id is this chunk's
                local = ids - start if start else ids
            else:
                inside = (ids >= start) & (ids < stop)
                local = ids[inside] - start
            columns = _columns(arrays, local)
            for name, column in columns.items():
                if inside is None:
                    out[name] = column
                    continue
                if name not in out:
                    out[name] = np.empty(len(ids), dtype=column.dtype)
                out[name][inside] = column
            left[0] -= len(local)
            if self.release and left[0] == 0:
                self.starts.remove(start)
                del self.held[start]
                if self._current[0] == start:
                    self._current = (0, 0, _EMPTY)
        return out


def _columns(arrays: RequestArrays, local: np.ndarray) -> dict[str, np.ndarray]:
    assert arrays.tier_index is not None and arrays.predicted_output_tokens is not None
    out = {
        "num_prompt_tokens": arrays.prompt_tokens[local],
        "max_output_tokens": arrays.output_tokens[local],
        "tier": np.asarray(arrays.tier_names, dtype=object)[arrays.tier_index[local]],
        "predicted_output_tokens": arrays.predicted_output_tokens[local],
    }
    if arrays.source_id is not None:  # the trace's own request ids
        out["source_id"] = arrays.source_id[local]
    if arrays.sessions is not None:
        out["session"] = arrays.sessions.labels_of(local)
        if arrays.sessions.successors is not None:  # agents' tasks: the type, the tool wait
            assert arrays.sessions.think_s is not None
            out["agent"] = np.asarray(arrays.class_names, dtype=object)[arrays.class_index[local]]
            out["wait_s"] = arrays.sessions.think_s[local]
            if arrays.sessions.wave is not None:  # rollouts: each call's wave
                out["wave"] = arrays.sessions.wave[local]
    return out


_EMPTY = RequestArrays(
    arrival_s=np.empty(0),
    prompt_tokens=np.empty(0, dtype=np.int64),
    output_tokens=np.empty(0, dtype=np.int64),
    class_index=np.empty(0, dtype=np.int64),
    class_names=("default",),
)


class Source:
    """Feeds a workload's requests to a dispatch function at their arrival times (URGENT, its
    SimPy process: closed-loop sessions), or hands them over as a feed that the fleet's clock or
    a lone instance's loop pulls (`pulled`, `ArrivalFeed`).

    Known arrivals are turned into `Request`s a block at a time, so a workload of millions never
    exists as Python objects all at once; its columns come a chunk at a time too (`window`, a
    `ChunkWindow`: a streamed run generates them as it goes). A closed-loop session's later
    turn has no arrival time in advance: `turn_finished` (the engine's finish hook) schedules
    it a think time after the previous turn finished.

    `frontend_s` (`engine.frontend_s`) is the serving front end's share of every request: it
    reaches the scheduler that long after its arrival (tokenization and the hand-off to the engine
    core), while its latencies still count from the arrival."""

    def __init__(
        self,
        env: simpy.Environment,
        workload: Workload,
        dispatch: Callable[[Request], object],
        *,
        push: bool = True,  # False: no SimPy process; a lone instance pulls them (`pulled`)
        frontend_s: float = 0.0,  # a request reaches the scheduler this long after it arrives
        release: bool = False,  # True: drop chunks once taken (`ChunkWindow`; a streamed run)
    ) -> None:
        self.env = env
        self.frontend_s = frontend_s
        self.window = ChunkWindow(workload.chunks(), release)
        self.dispatch = dispatch
        # tier names by index; a block's tiers are looked up as it is built (no column of
        # Python objects as long as the workload)
        self.tier_names = np.asarray(workload.tier_names, dtype=object)
        whole = workload.arrays
        sessions = whole.sessions if whole is not None else None
        self.content = self.window.has_content  # requests with content ids: built one by one
        self.session = sessions.session if sessions is not None else None
        self.next_turn = sessions.next_turn if sessions is not None else None
        self.think_s = sessions.think_s if sessions is not None else None
        # a task graph (agents): a call arrives once every call it waits for has ended
        self.successors: np.ndarray | None = None
        self.successor_offsets: np.ndarray | None = None
        self.waiting_on: np.ndarray | None = None
        self.last_ended: np.ndarray | None = None
        if sessions is not None and sessions.successors is not None:
            assert sessions.needs is not None
            self.successors = sessions.successors
            self.successor_offsets = sessions.successor_offsets
            self.waiting_on = sessions.needs.copy()
            self.last_ended = np.zeros(len(sessions.needs))
        self.num_requests = len(sessions.session) if sessions is not None else 0
        shape = workload.shape
        known = shape.num_requests
        if not shape.all_known:
            assert whole is not None  # closed-loop sessions are generated whole
            known = int((~np.isnan(whole.arrival_s)).sum())
        self.num_known = known
        self.process = env.process(self._feed()) if push else None

    def make(self, i: int, arrival_s: float | None = None) -> Request:
        start, _, r = self.window.chunk(i)
        k = i - start
        assert r.predicted_output_tokens is not None and r.tier_index is not None
        content = r.content
        return Request(
            i,
            float(r.arrival_s[k]) if arrival_s is None else arrival_s,
            int(r.prompt_tokens[k]),
            int(r.output_tokens[k]),
            self.tier_names[r.tier_index[k]],
            int(r.predicted_output_tokens[k]),
            session=int(self.session[i]) if self.session is not None else -1,
            content=content.of(k) if content is not None else (),
            content_unit=content.unit if content is not None else 0,
            content_tokens=int(content.tokens[k]) if content is not None else 0,
        )

    def block(self, first: int, last: int) -> list[list[Any]]:
        """Request arguments after the id of arrivals first..last-1 (or fewer: up to the end of
        the chunk that holds `first`), column by column: arrival, prompt, output, tier,
        predicted output."""
        start, stop, r = self.window.chunk(first)
        assert r.predicted_output_tokens is not None and r.tier_index is not None
        a, b = first - start, min(last, stop) - start
        return [
            r.arrival_s[a:b].tolist(),
            r.prompt_tokens[a:b].tolist(),
            r.output_tokens[a:b].tolist(),
            self.tier_names[r.tier_index[a:b]].tolist(),
            r.predicted_output_tokens[a:b].tolist(),
        ]

    def arrival_times(self, first: int, last: int) -> list[float]:
        """The arrival times of first..last-1 (or fewer, as `block`)."""
        start, stop, r = self.window.chunk(first)
        return r.arrival_s[first - start : min(last, stop) - start].tolist()

    def turn_finished(self, req: Request) -> None:
        """A session's turn finished: its next turn arrives a think time later."""
        self._next_turn(req, req.finish_s)

    def turn_rejected(self, req: Request) -> None:
        """A session's turn was refused (longer than the context, shed) or given up on: the
        session goes on as after a finished turn, from the moment it was refused (a closed-loop
        client whose request is rejected sends its next one)."""
        if self.next_turn is None:
            return
        ended = req.finish_s if req.finish_s == req.finish_s else self.env.now  # NaN: now
        self._next_turn(req, max(ended, self.env.now))

    def _next_turn(self, req: Request, ended_s: float) -> None:
        assert self.next_turn is not None and self.think_s is not None
        if self.successors is not None:
            self._successors_of(req.id, ended_s)
            return
        nxt = int(self.next_turn[req.id])
        if nxt >= 0:
            self._arrive(nxt, ended_s + float(self.think_s[nxt]))

    def _successors_of(self, rid: int, ended_s: float) -> None:
        """A call of a task graph ended: each call that waited on it and on nothing else now
        arrives its wait after the last of them ended (a join after its slowest subagent). A
        node past the requests is a gate (a wave's barrier): once all it waits for ended, it
        passes on at once, its wait later, to what waits on it."""
        assert self.successor_offsets is not None and self.successors is not None
        assert self.waiting_on is not None and self.last_ended is not None
        assert self.think_s is not None
        first, last = int(self.successor_offsets[rid]), int(self.successor_offsets[rid + 1])
        for nxt in self.successors[first:last].tolist():
            if self.last_ended[nxt] < ended_s:
                self.last_ended[nxt] = ended_s
            self.waiting_on[nxt] -= 1
            if self.waiting_on[nxt] == 0:
                at = float(self.last_ended[nxt]) + float(self.think_s[nxt])
                if nxt >= self.num_requests:  # a gate
                    self._successors_of(nxt, at)
                else:
                    self._arrive(nxt, at)

    def _arrive(self, nxt: int, at: float) -> None:
        event = UrgentTimeout(self.env, at + self.frontend_s - self.env.now)

        def arrive(_: simpy.Event) -> None:
            self.dispatch(self.make(nxt, at))

        event.callbacks.append(arrive)

    def pulled(self) -> ArrivalFeed:
        """The arrivals as a feed, instead of this source's SimPy process: pulled by the fleet's
        clock (`sim.core.clock.Clock.pull`) or by a lone instance's loop (`Instance.feed`), where
        nothing else could see an arrival before that instance's next step. Known arrivals only
        (no closed-loop sessions)."""
        assert self.process is None and self.session is None
        return ArrivalFeed(self)

    def _feed(self) -> Generator[Event, Any, None]:
        env = self.env
        n = self.num_known
        delay = self.frontend_s
        first = 0
        if self.content or self.session is not None:
            while first < n:  # requests with content: built one by one
                times = self.arrival_times(first, min(n, first + ARRIVAL_BLOCK))
                for offset, arrival in enumerate(times):
                    t = arrival + delay
                    if t > env.now:
                        yield UrgentTimeout(env, t - env.now)
                    self.dispatch(self.make(first + offset))
                first += len(times)
            return
        while first < n:
            block = self.block(first, min(n, first + ARRIVAL_BLOCK))
            for offset, args in enumerate(zip(*block, strict=True)):
                t = args[0] + delay
                if t > env.now:
                    yield UrgentTimeout(env, t - env.now)
                self.dispatch(Request(first + offset, *args))
            first += len(block[0])


class ArrivalFeed:
    """Known arrivals in order, pulled by a fleet's clock (`take`, one at a time, as a pushing
    process would dispatch them) or by a lone instance's step loop (`Instance.feed`, `pull`).

    Same order and times as the `Source` process: in a lone instance's loop, at each schedule
    and when a run ends, every arrival at or before that instant is queued first (arrivals at t
    are visible to a schedule at t), and a run an arrival could join ends at the step boundary
    at or after the next arrival, where a pushed arrival would have cut it. That loop then never
    waits on the clock while busy: a run of steps costs no entry at all, and an arrival costs
    none unless the instance is idle."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.one_by_one = source.content  # requests with content: `Source.make`
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
        if first >= last:
            columns: list[list[Any]] = [[]]
        elif self.one_by_one:  # only the arrival times: `Source.make` builds each request
            columns = [src.arrival_times(first, last)]
        else:
            columns = src.block(first, last)
        self._block = list(zip(*columns, strict=True))
        self._first = first
        self.next_s = self._block[0][0] + self.delay if self._block else FOREVER_S

    def pull(self, until_s: float, submit: Callable[[Request], object]) -> None:
        """Queue every arrival at or before `until_s`, in order."""
        while self.next_s <= until_s:
            self.take(submit)

    def take(self, submit: Callable[[Request], object]) -> None:
        """Hand the next arrival to `submit` (`sim.core.clock.Clock` pulls a fleet's this way)."""
        i = self._next
        args = self._block[i - self._first]
        submit(self.source.make(i) if self.one_by_one else Request(i, *args))
        self._next = i + 1
        k = i + 1 - self._first
        if k < len(self._block):
            self.next_s = self._block[k][0] + self.delay
        else:
            self._load()
