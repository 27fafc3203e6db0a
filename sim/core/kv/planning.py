"""What a plan's evictions will do to the KV pool, worked out while the plan is drafted.

A victim frees its blocks but the cached ones others still hold; its computed full blocks are
cached first (so they become cached free blocks, which a later admission of the same plan may
hit). This mirrors `KVPool.register` and `KVPool.release`, in the order the engine applies them,
by asking the pool questions and never changing it. Without prefix caching a victim frees all it
holds.
"""

from __future__ import annotations

from typing import Protocol

from sim.core.request import Request


class CacheQuestions(Protocol):
    """What the planning mirror asks the pool (`sim.core.kv.pool.KVPool`)."""

    @property
    def block_size(self) -> int: ...

    def is_cached(self, block_hash: int) -> bool: ...

    def holders(self, block_hash: int) -> int: ...


class PlannedReleases:
    def __init__(self, pool: CacheQuestions, caching: bool) -> None:
        self.pool = pool
        self.caching = caching
        self.refs_left: dict[int, int] = {}
        self.registered: set[int] = set()
        self.cached_free: set[int] = set()  # hashes in the cached free blocks after the evictions

    def release(self, req: Request) -> int:
        """Blocks `req` leaves free (its full computed blocks are cached first)."""
        if not self.caching:
            return req.kv_blocks
        pool = self.pool
        hashes = req.block_hashes(pool.block_size)
        full = min(req.num_computed_tokens // pool.block_size, len(hashes))
        for block_hash in hashes[req.kv_scanned : full]:
            if pool.is_cached(block_hash) or block_hash in self.registered:
                continue  # a duplicate stays private; the blocks after it are still cached
            self.registered.add(block_hash)
            self.cached_free.add(block_hash)
        still_held = 0
        for block_hash in req.cached_blocks:
            left = self.refs_left.get(block_hash, pool.holders(block_hash)) - 1
            self.refs_left[block_hash] = left
            if left:
                still_held += 1
            else:
                self.cached_free.add(block_hash)
        return req.kv_blocks - still_held
