"""Tabulated step costs: the `table` block of a profile and the lookups that price from it.

A table profile splits a step into the parts whose cost measurements tabulate well:

- `linear`: everything but attention (weights, norms, rotary, activations, embedding; with
  tensor parallelism the all-reduces) for a step computing `tokens` tokens, prefill and decode
  alike. Measured kernel times are not smooth in the token count (they jump above multiples of
  the GPU's tile sizes), so the axis is sampled densely.
- `decode_attention` (optional): attention of `batch` decoding sequences, each with `context`
  cached tokens before the step (the mean over the batch), KV-cache writes included.
- `prefill_attention` (optional): attention of one prompt chunk of `chunk` tokens after `prefix`
  cached tokens, KV-cache writes included. A step with several chunks pays each one.

Between grid points a value is interpolated linearly along each axis (bilinear on a grid:
first along the first axis, then along the second), so every grid point is reproduced exactly.
A grid cell may be null (not measured, e.g. chunk + prefix beyond the model's context); a point
needing a null value is outside the table, like a point beyond either end of an axis.

Cells are seconds, finite. The linear part is >= 0, and > 0 at every token count >= 1; an
attention cell may be slightly negative (a step's measured time minus a fitted linear part) but
the step it prices at its grid point, linear(batch or chunk) + cell, must take time: a table
that prices a step at or below zero is refused at load, and the table cost model refuses any step
it would still price so (between grid points), so the clock always moves. The fallback form is
held to the same rule by the profile.

Axes are token or sequence counts: non-negative integers, strictly increasing; the linear axis
has at least two points, a grid axis at least one (a grid measured at one prefix only, say,
covers that prefix and nothing else).
"""

from __future__ import annotations

from abc import abstractmethod
from bisect import bisect_right
from itertools import pairwise
from typing import Literal

import numpy as np
from pydantic import ConfigDict, Field, model_validator

from sim.inputs.strict_model import StrictModel

INF = float("inf")
MAX_DENSE_TOKENS = 1 << 21  # the linear axis is expanded to one value per token count
AnalyticForm = Literal["seed", "extended", "two_regime", "split"]


class _Strict(StrictModel):  # unknown keys, booleans as numbers, inf and NaN refused
    model_config = ConfigDict(frozen=True)


def _check_axis(name: str, axis: list[int], lowest: int, least: int = 1) -> None:
    if len(axis) < least:
        raise ValueError(f"{name}: needs at least {least} grid point{'s' if least > 1 else ''}")
    if axis[0] < lowest:
        raise ValueError(f"{name}: must be >= {lowest}")
    if any(b <= a for a, b in pairwise(axis)):
        raise ValueError(f"{name}: must be strictly increasing")


class LinearTable(_Strict):
    """Seconds of everything but attention, by tokens computed in the step."""

    tokens: list[int]
    seconds: list[float]

    @model_validator(mode="after")
    def _check(self) -> LinearTable:
        _check_axis("tokens", self.tokens, 0, least=2)
        if self.tokens[-1] > MAX_DENSE_TOKENS:
            raise ValueError(f"tokens: at most {MAX_DENSE_TOKENS}")
        if len(self.seconds) != len(self.tokens):
            raise ValueError("seconds: one value per entry of tokens")
        if not all(np.isfinite(self.seconds)) or min(self.seconds) < 0:
            raise ValueError("seconds: must be finite and >= 0")
        # every step computes a token, so it must take time: values interpolate linearly, so
        # positive points at tokens >= 1 (and any value >= 0 at 0) keep every such step positive
        pairs = zip(self.tokens, self.seconds, strict=True)
        zero = next((t for t, v in pairs if t >= 1 and v <= 0), None)
        if zero is not None:
            raise ValueError(
                f"seconds: must be > 0 wherever tokens >= 1 (0 at {zero} tokens: a step of "
                "that size would take no time)"
            )
        return self


Cells = list[list[float | None]]  # seconds[i][j]: first axis i, second axis j; null: not measured


class _Grid(_Strict):
    """A measured grid; each table names its axes and cells (pydantic's models are ABCs)."""

    @abstractmethod
    def axes(self) -> tuple[list[int], list[int]]: ...

    @abstractmethod
    def axis_names(self) -> tuple[str, str]: ...

    @abstractmethod
    def cells(self) -> Cells: ...

    @model_validator(mode="after")
    def _check(self) -> _Grid:
        (first_name, second_name), (first, second) = self.axis_names(), self.axes()
        _check_axis(first_name, first, 1)
        _check_axis(second_name, second, 0)
        cells = self.cells()
        if len(cells) != len(first) or any(len(r) != len(second) for r in cells):
            raise ValueError(f"seconds: {len(first)} rows ({first_name}) of {len(second)} values")
        values = [v for row in cells for v in row if v is not None]
        if not values or not all(np.isfinite(values)):
            raise ValueError("seconds: must be finite (null where not measured)")

        return self


class DecodeAttentionTable(_Grid):
    """Seconds of the attention of `batch` decodes over `context` cached tokens each."""

    batch: list[int]
    context: list[int]
    seconds: Cells

    def axes(self) -> tuple[list[int], list[int]]:
        return self.batch, self.context

    def cells(self) -> Cells:
        return self.seconds

    def axis_names(self) -> tuple[str, str]:
        return "batch", "context"


class PrefillAttentionTable(_Grid):
    """Seconds of the attention of one prompt chunk of `chunk` tokens after `prefix` tokens."""

    chunk: list[int]
    prefix: list[int]
    seconds: Cells

    def axes(self) -> tuple[list[int], list[int]]:
        return self.chunk, self.prefix

    def cells(self) -> Cells:
        return self.seconds

    def axis_names(self) -> tuple[str, str]:
        return "chunk", "prefix"


