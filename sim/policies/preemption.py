"""Preemption for continuous batching: whom to evict, and how (recompute or swap).

The block manager only reports that a decode cannot get a block; `Preemptor` picks the victim
among the running requests and evicts it:

* victim `last_admitted` (vLLM's default): the most recently admitted; `lowest_priority`: the
  running request with the largest tier rank (ties: the most recently admitted); `most_kv`: the
  one holding most blocks (ties: the most recently admitted).
* mode `recompute`: its blocks are freed, its computed tokens dropped (counted in
  `num_recomputed_tokens`), and it goes to the front of the waiting queue to prefill again.
* mode `swap`: the KV of its computed tokens, `blocks_for(computed) * block_size *
  kv_bytes_per_token` bytes, is copied to host memory at `swap_bandwidth` (the copy's seconds are
  added to the step that preempts, `StepPlan.swap_s`); the request keeps its computed tokens and
  waits in `swapped` (FIFO in eviction order). Swapped requests resume before any new admission:
  at a step that preempted nobody, while seats and free blocks (above the watermark) allow, each
  is copied back (the same bytes, its seconds again added to that step) and rejoins `running`.
  When host memory (`host_memory_gb`) cannot take a victim's KV, that victim is recomputed.

Swap-ins need blocks, and blocks are only freed when requests finish or are preempted, so a run
of identical decode steps cannot be interrupted by a swap-in: a run starts only at a step that
neither swapped nor preempted with requests swapped out (see ContinuousPolicy._plan).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping

from sim.core.kv_cache import BlockManager
from sim.core.request import Request
from sim.policies.queues import WaitingQueue


class Preemptor:
    def __init__(
        self,
        kv: BlockManager,
        *,
        mode: str = "recompute",
        victim: str = "last_admitted",
        swap_bandwidth_bytes_per_s: float = 25e9,
        host_memory_bytes: float = 64e9,
        kv_bytes_per_token: float = 0.0,
        tier_ranks: Mapping[str, int] | None = None,
    ) -> None:
        if mode == "swap" and not (swap_bandwidth_bytes_per_s > 0 and kv_bytes_per_token > 0):
            raise ValueError("swap preemption needs a positive bandwidth and kv_bytes_per_token")
        self.kv = kv
        self.swap = mode == "swap"
        self.victim = victim
        self.bandwidth = swap_bandwidth_bytes_per_s
        self.host_capacity = host_memory_bytes
        self.kv_bytes_per_token = kv_bytes_per_token
        self.ranks = dict(tier_ranks or {})
        self.host_used = 0
        self.swapped: deque[Request] = deque()
        self.swap_s = 0.0  # copy seconds of the step being planned

    def pick(self, running: list[Request]) -> int:
        """Index in `running` (admission order) of the request to evict."""
        last = len(running) - 1
        if self.victim == "last_admitted":
            return last
        if self.victim == "lowest_priority":
            ranks = self.ranks
            return max(range(len(running)), key=lambda i: (ranks.get(running[i].tier, 0), i))
        return max(range(len(running)), key=lambda i: (running[i].kv_blocks, i))

    def evict(self, victim: Request, waiting: WaitingQueue) -> None:
        """Free the victim's blocks and park it: in host memory, or at the queue's front."""
        victim.num_preemptions += 1
        tokens = self.kv.blocks_for(victim.num_computed_tokens) * self.kv.block_size
        nbytes = int(tokens * self.kv_bytes_per_token)
        self.kv.free(victim)
        if self.swap and self.host_used + nbytes <= self.host_capacity:
            victim.num_swaps += 1
            victim.swapped_bytes += nbytes
            victim.host_bytes = nbytes
            self.host_used += nbytes
            self.swap_s += nbytes / self.bandwidth
            self.swapped.append(victim)
            return
        victim.num_recomputed_tokens += victim.num_computed_tokens
        victim.num_computed_tokens = 0
        waiting.push_front(victim)

    def swap_in(
        self,
        running: list[Request],
        seats: int,
        reserve: int,
        target: Callable[[Request, int], int],
    ) -> list[Request]:
        """Bring swapped requests back, oldest eviction first, while seats and blocks allow.

        `reserve`: blocks to keep free; `target(req, tokens)`: the tokens its holding must cover
        to store `tokens` (the policy's reservation rule)."""
        resumed: list[Request] = []
        while self.swapped and len(resumed) < seats:
            req = self.swapped[0]
            need_tokens = target(req, req.num_computed_tokens + (1 if req.is_decoding else 0))
            keep = reserve if running or resumed else 0
            if not self.kv.can_allocate(self.kv.blocks_needed(req, need_tokens), keep):
                break
            self.kv.allocate(req, need_tokens)
            self.swapped.popleft()
            self.host_used -= req.host_bytes
            self.swap_s += req.host_bytes / self.bandwidth
            req.host_bytes = 0
            resumed.append(req)
        return resumed
