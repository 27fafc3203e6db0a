"""Serving topologies: a lone instance, a routed colocated cluster, prefill/decode pools.

A `Topology` owns the run's instances (built by `sim.topology.groups.Builder`), how an arrival
reaches one (`dispatch`), and the wiring of every instance, including those a fleet launches
during the run (`wire`). The fleet (`sim.topology.scaling.Fleet`) talks to it through three
calls: `launch` (build and wire one instance of a group), `ready` (an instance became ready:
release what waits for one) and `num_held` (requests waiting at the gateway, for the
queue-length signal). The run asks it for `entry` (the function the arrival source calls) and
`each_instance` (a hook applied to every instance, now and as launched).

* `Single`: one instance and nothing to shed. Every arrival is submitted to it as it comes
  (`direct`: the run may let the instance pull arrivals itself, `sim.simulate.run.pulls_arrivals`).
* `Colocated`: every instance serves whole requests; the gateway (`sim.topology.gateway`) routes
  each arrival among the instances serving now.
* `Disaggregated`: the gateway routes arrivals among the prefill pool's serving instances; a
  prefill instance hands each prompt's KV to the `KVLink` (`sim.topology.kv_link`), which moves
  it to a decode instance. A request no decode pool could ever hold is rejected on arrival.

`docs/architecture.md` ("Topologies") says how a fourth topology is added.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from sim.core.clock import Clock
from sim.core.instance import Instance
from sim.core.recorder import RequestLog
from sim.core.request import Request
from sim.costs.memory_tiers import TierGeometry
from sim.scenario.load import ResolvedScenario
from sim.scenario.schema import RouterOptions
from sim.topology.gateway import Gateway
from sim.topology.groups import Builder, InstanceInfo
from sim.topology.kv_link import KVLink
from sim.topology.router import make_router

if TYPE_CHECKING:  # the fleet is told of its topology after both are made
    from sim.topology.scaling import Fleet

TOO_LONG = "sequence larger than any decode instance's KV pool"


class Topology:
    """What every topology owns and answers (see the module docstring)."""

    direct = False  # one instance, every arrival submitted to it as it comes
    link: KVLink | None = None  # the P/D KV link, where there is one
    # an arrival, at its arrival time (each topology sets its own)
    dispatch: Callable[[Request], object]

    def __init__(self, env: Clock, resolved: ResolvedScenario, builder: Builder,
                 log: RequestLog, rng: np.random.Generator) -> None:  # fmt: skip
        self.env = env
        self.resolved = resolved
        self.builder = builder
        self.log = log
        self.rng = rng  # the routers' stream
        self.instances: list[Instance] = builder.instances  # by index; a fleet's grow
        self.info: list[InstanceInfo] = builder.info
        self.fleet: Fleet | None = None
        self._hooks: list[Callable[[Instance], None]] = []
        self._build()

    def _build(self) -> None:
        """Make the topology's gateway and links over the instances of the start, wire them,
        and set `dispatch`."""
        raise NotImplementedError

    # -- what the run asks -------------------------------------------------------------------

    def entry(self) -> Callable[[Request], object]:
        """The function the arrival source calls with each arrival: `dispatch`, or with a
        fleet that scales on TTFT, `dispatch` after the fleet has seen the arrival."""
        fleet = self.fleet
        dispatch = self.dispatch
        if fleet is None or not fleet.watch_ttft:
            return dispatch

        def observed(req: Request) -> None:
            fleet.observe(req)
            dispatch(req)

        return observed

    def each_instance(self, hook: Callable[[Instance], None]) -> None:
        """Apply `hook` to every instance, now and as they are launched."""
        for instance in self.instances:
            hook(instance)
        self._hooks.append(hook)

    # -- what the fleet asks -----------------------------------------------------------------

    def serve_from(self, fleet: Fleet) -> None:
        """From now on the fleet says which instances serve."""
        self.fleet = fleet

    def launch(self, number: int) -> Instance:
        """Build one instance of group `number` during the run, wired like the others."""
        instance = self.builder.add(number)
        self.wire(instance)
        for hook in self._hooks:
            hook(instance)
        return instance

    def ready(self) -> None:
        """An instance became ready: release what waits for one."""

    def num_held(self) -> int:
        """Requests waiting at the gateway for an instance to serve."""
        return 0

    # -- what a topology does with each instance ---------------------------------------------

    def wire(self, instance: Instance) -> None:
        """Connect one instance (at the start, or launched during the run) to the topology."""


class _Serving:
    """The instances of one role that take new requests now, as the gateway and the KV link
    ask (`sim.topology.gateway.Serving`): the fleet's serving ones, or with a fixed fleet every
    instance (`None` when every instance has the role)."""

    def __init__(self, topology: Topology, role: str | None) -> None:
        self.topology = topology
        self.role = role
        self._fixed: list[int] | None = None

    def candidates(self) -> Sequence[int] | None:
        fleet = self.topology.fleet
        role = self.role
        info = self.topology.info
        if fleet is not None:
            every = fleet.candidates()
            return every if role is None else [i for i in every if info[i].role == role]
        if role is None:
            return None
        if self._fixed is None:  # a fixed fleet's instances never change
            self._fixed = [i.index for i in info if i.role == role]
        return self._fixed

    def starved(self) -> None:
        fleet = self.topology.fleet
        if fleet is None:
            raise AssertionError("a fixed fleet always has an instance serving")
        fleet.starved()


class Single(Topology):
    """One instance and nothing to shed: nothing to choose (a router never draws for one)."""

    direct = True

    def _build(self) -> None:
        self.dispatch = self.instances[0].submit


class Colocated(Topology):
    """Instances that serve whole requests, behind the cluster's router."""

    def _build(self) -> None:
        spec, rng, log = self.resolved.spec, self.rng, self.log
        c = spec.cluster
        options = c.router_options if c is not None else RouterOptions()
        router = make_router(
            c.router if c is not None else "round_robin", rng, options.hit_weight,
            options.load_weight,
        )  # fmt: skip
        self.gateway = Gateway(
            self.instances, router, _Serving(self, None), log, options=options,
            admission=c.admission if c is not None else None, slo=spec.slo,
        )  # fmt: skip
        for instance in self.instances:
            self.wire(instance)
        self.dispatch = self.gateway.dispatch

    def wire(self, instance: Instance) -> None:
        self.gateway.watch(instance)

    def ready(self) -> None:
        self.gateway.release()

    def num_held(self) -> int:
        return self.gateway.num_held


