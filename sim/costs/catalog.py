"""Model and hardware specifications, and the KV memory they leave.

A scenario names a model and a GPU. Each may be given as a catalog name (`"llama-3-8b"`), as a
mapping that names a catalog entry and overrides some fields (`{name: a100-80g,
gpu_memory_utilization: 0.8}`, `{name: llama-3-70b, weight_dtype: fp8}`), or as a fully explicit
mapping whose name is not in the catalog (then every required field must be present). The specs
are frozen pydantic models, so a resolved spec can be shared by every instance of a run.

Data types. `weight_dtype` (bf16 | fp16 | fp8 | int4 | mxfp4 | nvfp4: 2, 2, 1, 0.5, 0.53, 0.56
bytes per parameter) sets the weight bytes; `kv_dtype` (bf16 | fp16 | fp8 | nvfp4) the KV bytes per
token. Both default to bf16.
The older `dtype_bytes` still works as an explicit override of both (the tiny test models use it)
and may not be combined with the dtype names (which then stay None; fp8 GEMM rates need
`weight_dtype: fp8`, so a legacy `dtype_bytes: 1` model keeps its bf16-rate roofline). int4
counts 0.5 bytes per parameter and ignores the quantization scales (about 3% more for
group-size-128 fp16 scales). Activations stay bf16 whatever the weight dtype.

FLOP rate assumed per weight dtype (sim/costs/profile.py): bf16/fp16 at the dense bf16 peak; fp8 at
the GPU's dense fp8 peak (W8A8) where it has fp8 tensor cores, else at bf16 (weight-only, A100);
int4 weight-only (W4A16) at bf16. Attention always at bf16, also with an fp8 KV cache.

Mixture of experts. `num_parameters` is the total (memory); the expert fields (sim/costs/
architecture.py) say which part a step reads by routing; data and expert parallelism in the
HardwareSpec (sim/costs/parallel.py). `num_active_parameters` (default: derived from the expert
fields, else the total) is what one token multiplies through.

Price and power. A GPU's rent per hour and board power (`usd_per_gpu_hour`, `tdp_w`, `idle_w`)
default to the table in sim/costs/prices.py (its source and date are there) and may be set like
any other field; they price a fleet and estimate its energy, and never change a schedule.

Tensor parallelism. A `HardwareSpec` is one serving *instance*: `tensor_parallel` GPUs of the
named kind (default 1). Weights and KV heads are split across them, each GPU keeps its own
activation reserve, so

    KV capacity (tokens) = (tp * memory * gpu_memory_utilization - weight_bytes
                            - tp * activation_reserve) / kv_bytes_per_token(tp)

where `kv_bytes_per_token(tp)` is the model's KV bytes per token, except that when tp exceeds the
number of KV heads each GPU keeps one (replicated) KV head, as vLLM does. `check_fits`
(sim/costs/fits.py) rejects a model whose weights leave no room for KV and names the smallest
tensor_parallel that would fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ConfigDict, Field, model_validator

from sim.costs.catalog_gpus import HARDWARE_TABLE as _HARDWARE_TABLE
from sim.costs.catalog_models import MODEL_TABLE as _MODEL_TABLE
from sim.costs.model_spec import (
    DTYPE_BYTES,
    FP4_DTYPES,
    KVDtype,
    ModelSpec,
    WeightDtype,
    resolve_entry,
)
from sim.costs.prices import GpuEconomics, economics
from sim.inputs.strict_model import StrictModel

# the model's specification lives in sim.costs.model_spec; importers find it here too
__all__ = ["DTYPE_BYTES", "FP4_DTYPES", "HARDWARE", "MODELS", "HardwareSpec", "KVDtype",
           "ModelSpec", "Placement", "WeightDtype", "place"]  # fmt: skip

GiB = 1024**3
MiB = 1024**2

# Tensor-parallel degrees `check_fits` suggests from (one NVLink domain holds at most 8 GPUs here).
TP_CANDIDATES = (1, 2, 4, 8)
# fields that an explicit (non-catalog) hardware spec must give
HARDWARE_REQUIRED = ("memory_bytes", "hbm_bandwidth_bytes_per_s", "peak_flops")


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
    tensor_parallel: int = Field(default=1, ge=1, le=1024)
    # rent per GPU-hour (US dollars), board power per GPU (watts); None: sim/costs/prices.py
    usd_per_gpu_hour: float | None = Field(default=None, ge=0)
    tdp_w: float | None = Field(default=None, gt=0)
    idle_w: float | None = Field(default=None, ge=0)
    # per GPU, dense fp4 tensor cores (NVFP4/MXFP4); None where the GPU has none: fp4 weights
    # are then dequantized (weight-only) and run at the bf16 rate
    fp4_peak_flops: float | None = Field(default=None, gt=0)
    # Mixture of experts (sim/costs/parallel.py): data_parallel attention ranks of
    # tensor_parallel GPUs each behind one set of expert layers; expert_parallel 1 (experts
    # split by tensor) or every GPU of the instance (num_experts / ep whole experts per GPU)
    data_parallel: int = Field(default=1, ge=1, le=1024)
    expert_parallel: int = Field(default=1, ge=1, le=1024)
    # pipeline stages, each `tensor_parallel x data_parallel` GPUs holding a share of the layers
    # (sim/costs/pipeline.py): as many batches in flight as stages
    pipeline_parallel: int = Field(default=1, ge=1, le=64)
    # GPUs one NVLink / Infinity Fabric domain joins (8: HGX, 72: GB200 NVL72); beyond it the
    # scale-out NIC, per GPU and direction (400 Gb/s: 50e9 bytes/s), and its one-way latency
    scaleup_domain_gpus: int = Field(default=8, ge=1, le=1024)
    scaleout_bandwidth_bytes_per_s: float | None = Field(default=None, gt=0)
    scaleout_latency_s: float = Field(default=5e-6, ge=0, le=1)
    # busiest expert-parallel GPU's routed tokens over the mean (None: drawn, sim/costs/moe.py)
    expert_imbalance: float | None = Field(default=None, ge=1, le=1024)
    # extra replicas of the hottest routed experts placed beside the model's own (SGLang's
    # `--ep-num-redundant-experts`, vLLM's `--num-redundant-experts`): num_experts +
    # redundant_experts must divide over expert_parallel; each replica takes its share of the load
    redundant_experts: int = Field(default=0, ge=0, le=4096)

    @model_validator(mode="before")
    @classmethod
    def _from_catalog(cls, data: Any) -> Any:
        return resolve_entry(data, _HARDWARE_TABLE, "hardware", HARDWARE_REQUIRED)

    @model_validator(mode="after")
    def _check_power(self) -> HardwareSpec:
        gpus, ep = self.stage_gpus, self.expert_parallel
        if ep not in (1, gpus):
            raise ValueError(
                f"expert_parallel ({ep}) must be 1 (experts split by tensor) or every GPU of a "
                f"stage: tensor_parallel x data_parallel = {gpus}"
            )
        if self.expert_imbalance is not None and self.expert_imbalance > ep:
            raise ValueError(
                f"expert_imbalance ({self.expert_imbalance:g}) cannot exceed expert_parallel "
                f"({ep}): the busiest GPU holds at most every routed token"
            )
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
        return self.num_gpus * self.memory_bytes * self.gpu_memory_utilization

    @property
    def instance_peak_flops(self) -> float:
        return self.num_gpus * self.peak_flops

    @property
    def instance_hbm_bandwidth_bytes_per_s(self) -> float:
        return self.num_gpus * self.hbm_bandwidth_bytes_per_s

    @property
    def stage_gpus(self) -> int:
        """GPUs of one pipeline stage: tensor_parallel for each data-parallel rank."""
        return self.tensor_parallel * self.data_parallel

    @property
    def num_gpus(self) -> int:
        """GPUs of the instance: every stage's."""
        return self.stage_gpus * self.pipeline_parallel

    def with_tensor_parallel(self, tp: int) -> HardwareSpec:
        return HardwareSpec.model_validate(self.model_dump() | {"tensor_parallel": tp})


