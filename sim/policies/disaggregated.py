"""The two halves of prefill/decode disaggregation (DistServe, Splitwise).

A prefill instance runs its continuous or chunked policy, but a request whose prompt completes
(its first token emitted) leaves the batch instead of decoding: it waits in `handoff`, still
holding its KV blocks (they count against the prefill instance's memory: backpressure), until the
cluster's link has moved its KV to a decode instance and `release` frees them.

A decode instance receives requests whose KV is already in its pool (blocks reserved when the
transfer started). They join the running batch directly, first come first served as seats free
up, with no prefill step; from then on they decode like any continuous-batching request, and a
request preempted there is recomputed locally (prompt and outputs prefilled on the decode
instance) as vLLM would.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from itertools import chain
from typing import Any

from sim.core.kv_cache import BlockManager
from sim.core.kv_usage import KVUsage
from sim.core.plan import StepPlan
from sim.core.recorder import Recorder, StepTimes
from sim.core.request import Request
from sim.policies.continuous import ContinuousPolicy


class PrefillOnlyPolicy(ContinuousPolicy):
    """Continuous or chunked prefill whose finished prompts are handed off, not decoded."""

    def __init__(self, kv: BlockManager, **limits: Any) -> None:
        super().__init__(kv, **limits)
        self.handoff: list[Request] = []

    def _kv_holders(self) -> Iterable[Request]:
        return list(chain(self.running, self.handoff))  # handed-off prompts hold their KV here

    def apply(self, plan: StepPlan, num_steps: int, times: StepTimes, rec: Recorder) -> KVUsage:
        usage = super().apply(plan, num_steps, times, rec)
        done = [
            r
            for r in plan.scheduled
            if r.num_output_tokens == 1 and r.num_output_tokens < r.max_output_tokens
        ]
        if done:
            leaving = set(done)
            self.running = [r for r in self.running if r not in leaving]
            self.handoff.extend(done)
        return usage

    def release(self, req: Request) -> None:
        """The request's KV has reached its decode instance: free the blocks here."""
        self.kv.free(req)


class DecodeOnlyPolicy(ContinuousPolicy):
    """Continuous batching whose requests arrive with their prompt's KV already in place."""

    def __init__(self, kv: BlockManager, **limits: Any) -> None:
        super().__init__(kv, **limits)
        self.arrived: deque[Request] = deque()  # KV in place, waiting for a seat

    @property
    def num_waiting(self) -> int:
        return len(self.waiting) + len(self.arrived)

    def _kv_holders(self) -> Iterable[Request]:
        return list(chain(self.running, self.arrived))

    def blocks_to_receive(self, req: Request) -> int:
        """Blocks to reserve for a transfer: the prompt's KV, or under a contiguous reservation
        mode the whole reservation, as admission would have taken it here."""
        return self.kv.blocks_for(self._target(req, req.num_computed_tokens))

    def can_ever_take(self, req: Request) -> bool:
        """Whether this pool could hold the request's whole sequence (and its reservation)."""
        total = req.num_prompt_tokens + req.max_output_tokens
        return self.kv.blocks_for(max(total, self._target(req, req.num_prompt_tokens))) <= (
            self.kv.num_total
        )

    def accept(self, req: Request, num_blocks: int) -> None:
        """Take a transferred request that holds `num_blocks` reserved blocks of this pool."""
        self.kv.attach(req, num_blocks)
        self.arrived.append(req)

    def outstanding_tokens(self) -> int:
        return super().outstanding_tokens() + sum(
            r.max_output_tokens - r.num_output_tokens for r in self.arrived
        )

    def _newcomer_could_join(self, decodes: dict[Request, int]) -> bool:
        # a transferred request takes a free seat at once, whoever waits for a recompute
        return len(self.running) < self.max_num_seqs

    def schedule(self, now: float) -> StepPlan | None:
        # arrivals hold their KV already: they take free seats before recomputes need new blocks
        while self.arrived and len(self.running) < self.max_num_seqs:
            self.running.append(self.arrived.popleft())
        return super().schedule(now)
