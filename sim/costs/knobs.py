"""Engine effects priced on top of a profile: CUDA-graph padding, token padding, CPU overhead.

All are off by default. They are set in a profile file or inline profile (`pricing:`), or for a
whole scenario in `engine.pricing` (whose fields, where given, win over the profile's):

- `cuda_graph_capture_sizes`: a decode-only step of B sequences runs the CUDA graph captured for
  the smallest captured batch size >= B, so its linear layers and per-sequence terms are priced
  at that size (the padded slots compute a token each but attend to no KV). Batches above the
  largest captured size run eagerly, unpadded. `vllm` is vLLM's default list (V1 engine): 1, 2,
  4, the multiples of 8 below 256 and of 16 from 256 to 512 (vLLM stops at 2 x max_num_seqs,
  which pads every batch the scheduler can form the same way).
- `pad_tokens_to`: every other step's token count is rounded up to a multiple of this (GEMM tile
  alignment, e.g. 8) for the linear layers; the padded tokens are priced as decode tokens.
- `gpu_time_scale`: every step's GPU time (the profile's price, padding included) times this
  factor: a deployment's kernels running faster or slower than those the profile measured (another
  driver, attention backend or clock); fitted from measured runs by `batchsim calibrate-engine`.
- `cpu_overhead`: host time per step, `per_step_s + per_seq_s * num_seqs` (scheduling, input
  preparation, sampling bookkeeping). Synchronous engines add it to the GPU time; with
  `overlap` (asynchronous scheduling: the CPU prepares step k+1 while the GPU runs step k) a step
  takes `max(gpu, cpu)`.

`KnobbedPricer` wraps a cost model (`CostModel` or `TableCostModel`) with these. A repeated run
stays exact: the padded sizes and the CPU time are the same for every step of a run, and with
overlap the run is cut where the growing GPU time crosses the CPU time.
"""

from __future__ import annotations

import math
from typing import Literal, Protocol

from pydantic import ConfigDict, Field, field_validator

from sim.costs.features import StepFeaturesLike
from sim.costs.priced_runs import PricedRuns
from sim.inputs.strict_model import StrictModel

VLLM_CAPTURE_SIZES: tuple[int, ...] = (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16))
BIG = 1 << 62  # "no limit" for linear_steps
# Upper bounds of the knobs, as the profile's coefficients have theirs: far beyond any real
# engine (vLLM captures at most 512 sizes by default; a host step of 10 s is already absurd),
# yet small enough that the per-size table stays small and a step's time stays finite.
MAX_CAPTURE_SIZE = 65_536
MAX_PAD_TOKENS = 65_536
MAX_CPU_STEP_S = 10.0
MAX_CPU_SEQ_S = 1.0


class _Strict(StrictModel):  # unknown keys, booleans as numbers, inf and NaN refused
    model_config = ConfigDict(frozen=True)


CaptureSizes = Literal["vllm"] | list[int] | None


class CpuOverheadSpec(_Strict):
    per_step_s: float = Field(default=0.0, ge=0, le=MAX_CPU_STEP_S)  # fixed host time per step
    # host time per sequence in the step
    per_seq_s: float = Field(default=0.0, ge=0, le=MAX_CPU_SEQ_S)
    overlap: bool = False  # asynchronous scheduling: step = max(gpu, cpu), else gpu + cpu


class PricingSpec(_Strict):
    """`pricing:` of a profile, or `engine.pricing` of a scenario (fields given there win)."""

    # decode-only steps run at the next captured batch size: "vllm" or a list of sizes
    cuda_graph_capture_sizes: CaptureSizes = None
    # other steps: round tokens up to a multiple of this
    pad_tokens_to: int | None = Field(default=None, gt=0, le=MAX_PAD_TOKENS)
    cpu_overhead: CpuOverheadSpec | None = None
    # the profile's GPU time times this (kernels faster or slower than where it was measured)
    gpu_time_scale: float = Field(default=1.0, ge=0.1, le=10.0)

    @field_validator("cuda_graph_capture_sizes")
    @classmethod
    def _sizes(cls, value: CaptureSizes) -> CaptureSizes:
        if isinstance(value, list):
            if not value or min(value) < 1:
                raise ValueError("capture sizes must be a non-empty list of sizes >= 1")
            if max(value) > MAX_CAPTURE_SIZE:
                # the pricer keeps a table with one entry per batch size up to the largest
                raise ValueError(
                    f"capture size {max(value)} is above {MAX_CAPTURE_SIZE} (a batch size)"
                )
            return sorted(set(value))
        return value

    def capture_sizes(self) -> tuple[int, ...]:
        sizes = self.cuda_graph_capture_sizes
        if sizes is None:
            return ()
        return VLLM_CAPTURE_SIZES if sizes == "vllm" else tuple(sizes)

    @property
    def active(self) -> bool:
        cpu = self.cpu_overhead
        has_cpu = cpu is not None and (cpu.per_step_s > 0 or cpu.per_seq_s > 0)
        scaled = self.gpu_time_scale != 1.0
        return bool(self.capture_sizes()) or self.pad_tokens_to is not None or has_cpu or scaled


