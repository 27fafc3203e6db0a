"""One decoder-only transformer's specification (`ModelSpec`): its dimensions, its data types
and their bytes (`DTYPE_BYTES`), its mixture-of-experts, latent-attention and sliding-window
fields (sim/costs/architecture.py), and what it weighs and computes per token. The catalog
(`sim.costs.catalog`) holds the named models and documents the fields; this module also expands a
catalog name, or a name plus overrides, into a spec's fields (`resolve_entry`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sim.costs.architecture import architecture_problem, routed_expert_parameters
from sim.costs.catalog_models import MODEL_TABLE as _MODEL_TABLE
from sim.inputs.strict_model import StrictModel

WeightDtype = Literal["bf16", "fp16", "fp8", "int4", "mxfp4", "nvfp4"]
KVDtype = Literal["bf16", "fp16", "fp8", "nvfp4"]
# bytes per element, block scales included: MXFP4 is 4-bit E2M1 with one 8-bit scale per 32
# elements (4.25 bits), NVFP4 one fp8 scale per 16 elements (4.5 bits; its per-tensor fp32 scale
# is negligible) - the OCP Microscaling spec v1.0 and NVIDIA's NVFP4 description
DTYPE_BYTES: dict[str, float] = {
    "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int4": 0.5, "mxfp4": 4.25 / 8, "nvfp4": 4.5 / 8,
}  # fmt: skip
FP4_DTYPES = ("mxfp4", "nvfp4")

# fields that an explicit (non-catalog) model must give
MODEL_REQUIRED = ("num_parameters", "num_layers", "hidden_size", "num_attention_heads",
                  "num_kv_heads", "head_dim", "max_model_len")  # fmt: skip


def _dtype_name(dtype_bytes: float | None) -> str:
    if dtype_bytes is None:
        return "bf16"
    return {2.0: "bf16", 1.0: "fp8", 0.5: "int4", 4.0: "fp32"}.get(dtype_bytes, "unknown")


def resolve_entry(
    data: Any, table: dict[str, dict[str, Any]], kind: str, fields: tuple[str, ...]
) -> Any:
    """Expand a catalog name, or a catalog name plus overrides, into a full field mapping; an
    explicit spec (a name not in `table`) must give the `fields`."""
    known = ", ".join(sorted(table))
    if not isinstance(data, (str, dict, BaseModel)):
        raise ValueError(f"must be a catalog {kind} name (known: {known}) or a mapping")
    if isinstance(data, str):
        if data not in table:
            raise ValueError(f"unknown {kind} {data!r} (known: {known})")
        return {"name": data, **table[data]}
    if isinstance(data, dict) and isinstance(data.get("name"), str):
        name = data["name"]
        if name in table:
            return {"name": name, **table[name], **data}
        # Not in the catalog: fine as a fully explicit spec, but a typo of a catalog name is the
        # likelier cause when required fields are missing, so say both.
        required = [f for f in fields if f not in data]
        if required:
            raise ValueError(
                f"unknown {kind} {name!r} (known: {known}); an explicit {kind} needs "
                f"{', '.join(required)}"
            )
    return data


class ModelSpec(StrictModel):
    """Dimensions and data types of one decoder-only transformer (dense or mixture of experts)."""

    model_config = ConfigDict(frozen=True)

    name: str
    num_parameters: int = Field(gt=0)  # total, every expert included: the weight memory
    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    # legacy override: bytes per element of weights and KV alike (None: from the dtypes below)
    dtype_bytes: float | None = Field(default=None, gt=0)
    max_model_len: int = Field(gt=0)
    # parameters one token multiplies through (MoE: the routed experts only); None: all of them
    num_active_parameters: int | None = Field(default=None, gt=0)
    # None: bf16, or what dtype_bytes says (a dumped scenario then validates again unchanged)
    weight_dtype: WeightDtype | None = None
    kv_dtype: KVDtype | None = None
    # mixture of experts, latent attention, sliding windows, MTP: sim/costs/architecture.py
    num_experts: int | None = Field(default=None, ge=2, le=65_536)
    experts_per_token: int | None = Field(default=None, ge=1, le=65_536)
    num_shared_experts: int = Field(default=0, ge=0, le=1024)
    moe_intermediate_size: int | None = Field(default=None, gt=0, le=1_000_000)
    num_moe_layers: int | None = Field(default=None, gt=0)
    expert_weight_dtype: WeightDtype | None = None
    expert_hottest_share: float | None = Field(default=None, gt=0, lt=1)
    kv_lora_rank: int | None = Field(default=None, gt=0, le=1_000_000)
    qk_rope_head_dim: int | None = Field(default=None, gt=0, le=1_000_000)
    v_head_dim: int | None = Field(default=None, gt=0, le=1_000_000)  # None: head_dim
    sliding_window: int | None = Field(default=None, gt=0, le=100_000_000)
    num_sliding_layers: int = Field(default=0, ge=0)
    num_mtp_layers: int = Field(default=0, ge=0, le=64)
    # read from a Hugging Face config.json (sim/costs/hf_config.py): the file as the scenario
    # gave it, and what the file states that the fields above do not carry (set by batchsim)
    config: str | None = Field(default=None, max_length=4096)
    unmapped: str | None = Field(default=None, max_length=600)

    @model_validator(mode="before")
    @classmethod
    def _from_catalog(cls, data: Any) -> Any:
        return resolve_entry(data, _MODEL_TABLE, "model", MODEL_REQUIRED)

    # One after-validator, keeping its name: pydantic puts it in error locations, and
    # sim/scenario/load.py strips that tag by name.
    @model_validator(mode="after")
    def _check_heads(self) -> ModelSpec:
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        if self.num_active_parameters is not None and (
            self.num_active_parameters > self.num_parameters
        ):
            raise ValueError(
                f"num_active_parameters ({self.num_active_parameters}) cannot exceed "
                f"num_parameters ({self.num_parameters})"
            )
        problem = architecture_problem(self)
        if problem:
            raise ValueError(problem)
        named = {k for k in ("weight_dtype", "kv_dtype") if getattr(self, k) is not None}
        if self.dtype_bytes is not None and named:
            raise ValueError(
                f"give dtype_bytes or {' and '.join(sorted(named))}, not both (dtype_bytes is the "
                "older override of weights and KV alike)"
            )
        return self

    @property
    def weight_dtype_name(self) -> str:
        """The weights' dtype: `weight_dtype`, else named after `dtype_bytes`, else bf16."""
        return self.weight_dtype or _dtype_name(self.dtype_bytes)

    @property
    def kv_dtype_name(self) -> str:
        return self.kv_dtype or _dtype_name(self.dtype_bytes)

    @property
    def weight_bytes_per_parameter(self) -> float:
        if self.dtype_bytes is not None:
            return self.dtype_bytes
        return DTYPE_BYTES[self.weight_dtype or "bf16"]

    @property
    def kv_bytes_per_element(self) -> float:
        if self.dtype_bytes is not None:
            return self.dtype_bytes
        return DTYPE_BYTES[self.kv_dtype or "bf16"]

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None

    @property
    def expert_bytes_per_parameter(self) -> float:
        """Bytes per parameter of the routed experts (`expert_weight_dtype`, else the weights')."""
        if self.expert_weight_dtype is not None:
            return DTYPE_BYTES[self.expert_weight_dtype]
        return self.weight_bytes_per_parameter

    @property
    def expert_parameters(self) -> int:
        """Parameters of one routed expert in one layer (gate, up and down projections)."""
        return 3 * self.hidden_size * (self.moe_intermediate_size or 0)

    @property
    def moe_layers(self) -> int:
        return (self.num_moe_layers or self.num_layers) if self.is_moe else 0

    @property
    def routed_parameters(self) -> int:
        """Every routed expert of every MoE layer (0 for a dense model)."""
        return routed_expert_parameters(self)

    @property
    def dense_parameters(self) -> int:
        """What every step reads whatever the routing: all but the routed experts."""
        return self.num_parameters - self.routed_parameters

    @property
    def active_parameters(self) -> int:
        """Parameters one token multiplies through: `num_active_parameters`, else for a mixture
        of experts the dense part plus its top-k experts in every MoE layer, else all."""
        if self.num_active_parameters is not None:
            return self.num_active_parameters
        if self.is_moe:
            assert self.experts_per_token is not None
            routed = self.moe_layers * self.experts_per_token * self.expert_parameters
            return self.dense_parameters + routed
        return self.num_parameters

    @property
    def dense_weight_bytes(self) -> float:
        return self.dense_parameters * self.weight_bytes_per_parameter

    @property
    def routed_weight_bytes(self) -> float:
        return self.routed_parameters * self.expert_bytes_per_parameter

    @property
    def weight_bytes(self) -> float:
        if not self.is_moe:
            return self.num_parameters * self.weight_bytes_per_parameter
        return self.dense_weight_bytes + self.routed_weight_bytes

    @property
    def full_attention_layers(self) -> int:
        return self.num_layers - self.num_sliding_layers

    @property
    def kv_elements_per_layer(self) -> int:
        """KV elements one token keeps in one layer: K and V of every KV head (grouped-query
        attention shares them), or one latent vector (latent attention)."""
        if self.kv_lora_rank is not None and self.qk_rope_head_dim is not None:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    @property
    def kv_bytes_per_token(self) -> float:
        """KV bytes per token in the block pool: the full-attention layers."""
        return self.full_attention_layers * self.kv_elements_per_layer * self.kv_bytes_per_element

    @property
    def sliding_kv_bytes_per_seq(self) -> float:
        """KV bytes one running sequence keeps in the sliding-window layers (their window)."""
        window = self.sliding_window or 0
        per_token = self.kv_elements_per_layer * self.kv_bytes_per_element
        return self.num_sliding_layers * per_token * window

    @property
    def flops_per_token(self) -> float:
        # one multiply-add per active parameter for each token a step computes (attention
        # excluded); a mixture of experts multiplies through its routed experts only
        return 2.0 * self.active_parameters

    @property
    def dtype_label(self) -> str:
        """`bf16`, or `w-int4/kv-fp8` when weights and KV differ."""
        w, kv = self.weight_dtype_name, self.kv_dtype_name
        return w if w == kv else f"w-{w}/kv-{kv}"
