"""Arrival processes: non-decreasing arrival times in seconds, starting at or after t = 0.

Generation stops at whichever comes first of `num_requests` arrivals and the first arrival at or
after `duration_s` (that one is dropped: arrivals satisfy `arrival_s < duration_s`). Random
processes are renewal processes whose first arrival comes one inter-arrival gap after t = 0, as
if the system had been idle just before; the constant process puts its first arrival at t = 0.

When only a duration is known the number of arrivals is random, so gaps are drawn in chunks
sized from the expected count (plus a margin, so one chunk almost always suffices) until the
clock passes the end. Chunk sizes depend only on the spec, never on the draws, so the same
generator state always yields the same arrivals.
"""

from __future__ import annotations

import math

import numpy as np

from sim.workload.spec import ArrivalSpec, ConstantArrival, GammaArrival, PoissonArrival

_MIN_CHUNK = 1024
_MAX_CHUNK = 1 << 20  # bounds the memory of one chunk when a huge duration is asked for


def sample_arrivals(
    spec: ArrivalSpec,
    rng: np.random.Generator,
    num_requests: int | None,
    duration_s: float | None,
) -> np.ndarray:
    """Arrival times (float64, sorted) under the stop conditions; at least one must be given."""
    if num_requests is None and duration_s is None:
        raise ValueError("arrivals need num_requests and/or duration_s")
    if isinstance(spec, ConstantArrival):
        return _constant(spec.rate, num_requests, duration_s)
    times = _renewal(spec, rng, num_requests, duration_s)
    if duration_s is not None:
        times = times[: int(np.searchsorted(times, duration_s, side="left"))]
    return times


def _constant(rate: float, num_requests: int | None, duration_s: float | None) -> np.ndarray:
    count = num_requests if num_requests is not None else math.inf
    if duration_s is not None:
        # One more than the expected count guards against i / rate rounding just below the end.
        count = min(count, math.ceil(duration_s * rate) + 1)
    times = np.arange(int(count), dtype=np.float64) / rate
    if duration_s is not None:
        times = times[times < duration_s]
    return times


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
) -> np.ndarray:
    if duration_s is None:
        assert num_requests is not None
        return np.cumsum(_gaps(spec, rng, num_requests))
    cv = spec.cv if isinstance(spec, GammaArrival) else 1.0
    expected = spec.rate * duration_s
    # The count in [0, T) has standard deviation about cv * sqrt(expected); six of them is enough
    # that a second chunk is rare, and the loop below handles it when it happens.
    chunk = int(min(_MAX_CHUNK, max(_MIN_CHUNK, expected + 6 * cv * math.sqrt(expected) + 16)))
    parts: list[np.ndarray] = []
    drawn = 0
    clock = 0.0
    while clock < duration_s and (num_requests is None or drawn < num_requests):
        size = chunk if num_requests is None else min(chunk, num_requests - drawn)
        times = clock + np.cumsum(_gaps(spec, rng, size))
        parts.append(times)
        drawn += size
        clock = float(times[-1])
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.float64)
