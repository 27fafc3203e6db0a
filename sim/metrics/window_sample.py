"""One latency's values per timeline window (`sim.metrics.timeline`): the sample kept whole
while it is small, then DDSketch bins per window (within `RELATIVE_ACCURACY` of the exact
value, as the summary's sketches), and the percentiles of each window from either.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

RELATIVE_ACCURACY = 0.005  # that of the summary's sketches
_BIN_BITS = 21  # a sketch entry's key: window << _BIN_BITS | (bin + _BIN_OFFSET)
_BIN_OFFSET = 1 << 20


def grouped_percentiles(
    group: IntArray, values: FloatArray, weights: FloatArray, n: int, q: float
) -> FloatArray:
    """The q-th percentile (numpy's linear rule on the sample repeated `weights` times) of each
    group `0..n-1`; rows sorted by group, then by value; NaN for an empty group."""
    out = np.full(n, math.nan)
    if not values.size:
        return out
    cum = np.cumsum(weights)
    totals = np.bincount(group, weights=weights, minlength=n)[:n]
    before = np.cumsum(totals) - totals
    last = np.searchsorted(group, np.arange(n), side="right") - 1
    has = totals > 0
    pos = q / 100.0 * (totals[has] - 1.0)
    lower = np.floor(pos)
    frac = pos - lower
    # the element at expanded rank k of a group is the first row whose cumulative weight
    # exceeds before + k
    lo = np.minimum(np.searchsorted(cum, before[has] + lower, side="right"), last[has])
    hi = np.minimum(np.searchsorted(cum, before[has] + lower + 1.0, side="right"), last[has])
    out[has] = values[lo] + frac * (values[hi] - values[lo])
    return out


class WindowSample:
    """One latency's values per window: kept whole while small, then DDSketch bins per window
    (a key per (window, bin) holding its count), so memory stays flat whatever the run's size."""

    def __init__(self, exact_rows: int | None) -> None:
        self.exact_rows = exact_rows  # rows kept whole before binning; None: always exact
        gamma = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
        self.log_gamma = math.log(gamma)
        self.scale = 2.0 / (1.0 + gamma)
        self.min_positive = sys.float_info.min * gamma
        self.kept: list[tuple[IntArray, FloatArray]] | None = []
        self.kept_rows = 0
        self.keys = np.zeros(0, dtype=np.int64)
        self.counts = np.zeros(0)
        self.pending: list[tuple[IntArray, FloatArray]] = []
        self.pending_rows = 0

    @property
    def exact(self) -> bool:
        return self.kept is not None

    def add(self, window: IntArray, values: FloatArray) -> None:
        keep = ~np.isnan(values)
        window, values = window[keep], values[keep]
        if not values.size:
            return
        if self.kept is None:
            self._bin(window, values)
            return
        self.kept.append((window, values))
        self.kept_rows += values.size
        if self.exact_rows is not None and self.kept_rows > self.exact_rows:
            for w, v in self.kept:
                self._bin(w, v)
            self.kept = None

    def _bin(self, window: IntArray, values: FloatArray) -> None:
        bins = np.zeros(values.size, dtype=np.int64)  # non-positive values: the lowest bin
        positive = values > self.min_positive
        found = np.ceil(np.log(values[positive]) / self.log_gamma).astype(np.int64)
        bins[positive] = np.clip(found, 1 - _BIN_OFFSET, _BIN_OFFSET - 1) + _BIN_OFFSET
        keys, counts = np.unique((window << _BIN_BITS) | bins, return_counts=True)
        self.pending.append((keys, counts.astype(float)))
        self.pending_rows += keys.size
        if self.pending_rows > max(self.keys.size, 1 << 16):
            self._consolidate()

    def _consolidate(self) -> None:
        if not self.pending:
            return
        keys = np.concatenate([self.keys, *(k for k, _ in self.pending)])
        counts = np.concatenate([self.counts, *(c for _, c in self.pending)])
        self.keys, inverse = np.unique(keys, return_inverse=True)
        self.counts = np.bincount(inverse.ravel(), weights=counts).astype(float, copy=False)
        self.pending, self.pending_rows = [], 0

    def percentiles(self, n: int, qs: tuple[float, ...]) -> list[FloatArray]:
        """Each of the percentiles `qs` per window `0..n-1` (NaN where a window has none)."""
        if self.kept is not None:
            if not self.kept:
                return [np.full(n, math.nan) for _ in qs]
            window = np.concatenate([w for w, _ in self.kept])
            values = np.concatenate([v for _, v in self.kept])
            # by window, then by value: one sort of the values and one of an integer key
            rank = np.empty(values.size, dtype=np.int64)
            rank[np.argsort(values)] = np.arange(values.size)
            order = np.argsort(window * values.size + rank)
            group, values = window[order], values[order]
            weights = np.ones(values.size)
        else:
            self._consolidate()
            group = self.keys >> _BIN_BITS
            bins = (self.keys & ((1 << _BIN_BITS) - 1)) - _BIN_OFFSET
            values = np.where(bins == -_BIN_OFFSET, 0.0, np.exp(bins * self.log_gamma) * self.scale)
            weights = self.counts
        inside = group < n
        group, values, weights = group[inside], values[inside], weights[inside]
        return [grouped_percentiles(group, values, weights, n, q) for q in qs]
