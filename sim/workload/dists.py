"""The building blocks of the `workload:` section: length distributions, arrival processes and
delays (think times, tool waits), each a tagged union discriminated by a literal field (`dist`
or `process`). `sim.workload.spec` assembles them into the section and re-exports them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from sim.inputs.strict_model import StrictModel
from sim.workload.rate_spec import RateProfile

# trace files of requests (an `empirical` length resamples one of their columns too)
RequestTraceFormat = Literal["azure", "csv", "mooncake"]
# ... and agents' traces, whose calls wait on each other (sim.workload.weka_trace: weka;
# sim.workload.agent_traces: rollouts)
TraceFormat = Literal["azure", "csv", "mooncake", "weka", "rollouts"]
# measured runs of real engines replayed as traces (sim.measured reads them)
MeasuredFormat = Literal["vllm_otlp", "vllm_bench", "guidellm", "aiperf", "batchsim", "measured"]
MEASURED_FORMATS = ("vllm_otlp", "vllm_bench", "guidellm", "aiperf", "batchsim", "measured")
# Longest prompt or output a length may ask for: far beyond any model's context, yet small enough
# that token sums stay exact in int64 and float64 arithmetic.
MAX_TOKENS = 2**31 - 1


class _Strict(StrictModel):
    pass


# --- length distributions (token counts are ints >= 1) ---------------------------------------


class FixedLength(_Strict):
    """Every request gets exactly `value` tokens."""

    dist: Literal["fixed"]
    value: int = Field(ge=1, le=MAX_TOKENS)


class UniformLength(_Strict):
    """Integers drawn uniformly from `low..high`, both ends inclusive."""

    dist: Literal["uniform"]
    low: int = Field(ge=1, le=MAX_TOKENS)
    high: int = Field(ge=1, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must be <= high ({self.high})")
        return self


class LognormalLength(_Strict):
    """`exp(N(ln median, sigma))`, rounded to the nearest integer and clipped to [min, max]."""

    dist: Literal["lognormal"]
    median: float = Field(gt=0, le=MAX_TOKENS)
    sigma: float = Field(ge=0, le=20)  # exp(20) is already a factor of 5e8
    min: int = Field(default=1, ge=1, le=MAX_TOKENS)
    max: int | None = Field(default=None, ge=1, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _ordered(self) -> LognormalLength:
        if self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self


class EmpiricalLength(_Strict):
    """Resample with replacement from one column of a trace file."""

    dist: Literal["empirical"]
    path: str = Field(min_length=1)
    format: RequestTraceFormat = "csv"
    column: Literal["prompt", "output"]


LengthDist = Annotated[
    FixedLength | UniformLength | LognormalLength | EmpiricalLength,
    Field(discriminator="dist"),
]


# --- arrival processes (rate in requests per second) ----------------------------------------


class PoissonArrival(_Strict):
    """Exponential inter-arrival times with mean `1 / rate`."""

    process: Literal["poisson"]
    rate: float = Field(gt=0)


class GammaArrival(_Strict):
    """Gamma inter-arrival times with mean `1 / rate` and coefficient of variation `cv`.

    `cv = 1` is a Poisson process; larger values give bursts separated by lulls.
    """

    process: Literal["gamma"]
    rate: float = Field(gt=0)
    # beyond these the gamma shape 1/cv^2 under- or overflows
    cv: float = Field(ge=1e-3, le=1e3)


class ConstantArrival(_Strict):
    """Evenly spaced arrivals `1 / rate` apart, the first at t = 0."""

    process: Literal["constant"]
    rate: float = Field(gt=0)


class ProfileArrival(_Strict):
    """A Poisson process whose rate changes with time (non-homogeneous): `rate` is a profile,
    multiplied by `scale` (a sweep moves the whole profile's level with it). Every profile
    stays flat at its last rate after its end (a diurnal one repeats); one that ends at 0
    needs the workload's `duration_s`."""

    process: Literal["profile"]
    rate: RateProfile
    scale: float = Field(default=1.0, gt=0, le=1e6)

    def ends(self) -> bool:
        """Whether the rate falls to 0 for good (known without reading a csv)."""
        return self.rate.tail_rate() == 0


ArrivalSpec = Annotated[
    PoissonArrival | GammaArrival | ConstantArrival | ProfileArrival,
    Field(discriminator="process"),
]


# --- think times (seconds) --------------------------------------------------------------------


class FixedDelay(_Strict):
    dist: Literal["fixed"]
    value_s: float = Field(ge=0, le=1e9)


class ExponentialDelay(_Strict):
    dist: Literal["exponential"]
    mean_s: float = Field(gt=0, le=1e9)


class UniformDelay(_Strict):
    dist: Literal["uniform"]
    low_s: float = Field(ge=0, le=1e9)
    high_s: float = Field(ge=0, le=1e9)

    @model_validator(mode="after")
    def _ordered(self) -> UniformDelay:
        if self.low_s > self.high_s:
            raise ValueError(f"low_s ({self.low_s}) must be <= high_s ({self.high_s})")
        return self


DelayDist = Annotated[FixedDelay | ExponentialDelay | UniformDelay, Field(discriminator="dist")]
