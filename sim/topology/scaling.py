"""The fleet over time: instances launched, made ready, drained and retired during a run.

`Fleet` owns each instance's lifetime and which instances take new requests; the gateway asks it
(`candidates`), the autoscaler (`sim.topology.autoscaler.decide`) tells it how many a group
should have, and it applies that:

* launch: a new instance is built at once (billed from now) with an empty prefix cache, and
  serves after its group's provisioning delay (sim/scenario/control_plane.py);
* scale-in takes instances still provisioning first (newest first: cancelled, billed until now),
  then drains serving ones, least outstanding work first: a draining instance receives nothing
  new, finishes every request it holds (none migrate; a P/D prefill instance also hands off its
  last prompts) and retires when empty, billed until its last step ends;
* every `interval_s` each autoscaled group observes its signal over its serving instances and
  decides; a group without `autoscale` keeps its instances for the whole run.

An arrival that finds no instance serving waits at the gateway (`sim.topology.gateway`); if no
instance is on its way either, one is launched at once for each autoscaled group with none
active (scale from zero, bypassing cooldowns, as an activator does).

The controller ticks until every request of the run has finished or been rejected. Lifetimes
(`lifetimes`) and the scaling events (`events`, `EVENT_COLUMNS`) are the run's record of the
fleet; an instance alive at the end has no retire time (its lifetime ends with the run).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pandas as pd
import simpy

from sim.core.instance import Instance
from sim.core.recorder import RequestLog
from sim.core.request import Request
from sim.scenario.control_plane import AutoscaleSpec
from sim.topology.autoscaler import Observation, decide

EVENT_COLUMNS = (
    "time_s", "group", "event", "instance", "serving", "provisioning", "draining", "signal",
    "desired",
)  # fmt: skip
LIFETIME_COLUMNS = ("launch_s", "ready_s", "drain_s", "retire_s")
TTFT_SAMPLE = 2048  # the ttft signal reads at most this many of the window's latest arrivals
NAN = math.nan


class Launcher(Protocol):
    """What the fleet asks of its topology (`sim.topology.topologies.Topology`)."""

    instances: list[Instance]  # every instance of the run, by index

    def launch(self, number: int) -> Instance:
        """Build and wire one instance of group `number` now."""
        ...

    def ready(self) -> None:
        """An instance became ready."""
        ...

    def num_held(self) -> int:
        """Requests waiting at the gateway for an instance to serve."""
        ...


@dataclass
class Member:
    index: int
    group: int
    launch_s: float
    phase: str = "provisioning"  # provisioning | serving | draining | retired
    ready_s: float = NAN
    drain_s: float = NAN
    retire_s: float = NAN


@dataclass(frozen=True)
class GroupPlan:
    """One instance group as the fleet sees it: its autoscaler (None: fixed) and the seconds a
    launched instance takes to serve."""

    number: int
    name: str
    autoscale: AutoscaleSpec | None
    delay_s: float


class Fleet:
    """Every instance's lifetime and which of them serve (see the module docstring)."""

    def __init__(
        self,
        env: simpy.Environment,
        groups: Sequence[GroupPlan],
        topology: Launcher,
        initial: Sequence[int],  # each initial instance's group number, by index
        log: RequestLog,
        total_requests: int,
        forecast: Callable[[float], float] | None = None,
    ) -> None:
        self.env = env
        self.groups = list(groups)
        self.topology = topology
        self.instances = topology.instances
        self.log = log
        self.total = total_requests
        self.forecast = forecast
        self.members = [Member(i, g, 0.0, "serving", 0.0) for i, g in enumerate(initial)]
        self._serving: list[int] = list(range(len(initial)))
        self.last_out = [-math.inf] * len(self.groups)
        self.last_in = [-math.inf] * len(self.groups)
        self.rows: list[tuple[Any, ...]] = []
        self.recent: deque[Request] = deque()
        self.watch_ttft = any(
            g.autoscale is not None and g.autoscale.signal == "ttft" for g in self.groups
        )
        for plan in self.groups:
            if plan.autoscale is not None:
                env.process(self._control(plan))

    # -- what the gateway asks ---------------------------------------------------------------

    def candidates(self) -> Sequence[int]:
        return self._serving

    def starved(self) -> None:
        for plan in self.groups:
            a = plan.autoscale
            if a is not None and self._count(plan.number, "provisioning", "serving") == 0:
                self._launch(plan, 1, NAN, 1)
                self.last_out[plan.number] = self.env.now

    def observe(self, req: Request) -> None:
        """An arrival, for the ttft signal."""
        self.recent.append(req)

    # -- the record --------------------------------------------------------------------------

    def lifetimes(self) -> pd.DataFrame:
        """One row per instance, by index: launch, ready, drain and retire times (NaN: never;
        retire NaN: alive at the end)."""
        return pd.DataFrame(
            [(m.launch_s, m.ready_s, m.drain_s, m.retire_s) for m in self.members],
            columns=list(LIFETIME_COLUMNS),
        )

    def events(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=list(EVENT_COLUMNS))

    # -- the controller ----------------------------------------------------------------------

    def _count(self, group: int, *phases: str) -> int:
        return sum(1 for m in self.members if m.group == group and m.phase in phases)

    def _record(
        self, plan: GroupPlan, event: str, index: int, signal: float, desired: int,
        time_s: float | None = None,
    ) -> None:  # fmt: skip
        g = plan.number
        self.rows.append(
            (
                self.env.now if time_s is None else time_s, plan.name, event, index,
                self._count(g, "serving"), self._count(g, "provisioning"),
                self._count(g, "draining"), signal, desired,
            )
        )  # fmt: skip

    def _done(self) -> bool:
        return self.log.num_done >= self.total

    def _control(self, plan: GroupPlan) -> Generator[simpy.events.Event, Any, None]:
        spec = plan.autoscale
        assert spec is not None
        while not self._done():
            yield self.env.timeout(spec.interval_s)
            self._retire_drained()
            if self._done():
                break
            now = self.env.now
            g = plan.number
            serving = self._count(g, "serving")
            provisioning = self._count(g, "provisioning")
            signal = self._signal(plan, spec)
            forecast = None
            if spec.mode == "predictive" and self.forecast is not None:
                lead = spec.lead_s if spec.lead_s is not None else plan.delay_s
                forecast = self.forecast(now + lead)
            obs = Observation(
                now, serving, provisioning, signal, self.last_out[g], self.last_in[g], forecast
            )
            desired = decide(spec, obs)
            if desired > obs.active:
                self._launch(plan, desired - obs.active, signal, desired)
                self.last_out[g] = now
            elif desired < obs.active:
                self._remove(plan, obs.active - desired, signal, desired)
                self.last_in[g] = now
        self._retire_drained()

    def _signal(self, plan: GroupPlan, spec: AutoscaleSpec) -> float:
        if spec.signal == "ttft":
            return self._recent_ttft(spec.window_s)
        serving = [m.index for m in self.members if m.group == plan.number and m.phase == "serving"]
        if spec.signal == "kv_use":  # blocks: the steps in flight are applied first
            if not serving:
                return NAN
            loads = [self.instances[i].load() for i in serving]
            return sum(x.kv_blocks_used / max(1, x.kv_blocks_total) for x in loads) / len(loads)
        # queues: read without applying the steps in flight (`Instance.work_load`), so a
        # fleet the controller never changes runs the very records of a fixed one
        work = [self.instances[i].work_load() for i in serving]
        if spec.signal == "queue_length":
            return (sum(x.num_waiting for x in work) + self.topology.num_held()) / max(1, len(work))
        if not work:
            return NAN
        return sum(x.num_running for x in work) / len(work)

    def _recent_ttft(self, window_s: float) -> float:
        """Mean TTFT of the latest arrivals of the last `window_s`: the TTFT of those with a
        first token, the time waited so far of the others (so a growing queue shows at once)."""
        now = self.env.now
        recent = self.recent
        while recent and recent[0].arrival_s < now - window_s:
            recent.popleft()
        while len(recent) > TTFT_SAMPLE:
            recent.popleft()
        if not recent:
            return NAN
        total = 0.0
        for req in recent:
            first = req.first_token_s
            total += (first if first == first else now) - req.arrival_s
        return total / len(recent)

    def _launch(self, plan: GroupPlan, n: int, signal: float, desired: int) -> None:
        for _ in range(n):
            instance = self.topology.launch(plan.number)
            member = Member(instance.index, plan.number, self.env.now)
            assert instance.index == len(self.members)
            self.members.append(member)
            self._record(plan, "launch", member.index, signal, desired)
            self.env.process(self._provision(plan, member))

    def _provision(self, plan: GroupPlan, member: Member) -> Generator[Any, Any, None]:
        yield self.env.timeout(plan.delay_s)
        self._ready(plan, member)

    def _ready(self, plan: GroupPlan, member: Member) -> None:
        if member.phase != "provisioning":
            return  # cancelled while provisioning
        member.phase = "serving"
        member.ready_s = self.env.now
        self._serving = sorted([*self._serving, member.index])
        self._record(plan, "ready", member.index, NAN, -1)
        self.topology.ready()

    def _remove(self, plan: GroupPlan, n: int, signal: float, desired: int) -> None:
        g = plan.number
        now = self.env.now
        pending = [m for m in self.members if m.group == g and m.phase == "provisioning"]
        for member in reversed(pending[-n:] if n <= len(pending) else pending):
            member.phase = "retired"
            member.retire_s = now
            self._record(plan, "cancel", member.index, signal, desired)
            n -= 1
        if n <= 0:
            return
        serving = [m for m in self.members if m.group == g and m.phase == "serving"]
        work = {m.index: self.instances[m.index].outstanding_tokens() for m in serving}
        serving.sort(key=lambda m: (work[m.index], -m.index))
        for member in serving[:n]:
            member.phase = "draining"
            member.drain_s = now
            self._serving.remove(member.index)
            self._record(plan, "drain", member.index, signal, desired)
        self._retire_drained()

    def _retire_drained(self) -> None:
        for member in self.members:
            if member.phase != "draining":
                continue
            instance = self.instances[member.index]
            if instance.holds_requests():
                continue
            member.phase = "retired"
            member.retire_s = max(member.drain_s, instance.engine.now)
            plan = self.groups[member.group]
            self._record(plan, "retire", member.index, NAN, -1, member.retire_s)
