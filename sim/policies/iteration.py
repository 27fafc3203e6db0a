"""What iteration-level policies share: limits, decodes with preemption, swap-ins, admission.

Continuous batching (Orca, vLLM; `sim.policies.continuous`) and chunked prefill (Sarathi-Serve;
`sim.policies.chunked`) plan every step from the same parts, in an order that is theirs:

* decodes: every decoding request gets its next token. When the free blocks cannot give each
  one that needs a block its block, requests are walked in admission order and victims evicted
  (`sim.policies.preemption`) until the request at hand gets one or is itself the victim;
* swap-ins: at a step that preempted nobody, swapped requests come back, oldest first, while
  seats and free blocks above the watermark allow;
* admission: waiting requests join, in the queue's order, while `max_num_seqs`, the per-step
  token budget `max_num_batched_tokens` and free KV blocks allow, keeping a `watermark` fraction
  of the blocks free as vLLM does; head-of-line: admission stops at the first that does not fit.
  Nothing is admitted while requests are swapped out.
* speculation (`sim.policies.speculation`, when the policy has a rule): after the decodes and
  swap-ins, decoding requests get lookahead tokens from the budget and the free blocks left,
  before any prompt chunk.

A `Draft` holds the plan being built and the resources left (free blocks, host memory, the
running list as it will be), so each part sees what the earlier ones took. On a P/D decode
instance, transferred requests (KV already in the pool) take free seats first.

Requests no schedule could complete are rejected on arrival: longer than `max_model_len` or the
whole KV pool, a reservation over the pool, or (whole-prompt modes) a prompt over the budget.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import chain

from sim.core.plan import NO_PADDING, InstanceView, KVView, Preemption, ReleasePlan, StepPlan
from sim.core.request import Request
from sim.policies.preemption import Preemptor
from sim.policies.reservation import Reservation
from sim.policies.speculation import SpeculationRule

FOREVER = 1 << 62
NO_ONE: frozenset[Request] = frozenset()
NO_BLOCKS: dict[Request, int] = {}  # never written to
# decodes alone, repeated while nothing else changes; an arrival may (or may not) cut the run
DECODE_RUN = StepPlan(decode=True, repeat=FOREVER, interruptible=True)
DECODE_RUN_FIXED = StepPlan(decode=True, repeat=FOREVER, interruptible=False)


class Draft:
    """A step plan in the making, and what is left to give."""

    __slots__ = (
        "admit",
        "cached",
        "evicted",
        "extra",
        "free",
        "hold",
        "loaded",
        "num_decodes",
        "num_running",
        "preempt",
        "prefill",
        "releases",
        "requeued",
        "seat",
        "spec_on",
        "speculate",
        "swap_bytes",
        "swap_in",
        "taken",
        "view",
    )

    def __init__(self, view: InstanceView) -> None:
        self.view = view
        self.free = view.kv.num_free
        self.swap_bytes = 0  # host memory this plan's swaps take (the engine's host account
        # says what is free: `view.host_bytes_free`)
        self.num_running = len(view.running)  # as it will be after this plan's changes
        self.extra: dict[Request, int] = {}  # blocks planned for running requests this step
        self.preempt: list[Preemption] = []
        self.evicted: set[Request] = set()
        self.requeued: list[Request] = []  # recompute victims: the queue's new front
        self.swap_in: list[Request] = []
        self.seat: list[Request] = []
        self.prefill: dict[Request, int] = {}
        self.admit: list[Request] = []
        self.hold: dict[Request, int] = {}
        self.num_decodes = view.num_decoding
        # prefix caching: cached blocks each admission starts from, and the cached free blocks
        # this plan takes (they are in use once taken)
        self.cached: dict[Request, int] = {}
        self.taken: set[int] = set()
        # KV tiers: blocks after the cached ones each admission loads from below the GPU
        self.loaded: dict[Request, int] = {}
        # what this plan's evictions leave free and cached (asked of the pool at the first)
        self.releases: ReleasePlan | None = None
        # speculative decoding: whether this step may speculate, and each request's lookahead
        self.spec_on = False
        self.speculate: dict[Request, int] = {}

    def held(self, req: Request) -> int:
        return req.kv_blocks + self.extra.get(req, 0)

    def evict(self, victim: Request, preemptor: Preemptor) -> None:
        extra = self.extra.get(victim, 0)  # planned for it, never taken
        if self.releases is None:  # blocks others share stay in use
            self.releases = self.view.kv.planned_releases()
        self.free += extra + self.releases.release(victim)
        self.extra.pop(victim, None)
        swap = False
        if preemptor.swap:
            nbytes = self.view.swap_bytes(victim)
            if self.swap_bytes + nbytes <= self.view.host_bytes_free:
                swap = True
                self.swap_bytes += nbytes
        self.preempt.append(Preemption(victim, swap))
        self.evicted.add(victim)
        if not swap:  # back to the front of the waiting queue, to prefill everything again
            self.requeued.insert(0, victim)
        if victim.is_decoding:
            self.num_decodes -= 1

    def plan(self, *, decode: bool, repeat: int = 1, interruptible: bool = True) -> StepPlan:
        return StepPlan(
            self.prefill,
            decode and self.num_decodes > 0,
            tuple(self.admit) if self.admit else (),
            tuple(self.preempt) if self.preempt else (),
            tuple(self.swap_in) if self.swap_in else (),
            tuple(self.seat) if self.seat else (),
            self.hold,
            NO_PADDING,
            repeat,
            interruptible,
            self.cached,
            self.speculate,
            self.loaded,
        )


@dataclass(frozen=True)
class Limits:
    """What bounds an iteration-level policy's steps (`policy` keys, resolved for the pool)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    watermark_blocks: int  # kept free at admission (vLLM's watermark, in blocks)
    reservation: Reservation
    preemptor: Preemptor
    max_prefill_seqs: int | None = None  # prompts per step (None: max_num_seqs)
    max_chunk_tokens: int | None = None  # a prompt's tokens per step (None: the budget)
    speculation: SpeculationRule | None = None