MODELS: dict[str, ModelSpec] = {n: ModelSpec.model_validate(n) for n in _MODEL_TABLE}
HARDWARE: dict[str, HardwareSpec] = {n: HardwareSpec.model_validate(n) for n in _HARDWARE_TABLE}


def _kv_copies(model: ModelSpec, hw: HardwareSpec) -> tuple[int, int]:
    """(KV heads or latents stored per layer, elements each) on one data-parallel rank."""
    tp = hw.tensor_parallel
    if model.kv_lora_rank is not None:  # one latent every head shares: each GPU keeps it whole
        return tp, model.kv_elements_per_layer
    return max(model.num_kv_heads, tp), 2 * model.head_dim


def kv_bytes_per_token_on(model: ModelSpec, hw: HardwareSpec) -> float:
    """KV bytes one token takes on the instance (in the block pool: full-attention layers).

    With tensor parallelism each GPU holds `num_kv_heads / tp` KV heads; when tp exceeds the KV
    heads each GPU still holds one, so the instance stores `tp` copies' worth of heads. A latent
    (multi-head latent attention) is kept whole on every GPU of the rank. With data-parallel
    attention a token lives on one rank."""
    copies, elements = _kv_copies(model, hw)
    if model.kv_lora_rank is not None:
        return model.full_attention_layers * copies * elements * model.kv_bytes_per_element
    heads = copies
    return 2 * model.full_attention_layers * heads * model.head_dim * model.kv_bytes_per_element


