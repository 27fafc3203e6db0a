"""Instances wired into a serving topology: one instance, a routed cluster, or P/D pools.

`build_cluster` turns a resolved scenario into SimPy instances and returns the dispatch function
the arrival source calls. Colocated clusters route each arrival with the cluster's router (the
load-aware routers read each instance's settled load at that instant). A disaggregated cluster
routes arrivals to the prefill pool, and its `KVLink` (`sim.topology.kv_link`) moves each
completed prompt's KV to a decode instance.

Every figure about an instance's KV (its pool's blocks, the bytes a token takes there with
tensor parallelism) comes from the catalog once, here, and travels with the instance.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from sim.core.engine import Instance, KVSpec
from sim.core.kv.pool import KVPool
from sim.core.kv.tiers import Tier, TierStack
from sim.core.recorder import ItlLog, RequestLog, StepLog
from sim.core.request import Request
from sim.costs.catalog import (
    HardwareSpec,
    ModelSpec,
    kv_bytes_per_token_on,
    kv_capacity_blocks,
    kv_capacity_tokens,
)
from sim.costs.pricer import make_cost_model
from sim.policies import IterationPolicy, make_policy, queue_from_spec
from sim.scenario.kv_tiers import KVTiersSpec, TierGeometry, TierSpec
from sim.scenario.load import ResolvedGroup, ResolvedScenario
from sim.scenario.schema import RouterOptions, StaticPolicySpec
from sim.topology.gateway import Gateway
from sim.topology.kv_link import KVLink
from sim.topology.router import Router
from sim.topology.scaling import Fleet, GroupPlan
from sim.topology.speculative import acceptance_sampler, proposal_cost
from sim.workload import RequestArrays
from sim.workload.forecast import forecast_of


@dataclass
class InstanceInfo:
    index: int
    role: str
    group: str
    hardware: str
    kv_blocks_total: int
    block_size: int
    kv_capacity: str  # "memory": from the GPU memory; "stated": the policy's num_gpu_blocks
    kv_bytes_per_token: float
    peak_flops: float
    hbm_bandwidth_bytes_per_s: float


@dataclass
class Cluster:
    instances: list[Instance]  # every instance of the run, by index (an autoscaled fleet's grow)
    info: list[InstanceInfo]
    dispatch: Callable[[Request], None]
    link: KVLink | None = None
    fleet: Fleet | None = None  # instances launched and retired during the run
    direct: bool = False  # one instance, every arrival submitted to it as it comes
    # called with each instance launched during the run (the run's own hooks, e.g. sessions)
    on_launch: list[Callable[[Instance], None]] = field(default_factory=list)

    # the first group's figures, for a fleet that starts with no instance
    first_group: InstanceInfo | None = None

    def reference(self) -> InstanceInfo:
        """The first instance's figures (GPU, KV pool), or the first group's while none exists."""
        if self.info:
            return self.info[0]
        assert self.first_group is not None
        return self.first_group

    def each_instance(self, hook: Callable[[Instance], None]) -> None:
        """Apply `hook` to every instance, now and as they are launched."""
        for instance in self.instances:
            hook(instance)
        self.on_launch.append(hook)


class _Every:
    """A fleet that never changes: every instance takes requests."""

    def candidates(self) -> None:
        return None

    def starved(self) -> None:
        raise AssertionError("a fixed fleet always has an instance serving")


_EVERY = _Every()


class _Role:
    """The serving instances of one P/D pool (`prefill` or `decode`)."""

    def __init__(
        self, fleet: Fleet | None, instances: list[Instance], role: str,
        role_of: Callable[[int], str],
    ) -> None:  # fmt: skip
        self.fleet = fleet
        self.instances = instances
        self.role = role
        self.role_of = role_of

    def candidates(self) -> Sequence[int]:
        every = (
            range(len(self.instances)) if self.fleet is None else self.fleet.candidates()
        )
        return [i for i in every if self.role_of(i) == self.role]

    def starved(self) -> None:
        if self.fleet is not None:
            self.fleet.starved()


def _make_tier(kind: str, spec: TierSpec, block_bytes: float, tensor_parallel: int) -> Tier:
    g = TierGeometry(kind, spec, block_bytes, tensor_parallel)
    return Tier(
        kind, g.capacity_blocks, block_bytes, g.read_bytes_per_s, g.write_bytes_per_s, g.latency_s
    )


class _Tiers:
    """The scenario's KV tiers, built per instance; the remote store once for all of them."""

    def __init__(self, spec: KVTiersSpec | None) -> None:
        self.spec = spec
        self.remote: Tier | None = None
        self.remote_block_size = 0

    def stack(
        self, group: ResolvedGroup, block_size: int, bytes_per_token: float
    ) -> TierStack | None:
        spec = self.spec
        if spec is None or not spec.given():
            return None
        block_bytes = block_size * bytes_per_token
        tp = group.hardware.num_gpus  # each GPU has its own path to the tiers
        tiers = []
        for kind, tier in spec.given():
            if kind != "remote":
                tiers.append(_make_tier(kind, tier, block_bytes, tp))
                continue
            if self.remote is None:
                self.remote = _make_tier(kind, tier, block_bytes, tp)
                self.remote_block_size = block_size
            else:  # the schema checked that every group shares the block size
                assert block_size == self.remote_block_size
            tiers.append(self.remote)
        return TierStack(tiers, write=spec.write, load=spec.load)


