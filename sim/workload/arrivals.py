"""Arrival processes: non-decreasing arrival times in seconds, starting at or after t = 0.

Generation stops at whichever comes first of `num_requests` arrivals and the first arrival at or
after `duration_s` (that one is dropped: arrivals satisfy `arrival_s < duration_s`). Random
processes are renewal processes whose first arrival comes one inter-arrival gap after t = 0, as
if the system had been idle just before; the constant process puts its first arrival at t = 0.

When only a duration is known the number of arrivals is random, so gaps are drawn in chunks
sized from the expected count (plus a margin, so one chunk almost always suffices) until the
clock passes the end. Chunk sizes depend only on the spec, never on the draws, so the same
generator state always yields the same arrivals.

A rate profile (`process: profile`) is a non-homogeneous Poisson process, drawn exactly by time
rescaling (`sim.workload.rate_profile`): unit exponential gaps, in chunks as above, summed into
a unit-rate clock S, and each S mapped through the inverse of the integrated rate Lambda. With
a duration, the clock stops at Lambda(duration_s), so the expected count (and the chunk size)
is Lambda(duration_s); a count above what this machine can hold is refused before any draw. A
profile that ends at 0 (possible only for a csv, the schema refuses the others) without a
duration is refused too: its count may never be reached.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from sim.errors import ScenarioError
from sim.workload.budget import arrivals_problem
from sim.workload.rate_profile import RateCurve, curve_of
from sim.workload.spec import (
    ArrivalSpec,
    ConstantArrival,
    GammaArrival,
    PoissonArrival,
    ProfileArrival,
)

_MIN_CHUNK = 1024
_MAX_CHUNK = 1 << 20  # bounds the memory of one chunk when a huge duration is asked for


def sample_arrivals(
    spec: ArrivalSpec,
    rng: np.random.Generator,
    num_requests: int | None,
    duration_s: float | None,
    *,
    base_dir: Path | None = None,
    keys: tuple[str, str] = ("workload.arrival", "workload.num_requests"),
) -> np.ndarray:
    """Arrival times (float64, sorted) under the stop conditions; at least one must be given.
    A csv rate profile is read from `base_dir`; `keys` are the key paths of the arrival and of
    the count (for errors)."""
    parts = list(iter_arrivals(spec, rng, num_requests, duration_s, base_dir=base_dir, keys=keys))
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.float64)


def iter_arrivals(
    spec: ArrivalSpec,
    rng: np.random.Generator,
    num_requests: int | None,
    duration_s: float | None,
    *,
    base_dir: Path | None = None,
    keys: tuple[str, str] = ("workload.arrival", "workload.num_requests"),
) -> Iterator[np.ndarray]:
    """`sample_arrivals` in consecutive parts of at most `_MAX_CHUNK` arrivals, drawn as they
    are asked for: their concatenation is `sample_arrivals`' array, bit for bit (each part
    draws what the whole draw would at its place, and sums carry on from the last time)."""
    if num_requests is None and duration_s is None:
        raise ValueError("arrivals need num_requests and/or duration_s")
    if isinstance(spec, ProfileArrival):
        curve = curve_of(spec, base_dir)
        return _profile(curve, rng, num_requests, duration_s, keys)
    if isinstance(spec, ConstantArrival):
        return _constant(spec.rate, num_requests, duration_s)
    return _renewal(spec, rng, num_requests, duration_s)


def _constant(
    rate: float, num_requests: int | None, duration_s: float | None
) -> Iterator[np.ndarray]:
    count = num_requests if num_requests is not None else math.inf
    if duration_s is not None:
        # One more than the expected count guards against i / rate rounding just below the end.
        count = min(count, math.ceil(duration_s * rate) + 1)
    for first in range(0, int(count), _MAX_CHUNK):
        times = np.arange(first, min(int(count), first + _MAX_CHUNK), dtype=np.float64) / rate
        if duration_s is not None:
            kept = int(np.searchsorted(times, duration_s, side="left"))
            if kept < len(times):
                yield times[:kept]
                return
        yield times


def _gaps(spec: PoissonArrival | GammaArrival, rng: np.random.Generator, n: int) -> np.ndarray:
    if isinstance(spec, PoissonArrival):
        return rng.exponential(1.0 / spec.rate, size=n)
    # Gamma with shape k has CV 1/sqrt(k); the scale then fixes the mean at 1/rate.
    shape = 1.0 / spec.cv**2
    return rng.gamma(shape, 1.0 / (spec.rate * shape), size=n)


def _renewal(
    spec: PoissonArrival | GammaArrival,
    rng: np.random.Generator,
    num_requests: int | None,
    duration_s: float | None,
) -> Iterator[np.ndarray]:
    if duration_s is None:
        assert num_requests is not None
        last = np.zeros(1)  # the last arrival so far: the running sum goes on from it
        for first in range(0, num_requests, _MAX_CHUNK):
            size = min(_MAX_CHUNK, num_requests - first)
            times = np.cumsum(np.concatenate((last, _gaps(spec, rng, size))))[1:]
            last = times[-1:]
            yield times
        return
    cv = spec.cv if isinstance(spec, GammaArrival) else 1.0
    expected = spec.rate * duration_s
    # The count in [0, T) has standard deviation about cv * sqrt(expected); six of them is enough
    # that a second chunk is rare, and the loop below handles it when it happens.
    chunk = int(min(_MAX_CHUNK, max(_MIN_CHUNK, expected + 6 * cv * math.sqrt(expected) + 16)))
    drawn = 0
    clock = 0.0
    while clock < duration_s and (num_requests is None or drawn < num_requests):
        size = chunk if num_requests is None else min(chunk, num_requests - drawn)
        times = clock + np.cumsum(_gaps(spec, rng, size))
        drawn += size
        clock = float(times[-1])
        yield times[: int(np.searchsorted(times, duration_s, side="left"))]


def _profile(
    curve: RateCurve,
    rng: np.random.Generator,
    num_requests: int | None,
    duration_s: float | None,
    keys: tuple[str, str],
) -> Iterator[np.ndarray]:
    key, count_key = keys
    if duration_s is None and curve.total < math.inf:
        raise ScenarioError(
            f"required: the rate of {key} falls to 0 for good at {curve.end_s:g} s, so "
            f"{count_key.rsplit('.', 1)[-1]} may never be reached (the arrivals stop at "
            "duration_s)",
            path="workload.duration_s",
        )
    horizon = curve.total if duration_s is None else min(curve.total, curve.expected(duration_s))
    expected = horizon + 6 * math.sqrt(horizon) + 16 if duration_s is not None else math.inf
    if num_requests is not None:
        expected = min(expected, float(num_requests))
    too_many = arrivals_problem(expected, f"the rate profile of {key}")
    if too_many is not None:
        by_time = num_requests is None or expected < num_requests
        raise ScenarioError(
            f"{too_many}: lower {count_key.rsplit('.', 1)[-1]}, duration_s or {key}.scale",
            path="workload.duration_s" if by_time else count_key,
        )
    chunk = int(min(_MAX_CHUNK, max(_MIN_CHUNK, expected)))
    return _profile_parts(curve, rng, num_requests, duration_s, horizon, chunk)


def _profile_parts(
    curve: RateCurve,
    rng: np.random.Generator,
    num_requests: int | None,
    duration_s: float | None,
    horizon: float,
    chunk: int,
) -> Iterator[np.ndarray]:
    drawn = 0
    clock = 0.0  # the unit-rate clock: Lambda of the last arrival drawn
    latest = np.full(1, -np.inf)  # the last arrival so far, for the running maximum
    while clock < horizon and (num_requests is None or drawn < num_requests):
        size = chunk if num_requests is None else min(chunk, num_requests - drawn)
        hazard = clock + np.cumsum(rng.standard_exponential(size))
        drawn += size
        clock = float(hazard[-1])
        hazard = hazard[: int(np.searchsorted(hazard, horizon, side="left"))]
        times = curve.inverse(hazard)
        # past float64's range an arrival never comes (a rate so small its gap overflows)
        times = times[np.isfinite(times)]
        if not len(times):
            continue
        # the inverse is exact up to rounding; keep the order it has in exact arithmetic
        times = np.maximum.accumulate(np.concatenate((latest, times)))[1:]
        latest = times[-1:]
        if duration_s is not None:
            kept = int(np.searchsorted(times, duration_s, side="left"))
            if kept < len(times):
                yield times[:kept]
                return
        yield times