class IterationPolicy:
    """The shared parts (see the module docstring); subclasses order them in `schedule`."""

    releases_kv_on_finish = True
    chunked = False  # prompts may be split across steps

    def __init__(self, limits: Limits) -> None:
        self.max_num_seqs = limits.max_num_seqs
        self.max_num_batched_tokens = limits.max_num_batched_tokens
        self.max_model_len = limits.max_model_len
        self.max_prefill_seqs = limits.max_prefill_seqs or limits.max_num_seqs
        self.max_chunk_tokens = limits.max_chunk_tokens or FOREVER
        self.watermark_blocks = limits.watermark_blocks
        self.reservation = limits.reservation
        self.preemptor = limits.preemptor
        self.paged_kv = limits.reservation.paged
        self.speculation = limits.speculation

    # -- arrival checks ------------------------------------------------------------------------

    def rejection(self, req: Request, kv: KVView) -> str:
        total = req.sequence_tokens
        if total > self.max_model_len:
            return f"longer than max_model_len ({self.max_model_len} tokens)"
        budget = self.max_num_batched_tokens
        if not self.chunked and req.num_prompt_tokens > budget:
            return f"prompt over max_num_batched_tokens ({budget}), not chunked"
        if total > kv.capacity_tokens:
            return f"larger than the KV pool ({kv.capacity_tokens} tokens)"
        if self.reservation.target(req, 0) > kv.capacity_tokens:
            return f"KV reservation larger than the KV pool ({kv.capacity_tokens} tokens)"
        return ""

    def transfer_blocks(self, req: Request, kv: KVView) -> int:
        """Blocks a decode instance reserves for a transferred request: its prompt's KV, or its
        whole reservation, as admission would have taken it here."""
        return kv.blocks_for(self.reservation.target(req, req.num_computed_tokens))

    def can_ever_take(self, req: Request, kv: KVView) -> bool:
        """Whether this pool could hold the request's whole sequence (and its reservation)."""
        target = self.reservation.target(req, req.num_prompt_tokens)
        return kv.blocks_for(max(req.sequence_tokens, target)) <= kv.num_total

    def next_wakeup_s(self, view: InstanceView) -> float | None:
        return None

    # -- the parts -------------------------------------------------------------------------------

    def seat_arrived(self, d: Draft) -> None:
        """P/D decode instances: transferred requests take free seats, oldest first."""
        for req in d.view.arrived:
            if d.num_running >= self.max_num_seqs:
                break
            d.seat.append(req)
            d.num_running += 1
            d.num_decodes += 1

    def plan_decodes(self, d: Draft) -> None:
        """One token for every decoding request, evicting from the back when blocks run out."""
        view = d.view
        demand = view.decode_block_demand()
        for req in d.seat:
            demand += view.needs_block(req)
        if demand <= d.free:
            d.free -= demand
            return
        alive = [*view.running, *d.seat]  # admission order; victims leave it
        i = 0
        while i < len(alive):
            req = alive[i]
            if not req.is_decoding or not view.needs_block(req):
                i += 1
                continue
            while d.free < 1:
                j = self.preemptor.pick(alive, d.held)
                victim = alive.pop(j)
                d.evict(victim, self.preemptor)
                if victim is req:
                    break
                if j < i:
                    i -= 1
            else:
                d.free -= 1
                d.extra[req] = 1
                i += 1
        d.num_running = len(alive)

    def plan_swap_ins(self, d: Draft) -> None:
        """Bring swapped requests back at a step that preempted nobody."""
        view = d.view
        if not view.swapped or d.preempt:
            return
        seats = self.max_num_seqs - d.num_running
        for req in view.swapped:
            if len(d.swap_in) >= seats:
                break
            target = self.reservation.target(req, req.num_computed_tokens + req.is_decoding)
            need = view.kv.blocks_needed(req, target)
            keep = self.watermark_blocks if d.num_running else 0
            if need + keep > d.free:
                break
            d.free -= need
            d.swap_in.append(req)
            d.hold[req] = target
            d.num_running += 1
            if req.is_decoding:
                d.num_decodes += 1

    def plan_speculation(self, d: Draft, budget: int) -> int:
        """Lookahead tokens of the speculating requests (none when speculation is off for this
        step); returns the budget left."""
        rule = self.speculation
        if rule is None or not rule.active(d.view):
            return budget
        d.spec_on = True
        d.speculate, budget, d.free = rule.lookahead(d.view, d.evicted, budget, d.free, d.extra)
        return budget

    def plan_continued(self, d: Draft, budget: int) -> int:
        """Next chunks of prompts in progress (admission order); returns the budget left."""
        kv = d.view.kv
        candidates: Iterable[Request] = d.view.prefilling
        if d.swap_in:
            candidates = [*candidates, *(r for r in d.swap_in if not r.is_decoding)]
        for req in candidates:
            if budget <= 0 or len(d.prefill) >= self.max_prefill_seqs:
                break
            if req in d.evicted:
                continue
            n = min(req.num_remaining, budget, self.max_chunk_tokens)
            held = max(req.kv_blocks, kv.blocks_for(d.hold.get(req, 0)))
            need = max(0, kv.blocks_for(req.num_computed_tokens + n) - held)
            if need > d.free:
                break  # no blocks: it waits, holding what it has, until decodes free some
            d.free -= need
            d.prefill[req] = n
            budget -= n
        return budget

    def plan_admissions(self, d: Draft, budget: int, num_decodes: int) -> None:
        """Move waiting requests to running, in queue order, while limits allow."""
        view = d.view
        if len(view.swapped) > len(d.swap_in):
            return  # swapped requests resume before anything new is admitted
        seats = self.max_num_seqs - d.num_running
        if seats <= 0 or not (len(view.waiting) or d.requeued):
            return
        kv = view.kv
        paged = self.reservation.paged
        admitted = d.admit
        requeued = d.requeued
        bs = kv.block_size
        released = d.releases.cached_free if d.releases is not None else frozenset()
        for req in chain(requeued, view.waiting.ordered()) if requeued else view.waiting.ordered():
            if len(admitted) >= seats or len(d.prefill) >= self.max_prefill_seqs:
                break
            # a victim of this very step recomputes from scratch
            computed = 0 if requeued and req in d.evicted else req.num_computed_tokens
            known = req.num_prompt_tokens + req.num_output_tokens
            hits = from_free = lower = 0
            if computed == 0:
                # it starts from its longest cached prefix (on the GPU, then loaded from a tier
                # below), but computes at least one token
                hits, from_free, lower = kv.hits(req, (known - 1) // bs, d.taken, released)
                computed = (hits + lower) * bs
            tokens = known - computed
            if self.chunked:
                tokens = min(tokens, budget, self.max_chunk_tokens)
                if tokens <= 0:
                    break
            # a recompute longer than the budget may run alone, else it could never resume
            elif tokens > budget and (d.prefill or num_decodes):
                break
            target = computed + tokens
            if not paged:
                target = self.reservation.target(req, target)
            if hits or lower:  # new blocks beyond the cached ones; cached free ones leave the
                need = kv.blocks_for(target) - hits + from_free  # free count
            else:
                need = kv.blocks_for(target) if computed == 0 else kv.blocks_needed(req, target)
            # the watermark keeps room for running decodes; with none running it would only
            # keep out a request that fits the empty pool, forever
            reserve = self.watermark_blocks if d.num_running or admitted else 0
            if need + reserve > d.free:
                break
            d.free -= need
            admitted.append(req)
            if hits:
                d.cached[req] = hits
                d.taken.update(req.block_hashes(bs)[:hits])
            if lower:
                d.loaded[req] = lower
            d.prefill[req] = tokens
            if not paged:
                d.hold[req] = target
            budget -= tokens

    def newcomer_could_join(self, d: Draft) -> bool:
        """Whether a request arriving during a decode run could change the next plan."""
        view = d.view
        if view.receives_transfers:  # a landing request takes a free seat at once
            return d.num_running < self.max_num_seqs
        waiting = view.waiting
        return (
            not view.swapped
            and (not len(waiting) or waiting.may_be_overtaken())
            and d.num_running < self.max_num_seqs
            and d.num_decodes < self.max_num_batched_tokens
        )

    def decode_only(self, view: InstanceView) -> StepPlan | None:
        """The common step, decided in O(1): nothing waits, nothing is mid-prompt, and every
        decoding request finds its block; everyone decodes, for as long as that holds (with
        speculation on: one step, and each request's lookahead, in O(running)). None when the
        full planning is needed."""
        if len(view.waiting) or view.swapped or view.arrived or view.prefilling:
            return None
        decoding = view.num_decoding
        if not decoding:
            return None
        demand = view.decode_block_demand()
        free = view.kv.num_free
        if demand > free:
            return None
        rule = self.speculation
        if rule is not None and rule.active(view):
            # one step, decodes and their lookahead: what the full planning would give here
            budget = self.max_num_batched_tokens - decoding
            speculate = rule.lookahead(view, NO_ONE, budget, free - demand, NO_BLOCKS)[0]
            return StepPlan(decode=True, speculate=speculate)
        seats_left = len(view.running) < self.max_num_seqs
        if seats_left and (view.receives_transfers or decoding < self.max_num_batched_tokens):
            return DECODE_RUN
        return DECODE_RUN_FIXED

    def finish_plan(self, d: Draft) -> StepPlan:
        """The plan of a step that decodes (and maybe prefills): repeatable when it is decodes
        alone, with no eviction, no KV copy and speculation off."""
        if d.prefill or d.preempt or d.swap_in or d.spec_on:
            return d.plan(decode=True)
        return d.plan(decode=True, repeat=FOREVER, interruptible=self.newcomer_could_join(d))
