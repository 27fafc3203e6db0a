"""Waiting-queue orders shared by every policy: FCFS, shortest job first, priority tiers, EDF.

A policy keeps its waiting requests in a `WaitingQueue` and admits from the head (`peek`/`pop`),
stopping at the first head that does not fit (head-of-line, as vLLM does). `push_front` is for
requests that must run before anything else: recompute victims go back to the front, whatever
the order. Orders (config `policy.queue.order`):

* `fcfs`: arrival order; a plain deque, so the hot path costs what it did before queue orders.
* `sjf`: shortest output first, on the true length (`length: known`) or on the workload's
  predicted length (`length: predicted`). Aging: the key is `length - aging_per_s * waited`;
  every queued request ages at the same rate, so the order of the queued ones never changes and
  the key `length + aging_per_s * arrival_s` in a heap is exact.
* `priority`, `strict`: lowest tier `rank` first, FCFS within a tier; aging lowers the rank by
  `aging_per_s` per second waited (key `rank + aging_per_s * arrival_s`, exact as above).
* `priority`, `weighted`: stride scheduling over tiers: each tier is a FIFO with a pass value,
  the non-empty tier with the smallest pass (ties: lower rank) goes next and its pass grows by
  `1 / weight` per admitted request, so backlogged tiers get admissions in proportion to their
  weights. A tier that becomes non-empty starts at the smallest active pass (no saved credit).
* `edf`: earliest TTFT deadline first, deadline = arrival + the tier's `ttft_s` SLO.

Every order is static between pushes and pops (aging shifts all keys alike), which is what lets
the engine coalesce decode runs: a head that cannot be admitted stays the head until a request
arrives or leaves. `may_be_overtaken` tells the policy whether a newcomer could become the head.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from itertools import count
from typing import Protocol

from sim.core.request import Request


class WaitingQueue(Protocol):
    """The waiting queue: the engine pushes and pops; policies peek and walk `ordered()`."""

    def push(self, req: Request) -> None: ...

    def push_front(self, req: Request) -> None: ...

    def peek(self, now: float) -> Request: ...

    def pop(self, now: float) -> Request: ...

    def remove(self, req: Request) -> None: ...

    def may_be_overtaken(self) -> bool: ...

    def ordered(self) -> Iterator[Request]:
        """The queued requests in the order pops would return them, without popping."""
        ...

    def oldest_arrival_s(self) -> float: ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Request]: ...


class FCFSQueue(deque[Request]):
    """First come first served: a deque, with the protocol's names bound to its methods."""

    push = deque.append
    push_front = deque.appendleft

    def peek(self, now: float) -> Request:
        return self[0]

    def pop(self, now: float) -> Request:  # type: ignore[override]
        return self.popleft()

    def may_be_overtaken(self) -> bool:
        return False  # a newcomer always goes behind everyone queued

    def ordered(self) -> Iterator[Request]:
        return iter(self)

    def oldest_arrival_s(self) -> float:
        return self[0].arrival_s  # arrival order (recompute victims do not come back here)


class KeyedQueue:
    """A heap on a static key per request (SJF, strict priority, EDF), behind a front deque."""

    def __init__(self, key: Callable[[Request], float]) -> None:
        self.key = key
        self.front: deque[Request] = deque()
        self.heap: list[tuple[float, float, int, Request]] = []
        self._seq = count()

    def push(self, req: Request) -> None:
        heapq.heappush(self.heap, (self.key(req), req.arrival_s, next(self._seq), req))

    def push_front(self, req: Request) -> None:
        self.front.appendleft(req)

    def peek(self, now: float) -> Request:
        return self.front[0] if self.front else self.heap[0][3]

    def pop(self, now: float) -> Request:
        return self.front.popleft() if self.front else heapq.heappop(self.heap)[3]

    def remove(self, req: Request) -> None:
        if req in self.front:
            self.front.remove(req)
            return
        self.heap = [e for e in self.heap if e[3] is not req]
        heapq.heapify(self.heap)

    def may_be_overtaken(self) -> bool:
        return not self.front

    def ordered(self) -> Iterator[Request]:
        yield from self.front
        heap = self.heap
        if not heap:
            return
        # walk the heap in key order without popping it: a frontier of (key, index) whose
        # smallest is the next in order; popping an entry opens its two children
        frontier = [(heap[0][:3], 0)]
        while frontier:
            _, i = heapq.heappop(frontier)
            yield heap[i][3]
            for child in (2 * i + 1, 2 * i + 2):
                if child < len(heap):
                    heapq.heappush(frontier, (heap[child][:3], child))

    def oldest_arrival_s(self) -> float:
        return min(r.arrival_s for r in self)

    def __len__(self) -> int:
        return len(self.front) + len(self.heap)

    def __iter__(self) -> Iterator[Request]:
        yield from self.front
        for entry in sorted(self.heap, key=lambda e: e[:3]):
            yield entry[3]


