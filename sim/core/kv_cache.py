"""The KV pool of one instance: fixed-size blocks, counted, never decided about.

Paged attention (vLLM) hands a request blocks of `block_size` tokens on demand; a contiguous
allocator (static batching, FasterTransformer-style) reserves a request's whole sequence at
admission. Both are this pool: a contiguous allocator is a pool of one-token blocks whose owner
asks for the full reservation up front. Only counts are tracked: the simulator never needs block
ids, and counting keeps allocation O(1). A request's holding is `Request.kv_blocks`; blocks can
also be reserved for a request that is not here yet (a KV transfer in flight). Conservation:
`num_free + holdings + reserved == num_total`, always.

The pool answers and moves counts; who waits and who is preempted is the policy's business
(nano-vllm's block manager / scheduler split). Running out is an error here: the policy planned
within the free blocks it saw, so a failed allocation is a bug, not a preemption.
"""

from __future__ import annotations

from sim.core.request import Request


class BlockManager:
    caching = False  # no prefix caching (`sim.core.prefix_cache.PrefixCachingPool` caches)

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 0 or block_size < 1:
            raise ValueError(f"bad KV pool: {num_blocks} blocks of {block_size} tokens")
        self.num_total = num_blocks
        self.block_size = block_size
        self._free = num_blocks

    @property
    def num_free(self) -> int:
        """Blocks a policy may hand out now."""
        return self._free

    @property
    def num_used(self) -> int:
        """Blocks held by requests (or reserved for transfers)."""
        return self.num_total - self.num_free

    @property
    def capacity_tokens(self) -> int:
        return self.num_total * self.block_size

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def blocks_needed(self, req: Request, num_tokens: int) -> int:
        """Extra blocks `req` needs so that its holding covers `num_tokens` tokens."""
        return max(0, -(-num_tokens // self.block_size) - req.kv_blocks)

    def take(self, num_blocks: int) -> None:
        """Hand out `num_blocks` blocks (to a request, or to decode-batch members' growth)."""
        if num_blocks > self._free:
            raise AssertionError(f"KV pool: {num_blocks} blocks asked, {self._free} free")
        self._free -= num_blocks

    def give_back(self, num_blocks: int) -> None:
        if self._free + num_blocks > self.num_total:  # a double free corrupts all that follows
            raise AssertionError(f"KV pool over-freed by {num_blocks} blocks")
        self._free += num_blocks

    def grow(self, req: Request, num_tokens: int) -> int:
        """Grow `req`'s holding to cover `num_tokens` tokens; the number of new blocks."""
        held = req.kv_blocks
        need = -(-num_tokens // self.block_size) - held
        if need <= 0:
            return 0
        self.take(need)
        req.set_kv_blocks(held + need)
        return need

    def shrink(self, req: Request, num_tokens: int) -> int:
        """Return the blocks at the end of `req`'s holding beyond those `num_tokens` tokens
        fill (a speculative step's rejected lookahead); the number freed."""
        held = req.kv_blocks
        extra = held - -(-num_tokens // self.block_size)
        if extra <= 0:
            return 0
        if len(req.cached_blocks) > held - extra:
            raise AssertionError(f"request {req.id}: shrinking into its cached blocks")
        self.give_back(extra)
        req.set_kv_blocks(held - extra)
        return extra

    def release(self, req: Request) -> int:
        """Return all of `req`'s blocks to the pool; the number freed."""
        held = req.kv_blocks
        self.give_back(held)
        req.drop_kv()
        return held
