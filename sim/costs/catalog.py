"""Model and hardware specifications, and the KV memory they leave.

A scenario names a model and a GPU. Each may be given as a catalog name (`"llama-3-8b"`), as a
mapping that names a catalog entry and overrides some fields (`{name: a100-80g,
gpu_memory_utilization: 0.8}`, `{name: llama-3-70b, weight_dtype: fp8}`), or as a fully explicit
mapping whose name is not in the catalog (then every required field must be present). The specs
are frozen pydantic models, so a resolved spec can be shared by every instance of a run.

Data types. `weight_dtype` (bf16 | fp16 | fp8 | int4: 2, 2, 1, 0.5 bytes per parameter) sets the
weight bytes; `kv_dtype` (bf16 | fp16 | fp8) sets the KV bytes per token. Both default to bf16.
The older `dtype_bytes` still works as an explicit override of both (the tiny test models use it)
and may not be combined with the dtype names (which then stay None; fp8 GEMM rates need
`weight_dtype: fp8`, so a legacy `dtype_bytes: 1` model keeps its bf16-rate roofline). int4
counts 0.5 bytes per parameter and ignores the quantization scales (about 3% more for
group-size-128 fp16 scales). Activations stay bf16 whatever the weight dtype.

FLOP rate assumed per weight dtype (sim/costs/profile.py): bf16/fp16 at the dense bf16 peak; fp8 at
the GPU's dense fp8 peak (W8A8) where it has fp8 tensor cores, else at bf16 (weight-only, A100);
int4 weight-only (W4A16) at bf16. Attention always at bf16, also with an fp8 KV cache.

Mixture of experts. `num_parameters` is the total (memory, weight reads); `num_active_parameters`
(default: the total) is what one token multiplies through (FLOPs), e.g. 2 of 8 experts.

Price and power. A GPU's rent per hour and board power (`usd_per_gpu_hour`, `tdp_w`, `idle_w`)
default to the table in sim/costs/prices.py (its source and date are there) and may be set like
any other field; they price a fleet and estimate its energy, and never change a schedule.

Tensor parallelism. A `HardwareSpec` is one serving *instance*: `tensor_parallel` GPUs of the
named kind (default 1). Weights and KV heads are split across them, each GPU keeps its own
activation reserve, so

    KV capacity (tokens) = (tp * memory * gpu_memory_utilization - weight_bytes
                            - tp * activation_reserve) / kv_bytes_per_token(tp)

where `kv_bytes_per_token(tp)` is the model's KV bytes per token, except that when tp exceeds the
number of KV heads each GPU keeps one (replicated) KV head, as vLLM does. `check_fits` rejects a
model whose weights leave no room for KV and names the smallest tensor_parallel that would fit.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sim.costs.prices import GpuEconomics, economics
from sim.inputs.strict_model import StrictModel

GiB = 1024**3
MiB = 1024**2

WeightDtype = Literal["bf16", "fp16", "fp8", "int4"]
KVDtype = Literal["bf16", "fp16", "fp8"]
DTYPE_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int4": 0.5}

# Tensor-parallel degrees `check_fits` suggests from (one NVLink domain holds at most 8 GPUs here).
TP_CANDIDATES = (1, 2, 4, 8)

# Real configs (Hugging Face `config.json`); parameter counts include embeddings and LM head
# (untied in every model here), checked by summing the weight shapes of each architecture
# (tests/costs/test_catalog_models.py does the sums from vocab and intermediate sizes).
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
    # meta-llama/Llama-2-70b-hf: vocab 32000, intermediate 28672, GQA with 8 KV heads
    "llama-2-70b": dict(
        num_parameters=68_976_648_192,
        num_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_kv_heads=8,
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
    # codellama/CodeLlama-34b-hf (and -Instruct-hf): vocab 32000, intermediate 22016, GQA with 8
    # KV heads, 16k positions (rope theta 1e6)
    "codellama-34b": dict(
        num_parameters=33_743_970_304,
        num_layers=48,
        hidden_size=8192,
        num_attention_heads=64,
        num_kv_heads=8,
        head_dim=128,
        max_model_len=16384,
    ),
    # mistralai/Mixtral-8x7B-v0.1: vocab 32000, 8 experts of intermediate 14336, top-2 routing.
    # Total 46.7B (all experts: memory); active 12.9B (attention, router, 2 experts, embeddings).
    "mixtral-8x7b": dict(
        num_parameters=46_702_792_704,
        num_active_parameters=12_879_925_248,
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_kv_heads=8,
        head_dim=128,
        max_model_len=32768,
    ),
    # Qwen/Qwen2.5-7B: vocab 152064, intermediate 18944, QKV biases, untied LM head; 32k in the
    # config (128k needs YaRN rope scaling, not modelled)
    "qwen2.5-7b": dict(
        num_parameters=7_615_616_512,
        num_layers=28,
        hidden_size=3584,
        num_attention_heads=28,
        num_kv_heads=4,
        head_dim=128,
        max_model_len=32768,
    ),
    # Qwen/Qwen2.5-72B: vocab 152064, intermediate 29568, QKV biases, untied LM head
    "qwen2.5-72b": dict(
        num_parameters=72_706_203_648,
        num_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_kv_heads=8,
        head_dim=128,
        max_model_len=32768,
    ),
}

# memory_bytes is the total the driver reports (nvidia-smi "MiB"), which is what an engine's
# gpu_memory_utilization multiplies; the datasheet "GB" label is a rounded figure. FLOP/s are
# dense (the datasheets' larger figures assume 2:4 sparsity). interconnect_bandwidth_bytes_per_s
# is the datasheet's per-GPU figure, both directions together (NVLink, or PCIe where the GPU has
# no NVLink switch); a ring all-reduce moves data one way at half of it.
_HARDWARE_TABLE: dict[str, dict[str, Any]] = {
    # NVIDIA A100 datasheet (2021): 40GB SXM 1,555 GB/s, 80GB SXM 2,039 GB/s; BF16 dense 312 TFLOPS;
    # no FP8 tensor cores; NVLink 3 600 GB/s
    "a100-40g": dict(
        memory_bytes=40_960 * MiB,
        hbm_bandwidth_bytes_per_s=1.555e12,
        peak_flops=312e12,
        interconnect_bandwidth_bytes_per_s=600e9,
    ),
    "a100-80g": dict(
        memory_bytes=81_920 * MiB,
        hbm_bandwidth_bytes_per_s=2.039e12,
        peak_flops=312e12,
        interconnect_bandwidth_bytes_per_s=600e9,
    ),
    # NVIDIA A40 datasheet (2021): 48 GB GDDR6 with ECC (nvidia-smi 46,068 MiB, as the L40S), 696
    # GB/s, BF16 dense 149.7 TFLOPS (299.4 is sparse); no FP8 tensor cores; PCIe Gen4 x16 64 GB/s
    # (the 112.5 GB/s NVLink bridge joins pairs only, not modelled)
    "a40": dict(
        memory_bytes=46_068 * MiB,
        hbm_bandwidth_bytes_per_s=696e9,
        peak_flops=149.7e12,
        interconnect_bandwidth_bytes_per_s=64e9,
    ),
    # NVIDIA H100 datasheet, SXM5: 80 GB HBM3, 3.35 TB/s, BF16 dense 989 TFLOPS (1,979 is sparse),
    # FP8 dense 1,979 TFLOPS, NVLink 4 900 GB/s
    "h100-sxm": dict(
        memory_bytes=81_559 * MiB,
        hbm_bandwidth_bytes_per_s=3.35e12,
        peak_flops=989e12,
        fp8_peak_flops=1979e12,
        interconnect_bandwidth_bytes_per_s=900e9,
    ),
    # NVIDIA H100 datasheet, PCIe: 80 GB HBM2e, 2.0 TB/s, BF16 dense 756 TFLOPS, FP8 dense 1,513
    # TFLOPS; PCIe Gen5 x16 128 GB/s (the 600 GB/s NVLink bridge joins pairs only, not modelled)
    "h100-pcie": dict(
        memory_bytes=81_559 * MiB,
        hbm_bandwidth_bytes_per_s=2.0e12,
        peak_flops=756e12,
        fp8_peak_flops=1513e12,
        interconnect_bandwidth_bytes_per_s=128e9,
    ),
    # NVIDIA H200 datasheet, SXM: 141 GB HBM3e, 4.8 TB/s, BF16 dense 989 TFLOPS (same die as H100),
    # FP8 dense 1,979 TFLOPS, NVLink 4 900 GB/s
    "h200": dict(
        memory_bytes=143_771 * MiB,
        hbm_bandwidth_bytes_per_s=4.8e12,
        peak_flops=989e12,
        fp8_peak_flops=1979e12,
        interconnect_bandwidth_bytes_per_s=900e9,
    ),
    # NVIDIA L40S datasheet: 48 GB GDDR6 (nvidia-smi 46,068 MiB with ECC), 864 GB/s, BF16 dense
    # 362.05 TFLOPS, FP8 dense 733 TFLOPS; no NVLink: PCIe Gen4 x16 64 GB/s
    "l40s": dict(
        memory_bytes=46_068 * MiB,
        hbm_bandwidth_bytes_per_s=864e9,
        peak_flops=362.05e12,
        fp8_peak_flops=733e12,
        interconnect_bandwidth_bytes_per_s=64e9,
    ),
    # NVIDIA HGX B200 datasheet (per GPU = 1/8 of the 8-GPU board): HBM3e 8 TB/s, FP16/BF16 dense
    # 2.25 PFLOPS (4.5 sparse), FP8 dense 4.5 PFLOPS, NVLink 5 1.8 TB/s. Memory: the board's
    # 180 GB label; nvidia-smi reports 183,359 MiB, used here as for the other GPUs.
    "b200": dict(
        memory_bytes=183_359 * MiB,
        hbm_bandwidth_bytes_per_s=8.0e12,
        peak_flops=2.25e15,
        fp8_peak_flops=4.5e15,
        interconnect_bandwidth_bytes_per_s=1.8e12,
    ),
}

# fields that an explicit (non-catalog) spec must give
_REQUIRED = {
    "model": ("num_parameters", "num_layers", "hidden_size", "num_attention_heads",
              "num_kv_heads", "head_dim", "max_model_len"),
    "hardware": ("memory_bytes", "hbm_bandwidth_bytes_per_s", "peak_flops"),
}  # fmt: skip


def _dtype_name(dtype_bytes: float | None) -> str:
    if dtype_bytes is None:
        return "bf16"
    return {2.0: "bf16", 1.0: "fp8", 0.5: "int4", 4.0: "fp32"}.get(dtype_bytes, "unknown")


def _resolve(data: Any, table: dict[str, dict[str, Any]], kind: str) -> Any:
    """Expand a catalog name, or a catalog name plus overrides, into a full field mapping."""
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
        required = [f for f in _REQUIRED[kind] if f not in data]
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

    @model_validator(mode="before")
    @classmethod
    def _from_catalog(cls, data: Any) -> Any:
        return _resolve(data, _MODEL_TABLE, "model")

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
    def active_parameters(self) -> int:
        return (
            self.num_parameters
            if self.num_active_parameters is None
            else (self.num_active_parameters)
        )

    @property
    def weight_bytes(self) -> float:
        return self.num_parameters * self.weight_bytes_per_parameter

    @property
    def kv_bytes_per_token(self) -> float:
        # K and V, in every layer, for every KV head (grouped-query attention shares them)
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.kv_bytes_per_element

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


class HardwareSpec(StrictModel):
    """One serving instance: `tensor_parallel` GPUs of one kind, with datasheet figures per GPU."""

    model_config = ConfigDict(frozen=True)

    name: str
    memory_bytes: int = Field(gt=0)  # per GPU
    hbm_bandwidth_bytes_per_s: float = Field(gt=0)  # per GPU
    peak_flops: float = Field(gt=0)  # per GPU, dense bf16 tensor cores
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    # workspace and activations kept out of the KV pool (vLLM measures it with a profiling run);
    # per GPU
    activation_reserve_bytes: int = Field(default=1 * GiB, ge=0)
    # per GPU, dense fp8 tensor cores; None where the GPU has none (A100): fp8 runs at bf16 rate
    fp8_peak_flops: float | None = Field(default=None, gt=0)
    # per GPU, both directions together (datasheet NVLink or PCIe figure); needed for tp > 1
    interconnect_bandwidth_bytes_per_s: float | None = Field(default=None, gt=0)
    # GPUs per instance: weights and KV heads split across them, all-reduces between them
    tensor_parallel: int = Field(default=1, ge=1)
    # rent per GPU-hour (US dollars) and board power per GPU (watts); None: the catalog default
    # (sim/costs/prices.py), unknown (NaN) for a GPU outside the catalog
    usd_per_gpu_hour: float | None = Field(default=None, ge=0)
    tdp_w: float | None = Field(default=None, gt=0)
    idle_w: float | None = Field(default=None, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _from_catalog(cls, data: Any) -> Any:
        return _resolve(data, _HARDWARE_TABLE, "hardware")

    @model_validator(mode="after")
    def _check_power(self) -> HardwareSpec:
        figures = self.economics
        if figures.idle_w > figures.tdp_w:
            raise ValueError(
                f"idle_w ({figures.idle_w:g}) cannot exceed tdp_w ({figures.tdp_w:g}) of "
                f"{self.name}"
            )
        return self

    @property
    def economics(self) -> GpuEconomics:
        """Price and power per GPU: the fields given, else the catalog defaults."""
        return economics(self.name, self.usd_per_gpu_hour, self.tdp_w, self.idle_w)

    @property
    def usable_bytes(self) -> float:
        """Memory the engine may use on the whole instance (all tensor-parallel GPUs)."""
        return self.tensor_parallel * self.memory_bytes * self.gpu_memory_utilization

    @property
    def instance_peak_flops(self) -> float:
        return self.tensor_parallel * self.peak_flops

    @property
    def instance_hbm_bandwidth_bytes_per_s(self) -> float:
        return self.tensor_parallel * self.hbm_bandwidth_bytes_per_s

    def with_tensor_parallel(self, tp: int) -> HardwareSpec:
        return HardwareSpec.model_validate(self.model_dump() | {"tensor_parallel": tp})


MODELS: dict[str, ModelSpec] = {n: ModelSpec.model_validate(n) for n in _MODEL_TABLE}
HARDWARE: dict[str, HardwareSpec] = {n: HardwareSpec.model_validate(n) for n in _HARDWARE_TABLE}


def kv_bytes_per_token_on(model: ModelSpec, hw: HardwareSpec) -> float:
    """KV bytes one token takes on the whole instance.

    With tensor parallelism each GPU holds `num_kv_heads / tp` KV heads; when tp exceeds the KV
    heads each GPU still holds one, so the instance stores `tp` copies' worth of heads."""
    heads = max(model.num_kv_heads, hw.tensor_parallel)
    return 2 * model.num_layers * heads * model.head_dim * model.kv_bytes_per_element


