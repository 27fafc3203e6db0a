"""Token-length samplers: draw `n` prompt or output lengths from a `LengthDist`.

Every sampler is vectorized and returns an int64 array of values >= 1. Each call draws only
from the generator it is given, so the caller decides which child stream feeds which column
(prompt lengths never share a stream with output lengths or arrivals).

Empirical distributions read their trace through `read_trace`, so a bad file surfaces as the
same `ScenarioError` (file, line) a replayed trace would give. `TraceCache` keeps each parsed
file for the duration of one `generate_requests` call, because a mix often points several
classes at the same file; it is created per call, so nothing is cached between runs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sim.workload.dists import RequestTraceFormat
from sim.workload.mooncake import read_mooncake
from sim.workload.spec import (
    MAX_TOKENS,
    EmpiricalLength,
    FixedLength,
    LengthDist,
    LognormalLength,
    UniformLength,
)
from sim.workload.traces import TraceData, read_trace, resolve_path

# Largest length a lognormal may produce when it has no `max`: the schema's bound on any length,
# so that the cast to int64 cannot overflow on an extreme draw (exp -> inf).
_LOGNORMAL_CEILING = float(MAX_TOKENS)


class TraceCache:
    """Parsed trace files keyed by (resolved path, format), for one generation call."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self._traces: dict[tuple[Path, str], TraceData] = {}

    def get(self, path: str, fmt: RequestTraceFormat) -> TraceData:
        resolved = resolve_path(path, self.base_dir)
        key = (resolved, fmt)
        if key not in self._traces:
            if fmt == "mooncake":
                moon = read_mooncake(resolved)
                self._traces[key] = TraceData(
                    moon.arrival_s, moon.prompt_tokens, moon.output_tokens, num_zero_output=0
                )
            else:
                self._traces[key] = read_trace(resolved, fmt)
        return self._traces[key]


def sample_lengths(
    dist: LengthDist, n: int, rng: np.random.Generator, traces: TraceCache
) -> np.ndarray:
    """`n` token counts (int64, each >= 1) drawn from `dist` using only `rng`."""
    if isinstance(dist, FixedLength):
        return np.full(n, dist.value, dtype=np.int64)
    if isinstance(dist, UniformLength):
        return rng.integers(dist.low, dist.high, size=n, endpoint=True, dtype=np.int64)
    if isinstance(dist, LognormalLength):
        return _lognormal(dist, n, rng)
    if isinstance(dist, EmpiricalLength):
        return _empirical(dist, n, rng, traces)
    raise TypeError(f"unknown length distribution {dist!r}")  # pydantic makes this unreachable


def _lognormal(dist: LognormalLength, n: int, rng: np.random.Generator) -> np.ndarray:
    upper = _LOGNORMAL_CEILING if dist.max is None else float(dist.max)
    values = np.exp(rng.normal(np.log(dist.median), dist.sigma, size=n))
    return np.clip(np.rint(values), dist.min, upper).astype(np.int64)


def _empirical(
    dist: EmpiricalLength, n: int, rng: np.random.Generator, traces: TraceCache
) -> np.ndarray:
    trace = traces.get(dist.path, dist.format)
    column = trace.prompt_tokens if dist.column == "prompt" else trace.output_tokens
    # read_trace guarantees at least one row and values >= 1 (zero outputs already raised to 1).
    return rng.choice(column, size=n, replace=True).astype(np.int64)
