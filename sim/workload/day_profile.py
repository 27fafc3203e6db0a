"""A day-long arrival-rate profile calibrated to a trace's short-scale shape.

A public trace of LLM requests spans an hour or so: long enough to show how bursty arrivals are
from minute to minute, far too short to show the day. `day_profile` joins the two scales:

    rate(bin i) = R x s(t_i) x f_i

* `s` is a smooth diurnal cosine of mean 1 whose peak is `peak_to_trough` (P) times its trough,
  peaking at `peak_hour` (H) hours into each `period_s`: `1 + a cos(2 pi (t - H h) / period)`
  with `a = (P - 1) / (P + 1)`, the shape of the workload's `diurnal` profile. Each bin carries
  the cosine's exact average over the bin.
* `f` is the trace's burst factor: its arrivals counted in bins of `bin_s`, divided by the mean
  count (mean 1). A count is the trace's rate plus Poisson sampling noise (variance = the mean
  count), and the simulator draws its own Poisson arrivals from the profile, so the noise would
  count twice; the factors are shrunk towards 1 by `sqrt(1 - noise / variance)`, keeping the
  trace's excess burstiness (`burst_cv`) and the order of its bins, and removing the share that
  only the trace's small counts made (none is left when the trace is no burstier than Poisson).
  The day is covered by copies of the trace's factor sequence end to end, each copy turned
  circularly by an offset drawn from `seed` (a circular block bootstrap with the whole trace as
  the block: minute-to-minute structure is kept, and the copies do not repeat in step).
* `R` is the day's mean: after the product, the rates are scaled so that their integral over
  the period is exactly `mean_rate x period_s`. The smooth component keeps its ratio P.

The result is a piecewise-constant rate, one step per bin, written as the piecewise csv that
`workload.arrival: {process: profile, rate: {shape: piecewise, csv: FILE}}` reads: each step is
two points at its two ends, and a repeated time is the jump to the next step. After the last
point the rate stays at the last step's value (the profile does not repeat): a run of one
period uses `duration_s` up to `period_s`.

What the trace shows is measured and returned with the profile (`TraceShape`): its mean rate,
the coefficient of variation of its per-bin rate (raw, and without the Poisson share), and the
coefficient of variation of its inter-arrival gaps (1 for a Poisson process).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.errors import ScenarioError
from sim.workload.spec import MAX_PROFILE_POINTS, MAX_PROFILE_RATE, MAX_PROFILE_TIME_S

HOUR_S = 3600.0
DEFAULT_PERIOD_S = 86_400.0
# a chat service a few GPUs serve: Llama-3-8B on H100-SXM (roofline) holds about 17.5 req/s of
# Azure-conversation-shaped requests within TTFT p99 2 s and TPOT p99 0.1 s, so a day at this
# mean swings from about 2 instances at the trough to 5-7 at the peak's bursts
DEFAULT_MEAN_RATE = 50.0
# Chat traffic's daily swing (see docs/day_profile.md): BurstGPT's regional conversation
# services (Azure OpenAI GPT, Wang et al. 2024, "Daily Periodicity") peak at 15-16 h and are
# lowest at 3-7 h, with a swing of more than 10x between those hours' medians for one region;
# a service spread over time zones swings less, and 3 is the milder default.
DEFAULT_PEAK_TO_TROUGH = 3.0
DEFAULT_PEAK_HOUR = 15.0
DEFAULT_BIN_S = 60.0
MAX_PEAK_TO_TROUGH = 1e6  # as the workload's diurnal profile
MIN_TRACE_BINS = 2


@dataclass(frozen=True)
class TraceShape:
    """What a trace's arrivals show, measured in bins of `bin_s`."""

    requests: int
    span_s: float  # first to last arrival
    mean_rate: float  # requests per second over the full bins
    bin_s: float
    bins: int  # full bins of the trace (the partial last one is left out)
    bin_cv: float  # coefficient of variation of the per-bin counts, Poisson noise included
    burst_cv: float  # the same without the Poisson share: the factors' coefficient of variation
    interarrival_cv: float  # of the gaps between consecutive arrivals (1 for Poisson)
    factors: np.ndarray  # per-bin rate / mean rate, shrunk (see the module), mean 1