class Disaggregated(Topology):
    """A prefill pool behind the gateway, a decode pool behind the KV link."""

    def _build(self) -> None:
        resolved, rng, log = self.resolved, self.rng, self.log
        spec = resolved.spec
        d = spec.disaggregation
        assert d is not None
        # each instance's path to the shared store, its group's (worked out when resolved)
        self._paths = {g.name: g.store for g in resolved.groups}
        self._store: list[TierGeometry] | None = None
        if d.link.via == "store":
            self._store = [self._geometry(i) for i in self.info]
        decode = [inst for inst, i in zip(self.instances, self.info, strict=True)
                  if i.role == "decode"]  # fmt: skip
        decode_serving = _Serving(self, "decode")

        def serving_decode() -> Sequence[int] | None:  # a fixed fleet: every decode instance
            return None if self.fleet is None else decode_serving.candidates()

        self.link = KVLink(
            self.env, d.link, decode, make_router(d.decode.router, rng), self._store,
            serving=serving_decode,
        )  # fmt: skip
        self.gateway = gateway = Gateway(
            self.instances, make_router(d.prefill.router, rng), _Serving(self, "prefill"), log,
            slo=spec.slo,
        )  # fmt: skip
        for instance in self.instances:
            self.wire(instance)

        def dispatch(req: Request) -> None:
            if self._admits(req):
                gateway.dispatch(req)

        self.dispatch = dispatch

    def _admits(self, req: Request) -> bool:
        """Whether some decode instance could ever hold the request (else it is refused)."""
        link = self.link
        assert link is not None
        if link.can_ever_take(req):
            return True
        req.reject(TOO_LONG)
        self.log.record(req)
        return False

    def _geometry(self, i: InstanceInfo) -> TierGeometry:
        path = self._paths[i.group]
        assert path is not None  # the schema checked that the store is given
        return path

    def entry(self) -> Callable[[Request], object]:
        """A TTFT-scaled fleet sees the arrivals given to the prefill pool (a request refused
        on arrival never waits for a first token)."""
        fleet = self.fleet
        if fleet is None or not fleet.watch_ttft:
            return self.dispatch
        gateway = self.gateway

        def observed(req: Request) -> None:
            if self._admits(req):
                fleet.observe(req)
                gateway.dispatch(req)

        return observed

    def wire(self, instance: Instance) -> None:
        link = self.link
        assert link is not None
        if self.info[instance.index].role == "prefill":
            instance.on_change = link.collect
            self.gateway.watch(instance)
        else:
            instance.on_change = link.capacity_freed

    def launch(self, number: int) -> Instance:
        instance = super().launch(number)
        if self._store is not None:
            self._store.append(self._geometry(self.info[instance.index]))
        if self.info[instance.index].role == "decode":
            link = self.link
            assert link is not None
            link.add_decode(instance)
        return instance

    def ready(self) -> None:  # requests held at the gateway, prompts waiting for a decode seat
        self.gateway.release()
        link = self.link
        assert link is not None
        link.start()

    def num_held(self) -> int:
        return self.gateway.num_held
