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

KV reservation (`kv_reservation`): `paged` allocates blocks on demand. When a decoding request needs
a block and none is free, a victim is preempted (sim/policies/preemption.py: by default the most
recently admitted request, by recompute: its blocks are freed and it goes back to the front of the
queue, to prefill its prompt and the tokens it has generated again; or by swap). The contiguous
modes reserve a request's memory whole at admission, as pre-paging servers did: `max_length`
reserves `max_model_len` tokens (the longest sequence the request could grow to, the vLLM paper's
baseline), `exact` reserves prompt + true output (an oracle); both round up to whole blocks, so use
`block_size: 1` for byte-exact contiguous allocation. They never need blocks after admission.

Waiting requests are admitted in the order of the policy's queue (sim/policies/queues.py),
head-of-line: admission stops at the first head that does not fit. Swapped-out requests resume
before any admission. A request no schedule could complete (longer than `max_model_len` or the whole
KV pool, its reservation over the pool, or, without chunking, a prompt over the token budget) is
rejected on arrival.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from sim.core.kv_cache import BlockManager
from sim.core.kv_usage import KVUsage
from sim.core.plan import StepPlan
from sim.core.recorder import Recorder, StepTimes
from sim.core.request import Request
from sim.policies.base import never_fits
from sim.policies.continuous_run import apply_run, decode_horizon
from sim.policies.preemption import Preemptor
from sim.policies.queues import FCFSQueue, WaitingQueue
from sim.topology.router import remaining_work

