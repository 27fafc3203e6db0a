"""A resolved scenario's instance groups, built into instances one at a time.

`Builder` makes one group's instance (at the run's start, and later when a fleet launches one):
its KV pool and tiers, its policy and queue, its step costs. What a group's instances share is
worked out once per group (`GroupSetup`); what every instance of the run looks like is its
`InstanceInfo` row (the run's `instances` table).

Every figure about an instance (its pool's blocks, the bytes a token takes there with tensor
parallelism, its FLOP/s, its KV tiers in blocks and bytes per second) was worked out once when
the scenario resolved (`ResolvedGroup.figures` and `tiers`): nothing here asks the catalog. The
policy spec answers every question asked of it by attribute (`block_size`, `seats`,
`num_gpu_blocks`, `prefix_caching`, `preemption`, `speculative`; static batching's are class
constants), so nothing here branches on the policy's kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sim.core.acceptance import AcceptanceSampler
from sim.core.clock import Clock
from sim.core.instance import Instance, KVSpec
from sim.core.kv.pool import KVPool
from sim.core.kv.tiers import Tier, TierStack
from sim.core.lookahead import Lookahead
from sim.core.prefill_curve import PrefillCurve
from sim.core.recorder import ItlLog, RequestLog, StepLog
from sim.costs.memory_tiers import TierGeometry
from sim.costs.pricer import make_cost_model
from sim.costs.proposal import ProposalCost
from sim.policies import make_policy, queue_from_spec
from sim.scenario.kv_tiers import KVTiersSpec
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
    acceptance: AcceptanceSampler | None  # speculative decoding: acceptance draws
    proposer: ProposalCost | None  # and the draft's proposal cost

    @property
    def engines(self) -> int:
        """Virtual engines per instance (pipeline stages)."""
        return self.group.figures.engines

    @property
    def moved_bytes_per_token(self) -> float:
        """A request's KV in host memory or a tier below is every model's: a draft model keeps
        its own KV of every token, swapped and stored with the target's."""
        return self.group.figures.moved_bytes_per_token


def _make_tier(g: TierGeometry) -> Tier:
    return Tier(
        g.kind, g.capacity_blocks, g.block_bytes, g.read_bytes_per_s, g.write_bytes_per_s,
        g.latency_s,
    )  # fmt: skip


class _Tiers:
    """The scenario's KV tiers, built per instance; the remote store once for all of them."""

    def __init__(self, spec: KVTiersSpec | None) -> None:
        self.spec = spec
        self.remote: Tier | None = None
        self.remote_block_size = 0

    def stack(self, group: ResolvedGroup, block_size: int) -> TierStack | None:
        spec = self.spec
        if spec is None or not group.tiers:
            return None
        tiers = []
        for geometry in group.tiers:
            if geometry.kind != "remote":
                tiers.append(_make_tier(geometry))
                continue
            if self.remote is None:
                self.remote = _make_tier(geometry)
                self.remote_block_size = block_size
            else:  # the schema checked that every group shares the block size
                assert block_size == self.remote_block_size
            tiers.append(self.remote)
        return TierStack(tiers, write=spec.write, load=spec.load)


class Builder:
    """Builds a resolved scenario's instances, one group's instance at a time (`add`)."""

    def __init__(
        self,
        env: Clock,
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
        speculative = group.policy.speculative
        acceptance = proposer = None
        if speculative is not None and speculative.active:
            acceptance = acceptance_sampler(speculative, spec.seed, number, requests)
            proposer = proposal_cost(speculative, group, spec.model)
        return GroupSetup(group, acceptance, proposer)

    def role(self, index: int) -> str:
        """Instance `index`'s role: `serve`, `prefill` or `decode`."""
        return self.info[index].role

    def _pool(self, setup: GroupSetup) -> KVPool:
        """One engine's pool: the instance's, or with pipeline stages one virtual engine's share
        of it (sim/costs/pipeline.py); the instance's blocks are `InstanceFigures.kv_blocks`."""
        group = setup.group
        policy = group.policy
        blocks = group.figures.kv_blocks // setup.engines
        if policy.prefix_caching:
            stack = self.tiers.stack(group, policy.block_size)
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
            # an asynchronous scheduler (sim/core/lookahead.py): on the prefill side and a
            # lone instance, where requests arrive; a decode instance's come by hand-off
            lookahead=(
                Lookahead(spec.engine.frontend_s)
                if spec.engine.async_scheduling and group.role != "decode"
                else None
            ),
        )
        self.instances.append(instance)
        self.info.append(self._describe(number, index, pool))
        return instance

    def describe(self, number: int) -> InstanceInfo:
        """What an engine of group `number` would be, without making one (index -1)."""
        return self._describe(number, -1, self._pool(self.groups[number]))

    def _describe(self, number: int, index: int, pool: KVPool) -> InstanceInfo:
        group = self.groups[number].group
        figures = group.figures
        return InstanceInfo(
            index,
            group.role,
            group.name,
            figures.label,
            pool.num_total,
            pool.block_size,
            "memory" if group.policy.num_gpu_blocks is None else "stated",
            figures.kv_bytes_per_token,
            figures.peak_flops,
            figures.hbm_bandwidth_bytes_per_s,
        )
