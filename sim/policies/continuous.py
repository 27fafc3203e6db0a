"""Continuous (iteration-level) batching with a paged KV cache: Orca, vLLM and Sarathi-Serve.

Every step, finished requests have already left (their blocks freed), running requests get one
decode token each, and waiting requests join, first come first served, while `max_num_seqs`,
`max_num_batched_tokens` (the per-step token budget) and free KV blocks allow, keeping a
`watermark` fraction of blocks free at admission as vLLM does.

Three modes say how prefills and decodes share a step:
* `prefill_first` (vLLM before chunked prefill): if any waiting request can be admitted, the step
  runs only whole-prompt prefills and every running request stalls for it;
* `mixed` (Orca's selective batching): decodes first, then whole prompts fill the rest of the
  budget in the same step;
* `chunked` (Sarathi-Serve, policy name `chunked`): decodes first, then prompts are cut into
  chunks that fill what is left of the budget: first the prompts already in progress, then new
  ones, at most `max_prefill_seqs` prompts per step. A long prompt spreads over several steps, so
  running decodes never wait for it.

KV blocks are allocated on demand. When a decoding request needs a block and none is free, the
most recently admitted running request is preempted by recompute: its blocks are freed and it
goes back to the front of the queue, to prefill its prompt and the tokens it has generated again.
A request no schedule could complete (longer than `max_model_len` or the whole KV pool, or, without
chunking, a prompt over the token budget) is rejected on arrival.
"""

from __future__ import annotations

from collections import deque
from typing import Literal

from sim.kv_cache import BlockManager
from sim.plan import StepPlan
from sim.policies.base import never_fits
from sim.recorder import Recorder, StepTimes, advance, decode_block_seconds
from sim.request import Request
from sim.router import remaining_work

Mode = Literal["prefill_first", "mixed", "chunked"]


