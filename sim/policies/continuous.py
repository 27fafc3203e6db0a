"""Continuous (iteration-level) batching with a paged KV cache: Orca and vLLM.

Every step, finished requests have already left (their blocks freed), running requests get one
decode token each, and waiting requests join, first come first served, while `max_num_seqs`,
`max_num_batched_tokens` and free KV blocks allow (keeping a `watermark` fraction of blocks free
at admission, as vLLM does). Prompts are prefilled whole; chunking them is the `chunked` policy.

Two modes say whether a step may mix prefill and decode:
* `prefill_first` (vLLM before chunked prefill): if any waiting request can be admitted, the step
  runs only prefills and every running request stalls for it;
* `mixed` (Orca's selective batching): decodes first, then prefills fill the rest of the token
  budget in the same step.

KV blocks are allocated on demand. When a running request needs a block and none is free, the most
recently admitted running request is preempted by recompute: its blocks are freed and it goes back
to the front of the queue, to prefill its prompt and the tokens it has generated again. A request
whose prompt exceeds the token budget, or whose whole sequence exceeds `max_model_len` or the KV
pool, is rejected on arrival: no schedule could complete it.
"""

from __future__ import annotations

from collections import deque
from typing import Literal

from sim.kv_cache import BlockManager
from sim.plan import StepPlan
from sim.policies.base import never_fits
from sim.recorder import Recorder, StepTimes, advance
from sim.request import Request


class ContinuousPolicy:
    def __init__(
        self,
        kv: BlockManager,
        *,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        max_model_len: int,
        mode: Literal["prefill_first", "mixed"] = "prefill_first",
        watermark: float = 0.01,
    ) -> None:
        self.kv = kv
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.mode = mode
        self.watermark_blocks = int(watermark * kv.num_total)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # in admission order: the last is preempted first

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    def add_request(self, req: Request, now: float) -> bool:
        if req.num_prompt_tokens > self.max_num_batched_tokens or never_fits(
            req, max_model_len=self.max_model_len, kv_capacity_tokens=self.kv.capacity_tokens
        ):
            return False
        self.waiting.append(req)
        return True

    def next_wakeup_s(self, now: float) -> float | None:
        return None

    def num_active_seqs(self, plan: StepPlan) -> int:
        return len(plan.scheduled)

    # -- planning -----------------------------------------------------------------------------

    def schedule(self, now: float) -> StepPlan | None:
        preempted: list[Request] = []
        if self.mode == "prefill_first":
            admitted = self._admit(now, self.max_num_batched_tokens, 0)
            if admitted:
                return self._plan({}, admitted, preempted)
            decodes = self._schedule_decodes(preempted)
        else:
            decodes = self._schedule_decodes(preempted)
            admitted = self._admit(now, self.max_num_batched_tokens - len(decodes), len(decodes))
        if not decodes and not admitted:
            return None
        return self._plan(decodes, admitted, preempted)

    def _schedule_decodes(self, preempted: list[Request]) -> dict[Request, int]:
        """One token for each running request, preempting from the back when blocks run out."""
        decodes: dict[Request, int] = {}
        running = self.running
        i = 0
        while i < len(running):
            req = running[i]
            while self.kv.allocate(req, req.num_computed_tokens + 1) is None:
                victim = running[-1]
                self._preempt(victim, preempted)
                if victim is req:
                    break
            else:
                decodes[req] = 1
                i += 1
        return decodes

    def _preempt(self, victim: Request, preempted: list[Request]) -> None:
        self.running.pop()  # the victim is always the most recently admitted
        self.kv.free(victim)
        victim.num_recomputed_tokens += victim.num_computed_tokens
        victim.num_computed_tokens = 0
        victim.num_preemptions += 1
        self.waiting.appendleft(victim)
        preempted.append(victim)

    def _admit(self, now: float, token_budget: int, num_scheduled: int) -> list[Request]:
        """Move waiting requests to running, first come first served, while limits allow."""
        admitted: list[Request] = []
        seats = self.max_num_seqs - len(self.running)
        while self.waiting and len(admitted) < seats:
            req = self.waiting[0]
            tokens = req.num_remaining
            # a recompute longer than the budget may run alone, else it could never resume
            alone = not admitted and num_scheduled == 0
            if tokens > token_budget and not alone:
                break
            need = self.kv.blocks_needed(req, tokens)
            # the watermark keeps room for running decodes; with none running it would only
            # keep out a request that fits the empty pool, forever
            reserve = self.watermark_blocks if self.running or admitted else 0
            if not self.kv.can_allocate(need, reserve):
                break
            self.kv.allocate(req, tokens)
            self.waiting.popleft()
            if req.first_scheduled_s != req.first_scheduled_s:  # NaN: first time scheduled
                req.first_scheduled_s = now
            admitted.append(req)
            token_budget -= tokens
        self.running.extend(admitted)
        return admitted

    def _plan(
        self, decodes: dict[Request, int], admitted: list[Request], preempted: list[Request]
    ) -> StepPlan:
        scheduled = dict(decodes)
        prefill_tokens = 0
        attention = 0
        context = len(decodes)
        for req in decodes:
            context += req.num_computed_tokens
        for req in admitted:
            n = req.num_remaining
            scheduled[req] = n
            prefill_tokens += n
            attention += n * (req.num_computed_tokens + n)
            context += req.num_computed_tokens + n
        num_steps = 1
        can_join = True
        if not admitted:
            num_steps = self._decode_horizon()
            can_join = not self.waiting and len(self.running) < self.max_num_seqs
        return StepPlan(
            scheduled=scheduled,
            num_seqs=len(scheduled),
            num_tokens=prefill_tokens + len(decodes),
            num_prefill_tokens=prefill_tokens,
            num_decode_tokens=len(decodes),
            sum_context_tokens=context,
            prefill_attention_term=attention,
            num_steps=num_steps,
            context_growth_per_step=len(decodes),
            arrivals_can_join=can_join,
            preempted=tuple(preempted),
        )

    def _decode_horizon(self) -> int:
        """Decode steps that can follow the first with nothing but token counts changing.

        Waiting requests could not be admitted now, and decoding only consumes blocks, so they
        stay blocked until a request finishes. The run ends at the first finish and before the
        free blocks could run out (a bound that is exact when blocks are scarce).
        """
        running = self.running
        steps = min(r.max_output_tokens - r.num_output_tokens for r in running)
        free = self.kv.num_free
        size = len(running)
        bs = self.kv.block_size
        if free >= size:
            extra = bs * (free // size)
        else:  # the (free+1)-th request to cross a block boundary would need a preemption
            slack = sorted(r.kv_blocks * bs - r.num_computed_tokens - 1 for r in running)
            extra = slack[free]
        return max(1, min(steps, 1 + extra))

    # -- applying -----------------------------------------------------------------------------

    def apply(self, plan: StepPlan, num_steps: int, times: StepTimes, rec: Recorder) -> None:
        finished = advance(plan, num_steps, times, rec)
        if num_steps > 1:  # blocks for the run's later tokens; the horizon guaranteed them
            for req in plan.scheduled:
                if self.kv.allocate(req, req.num_computed_tokens) is None:
                    raise AssertionError("decode run outgrew the KV pool")
        if finished:
            for req in finished:
                self.kv.free(req)
            self.running = [r for r in self.running if r.num_output_tokens < r.max_output_tokens]