def _free_kv_bytes(model: ModelSpec, hw: HardwareSpec, draft: ModelSpec | None = None) -> float:
    reserve = hw.tensor_parallel * hw.activation_reserve_bytes
    weights = model.weight_bytes + (draft.weight_bytes if draft is not None else 0.0)
    return hw.usable_bytes - weights - reserve


def _token_bytes(model: ModelSpec, hw: HardwareSpec, draft: ModelSpec | None) -> float:
    """KV bytes a token takes: the target's, and a speculative draft model's own KV of it."""
    own = kv_bytes_per_token_on(model, hw)
    return own if draft is None else own + kv_bytes_per_token_on(draft, hw)


def kv_capacity_tokens(model: ModelSpec, hw: HardwareSpec, draft: ModelSpec | None = None) -> int:
    """Tokens of KV that fit next to the weights; zero or negative when nothing fits. With a
    speculative `draft` model, its weights take memory too and every token also has its KV."""
    return int(_free_kv_bytes(model, hw, draft) // _token_bytes(model, hw, draft))


def kv_capacity_blocks(
    model: ModelSpec, hw: HardwareSpec, block_size: int, draft: ModelSpec | None = None
) -> int:
    """Whole KV blocks of `block_size` tokens; a partial block is unusable."""
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    return int(_free_kv_bytes(model, hw, draft) // (block_size * _token_bytes(model, hw, draft)))


def check_parallelism(model: ModelSpec, hw: HardwareSpec) -> None:
    """Raise ValueError when `hw.tensor_parallel` cannot shard `model` or lacks a link figure."""
    tp = hw.tensor_parallel
    if tp == 1:
        return
    if model.num_attention_heads % tp:
        raise ValueError(
            f"hardware.tensor_parallel ({tp}) must divide {model.name}'s num_attention_heads "
            f"({model.num_attention_heads})"
        )
    if model.num_kv_heads % tp and tp % model.num_kv_heads:
        raise ValueError(
            f"hardware.tensor_parallel ({tp}) must divide or be a multiple of {model.name}'s "
            f"num_kv_heads ({model.num_kv_heads})"
        )
    if hw.interconnect_bandwidth_bytes_per_s is None:
        raise ValueError(
            f"hardware.interconnect_bandwidth_bytes_per_s is required when tensor_parallel > 1 "
            f"({hw.name} has none)"
        )


def min_tensor_parallel(model: ModelSpec, hw: HardwareSpec) -> int | None:
    """The smallest degree in TP_CANDIDATES that shards `model` and leaves room for KV."""
    for tp in TP_CANDIDATES:
        candidate = hw.with_tensor_parallel(tp)
        try:
            check_parallelism(model, candidate)
        except ValueError:
            continue
        if kv_capacity_tokens(model, candidate) > 0:
            return tp
    return None


def check_draft_fits(model: ModelSpec, draft: ModelSpec, hw: HardwareSpec) -> None:
    """Raise ValueError when a speculative draft model cannot run next to `model` on `hw`."""
    check_parallelism(draft, hw)
    if kv_capacity_tokens(model, hw, draft) > 0:
        return
    raise ValueError(
        f"{draft.name} ({draft.weight_bytes / GiB:.1f} GiB of weights) leaves no room for KV "
        f"next to {model.name} ({model.weight_bytes / GiB:.1f} GiB) on {hw.name}"
    )


def check_fits(model: ModelSpec, hw: HardwareSpec) -> None:
    """Raise ValueError when the weights and the activation reserve leave no room for KV.

    Also rejects a tensor-parallel degree that cannot shard the model (`check_parallelism`)."""
    check_parallelism(model, hw)
    if kv_capacity_tokens(model, hw) > 0:
        return
    tp = hw.tensor_parallel
    where = f"one {hw.name}" if tp == 1 else f"{tp} x {hw.name} (tensor_parallel {tp})"
    reserve = tp * hw.activation_reserve_bytes
    hint = ""
    if hw.interconnect_bandwidth_bytes_per_s is not None:
        need = min_tensor_parallel(model, hw)
        if need is None:
            hint = f"; not even hardware.tensor_parallel {TP_CANDIDATES[-1]} fits"
        elif need > tp:
            hint = f"; hardware.tensor_parallel {need} would fit"
    dtype = (
        f"dtype_bytes {model.dtype_bytes:g}"
        if model.dtype_bytes is not None
        else (f"weight_dtype {model.weight_dtype_name}")
    )
    raise ValueError(
        f"{model.name} does not fit on {where}: weights {model.weight_bytes / GiB:.1f} GiB "
        f"({model.num_parameters / 1e9:.1f}B parameters x {model.weight_bytes_per_parameter:g} "
        f"bytes, {dtype}) "
        f"+ activation reserve {reserve / GiB:.1f} GiB vs usable memory "
        f"{hw.usable_bytes / GiB:.1f} GiB ({tp} x {hw.memory_bytes / GiB:.1f} GiB x "
        f"gpu_memory_utilization {hw.gpu_memory_utilization}){hint}"
    )
