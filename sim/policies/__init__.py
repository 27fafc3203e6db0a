"""Batching policies, looked up by the `name` of a scenario's `policy` mapping."""

from __future__ import annotations

from sim.kv_cache import BlockManager
from sim.policies.base import Policy
from sim.policies.continuous import ContinuousPolicy
from sim.policies.static import StaticPolicy
from sim.scenario import ChunkedPolicySpec, ContinuousPolicySpec, StaticPolicySpec

__all__ = ["ContinuousPolicy", "Policy", "StaticPolicy", "make_policy"]


def make_policy(
    spec: StaticPolicySpec | ContinuousPolicySpec | ChunkedPolicySpec,
    kv: BlockManager,
    *,
    max_model_len: int,
) -> Policy:
    if isinstance(spec, StaticPolicySpec):
        return StaticPolicy(
            kv,
            max_batch_size=spec.max_batch_size,
            max_wait_s=spec.max_wait_s,
            max_model_len=max_model_len,
            kv_reservation=spec.kv_reservation,
            pad_prompts=spec.pad_prompts,
        )
    if isinstance(spec, ChunkedPolicySpec):
        return ContinuousPolicy(
            kv,
            max_num_seqs=spec.max_num_seqs,
            max_num_batched_tokens=spec.max_num_batched_tokens,
            max_model_len=max_model_len,
            mode="chunked",
            watermark=spec.watermark,
            max_prefill_seqs=spec.max_prefill_seqs,
        )
    return ContinuousPolicy(
        kv,
        max_num_seqs=spec.max_num_seqs,
        max_num_batched_tokens=spec.max_num_batched_tokens,
        max_model_len=max_model_len,
        mode=spec.mode,
        watermark=spec.watermark,
    )
