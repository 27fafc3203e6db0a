"""Arrival-rate profiles as curves: the rate r(t), its integral Lambda(t) = int_0^t r, and the
inverse of Lambda, which turns a unit-rate Poisson process into arrivals at rate r(t).

Time rescaling (Cinlar; Brown et al., "The time-rescaling theorem and its application to neural
spike train data analysis", Neural Computation 2002): if S_1 < S_2 < ... are the arrival times
of a Poisson process of rate 1 (cumulative sums of unit exponential gaps), then
Lambda^-1(S_1) < Lambda^-1(S_2) < ... is a Poisson process of rate r(t). The arrivals are thus
exact, not thinned or binned, and a count in any window [a, b) is Poisson with mean
Lambda(b) - Lambda(a).

Two curves cover every shape. A piecewise-linear rate (ramp, spikes, piecewise points, csv)
integrates in closed form segment by segment (a quadratic in time), and inverts in closed form
too (the stable root of that quadratic). The diurnal cosine
`m (1 + a cos(w (t - p)))` integrates to `m t + (m a / w)(sin(w (t - p)) + sin(w p))`; its
inverse, after taking out whole periods (each adds `m x period`), is found by Newton's method
kept inside a bisection bracket, vectorised over the arrivals.

A piecewise profile stays flat at its last rate after its last point. When that rate is 0 the
profile ends: its integral has a finite total, and arrivals past it never come (the workload
schema then requires `duration_s`; a csv, known only here, is checked when it is read).

A csv profile has the header `time_s,rate` (in either order, nothing else) and one point per
line. It is read strictly: every error names the file and the line (`line 1` for the header)
with the reason, every number must be finite and within the schema's bounds, the points obey
the inline points' rules, and a file of more than `MAX_PROFILE_POINTS` rows is refused before
its rows are parsed.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np

from sim.errors import ScenarioError
from sim.inputs.text import read_text
from sim.workload.spec import (
    MAX_PROFILE_POINTS,
    MAX_PROFILE_RATE,
    MAX_PROFILE_TIME_S,
    DiurnalRate,
    PiecewiseRate,
    ProfileArrival,
    RampRate,
    SpikesRate,
    points_problem,
)
from sim.workload.traces import resolve_path

_NEWTON_STEPS = 100  # bisection halves the bracket each step: 2^-100 of a period at worst


class RateCurve:
    """A rate r(t) >= 0 for t >= 0 with its integral and the integral's inverse."""

    total: float  # Lambda(infinity): finite only when the rate ends at 0
    end_s: float  # the time from which the rate is 0 for good (inf if never)

    def rate(self, t: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def integral(self, t: np.ndarray) -> np.ndarray:
        """Lambda(t) for t >= 0."""
        raise NotImplementedError

    def inverse(self, y: np.ndarray) -> np.ndarray:
        """A t with Lambda(t) = y, for 0 <= y < total (where the rate is 0 for a while,
        Lambda is flat: a level reached there maps to the stretch's end)."""
        raise NotImplementedError

    def expected(self, duration_s: float) -> float:
        """The expected number of arrivals in [0, duration_s)."""
        return float(self.integral(np.array([duration_s]))[0])


class PiecewiseLinear(RateCurve):
    """Linear between knots (times non-decreasing from 0; a repeated time is a jump), flat at
    the last knot's rate after it. Within a segment of width w from rate r0 to r1, at the
    fraction u = dt / w of it: r = r0 + (r1 - r0) u and Lambda grows by w (r0 u + (r1 - r0)
    u^2 / 2); no slope is formed, so a segment however narrow stays finite."""

    def __init__(self, times: np.ndarray, rates: np.ndarray) -> None:
        self.times = np.asarray(times, dtype=np.float64)
        self.rates = np.asarray(rates, dtype=np.float64)
        self.widths = np.diff(self.times)
        self.rises = np.diff(self.rates)
        self.cum = np.zeros(len(self.times))
        self.cum[1:] = np.cumsum(self.widths * (self.rates[:-1] + self.rates[1:]) / 2)
        self.tail = float(self.rates[-1])
        positive = np.flatnonzero(self.rates > 0)
        if self.tail > 0:
            self.total, self.end_s = math.inf, math.inf
        else:
            self.total = float(self.cum[-1])
            last = int(positive[-1]) if len(positive) else 0
            self.end_s = float(self.times[min(last + 1, len(self.times) - 1)])

    def _where(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(knot at or before t, seconds past it, whether t is before the last knot, the
        fraction of the segment: 0 past the last knot)."""
        t = np.asarray(t, dtype=np.float64)
        # the last knot at or before t: after a jump's second knot, and never at a knot whose
        # segment has no width
        k = np.searchsorted(self.times, t, side="right") - 1
        dt = t - self.times[k]
        inside = k < len(self.times) - 1
        kk = np.minimum(k, len(self.times) - 2)
        with np.errstate(divide="ignore", invalid="ignore"):
            u = np.where(inside, dt / self.widths[kk], 0.0)
        return k, dt, inside, u

    def rate(self, t: np.ndarray) -> np.ndarray:
        k, _, inside, u = self._where(t)
        kk = np.minimum(k, len(self.times) - 2)
        return np.where(inside, self.rates[k] + self.rises[kk] * u, self.tail)

    def integral(self, t: np.ndarray) -> np.ndarray:
        k, dt, inside, u = self._where(t)
        kk = np.minimum(k, len(self.times) - 2)
        within = dt * (self.rates[k] + self.rises[kk] * u / 2)
        return self.cum[k] + np.where(inside, within, self.tail * dt)

    def inverse(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64)
        # the last knot whose cumulative integral is <= y: zero-rate stretches are skipped, and
        # its segment (if not the tail) has a width and an area above y - cum[k]
        k = np.searchsorted(self.cum, y, side="right") - 1
        d = y - self.cum[k]
        last = len(self.times) - 1
        inside = k < last
        kk = np.minimum(k, last - 1)
        r0 = self.rates[kk]
        rise = self.rises[kk]
        width = self.widths[kk]
        with np.errstate(divide="ignore", invalid="ignore"):
            # r0 u + rise u^2 / 2 = d / width, for u in [0, 1]: the root that stays accurate
            # for a rise of either sign
            per_width = np.where(inside, d / width, 0.0)
            root = np.sqrt(np.maximum(r0 * r0 + 2 * rise * per_width, 0.0))
            denominator = r0 + root
            u = np.where(denominator > 0, 2 * per_width / denominator, 0.0)
            tail = d / self.tail if self.tail > 0 else np.full_like(d, np.inf)
        dt = np.where(inside, np.clip(u, 0.0, 1.0) * width, tail)
        return self.times[k] + dt


class Diurnal(RateCurve):
    """`mean (1 + a cos(2 pi (t - peak) / period))`, 0 <= a < 1."""

    def __init__(self, mean: float, a: float, period: float, peak: float) -> None:
        self.mean, self.a, self.period, self.peak = mean, a, period, peak
        self.omega = 2 * math.pi / period
        self.per_period = mean * period
        self.total, self.end_s = math.inf, math.inf

    def rate(self, t: np.ndarray) -> np.ndarray:
        return self.mean * (1 + self.a * np.cos(self.omega * (np.asarray(t) - self.peak)))

    def _within(self, t: np.ndarray) -> np.ndarray:
        """Lambda(t) for 0 <= t <= period (exact there; whole periods are added apart)."""
        swing = np.sin(self.omega * (t - self.peak)) + math.sin(self.omega * self.peak)
        return self.mean * t + (self.mean * self.a / self.omega) * swing

    def integral(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64)
        periods = np.floor(t / self.period)
        return periods * self.per_period + self._within(t - periods * self.period)

    def inverse(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64)
        periods = np.floor(y / self.per_period)
        target = y - periods * self.per_period  # in [0, mean x period)
        t = np.clip(target / self.mean, 0.0, self.period)
        lo = np.zeros_like(target)
        hi = np.full_like(target, self.period)
        active = np.arange(len(t))  # the arrivals not yet converged
        for _ in range(_NEWTON_STEPS):
            if not active.size:
                break
            now, goal = t[active], target[active]
            f = self._within(now) - goal
            low = np.where(f <= 0, now, lo[active])
            high = np.where(f >= 0, now, hi[active])
            with np.errstate(divide="ignore", invalid="ignore"):
                newton = now - f / self.rate(now)
            following = np.where((newton >= low) & (newton <= high), newton, (low + high) / 2)
            t[active], lo[active], hi[active] = following, low, high
            active = active[np.abs(following - now) > 1e-13 * self.period]
        return periods * self.period + t


def curve_of(arrival: ProfileArrival, base_dir: Path | None = None, key: str = "") -> RateCurve:
    """The scaled rate curve of a profile; a csv is read from `base_dir` (its errors name the
    file and line; `key` is the arrival's key path, for a csv profile that ends at 0)."""
    profile = arrival.rate
    scale = arrival.scale
    if isinstance(profile, DiurnalRate):
        ratio = profile.peak_to_trough
        a = (ratio - 1) / (ratio + 1)
        return Diurnal(profile.mean_rate * scale, a, profile.period_s, profile.peak_at_s)
    if isinstance(profile, RampRate):
        times = np.array([0.0, profile.over_s])
        rates = np.array([profile.from_rate, profile.to_rate])
    elif isinstance(profile, SpikesRate):
        times, rates = _spike_knots(profile)
    else:
        assert isinstance(profile, PiecewiseRate)
        if profile.points is not None:
            times = np.array([t for t, _ in profile.points])
            rates = np.array([r for _, r in profile.points])
        else:
            assert base_dir is not None, "a csv rate profile needs the scenario's folder"
            times, rates = read_rate_csv(resolve_path(profile.csv or "", base_dir))
    return PiecewiseLinear(times, rates * scale)


def inline_curve(arrival: ProfileArrival) -> RateCurve | None:
    """The curve when the spec holds it all (None for a csv, read only at generation)."""
    profile = arrival.rate
    if isinstance(profile, PiecewiseRate) and profile.points is None:
        return None
    return curve_of(arrival)


def _spike_knots(profile: SpikesRate) -> tuple[np.ndarray, np.ndarray]:
    base = profile.base_rate
    times, rates = [0.0], [base]
    for spike in sorted(profile.spikes, key=lambda s: s.at_s):
        end = spike.at_s + spike.for_s
        times += [spike.at_s, spike.at_s, end, end]
        rates += [base, spike.rate, spike.rate, base]
    return np.array(times), np.array(rates)


def read_rate_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(times, rates) of a csv rate profile (see the module); ScenarioError naming the line."""
    file = str(path)
    lines = io.StringIO(read_text(path, "rate profile"))
    names: list[str] = []
    header_line = 0
    rows: list[int] = []  # the line of each point
    bounds = {"time_s": MAX_PROFILE_TIME_S, "rate": MAX_PROFILE_RATE}
    times: list[float] = []
    rates: list[float] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():  # blank lines are skipped (and still counted)
            continue
        if not names:
            header_line = number
            names = _header(line, file, number)
            continue
        if len(rows) == MAX_PROFILE_POINTS:
            raise ScenarioError(
                f"more than {MAX_PROFILE_POINTS} rows: a rate profile has at most that many",
                file=file,
                path=f"line {number}",
            )
        fields = line.split(",")
        if len(fields) != 2:
            raise ScenarioError(
                f"{len(fields)} fields where the header has 2", file=file, path=f"line {number}"
            )
        values = {
            name: _number(raw, name, bounds[name], file, number)
            for name, raw in zip(names, fields, strict=True)
        }
        rows.append(number)
        times.append(values["time_s"])
        rates.append(values["rate"])
    if not names:
        raise ScenarioError("rate profile is empty (expected the header time_s,rate)", file=file)
    if len(rows) < 2:
        raise ScenarioError(
            f"{len(rows)} row(s): a rate profile needs at least 2 points",
            file=file,
            path=f"line {header_line}",
        )
    bad = points_problem(times, rates)
    if bad is not None:
        raise ScenarioError(bad[1], file=file, path=f"line {rows[bad[0]]}")
    return np.array(times), np.array(rates)


def _header(line: str, file: str, number: int) -> list[str]:
    names = [name.strip() for name in line.split(",")]
    if sorted(names) == ["rate", "time_s"]:
        return names
    missing = [name for name in ("time_s", "rate") if name not in names]
    extra = [name for name in names if name not in ("time_s", "rate")]
    problems = [f"missing column(s) {', '.join(missing)}"] if missing else []
    if extra:
        problems.append(f"unexpected column(s) {', '.join(repr(n) for n in extra)}")
    if not problems:
        problems.append("a column is named twice")
    raise ScenarioError(
        "; ".join(problems) + " (expected the header time_s,rate)",
        file=file,
        path=f"line {number}",
    )


def _number(raw: str, name: str, bound: float, file: str, line: int) -> float:
    text = raw.strip()
    try:
        if "_" in text:  # Python reads 1_000 as a number; a csv does not
            raise ValueError(text)
        value = float(text)
    except ValueError:
        raise ScenarioError(
            f"{name} {text!r} is not a number", file=file, path=f"line {line}"
        ) from None
    if not math.isfinite(value):
        raise ScenarioError(f"{name} {text!r} is not finite", file=file, path=f"line {line}")
    if not 0 <= value <= bound:
        raise ScenarioError(
            f"{name} {text} is outside [0, {bound:g}]", file=file, path=f"line {line}"
        )
    return value
