"""Automatic prefix caching in the paged KV pool, as vLLM does it.

A full block is identified by a chained hash of its content and its prefix's
(`Request.block_hashes`). Blocks are reference-counted: requests sharing a prompt prefix share
its blocks. A block whose last holder leaves keeps its hash and stays cached (free, but still
holding its KV); cached free blocks are evicted least-recently-freed first, and only when a block
is needed and no never-cached free block is left (a request's blocks are freed tail first, so a
prefix's later blocks go before its first ones). An arriving request takes the longest run of
its leading blocks that is cached (never its whole sequence: at least one token is computed) and
computes the rest.

When blocks are registered: a prompt's blocks once its prefill has computed them (a chunk at a
time); a decoding request's blocks whose content the workload knows (a multi-turn session's
answers) when it leaves the batch. A block whose hash is already cached (another request computed
the same content meanwhile) stays a private duplicate, as in vLLM.

`num_free` counts what a policy may allocate: never-cached free blocks plus cached free ones;
`num_cached_free` the latter. Everything else is `BlockManager`'s: counts, no block ids.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence, Set

from sim.core.kv_cache import BlockManager
from sim.core.request import Request

IN_USE, CACHED, MISSING = range(3)


class PrefixCachingPool(BlockManager):
    caching = True

    def __init__(self, num_blocks: int, block_size: int) -> None:
        super().__init__(num_blocks, block_size)
        self.refs: dict[int, int] = {}  # hash of a block in use -> its holders
        self.lru: OrderedDict[int, None] = OrderedDict()  # cached free blocks, oldest first
        self.num_evictions = 0
        self.shared_tokens_delta = 0  # stored-token correction of the last acquire / release

    @property
    def num_free(self) -> int:
        return self._free + len(self.lru)

    @property
    def num_cached_free(self) -> int:
        return len(self.lru)

    # -- reading, for policies and routers ------------------------------------------------------

    def state(self, block_hash: int) -> int:
        if block_hash in self.refs:
            return IN_USE
        return CACHED if block_hash in self.lru else MISSING

    def cached_prefix(self, req: Request, limit: int) -> int:
        """Leading blocks of `req` (at most `limit`) that are cached, in use or free."""
        n = 0
        refs, lru = self.refs, self.lru
        for block_hash in req.block_hashes(self.block_size)[:limit]:
            if block_hash not in refs and block_hash not in lru:
                break
            n += 1
        return n

    # -- changes, by the engine ----------------------------------------------------------------

    def take(self, num_blocks: int) -> None:
        """Hand out blocks: never-cached ones first, then evict the least recently freed."""
        if num_blocks > self.num_free:
            raise AssertionError(f"KV pool: {num_blocks} blocks asked, {self.num_free} free")
        raw = min(num_blocks, self._free)
        self._free -= raw
        evict = num_blocks - raw
        if evict:
            pop = self.lru.popitem
            for _ in range(evict):
                pop(False)
            self.num_evictions += evict

    def acquire(self, req: Request, num_blocks: int) -> int:
        """`req` starts from its first `num_blocks` cached blocks; returns how many of them were
        already in use by others (shared: their tokens are stored once)."""
        shared = 0
        hashes = req.block_hashes(self.block_size)[:num_blocks]
        refs, lru = self.refs, self.lru
        for block_hash in hashes:
            count = refs.get(block_hash)
            if count is None:
                del lru[block_hash]  # a KeyError here: the plan's hit was not cached
                refs[block_hash] = 1
            else:
                refs[block_hash] = count + 1
                shared += 1
        req.cached_blocks.extend(hashes)
        req.set_kv_blocks(req.kv_blocks + num_blocks)
        return shared

    def register(self, req: Request, upto_tokens: int) -> None:
        """Cache the full blocks among `req`'s first `upto_tokens` computed tokens whose
        content is known and that no one has cached yet (a duplicate stays private)."""
        hashes = req.block_hashes(self.block_size)
        full = min(upto_tokens // self.block_size, len(hashes))
        mine = req.cached_blocks
        new = hashes[len(mine) : full]
        if not new:
            return
        refs, lru = self.refs, self.lru
        if refs.keys().isdisjoint(new) and lru.keys().isdisjoint(new):  # the common case
            refs.update(dict.fromkeys(new, 1))
            mine.extend(new)
            return
        for block_hash in new:
            if block_hash in refs or block_hash in lru:
                return  # computed twice: this copy stays private, and so do the rest
            refs[block_hash] = 1
            mine.append(block_hash)

    def release(self, req: Request) -> int:
        """Return `req`'s blocks: its cached blocks stay cached (free once no one holds them),
        the rest become plain free blocks. Returns the blocks it held."""
        held = req.kv_blocks
        cached = req.cached_blocks
        shared = 0
        refs, lru = self.refs, self.lru
        pop = refs.pop
        # the tail first, as vLLM does: a prefix's later blocks are evicted before its first
        for block_hash in reversed(cached):
            count = pop(block_hash)
            if count > 1:  # others still hold it
                refs[block_hash] = count - 1
                shared += 1
            else:
                lru[block_hash] = None  # most recently freed: evicted last
        self.shared_tokens_delta = shared * self.block_size
        plain = held - len(cached)
        if self._free + plain > self.num_total:
            raise AssertionError(f"KV pool over-freed by request {req.id}")
        self._free += plain
        cached.clear()
        req.drop_kv()
        return held


class PlannedReleases:
    """What a plan's evictions will do to the pool, worked out for the plan being drafted
    without touching the pool: how many blocks each victim frees (its blocks but the cached ones
    others still hold) and which hashes become cached free blocks (an admission that hits one
    takes it out of the free count). Mirrors `PrefixCachingPool.register` and `.release`, in
    the order the engine applies them."""

    def __init__(self, pool: PrefixCachingPool) -> None:
        self.pool = pool
        self.refs_left: dict[int, int] = {}
        self.registered: set[int] = set()
        self.cached_free: set[int] = set()  # hashes in the cached free blocks after the evictions

    def release(self, req: Request) -> int:
        """Blocks `req` leaves free (its full computed blocks are registered first)."""
        pool = self.pool
        refs, lru = pool.refs, pool.lru
        hashes = req.block_hashes(pool.block_size)
        held = req.cached_blocks
        full = min(req.num_computed_tokens // pool.block_size, len(hashes))
        for block_hash in hashes[len(held) : full]:
            if block_hash in refs or block_hash in lru or block_hash in self.registered:
                break  # a duplicate: it and the rest stay private (see `register`)
            self.registered.add(block_hash)
            self.cached_free.add(block_hash)
        still_held = 0
        for block_hash in held:
            left = self.refs_left.get(block_hash, refs[block_hash]) - 1
            self.refs_left[block_hash] = left
            if left:
                still_held += 1
            else:
                self.cached_free.add(block_hash)
        return req.kv_blocks - still_held


def hit_blocks(
    pool: PrefixCachingPool,
    req: Request,
    limit: int,
    taken: set[int],
    released: Set[int] = frozenset(),
) -> tuple[int, int]:
    """For a plan being drafted: the leading cached blocks `req` would start from (at most
    `limit`), and how many of them come from the cached free blocks (each leaves the free
    count). `taken`: hashes this plan's earlier admissions already hold (in use by then);
    `released`: hashes this plan's evictions leave cached and free (`PlannedReleases`)."""
    n = from_free = 0
    hashes: Sequence[int] = req.block_hashes(pool.block_size)[:limit]
    for block_hash in hashes:
        if block_hash in taken:
            n += 1
        elif block_hash in released:  # in use now, but cached and free once its holders leave
            n += 1
            from_free += 1
        else:
            state = pool.state(block_hash)
            if state == MISSING:
                break
            n += 1
            from_free += state == CACHED
    return n, from_free
