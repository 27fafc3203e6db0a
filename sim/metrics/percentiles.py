"""Percentiles and means of latency samples, plain and weighted.

Every latency metric in the summary is reported as a mean plus the percentiles in `QUANTILES`.
Per-request latencies (TTFT, TPOT, E2E, queue delay) are plain samples with NaN where a metric is
undefined; the pooled inter-token gaps come as a weighted sample `(gap_s, count)` that can hold
about a million distinct gaps, so the weighted version sorts once and answers every quantile with
one `searchsorted`.

The weighted percentile is defined to equal `np.percentile(np.repeat(values, counts), q)` (numpy's
default "linear" method) for integer counts: with `N` tokens in total, quantile `q` sits at
position `h = q/100 * (N - 1)` of the expanded sorted sample and interpolates between the elements
at `floor(h)` and `floor(h) + 1`. Non-integer weights use the same rule on the cumulative weight.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

QUANTILES: tuple[int, ...] = (50, 90, 95, 99)

FloatArray = npt.NDArray[np.float64]


def latency_stats(prefix: str, values: npt.ArrayLike) -> dict[str, float]:
    """`<prefix>_mean_s` and `<prefix>_p<q>_s` of a sample, ignoring NaN; NaN when empty."""
    arr = np.asarray(values, dtype=float)
    arr = arr[~np.isnan(arr)]
    out = {f"{prefix}_mean_s": float(arr.mean()) if arr.size else math.nan}
    qs = np.percentile(arr, QUANTILES) if arr.size else [math.nan] * len(QUANTILES)
    for q, v in zip(QUANTILES, qs, strict=True):
        out[f"{prefix}_p{q}_s"] = float(v)
    return out


def longest(values: FloatArray) -> float:
    """The largest value of a sample, NaN ignored (the oldest wait, the longest stall); NaN when
    there is none."""
    return float(np.nanmax(values)) if (~np.isnan(values)).any() else math.nan


def _weighted_sample(
    values: npt.ArrayLike, weights: npt.ArrayLike
) -> tuple[FloatArray, npt.NDArray[Any]]:
    """Values as floats and weights as given (integer counts stay integers: their sums are
    exact either way), without the NaN values and the non-positive weights; no copy when there
    are none, since the ITL sample can hold millions of rows."""
    vals = np.asarray(values, dtype=float)
    wts = np.asarray(weights)
    if wts.dtype.kind not in "iu":
        wts = wts.astype(float, copy=False)
    if vals.shape != wts.shape:
        raise ValueError(f"values {vals.shape} and weights {wts.shape} differ in shape")
    keep = (wts > 0) & ~np.isnan(vals)
    if not keep.all():
        vals, wts = vals[keep], wts[keep]
    return vals, wts


CHUNK = 1 << 20  # rows per pass where a whole-sample temporary would cost megabytes


def _sorted_percentiles(
    vals: FloatArray, wts: npt.NDArray[Any], qs: Sequence[float]
) -> list[float]:
    if vals.size == 0:
        return [math.nan] * len(qs)
    if wts.dtype.kind in "iu" and _ascending(vals):
        return _ascending_percentiles(vals, wts, qs)
    # any sort order will do: tied values are the same number whichever of them a quantile
    # lands on (quicksort needs no merge buffer, unlike a stable sort)
    order = np.argsort(vals)
    # cum[i] = number of expanded elements up to and including the i-th smallest value (summed
    # in place: the permuted weights are a fresh array); the sorted values themselves are only
    # read at the few indices the quantiles need, through `order`
    cum = wts[order]
    np.cumsum(cum, out=cum)
    positions = np.asarray(qs, dtype=float) / 100.0 * (float(cum[-1]) - 1.0)
    lower = np.floor(positions)
    frac = positions - lower
    # the element at expanded index k is the first value whose cumulative count exceeds k
    last = vals.size - 1
    lo = vals[order[np.minimum(np.searchsorted(cum, lower, side="right"), last)]]
    hi = vals[order[np.minimum(np.searchsorted(cum, lower + 1.0, side="right"), last)]]
    result = lo + frac * (hi - lo)
    return [float(r) for r in result]


def _ascending(vals: FloatArray) -> bool:
    return all(
        bool((vals[i + 1 : i + CHUNK + 1] >= vals[i : i + CHUNK][: vals.size - i - 1]).all())
        for i in range(0, vals.size - 1, CHUNK)
    )


def _ascending_percentiles(
    vals: FloatArray, wts: npt.NDArray[Any], qs: Sequence[float]
) -> list[float]:
    """The same quantiles on values already in ascending order with integer counts (the gap
    table is built sorted): the cumulative counts are summed a chunk at a time, so the largest
    sample of a run needs no sort and no temporary of its size. Integer sums are exact, so the
    answer is the argsort path's to the bit."""
    total = int(wts.sum())
    positions = np.asarray(qs, dtype=float) / 100.0 * (float(total) - 1.0)
    lower = np.floor(positions)
    frac = positions - lower
    # the element at expanded index k is the first value whose cumulative count exceeds k
    targets = np.concatenate([lower, lower + 1.0])
    found = np.full(targets.size, vals.size - 1, dtype=np.int64)
    pending = np.ones(targets.size, dtype=bool)
    running = 0
    for start in range(0, vals.size, CHUNK):
        cum = np.cumsum(wts[start : start + CHUNK], dtype=np.int64)
        cum += running
        hit = pending & (targets < cum[-1])
        if hit.any():
            found[hit] = start + np.searchsorted(cum, targets[hit], side="right")
            pending &= ~hit
        if not pending.any():
            break
        running = int(cum[-1])
    lo = vals[found[: lower.size]]
    hi = vals[found[lower.size :]]
    result = lo + frac * (hi - lo)
    return [float(r) for r in result]


def weighted_percentiles(
    values: npt.ArrayLike, weights: npt.ArrayLike, qs: Sequence[float]
) -> list[float]:
    """Percentiles `qs` (0..100) of `values` repeated `weights` times; NaN for an empty sample."""
    return _sorted_percentiles(*_weighted_sample(values, weights), qs)


def weighted_percentile(values: npt.ArrayLike, weights: npt.ArrayLike, q: float) -> float:
    """One percentile of a weighted sample; see `weighted_percentiles`."""
    return weighted_percentiles(values, weights, [q])[0]


def weighted_stats(prefix: str, values: npt.ArrayLike, weights: npt.ArrayLike) -> dict[str, float]:
    """Mean and `QUANTILES` of a weighted sample, keyed like `latency_stats`."""
    vals, wts = _weighted_sample(values, weights)
    total = float(wts.sum())
    # a chunk at a time (one chunk, the whole product, below a million rows)
    weighted = math.fsum(
        float((vals[i : i + CHUNK] * wts[i : i + CHUNK]).sum()) for i in range(0, vals.size, CHUNK)
    )
    mean = weighted / total if total > 0 else math.nan
    out = {f"{prefix}_mean_s": mean}
    for q, v in zip(QUANTILES, _sorted_percentiles(vals, wts, QUANTILES), strict=True):
        out[f"{prefix}_p{q}_s"] = v
    return out