def sliding_kv_bytes_per_seq_on(model: ModelSpec, hw: HardwareSpec) -> float:
    """KV bytes one running sequence keeps on the instance in the sliding-window layers."""
    if not model.num_sliding_layers:
        return 0.0
    heads, _ = _kv_copies(model, hw)
    window = model.sliding_window or 0
    per_head = model.head_dim * model.kv_bytes_per_element * window
    return 2 * model.num_sliding_layers * heads * per_head


def stored_weight_bytes(model: ModelSpec, hw: HardwareSpec) -> float:
    """Weight bytes the instance holds: with data-parallel attention every rank keeps its own
    copy of the dense part (attention, dense layers, shared experts, embeddings), while the
    routed experts are held once across all GPUs, with any redundant replicas beside them."""
    replicas = hw.redundant_experts * model.moe_layers * model.expert_parameters
    held = model.weight_bytes + replicas * model.expert_bytes_per_parameter
    if hw.data_parallel == 1:
        return held
    return held + (hw.data_parallel - 1) * model.dense_weight_bytes


def free_kv_bytes(
    model: ModelSpec, hw: HardwareSpec, draft: ModelSpec | None = None, max_seqs: int = 0
) -> float:
    reserve = float(hw.num_gpus * hw.activation_reserve_bytes)
    weights = stored_weight_bytes(model, hw)
    if draft is not None:
        weights += stored_weight_bytes(draft, hw)
    if max_seqs:
        reserve += max_seqs * sliding_kv_bytes_per_seq_on(model, hw)
    return hw.usable_bytes - weights - reserve


def _token_bytes(model: ModelSpec, hw: HardwareSpec, draft: ModelSpec | None) -> float:
    """KV bytes a token takes: the target's, and a speculative draft model's own KV of it."""
    own = kv_bytes_per_token_on(model, hw)
    return own if draft is None else own + kv_bytes_per_token_on(draft, hw)


