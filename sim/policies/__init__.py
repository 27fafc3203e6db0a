"""Batching policies, built from the `policy` mapping of a scenario (or a cluster group)."""

from __future__ import annotations

from typing import Literal

from sim.core.kv_cache import BlockManager
from sim.policies.base import Policy
from sim.policies.continuous import ContinuousPolicy
from sim.policies.disaggregated import DecodeOnlyPolicy, PrefillOnlyPolicy
from sim.policies.preemption import Preemptor
from sim.policies.queues import WaitingQueue, make_queue
from sim.policies.static import StaticPolicy
from sim.scenario.schema import (
    ChunkedPolicySpec,
    ContinuousPolicySpec,
    QueueSpec,
    SLOSpec,
    StaticPolicySpec,
)

__all__ = [
    "ContinuousPolicy",
    "DecodeOnlyPolicy",
    "Policy",
    "PrefillOnlyPolicy",
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


# in a disaggregated cluster the same limits drive a prefill-only or a decode-only instance
_ROLES: dict[str, type[ContinuousPolicy]] = {
    "serve": ContinuousPolicy,
    "prefill": PrefillOnlyPolicy,
    "decode": DecodeOnlyPolicy,
}


def make_policy(
    spec: StaticPolicySpec | ContinuousPolicySpec | ChunkedPolicySpec,
    kv: BlockManager,
    *,
    max_model_len: int,
    role: Literal["serve", "prefill", "decode"] = "serve",
    slo: SLOSpec | None = None,
    kv_bytes_per_token: float = 0.0,
) -> Policy:
    """A policy for `spec` on pool `kv`; `slo` gives EDF its deadlines, `kv_bytes_per_token`
    sizes swap copies."""
    queue = queue_from_spec(spec.queue, slo)
    if isinstance(spec, StaticPolicySpec):
        if role != "serve":
            raise ValueError("static batching cannot be split into prefill and decode pools")
        return StaticPolicy(
            kv,
            max_batch_size=spec.max_batch_size,
            max_wait_s=spec.max_wait_s,
            max_model_len=max_model_len,
            kv_reservation=spec.kv_reservation,
            pad_prompts=spec.pad_prompts,
            queue=queue,
        )
    cls = _ROLES[role]
    pre = spec.preemption
    preemptor = Preemptor(
        kv,
        mode=pre.mode,
        victim=pre.victim,
        swap_bandwidth_bytes_per_s=pre.swap_bandwidth_gb_per_s * 1e9,
        host_memory_bytes=pre.host_memory_gb * 1e9,
        kv_bytes_per_token=kv_bytes_per_token,
        tier_ranks={tier: t.rank for tier, t in spec.queue.tiers.items()},
    )
    return cls(
        kv,
        max_num_seqs=spec.max_num_seqs,
        max_num_batched_tokens=spec.max_num_batched_tokens,
        max_model_len=max_model_len,
        mode="chunked" if isinstance(spec, ChunkedPolicySpec) else spec.mode,
        watermark=spec.watermark,
        max_prefill_seqs=spec.max_prefill_seqs if isinstance(spec, ChunkedPolicySpec) else None,
        queue=queue,
        preemptor=preemptor,
        kv_reservation=spec.kv_reservation,
    )
