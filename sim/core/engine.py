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

Running ahead. When an instance's next step ends before any other scheduled event (the next
arrival, another instance's step), nothing can observe or interrupt it, so the loop applies it at
once and plans the next on its own clock, without a SimPy event; it catches SimPy up before it
waits. Instances whose steps notify a KV link do not run ahead.

Same-time order (tested): arrivals carry SimPy's URGENT priority and step ends NORMAL, so requests
arriving at time t are queued before any instance plans the step that starts at t: an arrival at
t is visible to a schedule at t. Arrivals with equal timestamps are queued in id order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import simpy
from simpy.core import URGENT
from simpy.events import Event

from sim.core.decode_batch import DecodeBatch, GrowthIntegrals
from sim.core.kv_cache import BlockManager
from sim.core.kv_usage import KVUsage
from sim.core.plan import Policy, StepFeatures, StepPlan
from sim.core.recorder import ItlLog, RequestLog, StepLog
from sim.core.request import RUNNING, Request
from sim.core.step_times import StepTimes, steps_before

NO_GROWTH = GrowthIntegrals(0, 0.0, 0, 0.0)
FOREVER = 1 << 62


class UrgentTimeout(Event):
    """A timeout processed before NORMAL events of the same instant (arrivals before steps)."""

    def __init__(self, env: simpy.Environment, delay: float) -> None:
        super().__init__(env)
        self._ok = True
        self._value = None
        env.schedule(self, URGENT, delay)


class StepPricer(Protocol):
    """Prices a step from its features (`sim.costs.cost_model.CostModel`)."""

    def run_times(self, features: StepFeatures) -> tuple[float, float]:
        """The first step's seconds, and how much longer each repeated step is."""
        ...

    def linear_steps(self, features: StepFeatures) -> int:
        """How many repeated steps grow by that same increment."""
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


@dataclass(slots=True)
class Run:
    """The plan in flight: the steps of it not yet applied."""

    plan: StepPlan
    features: StepFeatures
    times: StepTimes  # of its first unapplied step onwards
    num_steps: int  # steps left (the first is under way)
    interruptible: bool
    num_preempted: int  # recorded with its first piece
    swap_s: float