@dataclass(frozen=True)
class DayProfile:
    """A day's rate as steps: step i covers [edges[i], edges[i + 1])."""

    edges: np.ndarray  # len n + 1, from 0 to period_s
    rates: np.ndarray  # len n, requests per second
    smooth: np.ndarray  # len n, the diurnal component (mean 1 over the period)
    burst: np.ndarray  # len n, the tiled burst factors
    shape: TraceShape

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        """(times, rates) of the piecewise csv: both ends of every step."""
        times = np.repeat(self.edges, 2)[1:-1]
        return times, np.repeat(self.rates, 2)

    def mean_rate(self) -> float:
        widths = np.diff(self.edges)
        return float(np.sum(widths * self.rates) / (self.edges[-1] - self.edges[0]))

    def csv_text(self) -> str:
        """The profile as `time_s,rate` csv (nine significant digits)."""
        times, rates = self.points()
        rows = [f"{t:.10g},{r:.9g}" for t, r in zip(times.tolist(), rates.tolist(), strict=True)]
        return "time_s,rate\n" + "\n".join(rows) + "\n"


def _check(ok: bool, reason: str, key: str) -> None:
    if not ok:
        raise ScenarioError(reason, path=key)


def _finite(value: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_options(
    period_s: float, mean_rate: float, peak_to_trough: float, peak_hour: float, bin_s: float
) -> None:
    """ScenarioError naming the parameter (`path`) when the options cannot make a profile."""
    _check(
        _finite(period_s) and 0 < period_s <= MAX_PROFILE_TIME_S,
        f"{period_s:g} must be a number above 0 and at most {MAX_PROFILE_TIME_S:g} s",
        "period_s",
    )
    _check(
        _finite(mean_rate) and 0 < mean_rate <= MAX_PROFILE_RATE,
        f"{mean_rate:g} must be a number above 0 and at most {MAX_PROFILE_RATE:g} requests/s",
        "mean_rate",
    )
    _check(
        _finite(peak_to_trough) and 1 <= peak_to_trough <= MAX_PEAK_TO_TROUGH,
        f"{peak_to_trough:g} must be a number from 1 (flat) to {MAX_PEAK_TO_TROUGH:g}",
        "peak_to_trough",
    )
    hours = period_s / HOUR_S
    _check(
        _finite(peak_hour) and 0 <= peak_hour < hours,
        f"{peak_hour:g} must be an hour from 0 to below the period's {hours:g} h",
        "peak_hour",
    )
    _check(
        _finite(bin_s) and 0 < bin_s <= period_s,
        f"{bin_s:g} must be a number of seconds above 0 and at most the period ({period_s:g} s)",
        "bin_s",
    )
    steps = math.ceil(period_s / bin_s - 1e-9)
    _check(
        2 * steps <= MAX_PROFILE_POINTS,
        f"{bin_s:g} s makes {steps} steps over {period_s:g} s, {2 * steps} points; a rate "
        f"profile holds at most {MAX_PROFILE_POINTS}: use wider bins",
        "bin_s",
    )


def measure_trace(arrival_s: np.ndarray, bin_s: float) -> TraceShape:
    """The shape of a trace's arrivals (seconds, sorted) in bins of `bin_s`; ScenarioError
    (path `bin_s`) when the trace spans fewer than two bins."""
    times = np.asarray(arrival_s, dtype=np.float64)
    times = times - times[0] if len(times) else times
    span = float(times[-1]) if len(times) else 0.0
    bins = math.floor(span / bin_s + 1e-9) if span > 0 else 0
    if bins < MIN_TRACE_BINS:
        raise ScenarioError(
            f"the trace spans {span:g} s ({len(times)} requests), fewer than "
            f"{MIN_TRACE_BINS} bins of {bin_s:g} s: use narrower bins or a longer trace",
            path="bin_s",
        )
    which = np.minimum((times / bin_s).astype(np.int64), bins)  # bin `bins`: the partial one
    counts = np.bincount(which, minlength=bins + 1)[:bins].astype(np.float64)
    mean_count = float(counts.mean())
    if mean_count == 0:  # unreachable: the first arrival is in bin 0
        raise ScenarioError("the trace has no arrivals in its full bins", path="bin_s")
    raw = counts / mean_count
    bin_cv = float(raw.std())
    variance = float(counts.var())
    # the Poisson share of the counts' variance is the mean count itself
    keep = math.sqrt(max(0.0, 1.0 - mean_count / variance)) if variance > 0 else 0.0
    factors = 1.0 + keep * (raw - 1.0)
    gaps = np.diff(times)
    gap_mean = float(gaps.mean()) if len(gaps) else 0.0
    gap_cv = float(gaps.std() / gap_mean) if gap_mean > 0 else 0.0
    return TraceShape(
        requests=len(times),
        span_s=span,
        mean_rate=float(counts.sum() / (bins * bin_s)),
        bin_s=bin_s,
        bins=bins,
        bin_cv=bin_cv,
        burst_cv=float(factors.std()),
        interarrival_cv=gap_cv,
        factors=factors,
    )


def smooth_averages(
    edges: np.ndarray, period_s: float, peak_to_trough: float, peak_hour: float
) -> np.ndarray:
    """The diurnal cosine (mean 1, ratio `peak_to_trough`, peak at `peak_hour`) averaged over
    each step between `edges`."""
    a = (peak_to_trough - 1) / (peak_to_trough + 1)
    omega = 2 * math.pi / period_s
    phase = omega * (edges - peak_hour * HOUR_S)
    widths = np.diff(edges)
    swing = np.diff(np.sin(phase)) / omega  # the integral of cos over each step
    return 1.0 + a * swing / widths


def tile_factors(factors: np.ndarray, steps: int, seed: int) -> np.ndarray:
    """`steps` burst factors: copies of `factors` end to end, each turned circularly by an
    offset drawn from `seed`."""
    rng = np.random.default_rng(seed)
    copies = -(-steps // len(factors))
    offsets = rng.integers(0, len(factors), size=copies)
    tiled = np.concatenate([np.roll(factors, -int(k)) for k in offsets])
    return tiled[:steps]


def day_profile(
    arrival_s: np.ndarray,
    *,
    period_s: float = DEFAULT_PERIOD_S,
    mean_rate: float = DEFAULT_MEAN_RATE,
    peak_to_trough: float = DEFAULT_PEAK_TO_TROUGH,
    peak_hour: float = DEFAULT_PEAK_HOUR,
    bin_s: float = DEFAULT_BIN_S,
    seed: int = 0,
) -> DayProfile:
    """The day-long profile of the module from a trace's arrival times (seconds, sorted).
    ScenarioError naming the parameter (`path`) for options that cannot make a profile."""
    check_options(period_s, mean_rate, peak_to_trough, peak_hour, bin_s)
    shape = measure_trace(arrival_s, bin_s)
    steps = math.ceil(period_s / bin_s - 1e-9)
    edges = np.minimum(np.arange(steps + 1, dtype=np.float64) * bin_s, period_s)
    edges[-1] = period_s
    smooth = smooth_averages(edges, period_s, peak_to_trough, peak_hour)
    burst = tile_factors(shape.factors, steps, seed)
    widths = np.diff(edges)
    product = smooth * burst
    area = float(np.sum(widths * product))
    if area <= 0:  # every factor 0 where the cosine is: only a trace of one bin's arrivals
        raise ScenarioError("the trace's burst factors are all 0", path="bin_s")
    rates = product * (mean_rate * period_s / area)
    top = float(rates.max())
    _check(
        top <= MAX_PROFILE_RATE,
        f"{mean_rate:g} makes a peak of {top:.3g} requests/s, above a rate profile's "
        f"{MAX_PROFILE_RATE:g}",
        "mean_rate",
    )
    return DayProfile(edges=edges, rates=rates, smooth=smooth, burst=burst, shape=shape)
