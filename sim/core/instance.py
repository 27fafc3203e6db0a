"""One serving instance: its step loop, the run in flight, and what the outside world may do.

An instance is a composition of parts that own their state: the engine (`sim.core.engine.Engine`:
its requests by where they are, with the waiting queue `sim.core.waiting.Waiting` and the P/D
hand-off state `sim.core.handoff.HandOff`; its KV pool, decode batch, usage integrals and host
memory; its pricing `sim.core.pricing.Pricing`; its records), which is what its policy sees and
the one thing that changes its requests, and `Instance` below: the step loop, a state machine
the fleet's clock steps (`sim.core.clock.Clock`: one entry per instance, for the end of its run
in flight or its wake-up), the run in flight and what the outside world does to it (its reads
are its base, `sim.core.instance_reads.InstanceReads`). Each step the loop asks the engine for
the policy's `StepPlan` (`sim.core.plan`: the contract), has the engine start it (evictions,
admissions, allocations, the price: a `sim.core.run.Run`), waits on the clock for its end, and
has the engine apply it there (the token rule, finishes, the step's record).

Runs of identical decode steps as one entry on the clock, `settle()` before any outside read or
change mid-run (so coalescing never changes a schedule: the tests run every policy both ways),
running ahead of the clock, pulled arrivals and the same-time order of arrivals and step ends:
docs/architecture.md, "Runs and the decode batch". An asynchronous scheduler's arrivals wait in
`sim.core.lookahead`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sim.core.acceptance import AcceptanceSampler
from sim.core.arrivals import FOREVER_S, ArrivalFeed
from sim.core.clock import NORMAL, URGENT, Clock
from sim.core.engine import Engine
from sim.core.instance_reads import InstanceReads
from sim.core.kv.host import KVSpec
from sim.core.kv.pool import KVPool
from sim.core.load import Load, WorkLoad
from sim.core.lookahead import Lookahead
from sim.core.plan import Policy, StepPlan
from sim.core.prefill_curve import PrefillCurve
from sim.core.pricing import StepPricer
from sim.core.recorder import ItlLog, RequestLog, StepLog
from sim.core.request import RUNNING, WAITING, Request
from sim.core.run import Run
from sim.core.speculative_step import ProposalPricer
from sim.core.step_times import steps_before
from sim.core.waiting import WaitQueue

__all__ = ["Instance", "KVSpec", "Load", "StepPricer", "WorkLoad"]

# what an instance's entry on the clock (`Clock.due`) waits for: its first look (as a process's
# start), the end of a cold start, SimPy's clock catching up with one that ran ahead, work while
# idle (with a wake-up time or without; woken), the hop an idle wait with a wake-up time takes
# (SimPy's condition event), the re-timing of a cut run (SimPy's interrupt) and a run's end
_START, _COLD, _CATCH_UP, _IDLE, _WOKEN, _HOP, _CUT, _RUN = range(8)


class Instance(InstanceReads):
    """One serving instance: its engine, its step loop and the run in flight (see the module
    docstring)."""

    def __init__(
        self,
        env: Clock,
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
        self._left = -1  # `_tokens_left()` as last worked out (-1: to work out again)
        # its entry on the clock: what it waits for, the entry's token (older ones are stale),
        # when it comes; whether an idle wait has a wake-up time; the queue a catch-up saw
        self._state = _START
        self._token = -1
        self._due_s = FOREVER_S
        self._timed = False
        self._queued = 0
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
        # start=False: never on the clock; the instance is stepped by hand (`step_by_hand`)
        self._started = start
        if start:  # its first look comes as a process started now would (URGENT)
            self._wait(0.0, _START, URGENT)

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

    def submit(self, req: Request) -> bool:
        """Queue an arriving request; False (and recorded) when it can never be served here."""
        req.arrive(self.index)
        if self._ahead.busy:  # asynchronous: the step after the one in flight is planned
            if not self.engine.accepts(req):
                return False
            self._ahead.hold(req)
        elif not self.engine.queue(req):
            return False
        self._changed()
        if self.on_load is not None:
            self.on_load(self)
        self.wake()
        return True

    def wake(self) -> None:
        """New work arrived: start if idle, or cut a run that the newcomer could join."""
        state = self._state
        if state == _IDLE:
            if not (self._timed and self._due_s == self.env.now):  # else its timer comes first
                self._wait(0.0, _WOKEN)
            else:
                self._state = _WOKEN
        elif self._run is not None and self._run.interruptible:
            self._cut()

    def _cut(self) -> None:
        """End the run in flight at the first step boundary at or after now."""
        run = self._run
        if run is not None and run.cut_at(self.env.now) and self._started:
            self._wait(0.0, _CUT, URGENT)  # re-timed where SimPy's interrupt would come

    def _wait(self, delay: float, state: int, priority: int = NORMAL) -> None:
        """Leave one entry on the clock, `delay` seconds from now (older ones go stale)."""
        self._state = state
        self._due_s = self.env.now + delay
        self._token = self.env.due(self, delay, priority)

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
        self._changed()
        run = self._run
        if run is not None and run.num_steps > 1:  # its horizon counted these blocks as free
            self._cut()

    def receive(self, req: Request, num_blocks: int) -> None:
        """P/D decode side: a transferred request lands, holding `num_blocks` reserved blocks."""
        self._touch()
        self.engine.land(req, num_blocks, self.env.now)
        self._changed()
        if self.on_load is not None:
            self.on_load(self)
        self.wake()

    def release(self, req: Request) -> None:
        """P/D prefill side: a handed-off request's KV has left; free its blocks here."""
        self._touch()
        self.engine.release(req)
        self._changed()
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
        self._changed()

    def abort(self, req: Request) -> bool:
        """Its client gave up on `req`: queued here, it leaves now; running here, at the next
        step boundary (any run it is in is cut there: the batch changes), after the step under
        way. False when it is in neither state (swapped, or in P/D hand-off)."""
        self._touch()
        if req.state == WAITING and req.instance == self.index:
            if self._ahead.drop(req):  # held: the scheduler never saw it
                self.engine.enqueue(req)
            self.engine.abort_waiting(req, self.env.now)
            self._changed()
        elif req.state == RUNNING and self.engine.is_running(req):
            if req not in self._aborts:
                self._aborts.append(req)
            if self._state in (_IDLE, _WOKEN, _HOP):
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

    def fire(self, token: int) -> None:
        """Its entry `token` on the clock came up: go on from what it waited for, until it next
        must wait (a stale entry, replaced since, is ignored)."""
        if token != self._token:
            return
        self._token = -1
        state = self._state
        env = self.env
        if state == _RUN:
            run = self._run
            assert run is not None
            self._run = None
            if self.feed is not None:
                self.feed.pull(env.now, self.submit)
            self._finish(run)
        elif state == _CUT:
            run = self._run
            assert run is not None
            end = run.times.end(run.num_steps)
            self._wait(max(0.0, end - env.now), _RUN)
            return
        elif state == _START:
            if self.serves_from_s > env.now:  # a cold start: arrivals queue until it is over
                self._wait(self.serves_from_s - env.now, _COLD)
                return
        elif state == _CATCH_UP:
            if self.engine.num_waiting == self._queued:
                self._idle_wait()
                return
            # sent at the very end of the run (a closed loop's next request with no delay)
            # while the clock caught up: plan for it instead of idling
        elif state in (_IDLE, _WOKEN) and self._timed:
            self._wait(0.0, _HOP)  # a wait with a wake-up time resumes one event later
            return
        else:  # _COLD, an idle wait's end, or its hop
            self.engine.at(env.now)
        self._loop()

    def _idle_wait(self) -> None:
        """Nothing to run: wait for work, or until the engine's or the feed's next wake-up."""
        env = self.env
        wake = self.engine.next_wakeup_s()
        feed = self.feed
        if feed is not None and feed.next_s < FOREVER_S:  # or the next arrival
            wake = feed.next_s if wake is None else min(wake, feed.next_s)
        self._timed = wake is not None
        if wake is None:
            self._state = _IDLE
            self._due_s = FOREVER_S
        else:
            self._wait(max(0.0, wake - env.now), _IDLE)

    def _loop(self) -> None:
        """Plan and apply runs until one must wait on the clock (its end is not before
        everything else that can happen), or there is nothing to run."""
        env = self.env
        engine = self.engine
        feed = self.feed
        ahead = self._ahead
        while True:
            if feed is not None:  # arrivals up to now are queued before the schedule at now
                feed.pull(engine.now, self.submit)
            if ahead:  # those the scheduler sees now
                engine.enqueue_all(ahead.due(engine.now))
                self._changed()
            if self._aborts:  # requests their clients gave up on leave before the schedule
                engine.drop_aborted(self._aborts)
                self._aborts.clear()
                self._changed()
                if self.on_load is not None:
                    self.on_load(self)
            plan = engine.plan()
            if plan is not None and (plan.preempt or plan.swap_in) and not plan.has_work:
                # evictions with nothing to run: they happened; the next step records them
                self._begin(plan)
                plan = None
            if plan is None and ahead:
                engine.enqueue_all(ahead.release_all())  # no step k+1 was launched without them
                self._changed()
                continue
            if plan is None:
                ahead.idle()
                clock = engine.now
                if clock > env.now:  # catch the clock up before waiting for anything
                    self._queued = engine.num_waiting
                    self._wait(clock - env.now, _CATCH_UP)
                    return
                self._idle_wait()
                return
            run = self._begin(plan)
            if ahead.launched() and run.interruptible:  # held ones join the step after this
                run.num_steps = 1
            if feed is not None and run.interruptible and feed.next_s < FOREVER_S:
                # the next arrival could join: the run ends at the step boundary at or after it,
                # where an arrival pushed by the clock would have cut it
                run.num_steps = steps_before(run.times, run.num_steps, feed.next_s)
            end = run.times.end(run.num_steps)
            if self._on_change is None and end < env.peek():
                if feed is not None:  # what arrived while it ran is queued when it ends
                    feed.pull(end, self.submit)
                self._finish(run)  # nothing can happen before it ends: no entry needed
                continue
            self._run = run
            self._wait(end - env.now, _RUN)
            return

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
        self._changed()
        if self.on_load is not None:
            self.on_load(self)
        if self.on_step is not None:
            self.on_step(self, run, False)
        return run

    def _finish(self, run: Run) -> None:
        last_start = run.times.end(run.num_steps - 1)
        # the end of the run as applied (settled pieces may move it by a rounding error)
        end = self._apply(run, run.num_steps)
        self._ahead.stepped(last_start, end)
        self.engine.finish_run(end)
        self._changed()
        if self.on_load is not None:
            self.on_load(self)
        if self._on_change is not None:
            self._on_change(self)
