"""An instance's waiting queue: the requests queued here, in the policy's order, and their work.

The queue itself is the policy's (`sim.policies.queues`: FCFS, shortest first, weighted tiers),
typed here by what the instance does with it (`WaitQueue`); a policy reads it as
`sim.core.plan.QueueView`. `Waiting` owns it with the tallies the instance's outside world asks
for: the tokens its requests still have to compute, and whether a request with no full prompt
block whose known content fills one has come (`late_first`: its decode steps can cache a first
block, `Instance.may_cache_prefix`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from sim.core.plan import QueueView
from sim.core.request import Request


class WaitQueue(QueueView, Protocol):
    """The policy's queue as the instance changes it."""

    def push(self, req: Request) -> None: ...

    def push_front(self, req: Request) -> None: ...

    def pop(self, now: float) -> Request: ...

    def remove(self, req: Request) -> None: ...

    def __iter__(self) -> Iterator[Request]: ...


class Waiting:
    """The waiting requests (the policy's queue) and the work they have left."""

    def __init__(self, queue: WaitQueue, caching_block_size: int = 0) -> None:
        self.queue = queue
        self._work = 0  # remaining work of the queued requests
        self._block_size = caching_block_size  # 0: the pool keeps no prefix cache
        self._late_first = False

    def __len__(self) -> int:
        return len(self.queue)

    def push(self, req: Request) -> None:
        """An arrival joins the back of the queue (in the policy's order)."""
        self.queue.push(req)
        self._work += req.remaining_work
        bs = self._block_size
        if bs and not self._late_first:
            self._late_first = req.num_prompt_tokens < bs and bool(req.block_hashes(bs))

    def push_front(self, req: Request) -> None:
        """A request preempted by recompute goes back to the front."""
        self.queue.push_front(req)
        self._work += req.remaining_work

    def pop(self, now: float, req: Request) -> None:
        """Admission: `req`, which must be the queue's head at `now`, leaves it."""
        if self.queue.pop(now) is not req:
            raise AssertionError(f"admission of request {req.id} out of queue order")
        self._work -= req.remaining_work

    def remove(self, req: Request) -> None:
        """A queued request leaves (its client gave up)."""
        self.queue.remove(req)
        self._work -= req.remaining_work

    def work(self) -> int:
        """Tokens the queued requests still have to compute."""
        return self._work

    def late_first(self) -> bool:
        """Whether a request with no full prompt block whose known content fills one came."""
        return self._late_first

    def prompt_backlog(self) -> int:
        """Prompt tokens not yet prefilled of the queued requests."""
        total = 0
        for req in self.queue:
            total += max(0, req.num_prompt_tokens - req.num_computed_tokens)
        return total