Mode = Literal["prefill_first", "mixed", "chunked"]
Reservation = Literal["paged", "max_length", "exact"]


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
        queue: WaitingQueue | None = None,
        preemptor: Preemptor | None = None,
        kv_reservation: Reservation = "paged",
    ) -> None:
        self.kv = kv
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.mode = mode
        self.chunked = mode == "chunked"
        self.max_prefill_seqs = max_prefill_seqs or max_num_seqs
        self.watermark_blocks = int(watermark * kv.num_total)
        self.waiting: WaitingQueue = queue if queue is not None else FCFSQueue()
        self.running: list[Request] = []  # in admission order
        self._carried_preempted: list[Request] = []  # see schedule()
        self._carried_swap_s = 0.0
        self.preemptor = preemptor or Preemptor(kv)
        self.swapped = self.preemptor.swapped  # evicted by swap, KV in host memory
        self.reservation = kv_reservation

    @property
    def num_waiting(self) -> int:
        return len(self.waiting) + len(self.swapped)

    @property
    def num_running(self) -> int:
        return len(self.running)

    def add_request(self, req: Request, now: float) -> bool:
        too_long = not self.chunked and req.num_prompt_tokens > self.max_num_batched_tokens
        capacity = self.kv.capacity_tokens
        if (
            too_long
            or never_fits(req, max_model_len=self.max_model_len, kv_capacity_tokens=capacity)
            or self._target(req, 0) > capacity
        ):
            return False
        self.waiting.push(req)
        return True

    def _target(self, req: Request, tokens: int) -> int:
        """Tokens `req`'s holding must cover to store `tokens` under the reservation mode."""
        if self.reservation == "paged":
            return tokens
        if self.reservation == "max_length":
            return max(tokens, self.max_model_len)
        return max(tokens, req.num_prompt_tokens + req.max_output_tokens)

    def outstanding_tokens(self) -> int:
        """Tokens still to compute for every request here (what token-aware routers balance)."""
        queues: tuple[Iterable[Request], ...] = (self.waiting, self.running, self.swapped)
        return sum(remaining_work(r) for queue in queues for r in queue)

    def _kv_holders(self) -> Iterable[Request]:
        """Requests holding blocks of this pool (subclasses add those parked elsewhere)."""
        return self.running

    def next_wakeup_s(self, now: float) -> float | None:
        return None

    def num_active_seqs(self, plan: StepPlan) -> int:
        return len(plan.scheduled)

    # -- planning -----------------------------------------------------------------------------

    def schedule(self, now: float) -> StepPlan | None:
        preempted: list[Request] = []
        budget = self.max_num_batched_tokens
        self.preemptor.swap_s = 0.0
        if self.mode == "prefill_first":
            prefills = self._admit(now, budget, {}, 0)
            if prefills:
                return self._plan({}, prefills, preempted)
            decodes = self._schedule_decodes(preempted)
            self._swap_in(decodes, preempted)
        else:
            decodes = self._schedule_decodes(preempted)
            self._swap_in(decodes, preempted)
            prefills = self._continue_prefills(budget - len(decodes))
            used = len(decodes) + sum(prefills.values())
            prefills = self._admit(now, budget - used, prefills, len(decodes))
        if not decodes and not prefills:
            # a request that preempted itself with nothing else runnable: the preemption (and
            # its swap-out) still happened, so the next plan carries it into the steps table
            self._carried_preempted.extend(preempted)
            self._carried_swap_s += self.preemptor.swap_s
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
            computed = req.num_computed_tokens
            out = req.num_output_tokens
            if not out or req.num_prompt_tokens + out - computed != 1:
                i += 1  # a prompt still being prefilled in chunks
                continue
            if req.kv_blocks * bs > computed:  # room in its last block
                decodes[req] = 1
                i += 1
                continue
            while self.kv.allocate(req, req.num_computed_tokens + 1) is None:
                j = self.preemptor.pick(running)
                victim = running.pop(j)
                self.preemptor.evict(victim, self.waiting)
                preempted.append(victim)
                decodes.pop(victim, None)  # a victim that already had its token this step
                if victim is req:
                    break
                if j < i:
                    i -= 1
            else:
                decodes[req] = 1
                i += 1
        return decodes

    def _swap_in(self, decodes: dict[Request, int], preempted: list[Request]) -> None:
        """Resume swapped requests (before any admission) at a step that preempted nobody."""
        if not self.swapped or preempted:
            return
        seats = self.max_num_seqs - len(self.running)
        resumed = self.preemptor.swap_in(self.running, seats, self.watermark_blocks, self._target)
        for req in resumed:
            self.running.append(req)
            if req.is_decoding:
                decodes[req] = 1

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
        """Move waiting requests to running, in queue order, while limits allow."""
        if self.swapped:
            return prefills  # swapped requests resume before anything new is admitted
        seats = self.max_num_seqs - len(self.running)
        admitted: list[Request] = []
        waiting = self.waiting
        while waiting and len(admitted) < seats and len(prefills) < self.max_prefill_seqs:
            req = waiting.peek(now)
            tokens = req.num_remaining
            if self.chunked:
                tokens = min(tokens, budget)
                if tokens <= 0:
                    break
            # a recompute longer than the budget may run alone, else it could never resume
            elif tokens > budget and (prefills or num_decodes):
                break
            target = req.num_computed_tokens + tokens
            if self.reservation != "paged":
                target = self._target(req, target)
            need = self.kv.blocks_needed(req, target)
            # the watermark keeps room for running decodes; with none running it would only
            # keep out a request that fits the empty pool, forever
            reserve = self.watermark_blocks if self.running or admitted else 0
            if not self.kv.can_allocate(need, reserve):
                break
            self.kv.allocate(req, target)
            waiting.pop(now)
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
        scheduled = {**decodes, **prefills} if prefills else decodes
        prefill_tokens = 0
        attention = 0
        context = len(decodes) + sum([req.num_computed_tokens for req in decodes])
        for req, n in prefills.items():
            prefill_tokens += n
            attention += n * (req.num_computed_tokens + n)  # a chunk attends to its context
            context += req.num_computed_tokens + n
        num_steps = 1
        can_join = True
        if self._carried_preempted or self._carried_swap_s:
            preempted = self._carried_preempted + preempted
            self.preemptor.swap_s += self._carried_swap_s
            self._carried_preempted, self._carried_swap_s = [], 0.0
        swap_s = self.preemptor.swap_s
        # a step that copied KV or preempted is not repeated: the blocks it freed may let a
        # swapped request back in next step, or (in a cluster) start a KV transfer here
        if not prefills and not swap_s and not preempted:
            num_steps = self._decode_horizon(decodes)
            can_join = self._newcomer_could_join(decodes)
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
            swap_s=swap_s,
        )

    def _newcomer_could_join(self, decodes: dict[Request, int]) -> bool:
        """Whether a request arriving during a decode run could change the next plan."""
        return (
            not self.swapped
            and (not self.waiting or self.waiting.may_be_overtaken())
            and len(self.running) < self.max_num_seqs
            and len(decodes) < self.max_num_batched_tokens
        )

    def _decode_horizon(self, decodes: dict[Request, int]) -> int:
        return decode_horizon(self.kv, decodes, paged=self.reservation == "paged")

    # -- applying -----------------------------------------------------------------------------

    def apply(self, plan: StepPlan, num_steps: int, times: StepTimes, rec: Recorder) -> KVUsage:
        paged = self.reservation == "paged"
        usage = apply_run(self.kv, plan, num_steps, times, rec, self._kv_holders(), paged=paged)
        if usage.finished:
            self.running = [r for r in self.running if r.num_output_tokens < r.max_output_tokens]
        return usage.kv
