"""A stand-in for what a policy sees, built from plain lists and counts: no engine, no SimPy.

`View` implements `sim.core.plan.InstanceView` (with `Queue` for `QueueView` and `Pool` for
`KVView`) over requests put in their states by hand, so a test can hand a policy any state and
assert the exact `StepPlan` it returns. Nothing here applies a plan.

Requests reach their states through their own lifecycle transitions, as the engine would leave
them: `prefilling(req, computed)` after `computed` prompt tokens, `decoding(req, emitted)` after
`emitted` output tokens, `swapped(req, emitted)` evicted to host memory. Each holds the blocks its
computed tokens fill unless `blocks` says otherwise. The view's answers follow the engine's
definitions (`sim.core.engine.Engine`): a request needs a block for its next token when its
blocks are full, and a swap copies the KV of its computed tokens' whole blocks.

The pool is counts only (`caching` False). A pool with more to say (prefix caching) is a subclass
of `Pool` with the extra answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence, Set

from sim.core.plan import KVView, QueueView
from sim.core.request import Request

BLOCK_SIZE = 4


class Queue:
    """A first-come-first-served waiting queue over a list (`QueueView`)."""

    def __init__(self, requests: Iterable[Request] = ()) -> None:
        self.requests = list(requests)

    def peek(self, now: float) -> Request:
        return self.requests[0]

    def may_be_overtaken(self) -> bool:
        return False  # a newcomer goes behind everyone queued

    def ordered(self) -> Iterator[Request]:
        return iter(self.requests)

    def oldest_arrival_s(self) -> float:
        return min(r.arrival_s for r in self.requests)

    def __len__(self) -> int:
        return len(self.requests)


class Releases:
    """What evictions free in a pool that caches nothing: everything the victim holds."""

    cached_free: frozenset[int] = frozenset()

    def release(self, req: Request) -> int:
        return req.kv_blocks


class Pool:
    """A KV pool of `num_total` blocks of `block_size` tokens, `num_free` free (`KVView`).
    `in_use` and `cached_free`: hashes of cached blocks held by requests, or free; `lower`:
    hashes a KV tier below the GPU holds. Empty: a pool that caches nothing."""

    def __init__(
        self,
        num_total: int,
        num_free: int,
        block_size: int = BLOCK_SIZE,
        *,
        in_use: Iterable[int] = (),
        cached_free: Iterable[int] = (),
        lower: Iterable[int] = (),
    ) -> None:
        self.num_total = num_total
        self.num_free = num_free
        self.block_size = block_size
        self.in_use, self.cached_free, self.lower = set(in_use), set(cached_free), set(lower)

    def hits(
        self, req: Request, limit: int, taken: Set[int], released: Set[int] = frozenset()
    ) -> tuple[int, int, int]:
        hashes = req.block_hashes(self.block_size)[:limit]
        n = from_free = 0
        for h in hashes:
            if h in taken or (h in self.in_use and h not in released):
                n += 1
            elif h in released or h in self.cached_free:
                n, from_free = n + 1, from_free + 1
            else:
                break
        lower = 0
        while n + lower < len(hashes) and hashes[n + lower] in self.lower:
            lower += 1
        return n, from_free, lower

    def planned_releases(self) -> Releases:
        return Releases()

    @property
    def capacity_tokens(self) -> int:
        return self.num_total * self.block_size

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def blocks_needed(self, req: Request, num_tokens: int) -> int:
        return max(0, self.blocks_for(num_tokens) - req.kv_blocks)


class View:
    """One instance's state as a policy reads it (`InstanceView`)."""

    def __init__(
        self,
        kv: KVView,
        *,
        waiting: Iterable[Request] = (),
        queue: QueueView | None = None,
        running: Sequence[Request] = (),
        swapped: Sequence[Request] = (),
        arrived: Sequence[Request] = (),
        now: float = 0.0,
        host_bytes_free: float = 64e9,
        bytes_per_token: float = 1.0,
        receives_transfers: bool = False,
    ) -> None:
        self.kv = kv
        # `queue`: another order (`sim.policies.queues`) holding the waiting requests
        self.waiting: QueueView = queue if queue is not None else Queue(waiting)
        self.running = list(running)
        self.swapped = list(swapped)
        self.arrived = list(arrived)
        self.now = now
        self.host_bytes_free = host_bytes_free
        self.bytes_per_token = bytes_per_token
        self.receives_transfers = receives_transfers

    @property
    def prefilling(self) -> list[Request]:
        return [r for r in self.running if not r.is_decoding]

    @property
    def num_decoding(self) -> int:
        return sum(r.is_decoding for r in self.running)

    def decode_block_demand(self) -> int:
        return sum(self.needs_block(r) for r in self.running if r.is_decoding)

    def needs_block(self, req: Request) -> bool:
        return req.kv_blocks * self.kv.block_size <= req.num_computed_tokens

    def swap_bytes(self, req: Request) -> int:
        tokens = self.kv.blocks_for(req.num_computed_tokens) * self.kv.block_size
        return int(tokens * self.bytes_per_token)


def request(
    id: int, prompt: int, output: int, *, arrival_s: float = 0.0, tier: str = "default"
) -> Request:
    """A waiting request of `prompt` tokens that will emit `output`."""
    return Request(id, arrival_s, prompt, output, tier)


def _hold(req: Request, blocks: int | None, block_size: int) -> Request:
    req.set_kv_blocks(-(-req.num_computed_tokens // block_size) if blocks is None else blocks)
    return req


def prefilling(
    req: Request, computed: int = 0, *, blocks: int | None = None, block_size: int = BLOCK_SIZE
) -> Request:
    """Running, `computed` of its prompt tokens done (fewer than all of them)."""
    assert computed < req.num_prompt_tokens
    req.admit(0.0)
    if computed:
        req.compute(computed, 0.0, 0.0)
    return _hold(req, blocks, block_size)


def decoding(
    req: Request, emitted: int = 1, *, blocks: int | None = None, block_size: int = BLOCK_SIZE
) -> Request:
    """Running, its prompt done and `emitted` output tokens out (fewer than all of them)."""
    assert 1 <= emitted < req.max_output_tokens
    req.admit(0.0)
    req.compute(req.num_prompt_tokens, 0.0, 0.0)  # the first token
    for i in range(1, emitted):
        req.compute(1, float(i - 1), float(i))
    return _hold(req, blocks, block_size)


def swapped(req: Request, emitted: int = 1, *, block_size: int = BLOCK_SIZE) -> Request:
    """Evicted to host memory while decoding, after `emitted` output tokens."""
    decoding(req, emitted, block_size=block_size)
    req.swap_out(req.kv_blocks * block_size)
    return req