class Instance:
    """One serving instance (see the module docstring)."""

    def __init__(
        self,
        env: simpy.Environment,
        index: int,
        policy: Policy,
        queue: Any,
        pool: BlockManager,
        cost: StepPricer,
        log: RequestLog,
        *,
        kv: KVSpec,
        coalesce: bool = True,
        hands_off: bool = False,
        receives: bool = False,
        start: bool = True,
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
        self.steps = StepLog(index)
        self.itl = ItlLog()
        self.host_used_bytes = 0
        self.reserved_blocks = 0  # P/D decode: set aside for transfers in flight
        self._waiting_work = 0  # remaining work of the waiting requests
        self._carried = (0, 0.0)  # preemptions (and swap seconds) of a plan with no step
        self._run: Run | None = None
        self._busy = False
        self._clock = 0.0  # the instance's own time: SimPy's, or ahead of it (running ahead)
        self._idle: Event | None = None
        self._cut_to: int | None = None
        self.on_change: Callable[[Instance], None] | None = None  # cluster hooks (P/D)
        # start=False: no SimPy process; the instance is stepped by hand (`step_by_hand`)
        self.process = env.process(self._loop()) if start else None

    # -- the view a policy reads (sim.core.plan.InstanceView) ----------------------------------

    @property
    def now(self) -> float:
        return self._clock

    @property
    def kv(self) -> BlockManager:
        return self.pool

    @property
    def num_decoding(self) -> int:
        return self.batch.size + len(self.ready)

    @property
    def host_bytes_free(self) -> float:
        return self.kv_spec.host_memory_bytes - self.host_used_bytes

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
        req.instance = self.index
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
        if run is None or run.num_steps <= 1:
            return
        cut = steps_before(run.times, run.num_steps, self.env.now)
        if cut < run.num_steps:
            run.num_steps = cut
            self._cut_to = cut
            if self.process is not None:
                self.process.interrupt()

    def settle(self) -> None:
        """Apply the steps of the run in flight that ended before now and start the one under
        way, so that the state is what a step-by-step loop would show now."""
        run = self._run
        if run is None:
            return
        done = steps_before(run.times, run.num_steps, self.env.now) - 1
        if done > 0:
            self._apply(run, done)
            self._continue(run, done)

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
        if self._busy:
            self.usage.accrue_to(self.env.now, self.pool.num_used)

    # -- the step loop ---------------------------------------------------------------------------

    def _loop(self) -> Generator[Event, Any, None]:
        env = self.env
        run_ahead = self.on_change is None
        while True:
            plan = self.policy.schedule(self)
            if plan is not None and (plan.preempt or plan.swap_in) and not plan.has_work:
                # evictions with nothing to run: they happened; the next step records them
                self._begin(plan)
                plan = None
            if plan is None:
                if self._clock > env.now:  # catch SimPy up before waiting for anything
                    yield env.timeout(self._clock - env.now)
                self._idle = env.event()
                wake = self.policy.next_wakeup_s(self)
                if wake is None:
                    yield self._idle
                else:
                    yield self._idle | env.timeout(max(0.0, wake - env.now))
                self._idle = None
                self._clock = env.now
                continue
            run = self._begin(plan)
            end = run.times.end(run.num_steps)
            if run_ahead and self.on_change is None and end < env.peek():
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
            self._finish(run)

    def step_by_hand(self, now: float, max_steps: int | None = None) -> Run | None:
        """Plan and apply one step (or run of up to `max_steps` steps) starting at `now`, with
        no SimPy: for tests and tools that drive an instance directly. Returns what ran (None
        when the policy had nothing to run)."""
        self._clock = now
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
        now = self._clock
        pool, usage, batch = self.pool, self.usage, self.batch
        usage.step_started(now)
        num_preempted, swap_s = self._carried
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
                self.host_used_bytes += nbytes
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
            self.host_used_bytes -= req.host_bytes
            swap_s += req.host_bytes / bandwidth
            req.swap_in()
            self.running.append(req)
            self._grow(req, plan.hold.get(req, req.num_computed_tokens))
            usage.stored_tokens += req.num_computed_tokens
            (self.ready if req.is_decoding else self.prefilling).append(req)
        for req in plan.admit:
            if self.waiting.pop(now) is not req:
                raise AssertionError(f"admission of request {req.id} out of queue order")
            self._waiting_work -= req.remaining_work
            req.admit(now)
            self.running.append(req)
            self.prefilling.append(req)
        if not plan.has_work:
            self._carried = (num_preempted, swap_s)
            if freed and self.on_change is not None:
                self.on_change(self)
            return Run(plan, _NO_FEATURES, StepTimes(now, 0.0), 0, False, 0, 0.0)
        self._carried = (0, 0.0)

        prefill_tokens = prefill_context = attention = 0
        hold = plan.hold
        for req, n in plan.prefill.items():
            computed = req.num_computed_tokens
            target = computed + n
            reserve = hold.get(req, 0) if hold else 0
            self._grow(req, reserve if reserve > target else target)
            prefill_tokens += n
            prefill_context += target
            attention += n * target  # a chunk attends to everything computed so far and itself
        usage.stored_tokens += prefill_tokens
        num_decodes = decode_context = 0
        if plan.decode:
            blocks, tails = batch.start_step()
            pool.take(blocks)
            usage.fragment_tokens += tails
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
        features = StepFeatures(
            num_seqs=len(plan.prefill) + num_decodes + pad.num_seqs,
            num_tokens=prefill_tokens + num_decodes + pad.num_seqs + pad.prefill_tokens,
            num_prefill_tokens=prefill_tokens + pad.prefill_tokens,
            num_decode_tokens=num_decodes,
            sum_context_tokens=prefill_context + decode_context + pad.context_tokens,
            prefill_attention_term=attention + pad.attention_term,
            context_growth_per_step=num_decodes + pad.num_seqs,
            num_active_seqs=len(plan.prefill) + num_decodes,
        )
        first_s, increment_s = self.cost.run_times(features)
        num_steps = 1
        pure_decode = not plan.prefill and not plan.preempt and not plan.swap_in and not swap_s
        if plan.repeat > 1 and pure_decode and self.coalesce:
            num_steps = min(
                plan.repeat,
                batch.steps_to_finish(),
                batch.steps_until_dry(pool.num_free),
                self.cost.linear_steps(features),
            )
        interruptible = plan.interruptible and num_steps > 1
        self._busy = True
        return Run(
            plan,
            features,
            StepTimes(now, first_s + swap_s, increment_s),
            max(1, num_steps),
            interruptible,
            num_preempted,
            swap_s,
        )

    def _grow(self, req: Request, num_tokens: int) -> None:
        before = req.kv_blocks
        if self.pool.grow(req, num_tokens):
            usage = self.usage
            usage.fragment_tokens += usage.over(req, req.kv_blocks) - usage.over(req, before)

    def _free(self, req: Request) -> None:
        """Return a (non-member) request's KV to the pool and take it out of the tallies."""
        usage = self.usage
        usage.stored_tokens -= req.num_computed_tokens
        usage.fragment_tokens -= usage.over(req, req.kv_blocks)
        self.pool.release(req)

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
        growth = batch.growth(num_steps, times) if plan.decode else NO_GROWTH
        used = pool.num_used
        pool.take(growth.blocks)
        piece = self.usage.integrate(
            times, num_steps, used, batch.size if plan.decode else 0, growth
        )
        end = times.end(num_steps)
        finished: list[Request] = []
        if plan.decode:
            finished = batch.advance(num_steps, times, self.itl)
        if plan.prefill:
            start, itl = times.start_s, self.itl
            for req in plan.prefill:
                if req.state != RUNNING:  # a chunk's request cannot have left mid-step
                    raise AssertionError(f"request {req.id} left during its own step")
                gap = req.compute(plan.prefill[req], start, end)
                if gap is None:
                    continue  # a prefill chunk: no token yet
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
            if self.policy.releases_kv_on_finish:
                self._free(req)
            else:
                self.held.append(req)
        if self.held and not self.running:  # a static batch has drained: release it whole
            for req in self.held:
                self._free(req)
            self.held.clear()
        f = run.features
        a = self.steps.append
        a[0](times.start_s)
        a[1](end)
        a[2](num_steps)
        a[3](times.first_duration_s)
        a[4](times.increment_s)
        a[5](f.num_seqs)
        a[6](f.num_active_seqs)
        a[7](f.num_tokens)
        a[8](f.num_prefill_tokens)
        a[9](f.num_decode_tokens)
        a[10](f.sum_context_tokens)
        a[11](f.context_growth_per_step)
        a[12](piece.blocks_held)
        a[13](piece.block_seconds)
        a[14](self.num_waiting)
        a[15](self.num_running)
        a[16](run.num_preempted)
        a[17](piece.stored_token_seconds)
        a[18](piece.fragment_token_seconds)
        a[19](run.swap_s)
        return end

    def _continue(self, run: Run, done: int) -> None:
        """After applying `done` steps of a run mid-flight: the rest, its first step under way."""
        f = run.features
        run.features = StepFeatures(
            f.num_seqs,
            f.num_tokens,
            f.num_prefill_tokens,
            f.num_decode_tokens,
            f.sum_context_tokens + f.context_growth_per_step * done,
            f.prefill_attention_term,
            f.context_growth_per_step,
            f.num_active_seqs,
        )
        run.times = run.times.after(done)
        run.num_steps -= done
        run.num_preempted = 0
        run.swap_s = 0.0
        blocks, tails = self.batch.start_step()
        self.pool.take(blocks)
        self.usage.fragment_tokens += tails
        self.usage.stored_tokens += self.batch.size


_NO_FEATURES = StepFeatures(0, 0, 0, 0, 0, 0)


class Source:
    """Feeds requests to a dispatch function at their arrival times (URGENT priority)."""

    def __init__(
        self,
        env: simpy.Environment,
        arrival_s: np.ndarray,
        make_request: Callable[[int], Request],
        dispatch: Callable[[Request], None],
    ) -> None:
        self.env = env
        self.arrival_s = arrival_s.tolist()
        self.make_request = make_request
        self.dispatch = dispatch
        self.process = env.process(self._feed())

    def _feed(self) -> Generator[Event, Any, None]:
        env = self.env
        for i, t in enumerate(self.arrival_s):
            if t > env.now:
                yield UrgentTimeout(env, t - env.now)
            self.dispatch(self.make_request(i))