def kv_capacity_tokens(
    model: ModelSpec, hw: HardwareSpec, draft: ModelSpec | None = None, max_seqs: int = 0
) -> int:
    """Tokens of KV that fit next to the weights; zero or negative when nothing fits. With a
    speculative `draft` model, its weights take memory too and every token also has its KV;
    sliding-window layers set aside their window for `max_seqs` running sequences first."""
    return int(free_kv_bytes(model, hw, draft, max_seqs) // _token_bytes(model, hw, draft))


def kv_capacity_blocks(
    model: ModelSpec,
    hw: HardwareSpec,
    block_size: int,
    draft: ModelSpec | None = None,
    max_seqs: int = 0,
) -> int:
    """Whole KV blocks of `block_size` tokens; a partial block is unusable. Sliding-window
    layers set aside their window for `max_seqs` running sequences first."""
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    free = free_kv_bytes(model, hw, draft, max_seqs)
    return int(free // (block_size * _token_bytes(model, hw, draft)))


@dataclass(frozen=True)
class Placement:
    """A model's figures on an instance's hardware, read from the catalog's entries once
    (`place`): what the fit checks (`sim.costs.fits`, `sim.costs.windows`), the roofline
    profile and its mixture-of-experts terms (`sim.costs.parallel`) and the instance's figures
    (`sim.costs.figures`) read, as plain numbers."""

    # the model's own
    is_moe: bool
    weight_bytes: float
    flops_per_token: float
    dense_weight_bytes: float
    dense_parameters: int
    expert_parameters: int
    expert_bytes_per_parameter: float
    moe_layers: int
    full_attention_layers: int
    weight_dtype_name: str
    kv_dtype_name: str
    dtype_label: str
    # on the hardware
    num_gpus: int
    stage_gpus: int
    kv_bytes_per_token: float
    sliding_kv_bytes_per_seq: float
    kv_capacity_tokens: int  # next to the weights alone
    economics: GpuEconomics
    instance_peak_flops: float
    instance_hbm_bandwidth_bytes_per_s: float
    # with a speculative draft model next to it, `seats` running sequences and KV blocks of
    # `block_size` tokens (`place`'s arguments)
    draft: Placement | None = None
    draft_capacity_tokens: int = 0  # tokens of KV next to both models' weights
    seats_blocks: int = 0  # blocks left beside the seats' sliding windows (no draft)
    kv_blocks: int = 0  # blocks left beside both, a draft's weights and KV included


def place(
    model: ModelSpec,
    hw: HardwareSpec,
    *,
    draft: ModelSpec | None = None,
    seats: int = 0,
    block_size: int = 1,
) -> Placement:
    """`model` on `hw` in plain figures (see `Placement`), with a `draft` model, `seats`
    running sequences and blocks of `block_size` tokens where a layout has them."""
    return Placement(
        is_moe=model.is_moe,
        weight_bytes=model.weight_bytes,
        flops_per_token=model.flops_per_token,
        dense_weight_bytes=model.dense_weight_bytes,
        dense_parameters=model.dense_parameters,
        expert_parameters=model.expert_parameters if model.is_moe else 0,
        expert_bytes_per_parameter=model.expert_bytes_per_parameter,
        moe_layers=model.moe_layers,
        full_attention_layers=model.full_attention_layers,
        weight_dtype_name=model.weight_dtype_name,
        kv_dtype_name=model.kv_dtype_name,
        dtype_label=model.dtype_label,
        num_gpus=hw.num_gpus,
        stage_gpus=hw.stage_gpus,
        kv_bytes_per_token=kv_bytes_per_token_on(model, hw),
        sliding_kv_bytes_per_seq=sliding_kv_bytes_per_seq_on(model, hw),
        kv_capacity_tokens=kv_capacity_tokens(model, hw),
        economics=hw.economics,
        instance_peak_flops=hw.instance_peak_flops,
        instance_hbm_bandwidth_bytes_per_s=hw.instance_hbm_bandwidth_bytes_per_s,
        draft=None if draft is None else place(draft, hw),
        draft_capacity_tokens=0 if draft is None else kv_capacity_tokens(model, hw, draft),
        seats_blocks=kv_capacity_blocks(model, hw, block_size, None, seats),
        kv_blocks=kv_capacity_blocks(model, hw, block_size, draft, seats),
    )
