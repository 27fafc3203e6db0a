"""The engine: one instance's state, the step loop that applies its policy's plans, and arrivals.

`Instance` owns everything that changes while an instance serves: its queues (waiting,
running, swapped, and in P/D serving the hand-off and arrived lists), its KV pool and usage
integrals, its decode batch and its records. Each step it asks the policy for a `StepPlan`
(`sim.core.plan`: the contract), applies the plan's evictions, admissions and allocations at
the step's start, prices the step with the cost model, lets SimPy advance time, and at the step's
end applies the token rule, finishes requests and records the step. Nothing else changes an
instance: routers and the KV link call its methods (`load`, `reserve`, `receive`, `release`).

Runs. A decode-only plan may repeat: the engine runs as many identical steps as the policy
allows, stopping before the first finish and before the KV pool would run dry (the decode batch
knows both in O(1)), as one SimPy timeout. Anything outside that reads or changes the instance
mid-run first calls `settle()`, which applies the steps that have ended and starts the one under
way, so the instance looks exactly as it would have stepped one step at a time; an arrival that
could join cuts the run at the first step boundary at or after it. So coalescing steps never
changes a schedule (the tests run every policy both ways).

Speculative steps. A plan that names `speculate` (speculative decoding) runs as one step whose
decoding requests are handled one by one outside the decode batch: each emits its own number of
tokens (`sim.core.speculative_step`). Its duration is the proposals' seconds plus the target's
verification step. Plans without it never touch that path, so a run with speculation off is
exactly the plain run, coalesced runs and all.

Running ahead. When an instance's next step ends before any other scheduled event (the next
arrival, another instance's step), nothing can observe or interrupt it, so the loop applies it at
once and plans the next on its own clock, without a SimPy event; it catches SimPy up before it
waits. Instances whose steps notify a KV link do not run ahead. A lone instance pulls its
arrivals (`ArrivalFeed`) instead of having them pushed: then it never waits on SimPy while busy.

Same-time order (tested): arrivals carry SimPy's URGENT priority and step ends NORMAL, so requests
arriving at time t are queued before any instance plans the step that starts at t: an arrival at
t is visible to a schedule at t. Arrivals with equal timestamps are queued in id order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol

import simpy
from simpy.events import Event

from sim.core.acceptance import AcceptanceSampler
from sim.core.arrivals import FOREVER_S, ArrivalFeed
from sim.core.decode_batch import NO_GROWTH, DecodeBatch, GrowthIntegrals
from sim.core.kv.host import HostMemory
from sim.core.kv.pool import KVPool
from sim.core.kv_usage import KVUsage, PieceUsage
from sim.core.plan import Policy, StepFeatures, StepPlan
from sim.core.recorder import ItlLog, RequestLog, StepLog
from sim.core.request import RUNNING, Request
from sim.core.run import NO_FEATURES, Run
from sim.core.speculative_step import ProposalPricer, SpecStart, Speculator
from sim.core.step_times import StepTimes, steps_before

NO_CARRY = (0, 0.0)
FOREVER = 1 << 62


class StepPricer(Protocol):
    """Prices a step from its features (`sim.costs.cost_model.CostModel`)."""

    def run_times(self, features: StepFeatures) -> tuple[float, float]:
        """The first step's seconds, and how much longer each repeated step is."""
        ...

    def linear_steps(self, features: StepFeatures) -> int:
        """How many repeated steps grow by that same increment."""
        ...

    def cpu_overhead_s(self, features: StepFeatures) -> float:
        """Host seconds per step of the run (scheduling, input preparation, sampling)."""
        ...

    @property
    def last_extrapolated(self) -> bool:
        """Whether the run just priced fell outside the profile's measured tables."""
        ...


@dataclass(frozen=True, slots=True)
class Load:
    """An instance's load at one instant, for routing decisions."""

    num_waiting: int
    num_running: int
    outstanding_tokens: int  # prompt tokens not yet prefilled + output tokens not yet generated
    kv_blocks_used: int
    kv_blocks_total: int


