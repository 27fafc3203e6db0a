"""Batching policies, built from the `policy` mapping of a scenario (or a cluster group)."""

from __future__ import annotations

from typing import Literal

from sim.kv_cache import BlockManager
from sim.policies.base import Policy
from sim.policies.continuous import ContinuousPolicy
from sim.policies.disaggregated import DecodeOnlyPolicy, PrefillOnlyPolicy
from sim.policies.static import StaticPolicy
from sim.scenario import ChunkedPolicySpec, ContinuousPolicySpec, StaticPolicySpec

__all__ = [
    "ContinuousPolicy",
    "DecodeOnlyPolicy",
    "Policy",
    "PrefillOnlyPolicy",
    "StaticPolicy",
    "make_policy",
]

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
) -> Policy:
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
        )
    cls = _ROLES[role]
    if isinstance(spec, ChunkedPolicySpec):
        return cls(
            kv,
            max_num_seqs=spec.max_num_seqs,
            max_num_batched_tokens=spec.max_num_batched_tokens,
            max_model_len=max_model_len,
            mode="chunked",
            watermark=spec.watermark,
            max_prefill_seqs=spec.max_prefill_seqs,
        )
    return cls(
        kv,
        max_num_seqs=spec.max_num_seqs,
        max_num_batched_tokens=spec.max_num_batched_tokens,
        max_model_len=max_model_len,
        mode=spec.mode,
        watermark=spec.watermark,
    )
