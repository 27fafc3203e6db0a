"""Preemption for iteration-level batching: whom to evict, and how (recompute or swap).

When a decoding request needs a block and none is free, the policy evicts a running request:

* victim `last_admitted` (vLLM's default): the most recently admitted; `lowest_priority`: the
  running request with the largest tier rank (ties: the most recently admitted); `most_kv`: the
  one holding most blocks (ties: the most recently admitted).
* mode `recompute`: its blocks are freed, its computed tokens dropped (counted in
  `num_recomputed_tokens`), and it goes to the front of the waiting queue to prefill again.
* mode `swap`: the KV of its computed tokens, `blocks_for(computed) * block_size *
  kv_bytes_per_token` bytes, is copied to host memory at the instance's swap bandwidth (the
  copy's seconds are added to the step that preempts); it keeps its computed tokens and waits,
  first in first out. Swapped requests resume before any new admission: at a step that preempted
  nobody, while seats and free blocks (above the watermark) allow, each is copied back (the same
  bytes, their seconds again added to that step). When host memory cannot take a victim's KV,
  that victim is recomputed.

These are decisions: the engine frees the blocks and moves the request (`sim.core.engine`).
A step that preempts or copies KV is never repeated: the blocks it frees may let a swapped
request back in at the next step, or (in a cluster) start a KV transfer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sim.core.request import Request


class Preemptor:
    def __init__(
        self,
        *,
        mode: str = "recompute",
        victim: str = "last_admitted",
        tier_ranks: Mapping[str, int] | None = None,
    ) -> None:
        if mode not in ("recompute", "swap"):
            raise ValueError(f"unknown preemption mode {mode!r}")
        if victim not in ("last_admitted", "lowest_priority", "most_kv"):
            raise ValueError(f"unknown preemption victim {victim!r}")
        self.swap = mode == "swap"
        self.victim = victim
        self.ranks = dict(tier_ranks or {})

    def pick(self, running: list[Request], held: Callable[[Request], int]) -> int:
        """Index in `running` (admission order) of the request to evict; `held(req)` is the
        blocks it holds counting those planned for it this step."""
        last = len(running) - 1
        if self.victim == "last_admitted":
            return last
        if self.victim == "lowest_priority":
            ranks = self.ranks
            return max(range(len(running)), key=lambda i: (ranks.get(running[i].tier, 0), i))
        return max(range(len(running)), key=lambda i: (held(running[i]), i))
