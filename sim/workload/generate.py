"""Turn a `WorkloadSpec` into the request arrays the simulator consumes.

Determinism: the caller's generator is split with `rng.spawn` into five independent child
streams - arrivals, class choice, prompt lengths, output lengths, predicted output lengths (the
fifth was added later: `spawn` keys children by index, so the first four and every column drawn
from them are bit-for-bit what they were before) - so editing one part of the
workload (say, the output distribution) leaves every other column bit-for-bit unchanged. Within
a mix, classes draw their lengths in class order from the shared prompt (or output) stream, and
each class's draws land on that class's requests in arrival order.

Traces are normalized in this order: keep the window `start_s <= t < end_s` (trace seconds,
measured from the trace's first row), keep the first `max_rows` of it, shift so the first kept
request arrives at 0, divide by `rate_scale`, and only then apply the `num_requests` and
`duration_s` caps, which are in simulated seconds like everywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from sim.errors import ScenarioError
from sim.workload.arrivals import sample_arrivals
from sim.workload.lengths import TraceCache, sample_lengths
from sim.workload.spec import TraceSpec, WorkloadSpec
from sim.workload.traces import read_trace, resolve_path


@dataclass(frozen=True)
class RequestArrays:
    """Columns of a workload; request ids are 0..n-1 in arrival order. Arrays are read-only."""

    arrival_s: np.ndarray  # float64, non-decreasing, first >= 0
    prompt_tokens: np.ndarray  # int64 >= 1
    output_tokens: np.ndarray  # int64 >= 1: the true output length of each request
    class_index: np.ndarray  # int64 index into class_names
    class_names: tuple[str, ...]  # ("default",) without a mix, ("trace",) for a trace
    # service tier of each request: index into tier_names (None: every request "default")
    tier_index: np.ndarray | None = None
    tier_names: tuple[str, ...] = ("default",)
    # a predictor's guess of each output length (None: the true length)
    predicted_output_tokens: np.ndarray | None = field(default=None)

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if self.tier_index is None:
            object.__setattr__(self, "tier_index", np.zeros(n, dtype=np.int64))
        if self.predicted_output_tokens is None:
            object.__setattr__(self, "predicted_output_tokens", self.output_tokens.copy())
        names = ("prompt_tokens", "output_tokens", "class_index", "tier_index")
        for name in (*names, "predicted_output_tokens"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} entries, expected {n}")
        for array in (
            self.arrival_s,
            self.prompt_tokens,
            self.output_tokens,
            self.class_index,
            self.tier_index,
            self.predicted_output_tokens,
        ):
            assert array is not None
            # Shared by every consumer of a run; a stray in-place edit would corrupt them all.
            array.flags.writeable = False

    def __len__(self) -> int:
        return len(self.arrival_s)


def generate_requests(
    spec: WorkloadSpec, rng: np.random.Generator, base_dir: Path
) -> RequestArrays:
    """Requests for `spec`; relative file paths in it resolve against `base_dir`."""
    if spec.trace is not None:
        return _from_trace(spec, spec.trace, base_dir)
    arrival_rng, class_rng, prompt_rng, output_rng, predict_rng = rng.spawn(5)
    assert spec.arrival is not None  # guaranteed by WorkloadSpec's validator
    arrival_s = sample_arrivals(spec.arrival, arrival_rng, spec.num_requests, spec.duration_s)
    n = len(arrival_s)
    traces = TraceCache(base_dir)

    if spec.mix is None:
        assert spec.prompt_tokens is not None and spec.output_tokens is not None
        output = sample_lengths(spec.output_tokens, n, output_rng, traces)
        return RequestArrays(
            arrival_s=arrival_s,
            prompt_tokens=sample_lengths(spec.prompt_tokens, n, prompt_rng, traces),
            output_tokens=output,
            class_index=np.zeros(n, dtype=np.int64),
            class_names=("default",),
            tier_names=(spec.tier,),
            predicted_output_tokens=_predict(output, spec.output_prediction_sigma, predict_rng),
        )

    weights = np.array([cls.weight for cls in spec.mix], dtype=np.float64)
    class_index = class_rng.choice(len(spec.mix), size=n, p=weights / weights.sum())
    class_index = class_index.astype(np.int64)
    prompt_tokens = np.empty(n, dtype=np.int64)
    output_tokens = np.empty(n, dtype=np.int64)
    for index, cls in enumerate(spec.mix):
        members = class_index == index
        count = int(members.sum())
        prompt_tokens[members] = sample_lengths(cls.prompt_tokens, count, prompt_rng, traces)
        output_tokens[members] = sample_lengths(cls.output_tokens, count, output_rng, traces)
    tier_names = tuple(dict.fromkeys(cls.tier for cls in spec.mix))
    tier_of_class = np.array([tier_names.index(cls.tier) for cls in spec.mix], dtype=np.int64)
    return RequestArrays(
        arrival_s=arrival_s,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        class_index=class_index,
        class_names=tuple(cls.name for cls in spec.mix),
        tier_index=tier_of_class[class_index],
        tier_names=tier_names,
        predicted_output_tokens=_predict(output_tokens, spec.output_prediction_sigma, predict_rng),
    )


def _predict(output: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """True length times lognormal noise exp(N(0, sigma)), rounded, at least 1."""
    if sigma == 0.0:
        return output.copy()
    noisy = np.rint(output * np.exp(rng.normal(0.0, sigma, size=len(output))))
    return np.maximum(noisy, 1).astype(np.int64)


def _from_trace(spec: WorkloadSpec, trace: TraceSpec, base_dir: Path) -> RequestArrays:
    extra = (trace.tier_column,) if trace.tier_column else ()
    data = read_trace(resolve_path(trace.path, base_dir), trace.format, extra)
    times = data.arrival_s
    end_s = np.inf if trace.end_s is None else trace.end_s
    keep = np.flatnonzero((times >= trace.start_s) & (times < end_s))
    if trace.max_rows is not None:
        keep = keep[: trace.max_rows]
    if len(keep) == 0:
        window = f"[{trace.start_s}, {trace.end_s if trace.end_s is not None else 'end'})"
        raise ScenarioError(
            f"the trace window {window} s holds no requests (the trace spans "
            f"{float(times[-1]):.3f} s)",
            path="workload.trace",
        )
    arrival_s = (times[keep] - times[keep[0]]) / trace.rate_scale
    # Caps in simulated time; arrival_s is sorted (read_trace rejects out-of-order rows).
    count = len(keep)
    if spec.num_requests is not None:
        count = min(count, spec.num_requests)
    if spec.duration_s is not None:
        count = min(count, int(np.searchsorted(arrival_s, spec.duration_s, side="left")))
    keep = keep[:count]
    tier_index: np.ndarray | None = None
    tier_names: tuple[str, ...] = ("default",)
    if trace.tier_column:
        codes, uniques = pd.factorize(data.extra[trace.tier_column][keep])
        tier_index, tier_names = codes.astype(np.int64), tuple(str(u) for u in uniques)
    return RequestArrays(
        arrival_s=arrival_s[:count].copy(),
        prompt_tokens=data.prompt_tokens[keep],
        output_tokens=data.output_tokens[keep],
        class_index=np.zeros(count, dtype=np.int64),
        class_names=("trace",),
        tier_index=tier_index,
        tier_names=tier_names,
    )