def merge_pricing(profile: PricingSpec | None, scenario: PricingSpec | None) -> PricingSpec:
    """The profile's knobs with the scenario's given fields on top."""
    base = profile or PricingSpec()
    if scenario is None:
        return base
    return base.model_copy(update={k: getattr(scenario, k) for k in scenario.model_fields_set})


class BasePricer(Protocol):
    num_extrapolated: int

    def price(
        self, features: StepFeaturesLike, num_tokens: int, num_seqs: int
    ) -> tuple[float, float, int, bool]:
        """(first step s, increment per repeated step, steps on this linear piece, outside)
        for the step computing `num_tokens` tokens over `num_seqs` slots (padding included)."""
        ...


class KnobbedPricer(PricedRuns):
    """A cost model with CUDA-graph padding, token padding and CPU overhead priced on top."""

    def __init__(self, base: BasePricer, pricing: PricingSpec) -> None:
        self.base = base
        self.pricing = pricing
        sizes = pricing.capture_sizes()
        self.max_graph = sizes[-1] if sizes else 0
        # the captured size each batch size runs at (index: batch size)
        self.graph_size = [0] * (self.max_graph + 1)
        for b in range(self.max_graph, 0, -1):
            self.graph_size[b] = b if b in sizes else self.graph_size[b + 1]
        self.pad_to = pricing.pad_tokens_to or 1
        cpu = pricing.cpu_overhead or CpuOverheadSpec()
        self.cpu_step_s, self.cpu_seq_s, self.overlap = cpu.per_step_s, cpu.per_seq_s, cpu.overlap
        self.scale = pricing.gpu_time_scale
        self.num_extrapolated = 0
        self.last_extrapolated = False
        self.has_tables: bool = getattr(base, "has_tables", False)
        self._last: tuple[StepFeaturesLike | None, int] = (None, 0)

    def padded(self, features: StepFeaturesLike) -> tuple[int, int]:
        """(tokens, sequences) the GPU computes: CUDA-graph or token padding included."""
        n, seqs = features.num_tokens, features.num_seqs
        if not features.num_prefill_tokens and 0 < seqs <= self.max_graph:
            extra = self.graph_size[seqs] - seqs
            return n + extra, seqs + extra
        m = self.pad_to
        return -(-n // m) * m, seqs

    def cpu_overhead_s(self, features: StepFeaturesLike) -> float:
        """Host seconds per step (the same for every step of a run)."""
        return self.cpu_step_s + self.cpu_seq_s * features.num_seqs

    def times(self, features: StepFeaturesLike) -> tuple[float, float, int, bool]:
        """(first step s, increment per repeated step, steps on this linear piece, outside)."""
        n, seqs = self.padded(features)
        first, increment, steps, outside = self.base.price(features, n, seqs)
        if self.scale != 1.0:  # a linear piece stays linear
            first, increment = first * self.scale, increment * self.scale
        cpu = self.cpu_step_s + self.cpu_seq_s * features.num_seqs
        if cpu:
            if not self.overlap:
                first += cpu
            else:
                first, increment, steps = _overlapped(first, increment, steps, cpu)
        return first, increment, steps, outside

    def _times(self, features: StepFeaturesLike) -> tuple[float, float, int, bool]:
        return self.times(features)


def _overlapped(first: float, increment: float, steps: int, cpu: float) -> tuple[float, float, int]:
    """max(gpu, cpu) over a run whose GPU time is first + (j - 1) * increment at step j: the
    run keeps one side of the crossing, so it stays linear."""
    if first >= cpu:
        if increment < 0:  # the GPU side shrinks: it holds while gpu >= cpu
            steps = _steps_within((first - cpu) / -increment, steps)
        return first, increment, steps
    if increment > 0:  # CPU-bound until the GPU time passes the CPU time
        steps = _steps_within((cpu - first) / increment, steps)
    return cpu, 0.0, steps


def _steps_within(ratio: float, steps: int) -> int:
    """Steps j = 1, 2, ... with j - 1 <= ratio, at most `steps`."""
    return math.floor(ratio) + 1 if ratio < steps else steps
