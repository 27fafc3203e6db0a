"""A resolved scenario's instance groups, built into instances one at a time.

`Builder` makes one group's instance (at the run's start, and later when a fleet launches one):
its KV pool and tiers, its policy and queue, its step costs. What a group's instances share is
worked out once per group (`GroupSetup`); what every instance of the run looks like is its
`InstanceInfo` row (the run's `instances` table).

Every figure about an instance's KV (its pool's blocks, the bytes a token takes there with
tensor parallelism) comes from the catalog once, here, and travels with the instance. The policy
spec answers every question asked of it by attribute (`block_size`, `seats`, `num_gpu_blocks`,
`prefix_caching`, `preemption`, `speculative`; static batching's are class constants), so
nothing here branches on the policy's kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import simpy

from sim.core.acceptance import AcceptanceSampler
from sim.core.instance import Instance, KVSpec
from sim.core.kv.pool import KVPool
from sim.core.kv.tiers import Tier, TierStack
from sim.core.prefill_curve import PrefillCurve
from sim.core.recorder import ItlLog, RequestLog, StepLog
from sim.costs.catalog import HardwareSpec, kv_bytes_per_token_on, kv_capacity_blocks
from sim.costs.pricer import make_cost_model
from sim.costs.proposal import ProposalCost
from sim.policies import make_policy, queue_from_spec
from sim.scenario.kv_tiers import KVTiersSpec, TierGeometry, TierSpec
from sim.scenario.load import ResolvedGroup, ResolvedScenario
from sim.topology.speculative import acceptance_sampler, proposal_cost
from sim.workload import RequestArrays


@dataclass
class InstanceInfo:
    """One row of the run's `instances` table."""

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


@dataclass(frozen=True)
class GroupSetup:
    """What every instance of one group shares, worked out once."""

    group: ResolvedGroup
    bytes_per_token: float  # the target model's KV per token on this group's hardware
    # a request's KV in host memory or a tier below is every model's: a draft model keeps its
    # own KV of every token, swapped and stored with the target's
    moved_bytes_per_token: float
    acceptance: AcceptanceSampler | None  # speculative decoding: acceptance draws
    proposer: ProposalCost | None  # and the draft's proposal cost

    @property
    def engines(self) -> int:
        """Virtual engines per instance (pipeline stages)."""
        return self.group.hardware.pipeline_parallel


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


def _label(hw: HardwareSpec) -> str:
    """`h100-sxm`, `h100-sxmx8`, or `h100-sxmx16 pp4` for one virtual engine of 4 stages."""
    name = hw.name if hw.num_gpus == 1 else f"{hw.name}x{hw.num_gpus}"
    return name if hw.pipeline_parallel == 1 else f"{name} pp{hw.pipeline_parallel}"


class Builder:
    """Builds a resolved scenario's instances, one group's instance at a time (`add`)."""

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
        self.instances: list[Instance] = []  # every instance of the run, by index
        self.info: list[InstanceInfo] = []
        self.tiers = _Tiers(resolved.spec.kv_tiers)
        self.groups = [self._setup(n, g, requests) for n, g in enumerate(resolved.groups)]
        # each group's prefill pricing, shared by its instances (`sim.core.prefill_curve`)
        self.curves: dict[int, PrefillCurve] = {}

    def _setup(
        self, number: int, group: ResolvedGroup, requests: RequestArrays | None
    ) -> GroupSetup:
        spec = self.resolved.spec
        hw = group.hardware
        bytes_per_token = kv_bytes_per_token_on(spec.model, hw)
        speculative = group.policy.speculative
        moved = bytes_per_token
        acceptance = proposer = None
        if speculative is not None and speculative.active:
            acceptance = acceptance_sampler(speculative, spec.seed, number, requests)
            proposer = proposal_cost(speculative, group, spec.model)
            if speculative.draft_model is not None:
                moved += kv_bytes_per_token_on(speculative.draft_model, hw)
        return GroupSetup(group, bytes_per_token, moved, acceptance, proposer)

    def role(self, index: int) -> str:
        """Instance `index`'s role: `serve`, `prefill` or `decode`."""
        return self.info[index].role

    def _pool(self, setup: GroupSetup) -> KVPool:
        """One engine's pool: the instance's, or with pipeline stages one virtual engine's share
        of it (sim/costs/pipeline.py). Static batching's one-token blocks are its contiguous
        reservation (`kv_capacity_blocks` at block size 1 is the token capacity)."""
        group = setup.group
        policy = group.policy
        speculative = policy.speculative
        # a draft model's weights take memory, and every token has its KV in the draft too
        draft = speculative.draft_model if speculative is not None and speculative.active else None
        model = self.resolved.spec.model
        blocks = (
            policy.num_gpu_blocks
            or kv_capacity_blocks(model, group.hardware, policy.block_size, draft, policy.seats)
        ) // setup.engines
        if policy.prefix_caching:
            stack = self.tiers.stack(group, policy.block_size, setup.moved_bytes_per_token)
            return KVPool(blocks, policy.block_size, caching=True, tiers=stack)
        return KVPool(blocks, policy.block_size)

    def add(self, number: int) -> Instance:
        """One engine of group `number` (an instance, or one virtual engine of a pipelined
        one), appended to `instances` and `info`."""
        spec = self.resolved.spec
        setup = self.groups[number]
        group = setup.group
        index = len(self.instances)
        pool = self._pool(setup)
        policy = make_policy(
            group.policy, max_model_len=spec.model.max_model_len, kv_blocks_total=pool.num_total
        )
        pre = group.policy.preemption
        kv = KVSpec(setup.moved_bytes_per_token)
        if pre is not None:  # swapping: the instance's host memory, shared by its engines
            kv = KVSpec(
                setup.moved_bytes_per_token,
                pre.swap_bandwidth_gb_per_s * 1e9,
                pre.host_memory_gb * 1e9 / setup.engines,
            )
        steps, itl = self.records(index) if self.records is not None else (None, None)
        curve = self.curves.get(number)
        if curve is None:  # a pricing is a pure function of its features: one per group, on
            # a cost model of its own (its counters are no instance's)
            curve = PrefillCurve(make_cost_model(group.profile, spec.engine.pricing))
            self.curves[number] = curve
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
            acceptance=setup.acceptance,
            proposer=setup.proposer,
            # the instances of the run's start pay the cold start; a launched one its warm-up
            serves_from_s=spec.engine.cold_start_s if self.env.now == 0 else 0.0,
            prefill=curve,
        )
        self.instances.append(instance)
        self.info.append(self._describe(number, index, pool))
        return instance

    def describe(self, number: int) -> InstanceInfo:
        """What an engine of group `number` would be, without making one (index -1)."""
        return self._describe(number, -1, self._pool(self.groups[number]))

    def _describe(self, number: int, index: int, pool: KVPool) -> InstanceInfo:
        setup = self.groups[number]
        group = setup.group
        hw = group.hardware
        return InstanceInfo(
            index,
            group.role,
            group.name,
            _label(hw),
            pool.num_total,
            pool.block_size,
            "memory" if group.policy.num_gpu_blocks is None else "stated",
            setup.bytes_per_token,
            hw.instance_peak_flops / setup.engines,
            hw.instance_hbm_bandwidth_bytes_per_s / setup.engines,
        )
