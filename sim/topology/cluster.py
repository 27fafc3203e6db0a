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

from collections.abc import Callable
from dataclasses import dataclass

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
from sim.scenario.schema import StaticPolicySpec
from sim.topology.kv_link import KVLink
from sim.topology.router import Router
from sim.topology.speculative import acceptance_sampler, proposal_cost
from sim.workload import RequestArrays


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
    instances: list[Instance]
    info: list[InstanceInfo]
    dispatch: Callable[[Request], None]
    link: KVLink | None = None


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
    model = spec.model
    instances: list[Instance] = []
    info: list[InstanceInfo] = []
    iteration: dict[int, IterationPolicy] = {}  # the P/D pools' policies, by instance
    tiers = _Tiers(spec.kv_tiers)
    for number, group in enumerate(resolved.groups):
        hw = group.hardware
        bytes_per_token = kv_bytes_per_token_on(model, hw)
        speculative = getattr(group.policy, "speculative", None)
        acceptance = proposer = None
        # a request's KV in host memory or a tier below is every model's: a draft model keeps
        # its own KV of every token, swapped and stored with the target's
        moved_bytes_per_token = bytes_per_token
        if speculative is not None and speculative.active:
            acceptance = acceptance_sampler(speculative, spec.seed, number, requests)
            proposer = proposal_cost(speculative, group, model)
            if speculative.draft_model is not None:
                moved_bytes_per_token += kv_bytes_per_token_on(speculative.draft_model, hw)
        # pipeline stages: each instance runs as that many virtual engines
        engines = hw.pipeline_parallel
        for _ in range(group.count * engines):
            index = len(instances)
            pool = _make_pool(group, model, tiers, moved_bytes_per_token)
            policy = make_policy(
                group.policy, max_model_len=model.max_model_len, kv_blocks_total=pool.num_total
            )
            if isinstance(policy, IterationPolicy):
                iteration[index] = policy
            kv = KVSpec(moved_bytes_per_token)
            if not isinstance(group.policy, StaticPolicySpec):
                pre = group.policy.preemption
                kv = KVSpec(
                    moved_bytes_per_token,
                    pre.swap_bandwidth_gb_per_s * 1e9,
                    pre.host_memory_gb * 1e9 / engines,  # the instance's host memory, shared
                )
            steps, itl = records(index) if records is not None else (None, None)
            instance = Instance(
                env,
                index,
                policy,
                queue_from_spec(group.policy.queue, spec.slo),
                pool,
                make_cost_model(group.profile, spec.engine.pricing),
                log,
                kv=kv,
                coalesce=spec.engine.coalesce_decode_steps,
                hands_off=group.role == "prefill",
                receives=group.role == "decode",
                steps=steps,
                itl=itl,
                acceptance=acceptance,
                proposer=proposer,
            )
            instances.append(instance)
            info.append(
                InstanceInfo(
                    index,
                    group.role,
                    group.name,
                    _label(hw),
                    pool.num_total,
                    pool.block_size,
                    "memory" if getattr(group.policy, "num_gpu_blocks", None) is None else "stated",
                    bytes_per_token,
                    hw.instance_peak_flops / engines,
                    hw.instance_hbm_bandwidth_bytes_per_s / engines,
                )
            )

    if spec.disaggregation is None:
        router_name = spec.cluster.router if spec.cluster is not None else "round_robin"
        options = spec.cluster.router_options if spec.cluster is not None else None
        router = Router(
            router_name,
            rng,
            options.hit_weight if options is not None else 1.0,
            options.load_weight if options is not None else 1.0,
        )
        serve = instances

        def dispatch(req: Request) -> None:
            def hit(i: int) -> float:
                return serve[i].cached_prefix_tokens(req) / req.num_prompt_tokens

            index = router.pick(len(serve), lambda i: serve[i].load(), hit=hit, session=req.session)
            serve[index].submit(req)

        def dispatch_one(req: Request) -> None:
            serve[0].submit(req)

        # one instance: nothing to choose (a router never draws for one)
        return Cluster(instances, info, dispatch_one if len(serve) == 1 else dispatch)

    d = spec.disaggregation
    prefill = [inst for inst, i in zip(instances, info, strict=True) if i.role == "prefill"]
    decode = [
        (inst, iteration[i.index])
        for inst, i in zip(instances, info, strict=True)
        if i.role == "decode"
    ]
    store = None
    if d.link.via == "store":  # each instance's path to the shared store, scaled by its TP
        remote = spec.kv_tiers.remote if spec.kv_tiers is not None else None
        assert remote is not None  # the schema checked
        tp = [g.hardware.num_gpus for g in resolved.groups for _ in range(g.count)]
        store = [
            TierGeometry("remote", remote, i.block_size * i.kv_bytes_per_token, tp[i.index])
            for i in info
        ]
    link = KVLink(env, d.link, decode, Router(d.decode.router, rng), store)
    prefill_router = Router(d.prefill.router, rng)

    def dispatch_pd(req: Request) -> None:
        if not link.can_ever_take(req):
            req.reject("sequence larger than any decode instance's KV pool")
            log.record(req)
            return

        def hit(i: int) -> float:
            return prefill[i].cached_prefix_tokens(req) / req.num_prompt_tokens

        index = prefill_router.pick(
            len(prefill), lambda i: prefill[i].load(), hit=hit, session=req.session
        )
        prefill[index].submit(req)

    for instance in prefill:
        instance.on_change = link.collect
    for instance, _ in decode:
        instance.on_change = link.capacity_freed
    return Cluster(instances, info, dispatch_pd, link=link)
