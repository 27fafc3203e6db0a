"""KV-cache accounting: a pool of fixed-size blocks that reports and never decides.

Paged attention (vLLM) hands a request KV blocks of `block_size` tokens on demand; a contiguous
allocator (static batching, FasterTransformer-style) reserves a request's whole sequence at
admission. Both are the same pool here: a contiguous allocator is a pool of one-token blocks whose
owner asks for the full reservation up front. Only counts are tracked: the simulator never needs
block ids, and counting keeps allocation O(1). A request's holding lives on `Request.kv_blocks`, so
conservation is `num_free + sum(held) == num_total` at all times.

The pool only answers questions and moves counts; who waits and who gets preempted is the
policy's business (nano-vllm's block manager / scheduler split).
"""

from __future__ import annotations

from sim.core.request import Request


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 0 or block_size < 1:
            raise ValueError(f"bad KV pool: {num_blocks} blocks of {block_size} tokens")
        self.num_total = num_blocks
        self.block_size = block_size
        self.num_free = num_blocks
        # changes made from outside the step loop, mid-step (KV transfers): (time, blocks)
        self.external: list[tuple[float, int]] = []

    @property
    def num_used(self) -> int:
        return self.num_total - self.num_free

    @property
    def capacity_tokens(self) -> int:
        return self.num_total * self.block_size

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def blocks_needed(self, req: Request, num_tokens: int) -> int:
        """Extra blocks `req` needs so that its holding covers `num_tokens` tokens."""
        return max(0, -(-num_tokens // self.block_size) - req.kv_blocks)

    def can_allocate(self, num_blocks: int, reserve: int = 0) -> bool:
        """Whether `num_blocks` can be handed out while keeping `reserve` blocks free."""
        return num_blocks + reserve <= self.num_free

    def allocate(self, req: Request, num_tokens: int) -> int | None:
        """Grow `req`'s holding to cover `num_tokens`; the number of new blocks, or None."""
        need = -(-num_tokens // self.block_size) - req.kv_blocks
        if need <= 0:
            return 0
        if need > self.num_free:
            return None
        self.num_free -= need
        req.kv_blocks += need
        return need

    def note_external(self, now_s: float, delta_blocks: int) -> None:
        """Record a change of `delta_blocks` at `now_s` made between step boundaries, so the
        engine can integrate KV use exactly rather than from the step's start."""
        self.external.append((now_s, delta_blocks))

    def reserve(self, num_blocks: int) -> bool:
        """Set blocks aside for a request that is not here yet (a KV transfer in flight)."""
        if num_blocks > self.num_free:
            return False
        self.num_free -= num_blocks
        return True

    def attach(self, req: Request, num_blocks: int) -> None:
        """Hand reserved blocks to the request they were reserved for."""
        if req.kv_blocks:
            raise AssertionError(f"request {req.id} already holds blocks in this pool")
        req.kv_blocks = num_blocks

    def free(self, req: Request) -> int:
        """Return all of `req`'s blocks to the pool; the number freed."""
        held = req.kv_blocks
        self.num_free += held
        req.kv_blocks = 0
        if self.num_free > self.num_total:  # a double free would corrupt every later decision
            raise AssertionError(f"KV pool over-freed by request {req.id}")
        return held