class TableSpec(_Strict):
    """A profile's `table` block; the profile's coefficients (in `fallback_form`) price every
    step that falls outside it."""

    fallback_form: AnalyticForm = "extended"
    linear: LinearTable
    decode_attention: DecodeAttentionTable | None = None
    prefill_attention: PrefillAttentionTable | None = None
    # what each part holds and where it came from, in words (the profile's provenance has more)
    notes: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _steps_take_time(self) -> TableSpec:
        """A step at a grid point costs linear(a) + cell (a: its batch or chunk): that must be
        > 0. A cell may be slightly negative (an attention time measured as a step's time minus
        a fitted linear part), never so negative that the step it prices takes no time."""
        lin = self.linear
        for name, grid in (("decode_attention", self.decode_attention),
                           ("prefill_attention", self.prefill_attention)):  # fmt: skip
            if grid is None:
                continue
            first, second = grid.axes()
            for i, row in enumerate(grid.cells()):
                a = first[i]
                inside = lin.tokens[0] <= a <= lin.tokens[-1]
                base = interpolate(lin.tokens, lin.seconds, a) if inside else 0.0
                for j, cell in enumerate(row):
                    if cell is not None and base + cell <= 0:
                        axis_a, axis_b = grid.axis_names()
                        raise ValueError(
                            f"{name}.seconds: the cell at {axis_a} {a}, {axis_b} {second[j]} is "
                            f"{cell:g} s, so a step there would take {base + cell:g} s "
                            f"(linear {base:g} s + the cell): a step must take time"
                        )
        return self


def interpolate(axis: list[int], values: list[float], x: float) -> float:
    """The piecewise-linear value at x in [axis[0], axis[-1]] (the pricing formula: exact on
    grid points)."""
    j = min(bisect_right(axis, x) - 1, len(axis) - 2)
    w = (x - axis[j]) / (axis[j + 1] - axis[j])
    return (1.0 - w) * values[j] + w * values[j + 1]


def dense_linear(table: LinearTable) -> list[float]:
    """The linear table at every integer token count from tokens[0] to tokens[-1]."""
    xs = np.asarray(table.tokens, dtype=np.float64)
    ys = np.asarray(table.seconds, dtype=np.float64)
    n = np.arange(table.tokens[0], table.tokens[-1] + 1, dtype=np.float64)
    j = np.minimum(np.searchsorted(xs, n, side="right") - 1, len(xs) - 2)
    w = (n - xs[j]) / (xs[j + 1] - xs[j])
    values: list[float] = ((1.0 - w) * ys[j] + w * ys[j + 1]).tolist()
    return values


class GridLookup:
    """Bilinear lookups on a grid whose first axis stays fixed during a run of steps (the batch,
    the chunk) while the second grows (the context, the prefix).

    `at(a, b)` returns (value, slope along b, bound). Inside the table the value is exact
    bilinear interpolation (first along the first axis, then along the second), the slope holds
    up to `bound` (the last b on the same linear piece, inclusive). Outside it the value is None
    and `bound` is the first b at which the point may be inside again (exclusive; inf: never, as
    b only grows)."""

    __slots__ = ("_weights", "first", "hi_a", "lo_a", "second", "values")

    def __init__(self, grid: _Grid) -> None:
        first, second = grid.axes()
        self.first = [int(a) for a in first]
        self.second = [float(b) for b in second]
        self.values = grid.cells()
        self.lo_a, self.hi_a = self.first[0], self.first[-1]
        # per first-axis value: its row pair and weight (cached: batches and chunks recur)
        self._weights: dict[int, tuple[list[float | None], list[float | None], float]] = {}

    def _rows(self, a: int) -> tuple[list[float | None], list[float | None], float]:
        first = self.first
        if len(first) == 1:  # a single row: only its own batch or chunk is inside
            pair = (self.values[0], self.values[0], 0.0)
        else:
            i = min(bisect_right(first, a) - 1, len(first) - 2)
            w = (a - first[i]) / (first[i + 1] - first[i])
            pair = (self.values[i], self.values[i + 1], w)
        self._weights[a] = pair
        return pair

    def cell(self, a: int, j: int) -> float | None:
        """The grid interpolated along the first axis at `a`, at second-axis index j."""
        low, high, w = self._weights.get(a) or self._rows(a)
        if w == 0.0:
            return low[j]
        if w == 1.0:
            return high[j]
        v0, v1 = low[j], high[j]
        if v0 is None or v1 is None:
            return None
        return (1.0 - w) * v0 + w * v1

    def at(self, a: int, b: float) -> tuple[float | None, float, float]:
        if a < self.lo_a or a > self.hi_a:
            return None, 0.0, INF
        bs = self.second
        if b < bs[0]:
            return None, 0.0, bs[0]
        last = len(bs) - 1
        if b >= bs[last]:
            value = self.cell(a, last) if b == bs[last] else None
            return (None, 0.0, INF) if value is None else (value, 0.0, b)
        j = bisect_right(bs, b) - 1
        v0, v1 = self.cell(a, j), self.cell(a, j + 1)
        b0, b1 = bs[j], bs[j + 1]
        if b == b0:
            if v0 is None:
                return None, 0.0, b1
            if v1 is None:
                return v0, 0.0, b  # this grid point only: the next step enters a null cell
            return v0, (v1 - v0) / (b1 - b0), b1
        if v0 is None or v1 is None:
            return None, 0.0, b1
        w = (b - b0) / (b1 - b0)
        return (1.0 - w) * v0 + w * v1, (v1 - v0) / (b1 - b0), b1
