"""One serving instance: its step loop, the run in flight, and what the outside world may do.

An instance is a composition of parts that own their state: the engine (`sim.core.engine.Engine`:
its requests by where they are, with the waiting queue `sim.core.waiting.Waiting` and the P/D
hand-off state `sim.core.handoff.HandOff`; its KV pool, decode batch, usage integrals and host
memory; its pricing `sim.core.pricing.Pricing`; its records), which is what its policy sees and
the one thing that changes its requests, and `Instance` below: the SimPy process that steps it,
the run in flight and the outside world's questions. Each step the loop asks the engine for the
policy's `StepPlan` (`sim.core.plan`: the contract), has the engine start it (evictions,
admissions, allocations, the price: a `sim.core.run.Run`), lets SimPy advance time, and has the
engine apply it at its end (the token rule, finishes, the step's record).

Runs of identical decode steps as one SimPy timeout, `settle()` before any outside read or
change mid-run (so coalescing never changes a schedule: the tests run every policy both ways),
running ahead without SimPy, pulled arrivals and the same-time order of arrivals and step ends:
docs/architecture.md, "Runs and the decode batch". An asynchronous scheduler's arrivals wait in
`sim.core.lookahead`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

import simpy
from simpy.events import Event

from sim.core.acceptance import AcceptanceSampler
from sim.core.arrivals import FOREVER_S, ArrivalFeed
from sim.core.engine import Engine
from sim.core.kv.host import KVSpec
from sim.core.kv.pool import KVPool
from sim.core.load import Load, WorkLoad
from sim.core.lookahead import Lookahead
from sim.core.plan import InstanceView, Policy, QueueView, StepPlan
from sim.core.prefill_curve import PrefillCurve
from sim.core.pricing import Pricing, StepPricer
from sim.core.recorder import ItlLog, RequestLog, StepLog
from sim.core.request import RUNNING, WAITING, Request
from sim.core.run import Run
from sim.core.speculative_step import ProposalPricer
from sim.core.step_times import steps_before
from sim.core.waiting import WaitQueue

__all__ = ["Instance", "KVSpec", "Load", "StepPricer", "WorkLoad"]


class Instance:
    """One serving instance: its engine, its step loop and the run in flight (see the module
    docstring)."""

    def __init__(
        self,
        env: simpy.Environment,
        index: int,
        policy: Policy,
        queue: WaitQueue,
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
        serves_from_s: float = 0.0,
        prefill: PrefillCurve | None = None,
        lookahead: Lookahead | None = None,
    ) -> None:
        self.env = env
        self.serves_from_s = serves_from_s  # a cold start: nothing is scheduled before this
        self.index = index
        self.policy = policy
        self.pool = pool
        self.kv_spec = kv
        self.engine = Engine(
            policy, queue, pool, cost, log,
            steps if steps is not None else StepLog(index),
            itl if itl is not None else ItlLog(),
            bytes_per_token=kv.bytes_per_token,
            swap_bandwidth_bytes_per_s=kv.swap_bandwidth_bytes_per_s,
            host_memory_bytes=kv.host_memory_bytes,
            coalesce=coalesce, hands_off=hands_off, receives=receives,
            acceptance=acceptance, proposer=proposer, prefill=prefill,
        )  # fmt: skip
        # the run in flight: started, not yet applied to its end (None between runs)
        self._run: Run | None = None
        self._idle: Event | None = None  # what an idle loop waits on (`wake` triggers it)
        self._cut_to: int | None = None
        self._aborts: list[Request] = []  # running requests to drop at the next boundary
        # an asynchronous scheduler's requests that came after the step in flight was planned
        # (sim/core/lookahead.py; one that never holds any: a synchronous engine loop)
        self._ahead = lookahead if lookahead is not None else Lookahead(enabled=False)
        self._on_change: Callable[[Any], None] | None = None  # cluster hooks (P/D)
        # a gateway's load index (`sim.topology.load_index`): told when a run starts or ends
        # and when a request is queued or lands, the only moments `load_floor` can change
        self.on_load: Callable[[Any], None] | None = None
        # observers (tests, tools): called with the run once its start is applied (False) and
        # again after each piece of it is applied (True). An attribute, not a method to wrap:
        # the compiled build calls its own methods directly, past any wrapper
        self.on_step: Callable[[Any, Run, bool], None] | None = None
        # a lone instance's arrivals, pulled by its loop rather than pushed by SimPy events
        self.feed: ArrivalFeed | None = None
        # start=False: no SimPy process; the instance is stepped by hand (`step_by_hand`)
        self.process = env.process(self._loop()) if start else None

    # -- hooks and what the engine holds, for the outside world ---------------------------------

    @property
    def on_change(self) -> Callable[[Any], None] | None:
        """Called with the instance when planning freed blocks or a run ended (the P/D link)."""
        return self._on_change

    @on_change.setter
    def on_change(self, hook: Callable[[Any], None] | None) -> None:
        self._on_change = hook
        self.engine.on_change = None if hook is None else lambda: hook(self)

    @property
    def on_finish(self) -> Callable[[Request], None] | None:
        """Called with each request that finishes here (closed-loop sessions)."""
        return self.engine.on_finish

    @on_finish.setter
    def on_finish(self, hook: Callable[[Request], None] | None) -> None:
        self.engine.on_finish = hook

    def view(self) -> InstanceView:
        """What its policy sees (the engine, at the instance's clock)."""
        return self.engine

    @property
    def now(self) -> float:
        return self.engine.now

    @property
    def waiting(self) -> QueueView:
        return self.engine.waiting

    @property
    def running(self) -> Sequence[Request]:
        return self.engine.running

    @property
    def swapped(self) -> Sequence[Request]:
        return self.engine.swapped

    @property
    def steps(self) -> StepLog:
        return self.engine.steps

    @property
    def itl(self) -> ItlLog:
        return self.engine.itl

    def pricing(self) -> Pricing:
        """Its step pricing: the cost model and the pricing's tallies."""
        return self.engine.pricing

    @property
    def num_waiting(self) -> int:
        return self.engine.num_waiting + len(self._ahead)  # held ones are queued to a router

    def _tokens_left(self) -> int:
        return self.engine.outstanding_tokens() + self._ahead.work  # held requests' included

    @property
    def num_running(self) -> int:
        return self.engine.num_running

    # -- arrivals and the outside world --------------------------------------------------------

    def submit(self, req: Request) -> bool:
        """Queue an arriving request; False (and recorded) when it can never be served here."""
        req.arrive(self.index)
        if self._ahead.busy:  # asynchronous: the step after the one in flight is planned
            if not self.engine.accepts(req):
                return False
            self._ahead.hold(req)
        elif not self.engine.queue(req):
            return False
        if self.on_load is not None:
            self.on_load(self)
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
            self.engine.continue_run(run)

    def load(self) -> Load:
        """What routers see now."""
        self.settle()
        engine = self.engine
        return Load(
            engine.num_waiting + len(self._ahead),
            engine.num_running,
            self._tokens_left(),
            self.pool.num_used,
            self.pool.num_total,
        )

    def work_load(self) -> WorkLoad:
        """`load()`'s queues and outstanding tokens now, without settling the run in flight:
        inside a run the steps that ended changed only the work left (one token from every
        decoding member, a repeated chunk's tokens), so the run stays one record. A speculative
        step, whose accepted tokens are drawn when it is applied, is settled."""
        left = self.work_left()  # first: it may settle a speculative run
        return WorkLoad(self.engine.num_waiting + len(self._ahead), self.engine.num_running, left)

    def work_left(self) -> int:
        """`work_load().outstanding_tokens` alone (what token-balancing routers rank by)."""
        run = self._run
        engine = self.engine
        if run is not None and run.num_steps > 1:
            done = run.settled_by(self.env.now)
            if done > 0:
                if run.spec is not None:
                    self.settle()
                    return self._tokens_left()
                per_step = engine.tokens_per_step(run.plan, False)
                return self._tokens_left() - done * per_step
        return self._tokens_left()

    def num_outstanding(self) -> int:
        """`num_waiting + num_running` of `work_load()` (what request-balancing routers rank
        by), read without building the whole load."""
        return self.engine.num_outstanding() + len(self._ahead)

    def load_floor(self, tokens: bool, horizon_steps: int) -> tuple[int, float, bool]:
        """The least `work_left()` (tokens) or `num_outstanding()` (requests) can show before
        this instance next starts or ends a run or takes a request, and before the time
        returned (infinity: none); and whether it is that number itself until then. Requests
        are exact, and so are tokens with no run in flight; during a run, the work left once
        `horizon_steps` more steps ended (the time: the last one's end), each taking at most a
        token per decoding member, its chunks and a first token per prompt; no bound inside a
        speculative run (whose tokens are drawn)."""
        engine = self.engine
        if not tokens:
            return self.num_outstanding(), FOREVER_S, True
        run = self._run
        if run is None:
            return self._tokens_left(), FOREVER_S, True
        if run.spec is not None:
            return 0, FOREVER_S, False
        per_step = engine.tokens_per_step(run.plan, True)
        steps = run.settled_by(self.env.now) + 1 + horizon_steps
        until = FOREVER_S
        if steps < run.num_steps:
            until = run.times.end(steps)
        else:
            steps = run.num_steps
        return self._tokens_left() - steps * per_step, until, False

    def kv_fraction(self) -> float:
        """`load()`'s fraction of KV blocks in use (what `least_kv` ranks by): the run in flight
        settled, as `load()` does."""
        self.settle()
        pool = self.pool
        return pool.num_used / max(1, pool.num_total)

    def kv_floor(self) -> tuple[float, bool]:
        """The least `kv_fraction()` can show before this instance next starts or ends a run,
        takes a request or frees a handed-off prompt's blocks, and whether it is that number
        itself until then: the blocks in use as applied, without settling. A run's steps only
        take blocks (requests finish, and are preempted, where runs end and start); a
        speculative run may give back the blocks of rejected drafts, so it has no bound."""
        run = self._run
        if run is not None and run.spec is not None:
            return 0.0, False
        pool = self.pool
        return pool.num_used / max(1, pool.num_total), run is None

    def holds_requests(self) -> bool:
        """Whether any request is here now: queued, running, swapped, finished but holding its
        KV, waiting to hand off or to land (an instance that holds none can retire)."""
        self.settle()
        return self.engine.holds_requests() or self._run is not None or len(self._ahead) > 0

    def cached_prefix_tokens(self, req: Request) -> int:
        """Tokens of `req`'s prompt this instance's prefix cache holds now, on the GPU or in a
        KV tier below it (0 without caching), as settling the run in flight would show them.
        It settles only a run whose steps could change them: one that computes prompt chunks
        (they cache their blocks), or whose decode batch may grow into cached free blocks
        (evicting them); a decode run that fits in never-cached blocks changes no cached block
        before its last step, which is applied when the run ends."""
        pool = self.pool
        run = self._run
        if run is not None and self.engine.caching_during(run):
            self.settle()
        limit = (req.num_known_tokens - 1) // pool.block_size
        return pool.cached_prefix(req, limit, self.env.now) * pool.block_size

    def may_cache_prefix(self, req: Request) -> bool:
        """Whether `cached_prefix_tokens(req)` could be above 0 now: False only where it is 0
        (a router need not ask). Its first block must be cached, on the GPU or in a tier below
        (readable or still being written), or be one that settling the run in flight caches:
        a prompt chunk's first block, or, where a request with no full prompt block decodes
        into known content, a decoded one; a speculative run (settled by the reads of its
        load) counts as able to cache anything."""
        pool = self.pool
        if not pool.caching:
            return False
        bs = pool.block_size
        if req.num_known_tokens - 1 < bs:
            return False
        hashes = req.block_hashes(bs)
        if not hashes:
            return False
        first = hashes[0]
        if pool.may_hold(first):
            return True
        run = self._run
        if run is None:
            return False
        if run.spec is not None:
            return True
        if not self.engine.caching_during(run):
            return False
        for other in run.plan.prefill:
            own = other.block_hashes(bs)
            if own and own[0] == first:
                return True
        return self.engine.late_first() and run.plan.decode

    def shares_kv_tier(self) -> bool:
        """Whether a KV tier below the GPU is shared with other instances (the remote store):
        then settling one instance can change what another has cached."""
        return self.pool.shares_tier

    def prefill_backlog(self) -> int:
        """Prompt tokens not yet prefilled of the requests waiting or prefilling here, less
        those the step under way computes (what a new arrival's first token waits behind
        once that step ends). Only a run of prompt chunks is settled: a decode run computes
        none."""
        run = self._run
        if run is not None and (run.plan.prefill or run.spec is not None):
            self.settle()
        total = self.engine.prompt_backlog()
        run = self._run
        if run is not None:
            total -= run.features.num_prefill_tokens
        return max(0, total)

    def step_end_s(self) -> float:
        """When the step under way ends (now when none is), as settling would show it: the
        end of the first step not yet ended of the run in flight."""
        run = self._run
        now = self.env.now
        if run is None:
            return max(now, self.engine.now)
        if run.spec is not None:
            self.settle()
            return max(now, run.times.end(1))
        done = run.settled_by(now)
        times = run.times.after(done) if done > 0 else run.times
        return max(now, times.end(1))

    def step_grid(self) -> tuple[float, float, float, int]:
        """The run in flight's step times as `step_end_s` reads them (its start, its first
        step's seconds, the growth of each next step's) and its number of steps; with no run,
        (its clock, 0, 0, 0). Valid until it next starts or ends a run or takes a request
        (`on_load`): settling only re-bases the same times (`sim.topology.ttft_index`)."""
        run = self._run
        if run is None:
            return (self.engine.now, 0.0, 0.0, 0)
        times = run.times
        return (times.start_s, times.first_duration_s, times.increment_s, run.num_steps)

    def caches_prefixes(self) -> bool:
        """Whether its KV pool keeps a prefix cache (else no request has a prefix cached)."""
        return self.pool.caching

    def prefill_seconds(self, num_tokens: int) -> float:
        """Seconds this instance's cost model gives to prefill `num_tokens` prompt tokens with
        no cached prefix (`sim.core.prefill_curve`). Priced between steps, never inside one."""
        return self.engine.pricing.prefill_curve().seconds(num_tokens)

    def prefill_curve(self) -> PrefillCurve:
        """Its prefill pricing, shared by the instances of its group (a router's bounds)."""
        return self.engine.pricing.prefill_curve()

    def outstanding_tokens(self) -> int:
        """Tokens still to compute for every request here (what token-aware routers balance)."""
        return self._tokens_left()

    def transfer_blocks(self, req: Request) -> int:
        """P/D decode side: blocks this instance would reserve for `req`'s KV (its policy's
        answer for its pool)."""
        return self.policy.transfer_blocks(req, self.pool)

    def can_ever_take(self, req: Request) -> bool:
        """Whether this instance's pool could ever hold `req`'s whole sequence."""
        return self.policy.can_ever_take(req, self.pool)

    def reserve(self, num_blocks: int) -> None:
        """P/D decode side: set blocks aside for a KV transfer that starts now."""
        self._touch()
        self.engine.reserve(num_blocks)
        run = self._run
        if run is not None and run.num_steps > 1:  # its horizon counted these blocks as free
            self._cut()

    def receive(self, req: Request, num_blocks: int) -> None:
        """P/D decode side: a transferred request lands, holding `num_blocks` reserved blocks."""
        self._touch()
        self.engine.land(req, num_blocks, self.env.now)
        if self.on_load is not None:
            self.on_load(self)
        self.wake()

    def release(self, req: Request) -> None:
        """P/D prefill side: a handed-off request's KV has left; free its blocks here."""
        self._touch()
        self.engine.release(req)
        if self.on_load is not None:  # its KV blocks fell
            self.on_load(self)
        self.wake()

    def take_handoffs(self) -> list[Request]:
        """P/D prefill side: the prompts handed off since the last call, in order."""
        return self.engine.take_handoffs()

    def _touch(self) -> None:
        """Before an outside change at now: settle, and integrate KV use up to now."""
        self.settle()
        self.engine.touch(self.env.now)

    def abort(self, req: Request) -> bool:
        """Its client gave up on `req`: queued here, it leaves now; running here, at the next
        step boundary (any run it is in is cut there: the batch changes), after the step under
        way. False when it is in neither state (swapped, or in P/D hand-off)."""
        self._touch()
        if req.state == WAITING and req.instance == self.index:
            if self._ahead.drop(req):  # held: the scheduler never saw it
                self.engine.enqueue(req)
            self.engine.abort_waiting(req, self.env.now)
        elif req.state == RUNNING and self.engine.is_running(req):
            if req not in self._aborts:
                self._aborts.append(req)
            if self._idle is not None:
                self.wake()
            elif self._run is not None:
                self._cut()
            return True
        else:
            return False
        if self.on_load is not None:
            self.on_load(self)
        return True

    # -- the step loop ---------------------------------------------------------------------------

    def _loop(self) -> Generator[Event, Any, None]:
        env = self.env
        engine = self.engine
        run_ahead = self._on_change is None
        feed = self.feed
        if self.serves_from_s > env.now:  # a cold start: arrivals queue until it is over
            yield env.timeout(self.serves_from_s - env.now)
            engine.at(env.now)
        ahead = self._ahead
        while True:
            if feed is not None:  # arrivals up to now are queued before the schedule at now
                feed.pull(engine.now, self.submit)
            if ahead:  # those the scheduler sees now
                engine.enqueue_all(ahead.due(engine.now))
            if self._aborts:  # requests their clients gave up on leave before the schedule
                engine.drop_aborted(self._aborts)
                self._aborts.clear()
                if self.on_load is not None:
                    self.on_load(self)
            plan = engine.plan()
            if plan is not None and (plan.preempt or plan.swap_in) and not plan.has_work:
                # evictions with nothing to run: they happened; the next step records them
                self._begin(plan)
                plan = None
            if plan is None and ahead:
                engine.enqueue_all(ahead.release_all())  # no step k+1 was launched without them
                continue
            if plan is None:
                ahead.idle()
                clock = engine.now
                if clock > env.now:  # catch SimPy up before waiting for anything
                    queued = engine.num_waiting
                    yield env.timeout(clock - env.now)
                    if engine.num_waiting != queued:
                        # sent at the very end of the run (a closed loop's next request with
                        # no delay) while SimPy caught up: plan for it instead of idling
                        continue
                self._idle = env.event()
                wake = engine.next_wakeup_s()
                if feed is not None and feed.next_s < FOREVER_S:  # or the next arrival
                    wake = feed.next_s if wake is None else min(wake, feed.next_s)
                if wake is None:
                    yield self._idle
                else:
                    yield self._idle | env.timeout(max(0.0, wake - env.now))
                self._idle = None
                engine.at(env.now)
                continue
            run = self._begin(plan)
            if ahead.launched() and run.interruptible:  # held ones join the step after this
                run.num_steps = 1
            if feed is not None and run.interruptible and feed.next_s < FOREVER_S:
                # the next arrival could join: the run ends at the step boundary at or after it,
                # where an arrival pushed by SimPy would have cut it
                run.num_steps = steps_before(run.times, run.num_steps, feed.next_s)
            end = run.times.end(run.num_steps)
            if run_ahead and self._on_change is None and end < env.peek():
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
        engine = self.engine
        engine.at(now)
        plan = engine.plan()
        if plan is None:
            return None
        run = self._begin(plan)
        if not plan.has_work:
            return run
        if max_steps is not None:
            run.num_steps = min(run.num_steps, max_steps)
        self._finish(run)
        return run

    def _begin(self, plan: StepPlan) -> Run:
        run = self.engine.start(plan)
        if self.on_load is not None:
            self.on_load(self)
        if self.on_step is not None:
            self.on_step(self, run, False)
        return run

    def _apply(self, run: Run, num_steps: int) -> float:
        end = self.engine.apply(run, num_steps)
        if self.on_step is not None:
            self.on_step(self, run, True)
        return end

    def _finish(self, run: Run) -> None:
        last_start = run.times.end(run.num_steps - 1)
        # the end of the run as applied (settled pieces may move it by a rounding error)
        end = self._apply(run, run.num_steps)
        self._ahead.stepped(last_start, end)
        self.engine.finish_run(end)
        if self.on_load is not None:
            self.on_load(self)
        if self._on_change is not None:
            self._on_change(self)