@dataclass(frozen=True, slots=True)
class KVSpec:
    """An instance's KV geometry beyond the pool: bytes per token on this instance (with tensor
    parallelism, as stored), and the host memory and bandwidth that swapping uses."""

    bytes_per_token: float
    swap_bandwidth_bytes_per_s: float = 25e9
    host_memory_bytes: float = 64e9


class Instance:
    """One serving instance (see the module docstring)."""

    def __init__(
        self,
        env: simpy.Environment,
        index: int,
        policy: Policy,
        queue: Any,
        pool: KVPool,
        cost: StepPricer,
        log: RequestLog,
        *,
        kv: KVSpec,
        coalesce: bool = True,
        hands_off: bool = False,
        receives: bool = False,
        start: bool = True,
        steps: StepLog | None = None,
        itl: ItlLog | None = None,
        acceptance: AcceptanceSampler | None = None,
        proposer: ProposalPricer | None = None,
    ) -> None:
        self.env = env
        self.index = index
        self.policy = policy
        self.cost = cost
        self.pool = pool
        self.kv_spec = kv
        self.log = log
        self.coalesce = coalesce
        self.hands_off = hands_off  # P/D prefill instance: finished prompts leave for the link
        self.receives = receives  # P/D decode instance: requests land with their KV
        self.waiting = queue
        self.running: list[Request] = []  # admission order
        self.prefilling: list[Request] = []  # running, prompt (or recompute) not done
        self.ready: list[Request] = []  # running, decode next, not yet in the batch
        self.swapped: deque[Request] = deque()
        self.held: list[Request] = []  # finished, KV kept until the batch ends (static)
        self.handoff: list[Request] = []  # P/D prefill: prompt done, KV waiting for the link
        self._new_handoffs: list[Request] = []  # handed off, not yet taken by the link
        self.arrived: deque[Request] = deque()  # P/D decode: KV landed, waiting for a seat
        self.batch = DecodeBatch(pool.block_size, paged=policy.paged_kv)
        self.usage = KVUsage(pool.block_size)
        # speculative decoding: applies the steps of plans that name `speculate`
        self.speculator: Speculator | None = None
        if acceptance is not None:
            if proposer is None:
                raise ValueError("speculative decoding needs a proposal pricer")
            self.speculator = Speculator(acceptance, proposer, pool, self.usage, policy.paged_kv)
        self.steps = steps if steps is not None else StepLog(index)
        self.itl = itl if itl is not None else ItlLog()
        self._streamed = self.steps.on_full is not None or self.itl.on_full is not None
        self.host = HostMemory(kv.host_memory_bytes)  # swapped-out KV: its one account
        self.reserved_blocks = 0  # P/D decode: set aside for transfers in flight
        self._waiting_work = 0  # remaining work of the waiting requests
        # pricing: steps priced outside the profile's tables, host seconds of CPU overhead
        self.num_extrapolated_steps = 0
        self.cpu_overhead_s = 0.0
        self._carried = NO_CARRY  # preemptions (and swap seconds) of a plan with no step
        self._load_s = 0.0  # seconds the step being started waits on loads from KV tiers
        self._run: Run | None = None
        self._busy = False
        self._clock = 0.0  # the instance's own time: SimPy's, or ahead of it (running ahead)
        self._idle: Event | None = None
        self._cut_to: int | None = None
        self.on_change: Callable[[Instance], None] | None = None  # cluster hooks (P/D)
        self.on_finish: Callable[[Request], None] | None = None  # closed-loop sessions
        # observers (tests, tools): called with the run once its start is applied (False) and
        # again after each piece of it is applied (True). An attribute, not a method to wrap:
        # the compiled build calls its own methods directly, past any wrapper
        self.on_step: Callable[[Instance, Run, bool], None] | None = None
        # a lone instance's arrivals, pulled by its loop rather than pushed by SimPy events
        self.feed: ArrivalFeed | None = None
        # start=False: no SimPy process; the instance is stepped by hand (`step_by_hand`)
        self.process = env.process(self._loop()) if start else None

    # -- the view a policy reads (sim.core.plan.InstanceView) ----------------------------------

    @property
    def now(self) -> float:
        return self._clock

    @property
    def kv(self) -> KVPool:
        return self.pool

    @property
    def num_decoding(self) -> int:
        return self.batch.size + len(self.ready)

    @property
    def host_bytes_free(self) -> float:
        return self.host.free_bytes

    @property
    def receives_transfers(self) -> bool:
        return self.receives

    def decode_block_demand(self) -> int:
        demand = self.batch.demand_at(self.batch.clock)
        bs = self.pool.block_size
        for req in self.ready:
            if req.kv_blocks * bs <= req.num_computed_tokens:
                demand += 1
        return demand

    def needs_block(self, req: Request) -> bool:
        return req.kv_blocks * self.pool.block_size <= req.num_computed_tokens

    def swap_bytes(self, req: Request) -> int:
        tokens = self.pool.blocks_for(req.num_computed_tokens) * self.pool.block_size
        return int(tokens * self.kv_spec.bytes_per_token)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting) + len(self.swapped) + len(self.arrived)

    @property
    def num_running(self) -> int:
        return len(self.running) + len(self.held)

    # -- arrivals and the outside world --------------------------------------------------------

    def submit(self, req: Request) -> bool:
        """Queue an arriving request; False (and recorded) when it can never be served here."""
        req.arrive(self.index)
        reason = self.policy.rejection(req, self.pool)
        if reason:
            req.reject(reason)
            self.log.record(req)
            return False
        self.waiting.push(req)
        self._waiting_work += req.remaining_work
        self.wake()
        return True

    def wake(self) -> None:
        """New work arrived: start if idle, or cut a run that the newcomer could join."""
        if self._idle is not None:
            if not self._idle.triggered:
                self._idle.succeed()
        elif self._run is not None and self._run.interruptible:
            self._cut()

    def _cut(self) -> None:
        """End the run in flight at the first step boundary at or after now."""
        run = self._run
        if run is not None and run.cut_at(self.env.now):
            self._cut_to = run.num_steps
            if self.process is not None:
                self.process.interrupt()

    def settle(self) -> None:
        """Apply the steps of the run in flight that ended before now and start the one under
        way, so that the state is what a step-by-step loop would show now."""
        run = self._run
        if run is None:
            return
        done = run.settled_by(self.env.now)
        if done > 0:
            self._apply(run, done)
            run.advance(done)
            self._continue(run)

    def load(self) -> Load:
        """What routers see now."""
        self.settle()
        return Load(
            self.num_waiting,
            self.num_running,
            self.outstanding_tokens(),
            self.pool.num_used,
            self.pool.num_total,
        )

    def cached_prefix_tokens(self, req: Request) -> int:
        """Tokens of `req`'s prompt this instance's prefix cache holds, on the GPU or in a KV
        tier below it (0 without caching)."""
        pool = self.pool
        limit = (req.num_known_tokens - 1) // pool.block_size
        return pool.cached_prefix(req, limit) * pool.block_size

    def outstanding_tokens(self) -> int:
        """Tokens still to compute for every request here (what token-aware routers balance)."""
        explicit = sum(r.remaining_work for r in self.prefilling)
        explicit += sum(r.remaining_work for r in self.ready)
        explicit += sum(r.remaining_work for r in self.swapped)
        explicit += sum(r.remaining_work for r in self.arrived)
        return self._waiting_work + explicit + self.batch.outstanding_tokens

    def reserve(self, num_blocks: int) -> None:
        """P/D decode side: set blocks aside for a KV transfer that starts now."""
        self._touch()
        self.pool.take(num_blocks)
        self.reserved_blocks += num_blocks
        run = self._run
        if run is not None and run.num_steps > 1:  # its horizon counted these blocks as free
            self._cut()

    def receive(self, req: Request, num_blocks: int) -> None:
        """P/D decode side: a transferred request lands, holding `num_blocks` reserved blocks."""
        self._touch()
        self.reserved_blocks -= num_blocks
        req.land(self.env.now, num_blocks)
        self.usage.stored_tokens += req.num_computed_tokens
        self.usage.fragment_tokens += self.usage.over(req, num_blocks)
        self.arrived.append(req)
        self.wake()

    def release(self, req: Request) -> None:
        """P/D prefill side: a handed-off request's KV has left; free its blocks here."""
        self._touch()
        self.handoff.remove(req)
        self._free(req)
        self.wake()

    def take_handoffs(self) -> list[Request]:
        """P/D prefill side: the prompts handed off since the last call, in order."""
        new, self._new_handoffs = self._new_handoffs, []
        return new

    def _touch(self) -> None:
        """Before an outside change at now: settle, and integrate KV use up to now."""
        self.settle()
        self.pool.at(self.env.now)
        if self._busy:
            self.usage.accrue_to(self.env.now, self.pool.num_used)

    # -- the step loop ---------------------------------------------------------------------------

    def _loop(self) -> Generator[Event, Any, None]:
        env = self.env
        run_ahead = self.on_change is None
        feed = self.feed
        while True:
            if feed is not None:  # arrivals up to now are queued before the schedule at now
                feed.pull(self._clock, self.submit)
            self.pool.at(self._clock)  # tier blocks are hits once written: as of now
            plan = self.policy.schedule(self)
            if plan is not None and (plan.preempt or plan.swap_in) and not plan.has_work:
                # evictions with nothing to run: they happened; the next step records them
                self._begin(plan)
                plan = None
            if plan is None:
                if self._clock > env.now:  # catch SimPy up before waiting for anything
                    queued = self.num_waiting
                    yield env.timeout(self._clock - env.now)
                    if self.num_waiting != queued:
                        # sent at the very end of the run (a closed loop's next request with
                        # no delay) while SimPy caught up: plan for it instead of idling
                        continue
                self._idle = env.event()
                wake = self.policy.next_wakeup_s(self)
                if feed is not None and feed.next_s < FOREVER_S:  # or the next arrival
                    wake = feed.next_s if wake is None else min(wake, feed.next_s)
                if wake is None:
                    yield self._idle
                else:
                    yield self._idle | env.timeout(max(0.0, wake - env.now))
                self._idle = None
                self._clock = env.now
                continue
            run = self._begin(plan)
            if feed is not None and run.interruptible and feed.next_s < FOREVER_S:
                # the next arrival could join: the run ends at the step boundary at or after it,
                # where an arrival pushed by SimPy would have cut it
                run.num_steps = steps_before(run.times, run.num_steps, feed.next_s)
            end = run.times.end(run.num_steps)
            if run_ahead and self.on_change is None and end < env.peek():
                if feed is not None:  # what arrived while it ran is queued when it ends
                    feed.pull(end, self.submit)
                self._finish(run)  # nothing can happen before it ends: no event needed
                continue
            self._run = run
            wait: Event = env.timeout(end - env.now)
            while True:
                try:
                    yield wait
                    break
                except simpy.Interrupt:
                    if self._cut_to is not None:
                        self._cut_to = None
                    end = run.times.end(run.num_steps)
                    wait = env.timeout(max(0.0, end - env.now))
            self._run = None
            if feed is not None:
                feed.pull(env.now, self.submit)
            self._finish(run)

    def step_by_hand(self, now: float, max_steps: int | None = None) -> Run | None:
        """Plan and apply one step (or run of up to `max_steps` steps) starting at `now`, with
        no SimPy: for tests and tools that drive an instance directly. Returns what ran (None
        when the policy had nothing to run)."""
        self._clock = now
        self.pool.at(now)
        plan = self.policy.schedule(self)
        if plan is None:
            return None
        run = self._begin(plan)
        if not plan.has_work:
            return run
        if max_steps is not None:
            run.num_steps = min(run.num_steps, max_steps)
        self._finish(run)
        return run

    def _finish(self, run: Run) -> None:
        # the end of the run as applied (settled pieces may move it by a rounding error)
        self._clock = self._apply(run, run.num_steps)
        self._busy = False
        if self.on_change is not None:
            self.on_change(self)

    # -- the start of a step: evictions, admissions, allocations, price ------------------------

    def _begin(self, plan: StepPlan) -> Run:
        run = self._start(plan)
        if self.on_step is not None:
            self.on_step(self, run, False)
        return run

    def _start(self, plan: StepPlan) -> Run:
        now = self._clock
        usage = self.usage
        usage.step_started(now)
        self.pool.at(now)
        num_preempted, swap_s = self._carried
        freed = False
        if plan.seat or plan.preempt or plan.swap_in or plan.admit:
            num_preempted, swap_s, freed = self._move(plan, now, num_preempted, swap_s)
        if not plan.has_work:
            self._carried = (num_preempted, swap_s)
            if freed and self.on_change is not None:
                self.on_change(self)
            return Run(plan, NO_FEATURES, StepTimes(now, 0.0), 0, False, 0, 0.0)
        if num_preempted or swap_s:
            self._carried = NO_CARRY

        prefill_tokens = prefill_context = attention = 0
        chunks: tuple[tuple[int, int], ...] = ()
        if plan.prefill:
            hold = plan.hold
            shapes = []
            for req, n in plan.prefill.items():
                before = req.num_computed_tokens
                target = before + n
                reserve = hold.get(req, 0) if hold else 0
                self._grow(req, reserve if reserve > target else target)
                prefill_tokens += n
                prefill_context += target
                attention += n * target  # a chunk attends to everything computed before it
                shapes.append((n, before))
            chunks = tuple(shapes)
            usage.stored_tokens += prefill_tokens
        num_decodes = decode_context = 0
        decode_tokens = -1  # -1: one token per decoding request
        batch = self.batch
        spec: SpecStart | None = None
        if plan.speculate:
            assert self.speculator is not None and plan.decode
            prompts = (
                (len(plan.prefill), prefill_tokens, prefill_context, attention, chunks)
                if prefill_tokens
                else None
            )
            spec = self.speculator.begin(
                plan.speculate, self.ready, self.running, batch, self._grow, prompts
            )
            num_decodes = len(spec.decoders)
            decode_tokens = spec.num_tokens
            decode_context = spec.sum_context
        elif plan.decode:
            if batch.paged:
                blocks, tails = batch.start_step()
                self.pool.take(blocks)
                usage.fragment_tokens += tails
            if self.ready:
                for req in self.ready:
                    self._grow(req, req.num_computed_tokens + 1)
                    batch.join(req)
                self.ready.clear()
            num_decodes = batch.size
            decode_context = batch.sum_computed + num_decodes
            usage.stored_tokens += num_decodes
        if freed and self.on_change is not None:
            # planning freed blocks (preemption): tell the cluster now, as a step-by-step loop
            # would, not at the end of a run
            self.on_change(self)

        pad = plan.padding
        num_prefills = len(plan.prefill)
        repeats = plan.repeat > 1 and self.coalesce and not swap_s and num_prefills <= 1
        draft_s = 0.0
        speculator = self.speculator
        if (
            spec is None
            and prefill_tokens
            and speculator is not None
            and speculator.proposer.prefills
        ):
            # the draft model computes the prompt chunks too: a single step, that much longer
            draft_s = speculator.proposer.prefill_s(
                (num_prefills, prefill_tokens, prefill_context, attention, chunks)
            )
            repeats = False
        if decode_tokens < 0:
            decode_tokens = num_decodes
        features = StepFeatures(
            num_prefills + num_decodes + pad.num_seqs,
            prefill_tokens + decode_tokens + pad.num_seqs + pad.prefill_tokens,
            prefill_tokens + pad.prefill_tokens,
            decode_tokens,
            prefill_context + decode_context + pad.context_tokens,
            attention + pad.attention_term,
            num_decodes + pad.num_seqs + (prefill_tokens if repeats else 0),
            num_prefills + num_decodes,
            prefill_tokens * prefill_tokens if repeats else 0,
            chunks,
        )
        cost = self.cost
        first_s, increment_s = cost.run_times(features)
        extrapolated = cost.last_extrapolated
        cpu_s = cost.cpu_overhead_s(features)
        num_steps = 1
        load_s = self._load_s
        if load_s:  # loads from KV tiers: before the step, or hidden behind its compute
            self._load_s = 0.0
            load_s = max(0.0, load_s - first_s) if self.pool.loads_overlap else load_s
            self.pool.load_wait_s += load_s
            repeats = False
        if spec is not None:  # one step: the target verifies after the proposals
            run = Run(
                plan,
                features,
                StepTimes(now, first_s + spec.proposal_s + swap_s + load_s),
                1,
                False,
                num_preempted,
                swap_s,
                cpu_s,
                extrapolated,
            )
            run.spec = spec
            run.load_s = load_s
            run.verify_s = first_s
            run.proposal_s = spec.proposal_s
            self._busy = True
            return run
        if draft_s:
            first_s += draft_s
        if repeats and not plan.preempt and not plan.swap_in:
            num_steps = min(plan.repeat, batch.steps_to_finish())
            num_steps = min(num_steps, self.cost.linear_steps(features))
            if prefill_tokens:
                num_steps = self._chunk_run_steps(plan, num_steps)
            else:
                num_steps = batch.steps_until_dry(self.pool.num_free, num_steps)
        self._busy = True
        run = Run(
            plan,
            features,
            StepTimes(now, first_s + swap_s + load_s, increment_s),
            num_steps,
            plan.interruptible and num_steps > 1,
            num_preempted,
            swap_s,
            cpu_s,
            extrapolated,
        )
        if draft_s:
            run.proposal_s = draft_s
        run.load_s = load_s
        return run

    def _move(
        self, plan: StepPlan, now: float, num_preempted: int, swap_s: float
    ) -> tuple[int, float, bool]:
        """A plan's seats, evictions, swap-ins and admissions, in that order (sim.core.plan);
        the swapped-in requests' blocks are taken last."""
        usage = self.usage
        bandwidth = self.kv_spec.swap_bandwidth_bytes_per_s
        freed = False
        for req in plan.seat:
            if not self.arrived or self.arrived[0] is not req:
                raise AssertionError(f"seat for request {req.id} out of order")
            self.arrived.popleft()
            req.seat()
            self.running.append(req)
            self.ready.append(req)
        for p in plan.preempt:
            req = p.request
            self._leave_running(req)
            if p.swap:
                nbytes = self.swap_bytes(req)
                self._free(req)
                req.swap_out(nbytes)
                self.host.swap_out(nbytes)
                swap_s += nbytes / bandwidth
                self.swapped.append(req)
            else:
                self._free(req)
                req.preempt_recompute()
                self.waiting.push_front(req)
                self._waiting_work += req.remaining_work
            num_preempted += 1
            freed = True
        for req in plan.swap_in:
            if not self.swapped or self.swapped[0] is not req:
                raise AssertionError(f"swap-in of request {req.id} out of order")
            self.swapped.popleft()
            self.host.swap_in(req.host_bytes)
            swap_s += req.host_bytes / bandwidth
            req.swap_in()
            self.running.append(req)
            usage.stored_tokens += req.num_computed_tokens
            (self.ready if req.is_decoding else self.prefilling).append(req)
        cached, loaded, pool = plan.cached, plan.loaded, self.pool
        for req in plan.admit:
            if self.waiting.pop(now) is not req:
                raise AssertionError(f"admission of request {req.id} out of queue order")
            self._waiting_work -= req.remaining_work
            hits = cached.get(req, 0) if cached else 0
            pool.lookup(req, hits)
            shared = pool.acquire(req, hits) if hits else 0
            lower = loaded.get(req, 0) if loaded else 0
            if lower:  # the blocks after them come from a tier below: their blocks with growth
                self._load_s += pool.load(req, hits, lower)
            if hits or lower:  # it starts from its cached prefix; shared blocks stored once
                bs = pool.block_size
                usage.stored_tokens += (hits + lower - shared) * bs
                req.admit(now, (hits + lower) * bs)
            else:
                req.admit(now)
            self.running.append(req)
            self.prefilling.append(req)
        # swapped-in requests take their blocks once the admissions hold their cached ones:
        # taking blocks may evict cached free blocks, and the plan counted those hits
        for req in plan.swap_in:
            self._grow(req, plan.hold.get(req, req.num_computed_tokens))
        return num_preempted, swap_s, freed

    def _grow(self, req: Request, num_tokens: int) -> None:
        """Grow a (non-member) request's holding; the blocks past its sequence are fragment."""
        added = self.pool.grow(req, num_tokens)
        if added:
            bs = self.pool.block_size
            final = req.num_prompt_tokens + req.max_output_tokens
            held = req._kv_blocks
            was = (held - added) * bs - final
            now = held * bs - final
            if now > 0:
                self.usage.fragment_tokens += now - (was if was > 0 else 0)

    def _chunk_run_steps(self, plan: StepPlan, limit: int) -> int:
        """How many steps of a repeated prompt chunk (with the decodes) find their blocks."""
        ((req, chunk),) = plan.prefill.items()
        pool, batch = self.pool, self.batch
        free = pool.num_free
        computed = req.num_computed_tokens + chunk  # after the first step
        for j in range(2, limit + 1):
            grown = computed + chunk
            need = (
                pool.blocks_for(grown)
                - pool.blocks_for(computed)
                + batch.demand_at(batch.clock + j - 1)
            )
            if need > free:
                return j - 1
            free -= need
            computed = grown
        return limit

    def _chunk_growth(self, req: Request, chunk: int, num_steps: int, times: StepTimes) -> Any:
        """What a prompt chunk repeated for steps 2..k allocates and adds to the KV integrals
        (like `DecodeBatch.growth` for the decodes); the blocks are not taken here."""
        bs = self.pool.block_size
        final = req.sequence_tokens
        total = times.elapsed(num_steps)
        computed = req.num_computed_tokens + chunk
        held = req._kv_blocks
        blocks = 0
        block_seconds = fragment_seconds = 0.0
        fragment = 0
        for a in range(2, num_steps + 1):
            computed += chunk
            need = -(-computed // bs) - held
            if need > 0:
                held += need
                blocks += need
                rest = total - times.elapsed(a - 1)
                block_seconds += need * rest
                over = held * bs - final
                if over > 0:  # the block past its sequence's end (only its last)
                    added = over - max(0, (held - need) * bs - final)
                    fragment += added
                    fragment_seconds += added * rest
        return GrowthIntegrals(blocks, block_seconds, fragment, fragment_seconds)

    def _free(self, req: Request) -> None:
        """Return a (non-member) request's KV to the pool and take it out of the tallies."""
        usage = self.usage
        usage.stored_tokens -= req.num_computed_tokens
        usage.fragment_tokens -= usage.over(req, req.kv_blocks)
        pool = self.pool
        # its full blocks stay cached; those others still hold stay stored, once
        pool.register(req, req.num_computed_tokens)
        usage.stored_tokens += pool.release(req)

    def _leave_running(self, req: Request) -> None:
        self.running.remove(req)
        if req._batch is not None:
            self.batch.leave(req)
        elif req in self.ready:
            self.ready.remove(req)
        else:
            self.prefilling.remove(req)

    # -- the end of a step: the token rule, finishes, records ----------------------------------

    def _apply(self, run: Run, num_steps: int) -> float:
        """Apply the first `num_steps` unapplied steps of `run` (all of it, or those that ended
        before an outside look); returns when they ended."""
        plan, times, batch, pool = run.plan, run.times, self.batch, self.pool
        if run.extrapolated:
            self.num_extrapolated_steps += num_steps
        if run.cpu_s:
            self.cpu_overhead_s += run.cpu_s * num_steps
        growth = batch.growth(num_steps, times) if plan.decode else NO_GROWTH
        stored_growth = batch.size if plan.decode else 0
        chunk_run = num_steps > 1 and plan.prefill
        if chunk_run:  # a repeated prompt chunk grows its holding too
            ((grower, chunk),) = plan.prefill.items()
            own = self._chunk_growth(grower, chunk, num_steps, times)
            growth = GrowthIntegrals(
                growth.blocks + own.blocks,
                growth.block_seconds + own.block_seconds,
                growth.fragment_tokens + own.fragment_tokens,
                growth.fragment_token_seconds + own.fragment_token_seconds,
            )
            stored_growth += chunk
        used = pool.num_used
        pool.take(growth.blocks)
        # the cached free blocks while the step ran (kv_blocks_used's moment, before any finish)
        cached = pool.num_cached_free
        piece = self.usage.integrate(times, num_steps, used, stored_growth, growth)
        end = times.end(num_steps)
        spec = run.spec
        accepted = 0
        if spec is not None:
            assert self.speculator is not None
            self.ready, finished, accepted = self.speculator.end(spec, times.start_s, end, self.itl)
        else:
            finished = batch.advance(num_steps, times, self.itl) if plan.decode else []
            if not finished:
                finished = []  # the batch's shared empty result is never appended to
        if plan.prefill:
            start, itl = end - times.duration(num_steps), self.itl
            for req in plan.prefill:
                if req.state != RUNNING:  # a chunk's request cannot have left mid-step
                    raise AssertionError(f"request {req.id} left during its own step")
                if chunk_run:
                    req.set_kv_blocks(req.kv_blocks + own.blocks)
                gap = req.compute(plan.prefill[req] * num_steps, start, end)
                # the prompt blocks it has just filled are cached now
                pool.register(req, req.num_computed_tokens)
                if gap is None:  # a prefill chunk: no token yet
                    if req.is_decoding:  # a recompute with one token left: that is a decode
                        self.prefilling.remove(req)
                        self.ready.append(req)
                    continue
                if gap == gap:  # not NaN: a recomputed request's next token
                    itl.gap(gap, 1)
                self.prefilling.remove(req)
                if req.is_finished:
                    finished.append(req)
                elif self.hands_off and req.num_output_tokens == 1:
                    self.running.remove(req)
                    req.hand_off(end)
                    self.handoff.append(req)
                    self._new_handoffs.append(req)
                else:
                    self.ready.append(req)
        for req in finished:
            if req._batch is not None:
                batch.leave(req)
            self.running.remove(req)
            req.finish(end)
            self.log.record(req)
            if self.on_finish is not None:
                self.on_finish(req)
            if self.policy.releases_kv_on_finish:
                self._free(req)
            else:
                self.held.append(req)
        if self.held and not self.running:  # a static batch has drained: release it whole
            for req in self.held:
                self._free(req)
            self.held.clear()
        self._record(run, num_steps, end, piece, cached, accepted)
        if self._streamed:  # hand full chunks of records over: a streamed run keeps no tables
            self.steps.hand_over()
            self.itl.hand_over()
        if self.on_step is not None:
            self.on_step(self, run, True)
        return end

    def _record(
        self, run: Run, num_steps: int, end: float, piece: PieceUsage, cached: int, accepted: int
    ) -> None:
        """The step group's row (`sim.core.recorder.STEP_SCHEMA`)."""
        f, times, spec = run.features, run.times, run.spec
        dram, nvme, remote = self.pool.occupancy()
        self.steps.add(
            start_s=times.start_s,
            end_s=end,
            num_steps=num_steps,
            duration_s=times.first_duration_s,
            duration_increment_s=times.increment_s,
            num_seqs=f.num_seqs,
            num_active_seqs=f.num_active_seqs,
            num_tokens=f.num_tokens,
            num_prefill_tokens=f.num_prefill_tokens,
            num_decode_tokens=f.num_decode_tokens,
            sum_context_tokens=f.sum_context_tokens,
            context_growth_per_step=f.context_growth_per_step,
            kv_blocks_used=piece.blocks_held,
            kv_block_seconds=piece.block_seconds,
            num_waiting=self.num_waiting,
            num_running=self.num_running,
            num_preempted=run.num_preempted,
            kv_stored_token_seconds=piece.stored_token_seconds,
            kv_fragment_token_seconds=piece.fragment_token_seconds,
            swap_s=run.swap_s,
            kv_blocks_cached=cached,
            num_spec_seqs=spec.num_spec_seqs if spec is not None else 0,
            num_spec_proposed=spec.num_proposed if spec is not None else 0,
            num_spec_accepted=accepted,
            spec_proposal_s=run.proposal_s,
            spec_verify_s=run.verify_s,
            kv_load_s=run.load_s,
            kv_dram_blocks=dram,
            kv_nvme_blocks=nvme,
            kv_remote_blocks=remote,
        )

    def _continue(self, run: Run) -> None:
        """After applying some steps of a run mid-flight: start the next one, under way now."""
        if run.plan.decode:
            blocks, tails = self.batch.start_step()
            self.pool.take(blocks)
            self.usage.fragment_tokens += tails
            self.usage.stored_tokens += self.batch.size
        for req, chunk in run.plan.prefill.items():  # a repeated chunk's next step
            self._grow(req, req.num_computed_tokens + chunk)
            self.usage.stored_tokens += chunk