class WeightedTierQueue:
    """Stride scheduling across tiers (see the module docstring), FIFO within each tier."""

    def __init__(self, ranks: Mapping[str, int], weights: Mapping[str, float]) -> None:
        self.ranks = dict(ranks)
        self.stride = {tier: 1.0 / w for tier, w in weights.items()}
        self.front: deque[Request] = deque()
        self.tiers: dict[str, deque[Request]] = {t: deque() for t in ranks}
        self.passes: dict[str, float] = dict.fromkeys(ranks, 0.0)
        self._len = 0

    def _active_min_pass(self) -> float:
        active = [self.passes[t] for t, q in self.tiers.items() if q]
        return min(active) if active else 0.0

    def push(self, req: Request) -> None:
        queue = self.tiers[req.tier]
        if not queue:  # a tier that was idle gets no credit for the time it had nothing queued
            self.passes[req.tier] = max(self.passes[req.tier], self._active_min_pass())
        queue.append(req)
        self._len += 1

    def push_front(self, req: Request) -> None:
        self.front.appendleft(req)
        self._len += 1

    def _next_tier(self) -> str:
        return min(
            (t for t, q in self.tiers.items() if q), key=lambda t: (self.passes[t], self.ranks[t])
        )

    def peek(self, now: float) -> Request:
        return self.front[0] if self.front else self.tiers[self._next_tier()][0]

    def pop(self, now: float) -> Request:
        self._len -= 1
        if self.front:
            return self.front.popleft()
        tier = self._next_tier()
        self.passes[tier] += self.stride[tier]
        return self.tiers[tier].popleft()

    def remove(self, req: Request) -> None:
        queue = self.front if req in self.front else self.tiers[req.tier]
        queue.remove(req)
        self._len -= 1

    def may_be_overtaken(self) -> bool:
        return not self.front

    def ordered(self) -> Iterator[Request]:
        yield from self.front
        # replay the stride choices pops would make, on copies of the passes
        passes = dict(self.passes)
        taken = dict.fromkeys(self.tiers, 0)
        while True:
            active = [t for t, q in self.tiers.items() if taken[t] < len(q)]
            if not active:
                return
            tier = min(active, key=lambda t: (passes[t], self.ranks[t]))
            yield self.tiers[tier][taken[tier]]
            taken[tier] += 1
            passes[tier] += self.stride[tier]

    def oldest_arrival_s(self) -> float:
        return min(r.arrival_s for r in self)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Request]:
        yield from self.front
        for queue in self.tiers.values():
            yield from queue


def make_queue(
    order: str,
    *,
    length: str = "known",
    aging_per_s: float = 0.0,
    priority_mode: str = "strict",
    ranks: Mapping[str, int] | None = None,
    weights: Mapping[str, float] | None = None,
    ttft_by_tier: Mapping[str, float | None] | None = None,
    default_ttft_s: float | None = None,
) -> WaitingQueue:
    """The queue for one policy; tier tables are validated by the scenario loader."""
    if order == "fcfs":
        return FCFSQueue()
    if order == "sjf":
        predicted = length == "predicted"

        def sjf_key(r: Request) -> float:
            n = r.predicted_output_tokens if predicted and r.predicted_output_tokens else None
            return (n or r.max_output_tokens) + aging_per_s * r.arrival_s

        return KeyedQueue(sjf_key)
    if order == "priority":
        rank_of = dict(ranks or {})
        if priority_mode == "weighted":
            return WeightedTierQueue(rank_of, weights or dict.fromkeys(rank_of, 1.0))
        return KeyedQueue(lambda r: rank_of[r.tier] + aging_per_s * r.arrival_s)
    if order == "edf":
        table = dict(ttft_by_tier or {})

        def deadline(r: Request) -> float:
            ttft = table.get(r.tier) or default_ttft_s
            return r.arrival_s + (ttft if ttft is not None else math.inf)

        return KeyedQueue(deadline)
    raise ValueError(f"unknown queue order {order!r}")
