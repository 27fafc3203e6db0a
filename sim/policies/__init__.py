"""Batching policies: each decides the next step of one instance and changes nothing.

A policy implements `sim.core.plan.Policy`: `schedule(view) -> StepPlan | None`. `static` batches
whole requests; `continuous` (prefill-first or mixed) and `chunked` plan every iteration from the
parts in `sim.policies.iteration`, with a KV reservation mode (`reservation`), a preemption rule
(`preemption`) and a waiting-queue order (`queues`) as strategy objects. `make_policy` builds one
from a scenario's `policy` mapping.

The scenario schema's `PolicySpec` union is the one list of policies; `BUILDERS` maps each of its
spec classes to the function that builds that policy. A new policy is its module, its spec class
in the union and one entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sim.core.plan import Policy
from sim.policies.chunked import ChunkedPolicy
from sim.policies.continuous import ContinuousPolicy
from sim.policies.iteration import IterationPolicy, Limits
from sim.policies.preemption import Preemptor
from sim.policies.queues import WaitingQueue, make_queue
from sim.policies.reservation import make_reservation
from sim.policies.speculation import SpeculationRule
from sim.policies.static import StaticPolicy
from sim.scenario.schema import (
    ChunkedPolicySpec,
    ContinuousPolicySpec,
    PolicySpec,
    QueueSpec,
    SLOSpec,
    StaticPolicySpec,
)

__all__ = [
    "BUILDERS",
    "ChunkedPolicy",
    "ContinuousPolicy",
    "IterationPolicy",
    "Limits",
    "Policy",
    "StaticPolicy",
    "make_policy",
    "queue_from_spec",
]


def queue_from_spec(spec: QueueSpec, slo: SLOSpec | None = None) -> WaitingQueue:
    """The waiting queue a `policy.queue` mapping describes (EDF deadlines from the SLOs)."""
    slo = slo or SLOSpec()
    return make_queue(
        spec.order,
        length=spec.length,
        aging_per_s=spec.aging_per_s,
        priority_mode=spec.priority_mode,
        ranks={tier: t.rank for tier, t in spec.tiers.items()},
        weights={tier: t.weight for tier, t in spec.tiers.items()},
        ttft_by_tier={tier: slo.targets(tier)[0] for tier in slo.tiers},
        default_ttft_s=slo.ttft_s,
    )


NO_TOKEN_BUDGET = 1 << 62  # `max_num_batched_tokens: null`: more than any step can hold


def speculation_rule(spec: ContinuousPolicySpec | ChunkedPolicySpec) -> SpeculationRule | None:
    """The policy's speculative-decoding rule (None: it does not speculate)."""
    s = spec.speculative
    if s is None or not s.active:
        return None
    return SpeculationRule(
        s.num_speculative_tokens,
        disable_by_batch_size=s.disable_by_batch_size,
        min_acceptance_rate=s.min_acceptance_rate,
    )


def iteration_limits(
    spec: ContinuousPolicySpec | ChunkedPolicySpec,
    max_model_len: int,
    kv_blocks_total: int,
    max_prefill_seqs: int | None = None,
    max_chunk_tokens: int | None = None,
) -> Limits:
    """The limits of an iteration-level policy, resolved for a pool of `kv_blocks_total`."""
    budget = spec.max_num_batched_tokens
    return Limits(
        max_num_seqs=spec.max_num_seqs,
        # no budget: a step's tokens are bounded by seats and memory only
        max_num_batched_tokens=NO_TOKEN_BUDGET if budget is None else budget,
        max_model_len=max_model_len,
        watermark_blocks=int(spec.watermark * kv_blocks_total),
        reservation=make_reservation(spec.kv_reservation, max_model_len),
        preemptor=Preemptor(
            mode=spec.preemption.mode,
            victim=spec.preemption.victim,
            tier_ranks={tier: t.rank for tier, t in spec.queue.tiers.items()},
        ),
        speculation=speculation_rule(spec),
        max_prefill_seqs=max_prefill_seqs,
        max_chunk_tokens=max_chunk_tokens,
    )


def build_static(spec: StaticPolicySpec, max_model_len: int, kv_blocks_total: int) -> Policy:
    return StaticPolicy(
        max_batch_size=spec.max_batch_size,
        max_wait_s=spec.max_wait_s,
        max_model_len=max_model_len,
        kv_reservation=spec.kv_reservation,
        pad_prompts=spec.pad_prompts,
    )


def build_continuous(
    spec: ContinuousPolicySpec, max_model_len: int, kv_blocks_total: int
) -> Policy:
    return ContinuousPolicy(iteration_limits(spec, max_model_len, kv_blocks_total), spec.mode)


def build_chunked(spec: ChunkedPolicySpec, max_model_len: int, kv_blocks_total: int) -> Policy:
    limits = iteration_limits(spec, max_model_len, kv_blocks_total, spec.max_prefill_seqs,
                              spec.long_prefill_token_threshold)  # fmt: skip
    return ChunkedPolicy(limits)


# (spec, max_model_len, kv_blocks_total) -> policy; each takes its own spec class
Builder = Callable[[Any, int, int], Policy]

# one entry per spec class of the schema's `PolicySpec` union (tests/policies/test_policy_specs.py)
BUILDERS: dict[type, Builder] = {
    StaticPolicySpec: build_static,
    ContinuousPolicySpec: build_continuous,
    ChunkedPolicySpec: build_chunked,
}


def make_policy(spec: PolicySpec, *, max_model_len: int, kv_blocks_total: int) -> Policy:
    """The policy a `policy` mapping describes, for a pool of `kv_blocks_total` blocks."""
    return BUILDERS[type(spec)](spec, max_model_len, kv_blocks_total)