def _make_pool(
    group: ResolvedGroup, model: ModelSpec, tiers: _Tiers, bytes_per_token: float
) -> KVPool:
    """One engine's pool: the instance's, or with pipeline stages one virtual engine's share
    of it (sim/costs/pipeline.py)."""
    policy = group.policy
    engines = group.hardware.pipeline_parallel
    if isinstance(policy, StaticPolicySpec):  # contiguous reservation: one-token blocks
        tokens = kv_capacity_tokens(model, group.hardware, None, policy.max_batch_size)
        return KVPool(tokens // engines, 1)
    speculative = policy.speculative
    # a draft model's weights take memory, and every token has its KV in the draft too
    draft = speculative.draft_model if speculative is not None and speculative.active else None
    blocks = (
        policy.num_gpu_blocks
        or kv_capacity_blocks(model, group.hardware, policy.block_size, draft, policy.max_num_seqs)
    ) // engines
    if policy.prefix_caching:
        stack = tiers.stack(group, policy.block_size, bytes_per_token)
        return KVPool(blocks, policy.block_size, caching=True, tiers=stack)
    return KVPool(blocks, policy.block_size)


def _label(hw: HardwareSpec) -> str:
    """`h100-sxm`, `h100-sxmx8`, or `h100-sxmx16 pp4` for one virtual engine of 4 stages."""
    name = hw.name if hw.num_gpus == 1 else f"{hw.name}x{hw.num_gpus}"
    return name if hw.pipeline_parallel == 1 else f"{name} pp{hw.pipeline_parallel}"


class _Builder:
    """Builds a resolved scenario's instances, one group's instance at a time: at the start, and
    later when a fleet launches one (`add`)."""

    def __init__(
        self,
        env: simpy.Environment,
        resolved: ResolvedScenario,
        log: RequestLog,
        records: Callable[[int], tuple[StepLog, ItlLog]] | None,
        requests: RequestArrays | None,
    ) -> None:
        self.env = env
        self.resolved = resolved
        self.log = log
        self.records = records
        self.instances: list[Instance] = []
        self.info: list[InstanceInfo] = []
        self.iteration: dict[int, IterationPolicy] = {}  # the P/D pools' policies, by instance
        self.tiers = _Tiers(resolved.spec.kv_tiers)
        spec = resolved.spec
        self.groups: list[tuple[float, float, Any, Any]] = []
        for number, group in enumerate(resolved.groups):
            hw = group.hardware
            bytes_per_token = kv_bytes_per_token_on(spec.model, hw)
            speculative = getattr(group.policy, "speculative", None)
            acceptance = proposer = None
            # a request's KV in host memory or a tier below is every model's: a draft model
            # keeps its own KV of every token, swapped and stored with the target's
            moved_bytes_per_token = bytes_per_token
            if speculative is not None and speculative.active:
                acceptance = acceptance_sampler(speculative, spec.seed, number, requests)
                proposer = proposal_cost(speculative, group, spec.model)
                if speculative.draft_model is not None:
                    moved_bytes_per_token += kv_bytes_per_token_on(speculative.draft_model, hw)
            self.groups.append((bytes_per_token, moved_bytes_per_token, acceptance, proposer))

    def add(self, number: int) -> Instance:
        """One engine of group `number` (an instance, or one virtual engine of a pipelined
        one), appended to `instances` and `info`."""
        spec = self.resolved.spec
        model = spec.model
        group = self.resolved.groups[number]
        hw = group.hardware
        engines = hw.pipeline_parallel
        _, moved_bytes_per_token, acceptance, proposer = self.groups[number]
        index = len(self.instances)
        pool = _make_pool(group, model, self.tiers, moved_bytes_per_token)
        policy = make_policy(
            group.policy, max_model_len=model.max_model_len, kv_blocks_total=pool.num_total
        )
        if isinstance(policy, IterationPolicy):
            self.iteration[index] = policy
        kv = KVSpec(moved_bytes_per_token)
        if not isinstance(group.policy, StaticPolicySpec):
            pre = group.policy.preemption
            kv = KVSpec(
                moved_bytes_per_token,
                pre.swap_bandwidth_gb_per_s * 1e9,
                pre.host_memory_gb * 1e9 / engines,  # the instance's host memory, shared
            )
        steps, itl = self.records(index) if self.records is not None else (None, None)
        instance = Instance(
            self.env,
            index,
            policy,
            queue_from_spec(group.policy.queue, spec.slo),
            pool,
            make_cost_model(group.profile, spec.engine.pricing),
            self.log,
            kv=kv,
            coalesce=spec.engine.coalesce_decode_steps,
            hands_off=group.role == "prefill",
            receives=group.role == "decode",
            steps=steps,
            itl=itl,
            acceptance=acceptance,
            proposer=proposer,
            # the instances of the run's start pay the cold start; a launched one its warm-up
            serves_from_s=spec.engine.cold_start_s if self.env.now == 0 else 0.0,
        )
        self.instances.append(instance)
        self.info.append(self._describe(number, index, pool))
        return instance

    def describe(self, number: int) -> InstanceInfo:
        """What an engine of group `number` would be, without making one (index -1)."""
        group = self.resolved.groups[number]
        pool = _make_pool(group, self.resolved.spec.model, self.tiers, self.groups[number][1])
        return self._describe(number, -1, pool)

    def _describe(self, number: int, index: int, pool: KVPool) -> InstanceInfo:
        group = self.resolved.groups[number]
        hw = group.hardware
        engines = hw.pipeline_parallel
        return InstanceInfo(
            index,
            group.role,
            group.name,
            _label(hw),
            pool.num_total,
            pool.block_size,
            "memory" if getattr(group.policy, "num_gpu_blocks", None) is None else "stated",
            self.groups[number][0],
            hw.instance_peak_flops / engines,
            hw.instance_hbm_bandwidth_bytes_per_s / engines,
        )


def build_cluster(
    env: simpy.Environment,
    resolved: ResolvedScenario,
    rng: np.random.Generator,
    log: RequestLog,
    records: Callable[[int], tuple[StepLog, ItlLog]] | None = None,
    requests: RequestArrays | None = None,
) -> Cluster:
    """The instances and topology of a resolved scenario; `records(index)` gives an instance's
    step and gap logs (default: in-memory tables); `requests` the run's requests (per-request
    speculative acceptance rates are drawn for them)."""
    spec = resolved.spec
    builder = _Builder(env, resolved, log, records, requests)
    initial: list[int] = []
    for number, group in enumerate(resolved.groups):
        # pipeline stages: each instance runs as that many virtual engines
        for _ in range(group.count * group.hardware.pipeline_parallel):
            builder.add(number)
            initial.append(number)
    instances, info, iteration = builder.instances, builder.info, builder.iteration
    hooks: list[Callable[[Instance], None]] = []  # wiring for instances launched later

    def launch(number: int) -> Instance:
        instance = builder.add(number)
        for hook in hooks:
            hook(instance)
        return instance

    fleet = _fleet(env, resolved, launch, instances, initial, log, requests)
    first = builder.describe(0) if not instances else None  # a fleet that starts empty

    if spec.disaggregation is None:
        c = spec.cluster
        options = c.router_options if c is not None else RouterOptions()
        router = Router(
            c.router if c is not None else "round_robin",
            rng,
            options.hit_weight,
            options.load_weight,
        )
        serving = fleet if fleet is not None else _EVERY
        gateway = Gateway(
            instances,
            router,
            serving,
            log,
            options=options,
            admission=c.admission if c is not None else None,
            slo=spec.slo,
        )
        if fleet is not None:
            fleet.on_ready = gateway.release
            fleet.held = lambda: gateway.num_held
            dispatch = gateway.dispatch
            if fleet.watch_ttft:

                def dispatch(req: Request) -> None:
                    fleet.observe(req)
                    gateway.dispatch(req)

            return Cluster(
                instances, info, dispatch, fleet=fleet, on_launch=hooks, first_group=first
            )

        def dispatch_one(req: Request) -> None:
            instances[0].submit(req)

        # one instance and nothing to shed: nothing to choose (a router never draws for one)
        if len(instances) == 1 and (c is None or c.admission is None):
            return Cluster(instances, info, dispatch_one, direct=True)
        return Cluster(instances, info, gateway.dispatch)

    d = spec.disaggregation

    def role_of(index: int) -> str:
        return builder.info[index].role

    decode: list[tuple[Instance, IterationPolicy]] = [
        (inst, iteration[i.index])
        for inst, i in zip(instances, info, strict=True)
        if i.role == "decode"
    ]
    decode_serving = _Role(fleet, instances, "decode", role_of)
    store = None
    if d.link.via == "store":  # each instance's path to the shared store, scaled by its TP
        remote = spec.kv_tiers.remote if spec.kv_tiers is not None else None
        assert remote is not None  # the schema checked
        tp = {g.name: g.hardware.num_gpus for g in resolved.groups}

        def geometry(i: InstanceInfo) -> TierGeometry:
            return TierGeometry("remote", remote, i.block_size * i.kv_bytes_per_token, tp[i.group])

        store = [geometry(i) for i in info]
    link = KVLink(
        env, d.link, decode, Router(d.decode.router, rng), store,
        serving=decode_serving.candidates if fleet is not None else None,
    )  # fmt: skip
    prefill_serving = _Role(fleet, instances, "prefill", role_of)
    gateway = Gateway(instances, Router(d.prefill.router, rng), prefill_serving, log, slo=spec.slo)

    def dispatch_pd(req: Request) -> None:
        if not link.can_ever_take(req):
            req.reject("sequence larger than any decode instance's KV pool")
            log.record(req)
            return
        gateway.dispatch(req)

    def wire(instance: Instance) -> None:
        if store is not None and instance.index == len(store):  # launched during the run
            store.append(geometry(builder.info[instance.index]))
        if role_of(instance.index) == "prefill":
            instance.on_change = link.collect
        else:
            instance.on_change = link.capacity_freed
            if all(inst is not instance for inst, _ in link.decode):  # launched during the run
                link.add_decode(instance, iteration[instance.index])

    for instance in instances:
        wire(instance)
    hooks.append(wire)
    if fleet is not None:

        def ready() -> None:  # requests held at the gateway, prompts waiting for a decode seat
            gateway.release()
            link.start()

        fleet.on_ready = ready
        fleet.held = lambda: gateway.num_held
    return Cluster(
        instances, info, dispatch_pd, link=link, fleet=fleet, on_launch=hooks, first_group=first
    )


def _fleet(
    env: simpy.Environment,
    resolved: ResolvedScenario,
    launch: Callable[[int], Instance],
    instances: list[Instance],
    initial: list[int],
    log: RequestLog,
    requests: RequestArrays | None,
) -> Fleet | None:
    """The run's `Fleet` when some group autoscales (None: a fixed fleet)."""
    if all(group.autoscale is None for group in resolved.groups):
        return None
    model = resolved.spec.model
    plans = [
        GroupPlan(
            number,
            group.name,
            group.autoscale,
            group.autoscale.provisioning.delay_s(model.weight_bytes)
            if group.autoscale is not None
            else 0.0,
        )
        for number, group in enumerate(resolved.groups)
    ]
    total = len(requests) if requests is not None else 0
    return Fleet(
        env, plans, instances, initial, launch, log, total,
        forecast_of(resolved.spec.workload, resolved.base_dir),
    )