class ContinuousPolicy:
    def __init__(
        self,
        kv: BlockManager,
        *,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        max_model_len: int,
        mode: Mode = "prefill_first",
        watermark: float = 0.01,
        max_prefill_seqs: int | None = None,
    ) -> None:
        self.kv = kv
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.mode = mode
        self.chunked = mode == "chunked"
        self.max_prefill_seqs = max_prefill_seqs or max_num_seqs
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
        too_long = not self.chunked and req.num_prompt_tokens > self.max_num_batched_tokens
        if too_long or never_fits(
            req, max_model_len=self.max_model_len, kv_capacity_tokens=self.kv.capacity_tokens
        ):
            return False
        self.waiting.append(req)
        return True

    def outstanding_tokens(self) -> int:
        """Tokens still to compute for every request here (what token-aware routers balance)."""
        return sum(remaining_work(r) for queue in (self.waiting, self.running) for r in queue)

    def next_wakeup_s(self, now: float) -> float | None:
        return None

    def num_active_seqs(self, plan: StepPlan) -> int:
        return len(plan.scheduled)

    # -- planning -----------------------------------------------------------------------------

    def schedule(self, now: float) -> StepPlan | None:
        preempted: list[Request] = []
        budget = self.max_num_batched_tokens
        if self.mode == "prefill_first":
            prefills = self._admit(now, budget, {}, 0)
            if prefills:
                return self._plan({}, prefills, preempted)
            decodes = self._schedule_decodes(preempted)
        else:
            decodes = self._schedule_decodes(preempted)
            prefills = self._continue_prefills(budget - len(decodes))
            used = len(decodes) + sum(prefills.values())
            prefills = self._admit(now, budget - used, prefills, len(decodes))
        if not decodes and not prefills:
            return None
        return self._plan(decodes, prefills, preempted)

    def _schedule_decodes(self, preempted: list[Request]) -> dict[Request, int]:
        """One token for each decoding request, preempting from the back when blocks run out."""
        decodes: dict[Request, int] = {}
        running = self.running
        bs = self.kv.block_size
        i = 0
        while i < len(running):
            req = running[i]
            if not req.num_output_tokens or req.num_remaining != 1:
                i += 1  # a prompt still being prefilled in chunks
                continue
            if req.kv_blocks * bs > req.num_computed_tokens:  # room in its last block
                decodes[req] = 1
                i += 1
                continue
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

    def _continue_prefills(self, budget: int) -> dict[Request, int]:
        """Next chunks of prompts already running (chunked mode only), oldest first."""
        chunks: dict[Request, int] = {}
        for req in self.running:
            if budget <= 0 or len(chunks) >= self.max_prefill_seqs:
                break
            remaining = req.num_remaining
            if remaining == 1 and req.num_output_tokens:
                continue  # decoding
            n = min(remaining, budget)
            if self.kv.allocate(req, req.num_computed_tokens + n) is None:
                break  # no blocks: it waits, holding what it has, until decodes free some
            chunks[req] = n
            budget -= n
        return chunks

    def _admit(
        self, now: float, budget: int, prefills: dict[Request, int], num_decodes: int
    ) -> dict[Request, int]:
        """Move waiting requests to running, first come first served, while limits allow."""
        seats = self.max_num_seqs - len(self.running)
        admitted: list[Request] = []
        while self.waiting and len(admitted) < seats and len(prefills) < self.max_prefill_seqs:
            req = self.waiting[0]
            tokens = req.num_remaining
            if self.chunked:
                tokens = min(tokens, budget)
                if tokens <= 0:
                    break
            # a recompute longer than the budget may run alone, else it could never resume
            elif tokens > budget and (prefills or num_decodes):
                break
            need = self.kv.blocks_needed(req, tokens)
            # the watermark keeps room for running decodes; with none running it would only
            # keep out a request that fits the empty pool, forever
            reserve = self.watermark_blocks if self.running or admitted else 0
            if not self.kv.can_allocate(need, reserve):
                break
            self.kv.allocate(req, req.num_computed_tokens + tokens)
            self.waiting.popleft()
            if req.first_scheduled_s != req.first_scheduled_s:  # NaN: first time scheduled
                req.first_scheduled_s = now
            admitted.append(req)
            prefills[req] = tokens
            budget -= tokens
        self.running.extend(admitted)
        return prefills

    def _plan(
        self, decodes: dict[Request, int], prefills: dict[Request, int], preempted: list[Request]
    ) -> StepPlan:
        scheduled = dict(decodes)
        prefill_tokens = 0
        attention = 0
        context = len(decodes)
        for req in decodes:
            context += req.num_computed_tokens
        for req, n in prefills.items():
            scheduled[req] = n
            prefill_tokens += n
            attention += n * (req.num_computed_tokens + n)  # a chunk attends to its context
            context += req.num_computed_tokens + n
        num_steps = 1
        can_join = True
        if not prefills:
            num_steps = self._decode_horizon(decodes)
            can_join = (
                not self.waiting
                and len(self.running) < self.max_num_seqs
                and len(decodes) < self.max_num_batched_tokens
            )
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

    def _decode_horizon(self, decodes: dict[Request, int]) -> int:
        """Decode steps that can follow the first with nothing but token counts changing.

        No prompt got tokens in this step: waiting requests could not be admitted and prompts in
        progress could not continue, and since decoding only consumes blocks and the budget stays
        the same, that holds until a request finishes. The run ends at the first finish and
        before the free blocks could run out (a bound that is exact when blocks are scarce).
        """
        if not decodes:
            return 1
        steps = min(r.max_output_tokens - r.num_output_tokens for r in decodes)
        if steps <= 1:
            return 1
        free = self.kv.num_free
        size = len(decodes)
        bs = self.kv.block_size
        if free >= size:
            extra = bs * (free // size)
        else:  # the (free+1)-th request to cross a block boundary would need a preemption
            slack = sorted(r.kv_blocks * bs - r.num_computed_tokens - 1 for r in decodes)
            extra = slack[free]
        return max(1, min(steps, 1 + extra))

    # -- applying -----------------------------------------------------------------------------

    def apply(
        self, plan: StepPlan, num_steps: int, times: StepTimes, rec: Recorder
    ) -> tuple[int, float]:
        finished = advance(plan, num_steps, times, rec)
        if num_steps == 1:
            held = self.kv.num_used
            block_seconds = held * times.first_duration_s
        else:  # blocks for the run's later tokens (the horizon guaranteed them), integrated
            bs = self.kv.block_size
            growing = 0.0
            growing_blocks = 0
            for req in plan.scheduled:
                if req.kv_blocks * bs < req.num_computed_tokens and (
                    self.kv.allocate(req, req.num_computed_tokens) is None
                ):
                    raise AssertionError("decode run outgrew the KV pool")
                start = req.num_computed_tokens - num_steps
                growing += decode_block_seconds(start, num_steps, bs, times)
                growing_blocks += req.kv_blocks
            held = self.kv.num_used
            span = times.end(num_steps) - times.start_s
            block_seconds = growing + (held - growing_blocks) * span  # the rest hold still
        if finished:
            for req in finished:
                self.kv.free(req)
            self.running = [r for r in self.running if r.num_output_tokens < r.max_output_tokens]
        return held, block_seconds
