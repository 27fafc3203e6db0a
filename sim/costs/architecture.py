"""What a model's architecture adds to the dense decoder: the rules its fields must keep.

`ModelSpec` (sim/costs/catalog.py) describes a decoder-only transformer. Beyond the dense
decoder it may state:

* **Mixture of experts**: `num_experts` routed experts per MoE layer, each token routed to
  `experts_per_token` (top-k) of them; `num_shared_experts` experts every token passes through;
  `moe_intermediate_size`, the FFN width of one expert (its gate, up and down projections hold
  `3 * hidden_size * moe_intermediate_size` parameters); `num_moe_layers` MoE layers (None:
  all; DeepSeek-V3's first 3 layers are dense, Llama-4 Maverick alternates). The routed experts'
  parameters are `num_moe_layers * num_experts * 3 * hidden * moe_intermediate`; the rest of
  `num_parameters` (attention, dense layers, shared experts, embeddings) is read by every step.
  `expert_weight_dtype` stores the routed experts apart (gpt-oss: MXFP4 experts, bf16 rest), and
  `expert_hottest_share` states unbalanced routing as the hottest expert's share of routed
  tokens (sim/costs/moe.py turns it into a distribution).
* **Multi-head latent attention** (DeepSeek-V2/V3): `kv_lora_rank` and `qk_rope_head_dim`; the
  KV cache keeps one latent vector of `kv_lora_rank + qk_rope_head_dim` elements per token and
  layer, shared by every head (so tensor parallelism replicates it instead of splitting it).
* **Sliding-window layers** (gpt-oss alternates them with full attention): `num_sliding_layers`
  of the layers keep only the last `sliding_window` tokens' KV. The block pool holds the full
  layers' KV; the sliding layers' bounded KV is set aside per running sequence.
* **Multi-token prediction** modules (`num_mtp_layers`, DeepSeek-V3's one), which the speculative
  method `mtp` drafts with.
"""

from __future__ import annotations

from typing import Protocol

_MOE_FIELDS = ("num_experts", "experts_per_token", "moe_intermediate_size")


class Architecture(Protocol):
    """The ModelSpec fields these rules read (read-only: the spec is frozen)."""

    @property
    def num_parameters(self) -> int: ...

    @property
    def num_layers(self) -> int: ...

    @property
    def hidden_size(self) -> int: ...

    @property
    def num_experts(self) -> int | None: ...

    @property
    def experts_per_token(self) -> int | None: ...

    @property
    def num_shared_experts(self) -> int: ...

    @property
    def moe_intermediate_size(self) -> int | None: ...

    @property
    def num_moe_layers(self) -> int | None: ...

    @property
    def expert_weight_dtype(self) -> str | None: ...

    @property
    def expert_hottest_share(self) -> float | None: ...

    @property
    def kv_lora_rank(self) -> int | None: ...

    @property
    def qk_rope_head_dim(self) -> int | None: ...

    @property
    def sliding_window(self) -> int | None: ...

    @property
    def num_sliding_layers(self) -> int: ...


def routed_expert_parameters(spec: Architecture) -> int:
    """Parameters of all routed experts of all MoE layers (0 for a dense model)."""
    if spec.num_experts is None or spec.moe_intermediate_size is None:
        return 0
    layers = spec.num_moe_layers or spec.num_layers
    return layers * spec.num_experts * 3 * spec.hidden_size * spec.moe_intermediate_size


def architecture_problem(spec: Architecture) -> str | None:
    """Why the architecture fields contradict each other, or None when they agree."""
    given = [f for f in _MOE_FIELDS if getattr(spec, f) is not None]
    if given and len(given) < len(_MOE_FIELDS):
        missing = [f for f in _MOE_FIELDS if f not in given]
        return f"a mixture of experts needs {', '.join(missing)} too (given: {', '.join(given)})"
    moe_only = ("num_moe_layers", "expert_weight_dtype", "expert_hottest_share")
    extra = [f for f in moe_only if getattr(spec, f) is not None]
    if not given and (extra or spec.num_shared_experts):
        named = extra or ["num_shared_experts"]
        return f"{', '.join(named)} needs a mixture of experts (num_experts and the rest)"
    if given:
        problem = _moe_problem(spec)
        if problem:
            return problem
    if (spec.kv_lora_rank is None) != (spec.qk_rope_head_dim is None):
        return "multi-head latent attention needs both kv_lora_rank and qk_rope_head_dim"
    if (spec.sliding_window is None) != (spec.num_sliding_layers == 0):
        return "sliding-window attention needs both sliding_window and num_sliding_layers > 0"
    if spec.num_sliding_layers >= spec.num_layers:
        return (
            f"num_sliding_layers ({spec.num_sliding_layers}) must leave at least one of the "
            f"{spec.num_layers} layers with full attention"
        )
    if spec.sliding_window is not None and spec.kv_lora_rank is not None:
        return "sliding-window layers with latent attention are not modelled; give one of them"
    return None


def _moe_problem(spec: Architecture) -> str | None:
    e, k = spec.num_experts, spec.experts_per_token
    assert e is not None and k is not None
    if k > e:
        return f"experts_per_token ({k}) cannot exceed num_experts ({e})"
    if spec.num_moe_layers is not None and spec.num_moe_layers > spec.num_layers:
        return (
            f"num_moe_layers ({spec.num_moe_layers}) cannot exceed num_layers ({spec.num_layers})"
        )
    routed = routed_expert_parameters(spec)
    layers = spec.num_moe_layers or spec.num_layers
    if routed >= spec.num_parameters:
        return (
            f"the routed experts alone hold {routed:,} parameters ({layers} layers x {e} "
            f"experts x 3 x {spec.hidden_size} x {spec.moe_intermediate_size}), not less than "
            f"num_parameters ({spec.num_parameters:,})"
        )
    share = spec.expert_hottest_share
    if share is not None and not (1 / e <= share <= 1 / k):
        return (
            f"expert_hottest_share ({share:g}) must lie between 1 / num_experts ({1 / e:.4g}, "
            f"uniform routing) and 1 / experts_per_token ({1 / k:.4g}: the expert in every token)"
        )
    return None
