"""A resolved scenario's cluster: its instances, its topology and, when it autoscales, its fleet.

`build_cluster` builds the groups' instances (`sim.topology.groups.Builder`), picks the topology
that serves them (`sim.topology.topologies`: one instance, a routed colocated cluster, or P/D
pools) and, when some group autoscales, the `Fleet` that launches and retires instances through
that topology (`sim.topology.scaling`). `Cluster` is what the run reads back: the instances and
their rows, the function the arrival source calls, the KV link and the fleet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sim.core.clock import Clock
from sim.core.instance import Instance
from sim.core.recorder import ItlLog, RequestLog, StepLog
from sim.core.request import Request
from sim.scenario.load import ResolvedScenario
from sim.topology.groups import Builder, InstanceInfo
from sim.topology.kv_link import KVLink
from sim.topology.scaling import Fleet, GroupPlan
from sim.topology.topologies import Colocated, Disaggregated, Single, Topology
from sim.workload import RequestArrays
from sim.workload.forecast import forecast_of

__all__ = ["Cluster", "InstanceInfo", "build_cluster"]


@dataclass
class Cluster:
    topology: Topology
    dispatch: Callable[[Request], object]  # what the arrival source calls with each arrival
    fleet: Fleet | None = None  # instances launched and retired during the run
    # the first group's figures, for a fleet that starts with no instance
    first_group: InstanceInfo | None = None

    @property
    def instances(self) -> list[Instance]:
        """Every instance of the run, by index (an autoscaled fleet's grow)."""
        return self.topology.instances

    @property
    def info(self) -> list[InstanceInfo]:
        return self.topology.info

    @property
    def link(self) -> KVLink | None:
        return self.topology.link

    @property
    def direct(self) -> bool:
        """One instance, every arrival submitted to it as it comes."""
        return self.topology.direct

    def reference(self) -> InstanceInfo:
        """The first instance's figures (GPU, KV pool), or the first group's while none exists."""
        if self.info:
            return self.info[0]
        assert self.first_group is not None
        return self.first_group

    def each_instance(self, hook: Callable[[Instance], None]) -> None:
        """Apply `hook` to every instance, now and as they are launched."""
        self.topology.each_instance(hook)


def build_cluster(
    env: Clock,
    resolved: ResolvedScenario,
    rng: np.random.Generator,
    log: RequestLog,
    records: Callable[[int], tuple[StepLog, ItlLog]] | None = None,
    requests: RequestArrays | None = None,
    num_requests: int | None = None,
) -> Cluster:
    """The instances and topology of a resolved scenario; `records(index)` gives an instance's
    step and gap logs (default: in-memory tables); `requests` the run's requests when they are
    generated whole (per-request speculative acceptance rates are drawn for them);
    `num_requests` how many the run has (default: `requests`' count, or 0)."""
    spec = resolved.spec
    builder = Builder(env, resolved, log, records, requests)
    initial: list[int] = []
    for number, group in enumerate(resolved.groups):
        # pipeline stages: each instance runs as that many virtual engines
        for _ in range(group.count * group.figures.engines):
            builder.add(number)
            initial.append(number)
    autoscaled = any(group.autoscale is not None for group in resolved.groups)
    topology: Topology
    if spec.disaggregation is not None:
        topology = Disaggregated(env, resolved, builder, log, rng)
    elif (
        len(builder.instances) == 1
        and not autoscaled
        and (spec.cluster is None or spec.cluster.admission is None)
    ):
        topology = Single(env, resolved, builder, log, rng)
    else:
        topology = Colocated(env, resolved, builder, log, rng)
    if num_requests is None:
        num_requests = len(requests) if requests is not None else 0
    fleet = _fleet(env, resolved, topology, initial, log, num_requests) if autoscaled else None
    if fleet is not None:
        topology.serve_from(fleet)
    first = builder.describe(0) if not builder.instances else None  # a fleet that starts empty
    return Cluster(topology, topology.entry(), fleet=fleet, first_group=first)


def _fleet(
    env: Clock,
    resolved: ResolvedScenario,
    topology: Topology,
    initial: list[int],
    log: RequestLog,
    total: int,
) -> Fleet:
    """The run's `Fleet` (some group autoscales)."""
    weight_bytes = resolved.model_figures.weight_bytes
    plans = [
        GroupPlan(
            number,
            group.name,
            group.autoscale,
            group.autoscale.provisioning.delay_s(weight_bytes)
            if group.autoscale is not None
            else 0.0,
        )
        for number, group in enumerate(resolved.groups)
    ]
    return Fleet(
        env, plans, topology, initial, log, total,
        forecast_of(resolved.spec.workload, resolved.base_dir),
    )  # fmt: skip
