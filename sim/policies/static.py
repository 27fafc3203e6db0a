"""Static batching (request-level, FasterTransformer / early HF `generate`).

A batch of up to `max_batch_size` waiting requests starts when that many are queued, or when the
oldest has waited `max_wait_s` (0: start with whatever waits as soon as the instance is idle). The
batch prefills all its prompts in one step, then decodes until its longest member finishes.
Finished members keep their slot: they go on computing padding, so every decode step costs the
full batch, and they keep their KV reservation until the batch ends. KV is reserved contiguously
at admission for the request's whole sequence (prompt + true output length, or the model's
`max_model_len` in `max_model_len` mode); members are taken in the order of the policy's queue
(sim/policies/queues.py; first come first served by default), and the batch closes at the first
request whose reservation does not fit (head-of-line). No request joins a
running batch: that is the head-of-line blocking continuous batching removes.
"""

from __future__ import annotations

from typing import Literal

from sim.core.kv_cache import BlockManager
from sim.core.kv_usage import KVUsage, fragment_token_seconds, series_token_seconds
from sim.core.plan import StepPlan
from sim.core.recorder import Recorder, StepTimes, advance
from sim.core.request import Request
from sim.policies.queues import FCFSQueue, WaitingQueue
from sim.topology.router import remaining_work


class StaticPolicy:
    def __init__(
        self,
        kv: BlockManager,
        *,
        max_batch_size: int,
        max_wait_s: float,
        max_model_len: int,
        kv_reservation: Literal["output", "max_model_len"] = "output",
        pad_prompts: bool = False,
        queue: WaitingQueue | None = None,
    ) -> None:
        self.kv = kv
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.max_model_len = max_model_len
        self.kv_reservation = kv_reservation
        self.pad_prompts = pad_prompts
        self.waiting: WaitingQueue = queue if queue is not None else FCFSQueue()
        self.batch: list[Request] = []  # members, finished ones included (padded slots)
        self.active: list[Request] = []  # members still generating
        self.decode_steps_done = 0
        self.prompt_tokens_in_batch = 0

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.batch)

    def _reservation(self, req: Request) -> int:
        if self.kv_reservation == "max_model_len":
            return self.max_model_len
        return req.num_prompt_tokens + req.max_output_tokens

    def add_request(self, req: Request, now: float) -> bool:
        total = req.num_prompt_tokens + req.max_output_tokens
        if total > self.max_model_len or self._reservation(req) > self.kv.capacity_tokens:
            return False
        self.waiting.push(req)
        return True

    def outstanding_tokens(self) -> int:
        """Tokens still to compute for every request here (what token-aware routers balance)."""
        return sum(remaining_work(r) for queue in (self.waiting, self.active) for r in queue)

    def next_wakeup_s(self, now: float) -> float | None:
        if self.batch or not self.waiting:
            return None
        return self._oldest_arrival_s() + self.max_wait_s

    def _oldest_arrival_s(self) -> float:
        # the timer belongs to the longest-waiting request, whatever the admission order
        if isinstance(self.waiting, FCFSQueue):
            return self.waiting[0].arrival_s
        return min(r.arrival_s for r in self.waiting)

    def num_active_seqs(self, plan: StepPlan) -> int:
        return len(plan.scheduled)

    def schedule(self, now: float) -> StepPlan | None:
        if self.batch:
            return self._decode_plan()
        # 1 ns of slack: the wake-up timer's float arithmetic may land a hair before the deadline
        ready = len(self.waiting) >= self.max_batch_size or (
            self.waiting and now + 1e-9 >= self._oldest_arrival_s() + self.max_wait_s
        )
        if not ready:
            return None
        return self._form_batch(now)

    def _form_batch(self, now: float) -> StepPlan | None:
        batch: list[Request] = []
        while self.waiting and len(batch) < self.max_batch_size:
            req = self.waiting.peek(now)
            if self.kv.allocate(req, self._reservation(req)) is None:
                break  # head-of-line: the next batch starts when this one has drained
            self.waiting.pop(now)
            req.first_scheduled_s = now
            batch.append(req)
        if not batch:  # cannot happen while every queued reservation fits an empty pool
            return None
        self.batch = batch
        self.active = list(batch)
        self.decode_steps_done = 0
        prompts = [r.num_prompt_tokens for r in batch]
        self.prompt_tokens_in_batch = sum(prompts)
        if self.pad_prompts:  # every prompt padded to the longest, as in padded HF batches
            longest = max(prompts)
            tokens = longest * len(batch)
            attention = longest * longest * len(batch)
        else:
            tokens = self.prompt_tokens_in_batch
            attention = sum(p * p for p in prompts)
        return StepPlan(
            scheduled={r: r.num_prompt_tokens for r in batch},
            num_seqs=len(batch),
            num_tokens=tokens,
            num_prefill_tokens=tokens,
            num_decode_tokens=0,
            sum_context_tokens=tokens,
            prefill_attention_term=attention,
            arrivals_can_join=False,
        )

    def _decode_plan(self) -> StepPlan:
        size = len(self.batch)
        step = self.decode_steps_done + 1
        # run until the next member finishes: only then does the useful token count change
        steps = min(r.max_output_tokens - r.num_output_tokens for r in self.active)
        return StepPlan(
            scheduled=dict.fromkeys(self.active, 1),
            num_seqs=size,
            num_tokens=size,  # padded slots compute too
            num_prefill_tokens=0,
            num_decode_tokens=len(self.active),
            sum_context_tokens=self.prompt_tokens_in_batch + size * step,
            prefill_attention_term=0,
            num_steps=steps,
            context_growth_per_step=size,
            arrivals_can_join=False,
        )

    def apply(self, plan: StepPlan, num_steps: int, times: StepTimes, rec: Recorder) -> KVUsage:
        if plan.num_decode_tokens:
            self.decode_steps_done += num_steps
        finished = advance(plan, num_steps, times, rec)
        growth = len(plan.scheduled) if num_steps > 1 else 0
        stored_end = sum(r.num_computed_tokens for r in self.batch)
        stored = series_token_seconds(
            stored_end - growth * (num_steps - 1), growth, num_steps, times
        )
        fragment = fragment_token_seconds(self.batch, {}, num_steps, self.kv.block_size, times)
        if finished:
            self.active = [r for r in self.active if r.num_output_tokens < r.max_output_tokens]
        held = self.kv.num_used  # reservations are fixed for the whole batch
        block_seconds = held * (times.end(num_steps) - times.start_s)
        usage = KVUsage(held, block_seconds, stored, fragment)
        if not self.active:  # the batch drains at once: release every reservation
            for req in self.batch:
                self.kv.free(req)
            self.batch = []
        return usage
