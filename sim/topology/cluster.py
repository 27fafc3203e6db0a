"""Instances wired into a serving topology: one instance, a routed cluster, or P/D pools.

`build_cluster` turns a resolved scenario into SimPy instances and returns the dispatch function
the arrival source calls. Colocated clusters route each arrival with the cluster's router. A
disaggregated cluster routes arrivals to the prefill pool; a prompt that completes there is
handed to the `KVLink`, which moves its KV to a decode instance:

* transfers start in FIFO order, at most `num_links` at once, each taking `KV bytes / bandwidth +
  latency`;
* a transfer starts only when some decode instance can reserve blocks for the prompt's KV (the
  decode pool's router picks among those that can); until then the KV stays on the prefill
  instance and counts against its memory (backpressure), and later prompts queue behind it;
* when it lands, the prefill instance frees the blocks and the decode instance takes the request.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from sim.core.engine import Instance
from sim.core.kv_cache import BlockManager
from sim.core.request import Request
from sim.costs.catalog import ModelSpec, kv_capacity_blocks, kv_capacity_tokens
from sim.costs.cost_model import CostModel
from sim.policies import make_policy
from sim.policies.disaggregated import DecodeOnlyPolicy, PrefillOnlyPolicy
from sim.scenario.load import LinkSpec, ResolvedGroup, ResolvedScenario
from sim.topology.router import Router


@dataclass
class InstanceInfo:
    index: int
    role: str
    group: str
    hardware: str
    kv_blocks_total: int
    block_size: int
    peak_flops: float
    hbm_bandwidth_bytes_per_s: float


@dataclass
class Cluster:
    instances: list[Instance]
    info: list[InstanceInfo]
    dispatch: Callable[[Request], None]
    rejected: list[Request] = field(default_factory=list)  # rejected by the cluster itself
    link: KVLink | None = None


def _make_pool(group: ResolvedGroup, model: ModelSpec) -> tuple[BlockManager, int]:
    policy = group.policy
    if policy.name == "static":  # contiguous reservation: a pool of one-token blocks
        return BlockManager(kv_capacity_tokens(model, group.hardware), 1), 1
    blocks = kv_capacity_blocks(model, group.hardware, policy.block_size)
    return BlockManager(blocks, policy.block_size), policy.block_size


def build_cluster(
    env: simpy.Environment, resolved: ResolvedScenario, rng: np.random.Generator
) -> Cluster:
    spec = resolved.spec
    model = spec.model
    instances: list[Instance] = []
    info: list[InstanceInfo] = []
    roles: dict[str, list[int]] = {"serve": [], "prefill": [], "decode": []}
    for group in resolved.groups:
        for _ in range(group.count):
            index = len(instances)
            kv, block_size = _make_pool(group, model)
            policy = make_policy(
                group.policy,
                kv,
                max_model_len=model.max_model_len,
                role=group.role,
                slo=spec.slo,
                kv_bytes_per_token=model.kv_bytes_per_token,
            )
            instance = Instance(
                env,
                index,
                policy,
                CostModel(group.profile),
                coalesce=spec.engine.coalesce_decode_steps,
            )
            instances.append(instance)
            roles[group.role].append(index)
            hw = group.hardware
            info.append(
                InstanceInfo(
                    index,
                    group.role,
                    group.name,
                    hw.name if hw.tensor_parallel == 1 else f"{hw.name}x{hw.tensor_parallel}",
                    kv.num_total,
                    block_size,
                    hw.instance_peak_flops,
                    hw.instance_hbm_bandwidth_bytes_per_s,
                )
            )

    if spec.disaggregation is None:
        router_name = spec.cluster.router if spec.cluster is not None else "round_robin"
        router = Router(router_name, rng)
        serve = [instances[i] for i in roles["serve"]]

        def dispatch(req: Request) -> None:
            serve[router.pick(len(serve), lambda i: serve[i].load())].submit(req)

        return Cluster(instances, info, dispatch)

    d = spec.disaggregation
    prefill = [instances[i] for i in roles["prefill"]]
    decode = [instances[i] for i in roles["decode"]]
    link = KVLink(env, d.link, model, decode, Router(d.decode.router, rng))
    prefill_router = Router(d.prefill.router, rng)
    cluster = Cluster(instances, info, lambda req: None, link=link)

    def dispatch_pd(req: Request) -> None:
        if not any(_decode_policy(i).can_ever_take(req) for i in decode):
            req.rejected = True  # its KV could never land on any decode instance
            req.instance = -1
            cluster.rejected.append(req)
            return
        prefill[prefill_router.pick(len(prefill), lambda i: prefill[i].load())].submit(req)

    for instance in prefill:
        instance.on_step = link.collect
    for instance in decode:
        instance.on_step = link.capacity_freed
    cluster.dispatch = dispatch_pd
    return cluster


class KVLink:
    """FIFO KV transfers from prefill to decode instances over `num_links` parallel links."""

    def __init__(
        self,
        env: simpy.Environment,
        spec: LinkSpec,
        model: ModelSpec,
        decode: list[Instance],
        router: Router,
    ) -> None:
        self.env = env
        self.bandwidth = spec.bandwidth_gb_per_s * 1e9
        self.latency_s = spec.latency_s
        self.num_links = spec.num_links
        self.free_links = spec.num_links
        self.kv_bytes_per_token = model.kv_bytes_per_token
        self.decode = decode
        self.router = router
        self.pending: deque[tuple[Request, Instance]] = deque()
        self.busy_s = 0.0

    def collect(self, prefill: Instance) -> None:
        """After a prefill step: queue the prompts it completed."""
        policy = prefill.policy
        assert isinstance(policy, PrefillOnlyPolicy)
        if policy.handoff:
            now = self.env.now
            for req in policy.handoff:
                req.handoff_s = now
                self.pending.append((req, prefill))
            policy.handoff.clear()
            self.start()

    def capacity_freed(self, _decode: Instance) -> None:
        if self.pending:
            self.start()

    def start(self) -> None:
        """Start transfers in FIFO order while a link and a decode instance's blocks allow."""
        while self.pending and self.free_links:
            req, source = self.pending[0]
            tokens = req.num_computed_tokens
            loads = [i.load() for i in self.decode]  # mid-run loads, as step by step
            needs = [_decode_policy(i).blocks_to_receive(req) for i in self.decode]
            fits = [
                i
                for i, (need, load) in enumerate(zip(needs, loads, strict=True))
                if need <= load.kv_blocks_total - load.kv_blocks_used
            ]
            if not fits:
                return  # backpressure: the head waits on its prefill instance, and so do the rest
            chosen = self.router.pick(len(self.decode), loads.__getitem__, fits)
            target = self.decode[chosen]
            blocks = needs[chosen]
            target.policy.kv.reserve(blocks)
            target.policy.kv.note_external(self.env.now, blocks)
            target.cut_run()  # its run horizon counted these blocks as free
            self.pending.popleft()
            self.free_links -= 1
            duration = tokens * self.kv_bytes_per_token / self.bandwidth + self.latency_s
            req.transfer_start_s = self.env.now
            req.decode_instance = target.index
            self.env.process(self._transfer(req, source, target, blocks, duration))

    def _transfer(
        self, req: Request, source: Instance, target: Instance, blocks: int, duration: float
    ) -> Generator[simpy.events.Event, Any, None]:
        yield self.env.timeout(duration)
        req.transfer_end_s = self.env.now
        self.busy_s += duration
        self.free_links += 1
        prefill_policy = source.policy
        assert isinstance(prefill_policy, PrefillOnlyPolicy)
        held = req.kv_blocks
        prefill_policy.release(req)
        prefill_policy.kv.note_external(self.env.now, -held)
        decode_policy = target.policy
        assert isinstance(decode_policy, DecodeOnlyPolicy)
        decode_policy.accept(req, blocks)
        source.wake()
        target.wake()
        self.start()


def _decode_policy(instance: Instance) -> DecodeOnlyPolicy:
    policy = instance.policy
    assert isinstance(policy, DecodeOnlyPolicy)
    return policy
