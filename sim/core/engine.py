"""The SimPy side: one process per instance runs the step loop, one process feeds arrivals.

SimPy only keeps time. An instance asks its policy for a `StepPlan`, prices it with the cost
model, waits for it in one timeout, and hands it back to the policy to apply. When the policy
has nothing to run, the instance sleeps until an arrival wakes it or the policy's own timer
(static batching's `max_wait_s`) fires.

Same-time order (tested): arrival events carry SimPy's URGENT priority and step ends NORMAL, so
requests arriving at time t are queued before any instance plans the step that starts at t: an
arrival at t is visible to a schedule at t. Arrivals with equal timestamps are queued in id
order. A planned run of identical decode steps that a newcomer could join is cut at the first
step boundary at or after the newcomer's arrival, so coalescing steps never changes a schedule.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy
from simpy.core import URGENT
from simpy.events import Event

from sim.core.plan import StepPlan
from sim.core.recorder import Recorder, StepTimes
from sim.core.request import Request
from sim.costs.cost_model import CostModel
from sim.policies.base import Policy


class UrgentTimeout(Event):
    """A timeout processed before NORMAL events of the same instant (arrivals before steps)."""

    def __init__(self, env: simpy.Environment, delay: float) -> None:
        super().__init__(env)
        self._ok = True
        self._value = None
        env.schedule(self, URGENT, delay)


def steps_before(times: StepTimes, max_steps: int, at_s: float) -> int:
    """The smallest j in 1..max_steps whose step ends at or after `at_s` (else max_steps)."""
    if times.end(max_steps) < at_s:
        return max_steps
    d0, inc = times.first_duration_s, times.increment_s
    span = at_s - times.start_s
    if inc > 0.0:  # end(j) - start = j*d0 + inc*j*(j-1)/2, increasing in j
        b = d0 - inc / 2.0
        j = math.ceil((-b + math.sqrt(b * b + 2.0 * inc * span)) / inc)
    else:
        j = math.ceil(span / d0) if d0 > 0.0 else 1
    j = min(max(j, 1), max_steps)
    # the closed form can be off by one in floating point: settle on the exact boundary
    while j > 1 and times.end(j - 1) >= at_s:
        j -= 1
    while j < max_steps and times.end(j) < at_s:
        j += 1
    return j


@dataclass(frozen=True, slots=True)
class Load:
    """An instance's load at one instant, for routing decisions."""

    num_waiting: int
    num_running: int
    outstanding_tokens: int  # prompt tokens not yet prefilled + output tokens not yet generated
    kv_blocks_used: int
    kv_blocks_total: int


