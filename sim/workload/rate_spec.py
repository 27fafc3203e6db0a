"""Arrival-rate profiles: the `rate` of a `process: profile` arrival, as pydantic models.

A profile is a rate that changes with time (requests/s at t seconds), tagged by `shape`:
`diurnal` (a cosine around `mean_rate` with peak/trough ratio `peak_to_trough`, peaking at
`peak_at_s` in each `period_s`), `ramp` (`from_rate` to `to_rate` over `over_s`), `spikes`
(`base_rate`, and non-overlapping windows at their own `rate`) or `piecewise` (linear between
`[time_s, rate]` points from t = 0, or the same points from a csv file). Every profile stays flat
at its last rate afterwards (`tail_rate`). Rates and times are bounded (`MAX_PROFILE_RATE`,
`MAX_PROFILE_TIME_S`) so that the integrated rate stays finite for the memory budget to size;
`sim.workload.rate_profile` integrates and inverts them. `sim.workload.spec` holds the arrival
that carries a profile and re-exports these names.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Annotated, Literal

from pydantic import Field, Strict, model_validator

from sim.inputs.strict_model import StrictModel


class _Strict(StrictModel):
    pass


# Bounds of a profile's numbers: far beyond any fleet or any run, yet small enough that the
# integrated rate (an expected count of requests) stays finite, for the memory budget to size.
MAX_PROFILE_RATE = 1e9  # requests/s at any one time
MAX_PROFILE_TIME_S = 1e9  # about 31 years
MAX_PROFILE_POINTS = 200_000  # points of a piecewise profile (inline or csv rows)
MAX_PROFILE_SPIKES = 10_000
ProfileRate = Annotated[float, Field(ge=0, le=MAX_PROFILE_RATE)]
ProfileTime = Annotated[float, Field(ge=0, le=MAX_PROFILE_TIME_S)]


class _KeyedError(ValueError):
    """A cross-field check failure that names the key it is about (the error's key path)."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(reason)
        self.key = key


class DiurnalRate(_Strict):
    """`mean_rate x (1 + a cos(2 pi (t - peak_at_s) / period_s))`, with `a` such that the
    peak is `peak_to_trough` times the trough: a = (ratio - 1) / (ratio + 1)."""

    shape: Literal["diurnal"]
    mean_rate: float = Field(ge=1e-9, le=MAX_PROFILE_RATE)  # 1e-9: one request in 30 years
    peak_to_trough: float = Field(ge=1, le=1e6)
    period_s: float = Field(default=86_400.0, ge=1e-3, le=MAX_PROFILE_TIME_S)
    peak_at_s: float = Field(default=0.0, ge=0, le=MAX_PROFILE_TIME_S)

    @model_validator(mode="after")
    def _in_period(self) -> DiurnalRate:
        if self.peak_at_s >= self.period_s:
            raise _KeyedError(
                "peak_at_s",
                f"must be within the period: below period_s ({self.period_s:g}), got "
                f"{self.peak_at_s:g}",
            )
        return self

    def tail_rate(self) -> float | None:
        return self.mean_rate * 2 / (self.peak_to_trough + 1)  # the trough: never 0


class RampRate(_Strict):
    """From `from_rate` at t = 0 linearly to `to_rate` at `over_s`, then flat at `to_rate`."""

    shape: Literal["ramp"]
    from_rate: ProfileRate
    to_rate: ProfileRate
    over_s: float = Field(gt=0, le=MAX_PROFILE_TIME_S)

    @model_validator(mode="after")
    def _some_rate(self) -> RampRate:
        if self.from_rate == 0 and self.to_rate == 0:
            raise _KeyedError("to_rate", "the rate is 0 throughout: no request would arrive")
        return self

    def tail_rate(self) -> float | None:
        return self.to_rate


class Spike(_Strict):
    """`rate` (instead of the base rate) from `at_s` for `for_s` seconds."""

    at_s: ProfileTime
    rate: ProfileRate
    for_s: float = Field(gt=0, le=MAX_PROFILE_TIME_S)


class SpikesRate(_Strict):
    """`base_rate`, except in each spike's window, where the rate is the spike's `rate`;
    windows must not overlap (they may touch), in any order."""

    shape: Literal["spikes"]
    base_rate: ProfileRate
    spikes: list[Spike] = Field(min_length=1)

    @model_validator(mode="after")
    def _apart(self) -> SpikesRate:
        if len(self.spikes) > MAX_PROFILE_SPIKES:
            raise _KeyedError(
                "spikes", f"at most {MAX_PROFILE_SPIKES} spikes (got {len(self.spikes)})"
            )
        order = sorted(range(len(self.spikes)), key=lambda i: self.spikes[i].at_s)
        for before, after in pairwise(order):
            first, second = self.spikes[before], self.spikes[after]
            end = first.at_s + first.for_s
            if second.at_s < end:
                raise _KeyedError(
                    f"spikes.{after}",
                    f"overlaps spikes.{before} (at_s {second.at_s:g} is before that spike's "
                    f"end, {first.at_s:g} + {first.for_s:g} = {end:g} s): spikes must not "
                    "overlap",
                )
        if self.base_rate == 0 and all(spike.rate == 0 for spike in self.spikes):
            raise _KeyedError("base_rate", "the rate is 0 throughout: no request would arrive")
        return self

    def tail_rate(self) -> float | None:
        return self.base_rate


def point_problem(point: list[float]) -> str | None:
    """Why one [time_s, rate] point is wrong, or None."""
    if len(point) != 2:
        return f"a point is [time_s, rate] (got {len(point)} numbers)"
    time_s, rate = point
    if not 0 <= time_s <= MAX_PROFILE_TIME_S:
        return f"time {time_s:g} must be in [0, {MAX_PROFILE_TIME_S:g}] s"
    if not 0 <= rate <= MAX_PROFILE_RATE:
        return f"rate {rate:g} must be in [0, {MAX_PROFILE_RATE:g}] requests/s"
    return None


def points_problem(times: list[float], rates: list[float]) -> tuple[int, str] | None:
    """(index of the first bad point, reason) for a piecewise profile's points, or None: times
    start at 0 and never decrease (a repeated time is a jump), and some rate is above 0."""
    if times[0] != 0:
        return 0, f"the first point must be at time 0 (got {times[0]:g})"
    for i in range(1, len(times)):
        if times[i] < times[i - 1]:
            return i, (
                f"time {times[i]:g} is before the previous point's ({times[i - 1]:g}): times "
                "must not decrease"
            )
    if not any(rate > 0 for rate in rates):
        return len(rates) - 1, "the rate is 0 throughout: no request would arrive"
    return None


class PiecewiseRate(_Strict):
    """Linear between `points` ([time_s, rate] pairs, the first at time 0; a repeated time is
    a jump), flat at the last point's rate after it; or the same points read from `csv`, a file
    with columns `time_s,rate` (relative to the scenario file)."""

    shape: Literal["piecewise"]
    # checked point by point below, so that an error names the point and what is wrong in it
    points: list[list[Annotated[float, Strict()]]] | None = Field(default=None, min_length=2)
    csv: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _points(self) -> PiecewiseRate:
        if (self.points is None) == (self.csv is None):
            raise ValueError("give 'points' or 'csv' (one of them)")
        if self.points is not None:
            if len(self.points) > MAX_PROFILE_POINTS:
                raise _KeyedError(
                    "points", f"at most {MAX_PROFILE_POINTS} points (got {len(self.points)})"
                )
            for i, point in enumerate(self.points):
                bad_point = point_problem(point)
                if bad_point is not None:
                    raise _KeyedError(f"points.{i}", bad_point)
            bad = points_problem([t for t, _ in self.points], [r for _, r in self.points])
            if bad is not None:
                raise _KeyedError(f"points.{bad[0]}", bad[1])
        return self

    def tail_rate(self) -> float | None:
        return None if self.points is None else self.points[-1][1]


RateProfile = Annotated[
    DiurnalRate | RampRate | SpikesRate | PiecewiseRate, Field(discriminator="shape")
]
