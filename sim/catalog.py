"""Model and hardware specifications, and the KV memory they leave.

A scenario names a model and a GPU. Each may be given as a catalog name (`"llama-3-8b"`), as a
mapping that names a catalog entry and overrides some fields (`{name: a100-80g,
gpu_memory_utilization: 0.8}`), or as a fully explicit mapping whose name is not in the catalog
(then every required field must be present). The specs are frozen pydantic models, so a resolved
spec can be shared by every instance of a run.

KV capacity follows DESIGN.md: the memory the serving engine may use (`memory_bytes *
gpu_memory_utilization`) minus the weights and an activation/workspace reserve, divided by the KV
bytes of one token. Tensor parallelism is out of scope: one model replica lives on one GPU, which
is why `check_fits` rejects e.g. Llama-3-70B in bf16 on a single A100-80G.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

GiB = 1024**3
MiB = 1024**2

# Real configs (Hugging Face `config.json`); parameter counts include embeddings and LM head,
# checked by summing the weight shapes of each architecture.
_MODEL_TABLE: dict[str, dict[str, Any]] = {
    "llama-2-7b": dict(
        num_parameters=6_738_415_616,
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_kv_heads=32,
        head_dim=128,
        max_model_len=4096,
    ),
    "llama-2-13b": dict(
        num_parameters=13_015_864_320,
        num_layers=40,
        hidden_size=5120,
        num_attention_heads=40,
        num_kv_heads=40,
        head_dim=128,
        max_model_len=4096,
    ),
    "llama-3-8b": dict(
        num_parameters=8_030_261_248,
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_kv_heads=8,
        head_dim=128,
        max_model_len=8192,
    ),
    "llama-3-70b": dict(
        num_parameters=70_553_706_496,
        num_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_kv_heads=8,
        head_dim=128,
        max_model_len=8192,
    ),
    # Mistral-7B-v0.1: 32k positions (its 4k sliding window is not modelled: KV is kept in full)
    "mistral-7b": dict(
        num_parameters=7_241_732_096,
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_kv_heads=8,
        head_dim=128,
        max_model_len=32768,
    ),
}

# memory_bytes is the total the driver reports (nvidia-smi "MiB"), which is what an engine's
# gpu_memory_utilization multiplies; the datasheet "GB" label is a rounded figure.
_HARDWARE_TABLE: dict[str, dict[str, Any]] = {
    # NVIDIA A100 datasheet (2021): 40GB SXM 1,555 GB/s, 80GB SXM 2,039 GB/s; BF16 dense 312 TFLOPS
    "a100-40g": dict(
        memory_bytes=40_960 * MiB, hbm_bandwidth_bytes_per_s=1.555e12, peak_flops=312e12
    ),
    "a100-80g": dict(
        memory_bytes=81_920 * MiB, hbm_bandwidth_bytes_per_s=2.039e12, peak_flops=312e12
    ),
    # NVIDIA H100 datasheet, SXM5: 80 GB HBM3, 3.35 TB/s, BF16 dense 989 TFLOPS (1,979 is sparse)
    "h100-sxm": dict(
        memory_bytes=81_559 * MiB, hbm_bandwidth_bytes_per_s=3.35e12, peak_flops=989e12
    ),
    # NVIDIA H200 datasheet, SXM: 141 GB HBM3e, 4.8 TB/s, BF16 dense 989 TFLOPS (same die as H100)
    "h200": dict(memory_bytes=143_771 * MiB, hbm_bandwidth_bytes_per_s=4.8e12, peak_flops=989e12),
}


def _resolve(data: Any, table: dict[str, dict[str, Any]], kind: str) -> Any:
    """Expand a catalog name, or a catalog name plus overrides, into a full field mapping."""
    known = ", ".join(sorted(table))
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
        required = [f for f in next(iter(table.values())) if f not in data]
        if required:
            raise ValueError(
                f"unknown {kind} {name!r} (known: {known}); an explicit {kind} needs "
                f"{', '.join(required)}"
            )
    return data


class ModelSpec(BaseModel):
    """Dimensions of one dense decoder-only transformer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    num_parameters: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    dtype_bytes: float = Field(default=2.0, gt=0)  # weights and KV bytes per element (bf16 = 2)
    max_model_len: int = Field(gt=0)

    @model_validator(mode="before")
    @classmethod
    def _from_catalog(cls, data: Any) -> Any:
        return _resolve(data, _MODEL_TABLE, "model")

    @model_validator(mode="after")
    def _check_heads(self) -> ModelSpec:
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        return self

    @property
    def weight_bytes(self) -> float:
        return self.num_parameters * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> float:
        # K and V, in every layer, for every KV head (grouped-query attention shares them)
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def flops_per_token(self) -> float:
        # one multiply-add per parameter for each token a step computes (attention excluded)
        return 2.0 * self.num_parameters


class HardwareSpec(BaseModel):
    """One accelerator: memory, bandwidth and dense bf16 throughput from its datasheet."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    memory_bytes: int = Field(gt=0)
    hbm_bandwidth_bytes_per_s: float = Field(gt=0)
    peak_flops: float = Field(gt=0)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    # workspace and activations kept out of the KV pool (vLLM measures it with a profiling run)
    activation_reserve_bytes: int = Field(default=1 * GiB, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _from_catalog(cls, data: Any) -> Any:
        return _resolve(data, _HARDWARE_TABLE, "hardware")

    @property
    def usable_bytes(self) -> float:
        return self.memory_bytes * self.gpu_memory_utilization


MODELS: dict[str, ModelSpec] = {n: ModelSpec.model_validate(n) for n in _MODEL_TABLE}
HARDWARE: dict[str, HardwareSpec] = {n: HardwareSpec.model_validate(n) for n in _HARDWARE_TABLE}


def kv_capacity_tokens(model: ModelSpec, hw: HardwareSpec) -> int:
    """Tokens of KV that fit next to the weights; zero or negative when nothing fits."""
    free = hw.usable_bytes - model.weight_bytes - hw.activation_reserve_bytes
    return int(free // model.kv_bytes_per_token)


def kv_capacity_blocks(model: ModelSpec, hw: HardwareSpec, block_size: int) -> int:
    """Whole KV blocks of `block_size` tokens; a partial block is unusable."""
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    free = hw.usable_bytes - model.weight_bytes - hw.activation_reserve_bytes
    return int(free // (block_size * model.kv_bytes_per_token))


def check_fits(model: ModelSpec, hw: HardwareSpec) -> None:
    """Raise ValueError when the weights and the activation reserve leave no room for KV."""
    if kv_capacity_tokens(model, hw) > 0:
        return
    raise ValueError(
        f"{model.name} does not fit on one {hw.name}: weights {model.weight_bytes / GiB:.1f} GiB "
        f"+ activation reserve {hw.activation_reserve_bytes / GiB:.1f} GiB vs usable memory "
        f"{hw.usable_bytes / GiB:.1f} GiB ({hw.memory_bytes / GiB:.1f} GiB x "
        f"gpu_memory_utilization {hw.gpu_memory_utilization})"
    )
