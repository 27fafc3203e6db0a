"""Static batching (request-level, FasterTransformer / early HF `generate`).

A batch of up to `max_batch_size` waiting requests starts when that many are queued, or when the
oldest has waited `max_wait_s` (0: start with whatever waits as soon as the instance is idle). The
batch prefills all its prompts in one step, then decodes until its longest member finishes.
Finished members keep their slot: they go on computing padding, so every decode step costs the
full batch, and they keep their KV reservation until the batch ends. KV is reserved contiguously
at admission for the request's whole sequence (prompt + true output length, or the model's
`max_model_len` in `max_model_len` mode); members are taken in the order of the policy's queue
(`sim.policies.queues`; first come first served by default), and the batch closes at the first
request whose reservation does not fit (head-of-line). No request joins a running batch: that is
the head-of-line blocking continuous batching removes.
"""

from __future__ import annotations

from typing import Literal

from sim.core.plan import InstanceView, KVView, Padding, StepPlan
from sim.core.request import Request

FOREVER = 1 << 62


class StaticPolicy:
    releases_kv_on_finish = False  # a batch's reservations are released when it ends
    paged_kv = False

    def __init__(
        self,
        *,
        max_batch_size: int,
        max_wait_s: float,
        max_model_len: int,
        kv_reservation: Literal["output", "max_model_len"] = "output",
        pad_prompts: bool = False,
    ) -> None:
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.max_model_len = max_model_len
        self.kv_reservation = kv_reservation
        self.pad_prompts = pad_prompts
        self.batch: list[Request] = []  # the current batch, finished members included

    def _reservation(self, req: Request) -> int:
        if self.kv_reservation == "max_model_len":
            return self.max_model_len
        return req.sequence_tokens

    def rejection(self, req: Request, kv: KVView) -> str:
        if req.sequence_tokens > self.max_model_len:
            return f"longer than max_model_len ({self.max_model_len} tokens)"
        if self._reservation(req) > kv.capacity_tokens:
            return f"KV reservation larger than the KV pool ({kv.capacity_tokens} tokens)"
        return ""

    def transfer_blocks(self, req: Request, kv: KVView) -> int:
        """A transferred request's reservation (static batching is never split into P/D pools,
        the schema refuses it; the answer is what admission here would take)."""
        return kv.blocks_for(self._reservation(req))

    def can_ever_take(self, req: Request, kv: KVView) -> bool:
        return kv.blocks_for(max(req.sequence_tokens, self._reservation(req))) <= kv.num_total

    def next_wakeup_s(self, view: InstanceView) -> float | None:
        if view.running or not len(view.waiting):
            return None
        # the timer belongs to the longest-waiting request, whatever the admission order
        return view.waiting.oldest_arrival_s() + self.max_wait_s

    def schedule(self, view: InstanceView) -> StepPlan | None:
        if view.running:
            return self._decode_plan(view)
        waiting = view.waiting
        # 1 ns of slack: the wake-up timer's float arithmetic may land a hair before the deadline
        ready = len(waiting) >= self.max_batch_size or (
            len(waiting) and view.now + 1e-9 >= waiting.oldest_arrival_s() + self.max_wait_s
        )
        if not ready:
            return None
        return self._form_batch(view)

    def _form_batch(self, view: InstanceView) -> StepPlan | None:
        kv = view.kv
        free = kv.num_free
        batch: list[Request] = []
        hold: dict[Request, int] = {}
        for req in view.waiting.ordered():
            if len(batch) >= self.max_batch_size:
                break
            reservation = self._reservation(req)
            need = kv.blocks_needed(req, reservation)
            if need > free:
                break  # head-of-line: the next batch starts when this one has drained
            free -= need
            batch.append(req)
            hold[req] = reservation
        if not batch:  # cannot happen while every queued reservation fits an empty pool
            return None
        self.batch = batch
        prompts = [r.num_prompt_tokens for r in batch]
        padding = Padding()
        if self.pad_prompts:  # every prompt padded to the longest, as in padded HF batches
            longest = max(prompts)
            extra = longest * len(batch) - sum(prompts)
            padding = Padding(
                prefill_tokens=extra,
                context_tokens=extra,
                attention_term=longest * longest * len(batch) - sum(p * p for p in prompts),
            )
        return StepPlan(
            prefill={r: r.num_prompt_tokens for r in batch},
            admit=tuple(batch),
            hold=hold,
            padding=padding,
            interruptible=False,
        )

    def _decode_plan(self, view: InstanceView) -> StepPlan:
        # every active member has emitted the same number of tokens: the decode step number
        step = view.running[0].num_output_tokens
        padded = [r for r in self.batch if r.is_finished]
        padding = Padding(
            num_seqs=len(padded),
            context_tokens=sum(r.num_prompt_tokens + step for r in padded),
        )
        # run until the next member finishes (the engine stops there): only then does the
        # useful token count change
        return StepPlan(decode=True, padding=padding, repeat=FOREVER, interruptible=False)