class Instance:
    """One serving instance: a policy, a cost model and the step loop.

    `submit` queues an arriving request; `wake` tells the instance that something it plans on
    changed (a request arrived, KV blocks were freed elsewhere). An idle instance starts at once;
    one in the middle of a run of identical decode steps that a newcomer could join cuts the run
    at the first step boundary at or after now, exactly where a step-by-step loop would first
    have seen the newcomer. `on_step` (if set) runs after each applied run, and when planning
    freed KV blocks, for cluster hooks.
    """

    def __init__(
        self,
        env: simpy.Environment,
        index: int,
        policy: Policy,
        cost: CostModel,
        *,
        coalesce: bool = True,
        on_step: Callable[[Instance], None] | None = None,
    ) -> None:
        self.env = env
        self.index = index
        self.policy = policy
        self.cost = cost
        self.coalesce = coalesce
        self.on_step = on_step
        self.recorder = Recorder(instance=index)
        self.rejected: list[Request] = []
        self._idle: Event | None = None
        # the run in flight: its plan, step times, length and whether newcomers may cut it
        self._run: tuple[StepPlan, StepTimes, int, bool] | None = None
        self._cut_steps = 0
        self.process = env.process(self._loop())

    def submit(self, req: Request) -> bool:
        """Queue an arriving request; False (and counted) when it can never be served here."""
        req.instance = self.index
        if not self.policy.add_request(req, self.env.now):
            req.rejected = True
            self.rejected.append(req)
            return False
        self.wake()
        return True

    def wake(self) -> None:
        """New work arrived: start if idle, or cut a run that the newcomer could join."""
        if self._idle is not None:
            if not self._idle.triggered:
                self._idle.succeed()
        elif self._run is not None and self._run[3]:
            self.cut_run()

    def cut_run(self) -> None:
        """End the run in flight at the first step boundary at or after now, whatever it is:
        for changes made from outside that the policy's run horizon did not foresee (KV
        reserved in this pool for a transfer)."""
        if self._run is None:
            return
        plan, times, num_steps, can_join = self._run
        cut = steps_before(times, num_steps, self.env.now)
        if cut < num_steps:
            # the shortened run stays on record: routers still read its mid-run state, and a
            # later change can shorten it again
            self._run = (plan, times, cut, can_join)
            self._cut_steps = cut
            self.process.interrupt()

    def load(self) -> Load:
        """What routers see now, as a step-by-step loop would show it mid-run.

        A coalesced run applies its tokens and blocks only when it ends; here the steps that
        ended before now are counted in, and blocks for the step under way are allocated, as
        they would have been at its start.
        """
        policy = self.policy
        kv = policy.kv
        tokens = policy.outstanding_tokens()
        used = kv.num_used
        if self._run is not None:
            plan, times, num_steps, _ = self._run
            done = steps_before(times, num_steps, self.env.now) - 1  # steps ended before now
            if done > 0:
                tokens -= done * len(plan.scheduled)
                bs = kv.block_size
                for req in plan.scheduled:
                    need = -(-(req.num_computed_tokens + done + 1) // bs) - req.kv_blocks
                    if need > 0:
                        used += need
        return Load(policy.num_waiting, policy.num_running, tokens, used, kv.num_total)

    def _loop(self) -> Generator[Event, Any, None]:
        env, policy, cost, rec = self.env, self.policy, self.cost, self.recorder
        t_kv = cost.t_kv_s_per_token
        while True:
            now = env.now
            free_before = policy.kv.num_free
            plan = policy.schedule(now)
            if policy.kv.num_free > free_before and self.on_step is not None:
                # planning freed blocks (preemption): tell the cluster now, not at the step's
                # end, which a coalesced run would put later than a step-by-step loop does
                self.on_step(self)
            if plan is None:
                self._idle = env.event()
                wake = policy.next_wakeup_s(now)
                if wake is None:
                    yield self._idle
                else:
                    yield self._idle | env.timeout(max(0.0, wake - now))
                self._idle = None
                continue
            # KV copies to and from host memory (swap preemption) lengthen the step they serve
            duration = cost.plan_time(plan) + plan.swap_s
            times = StepTimes(now, duration, t_kv * plan.context_growth_per_step)
            num_steps = plan.num_steps if self.coalesce else 1
            self._run = (plan, times, num_steps, num_steps > 1 and plan.arrivals_can_join)
            wait: Event = env.timeout(times.end(num_steps) - now)
            while True:
                try:
                    yield wait
                    break
                except simpy.Interrupt:
                    num_steps = self._cut_steps
                    wait = env.timeout(max(0.0, times.end(num_steps) - env.now))
            self._run = None
            usage = policy.apply(plan, num_steps, times, rec)
            external = policy.kv.external
            if external:
                # blocks reserved or released mid-run were counted over the whole run: count
                # them from the moment they changed hands
                start = times.start_s
                early = sum(delta * (t - start) for t, delta in external if t > start)
                external.clear()
                usage = usage._replace(block_seconds=usage.block_seconds - early)
            rec.step(
                plan,
                num_steps,
                times,
                num_active_seqs=policy.num_active_seqs(plan),
                kv_blocks_used=usage.blocks_held,
                kv_block_seconds=usage.block_seconds,
                kv_stored_token_seconds=usage.stored_token_seconds,
                kv_fragment_token_seconds=usage.fragment_token_seconds,
                num_waiting=policy.num_waiting,
                num_running=policy.num_running,
            )
            if self.on_step is not None:
                self.on_step(self)


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
