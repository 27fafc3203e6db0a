"""The units and ticks every plot shares, so that each axis has one unit and readable labels.

- Latencies: TPOT and ITL in milliseconds always (tens of ms: "12.5", not "0.0125"); TTFT and
  E2E in milliseconds when every value shown is under a second, else in seconds
  (`latency_unit`). The axis label names the unit; the values are scaled, never the labels.
- Time axes: seconds, minutes past 10 minutes, hours past 2 hours (`time_unit`), for the run's
  timelines and the per-window plot alike; `time_axis` labels an axis whose data stay in
  seconds, with ticks at whole steps of the unit.
- Log axes (`log_ticks`): major ticks at 1, 2 and 5 times each power of ten when the axis spans
  one to two decades, at the powers of ten over more (matplotlib's `LogLocator`), at up to six
  round numbers within one decade (`MaxNLocator`), labelled as plain numbers ("0.5", "20",
  "1000"); minor ticks are unlabelled, so labels never crowd.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.ticker import (
    FuncFormatter,
    LogLocator,
    MaxNLocator,
    MultipleLocator,
    NullFormatter,
)

ALWAYS_MS = frozenset({"tpot", "itl"})  # per-token latencies: tens of milliseconds


def latency_unit(metric: str, values: Any) -> tuple[float, str]:
    """(factor from seconds, unit) of an axis showing latency `metric` ("ttft", "tpot", "itl",
    "e2e", ...) over `values` in seconds: ms for TPOT and ITL, and for the others when every
    finite value is under a second; s otherwise."""
    if metric in ALWAYS_MS:
        return 1000.0, "ms"
    finite = np.asarray(values, dtype=float)
    finite = finite[np.isfinite(finite)]
    if finite.size and float(np.max(np.abs(finite))) < 1.0:
        return 1000.0, "ms"
    return 1.0, "s"


def time_unit(span_s: float) -> tuple[float, str]:
    """(seconds per unit, unit name) of the time axis for a run of `span_s` seconds."""
    if span_s > 2 * 3600:
        return 3600.0, "h"
    if span_s > 600:
        return 60.0, "min"
    return 1.0, "s"


def _plain(value: float, _: Any = None) -> str:
    return f"{value:g}"


def log_ticks(axis: Axis) -> None:
    """Readable ticks on a log-scaled axis (module docstring); call it once the data are drawn
    and the limits are final."""
    low, high = sorted(axis.get_view_interval())
    decades = math.log10(high / low) if low > 0 and high > 0 else math.inf
    if decades < 1:  # within a decade: evenly spaced round numbers read best
        axis.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]))
    else:
        subs = (1.0, 2.0, 5.0) if decades < 2 else (1.0,)
        axis.set_major_locator(LogLocator(base=10.0, subs=subs, numticks=12))
    axis.set_major_formatter(FuncFormatter(_plain))
    axis.set_minor_locator(LogLocator(base=10.0, subs=tuple(range(2, 10)), numticks=12))
    axis.set_minor_formatter(NullFormatter())


def _nice_step(raw: float) -> float:
    """The smallest of 1, 2, 5 x 10^k at least `raw`."""
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1.0, 2.0, 5.0, 10.0) if m * power >= raw)


def time_axis(ax: Axes, span_s: float, what: str = "simulated time") -> None:
    """Label the x axis of `ax` (data in seconds) in the unit of `time_unit(span_s)`, with ticks
    at whole steps of that unit."""
    unit, name = time_unit(span_s)
    ax.set_xlabel(f"{what} ({name})")
    if unit == 1.0 or not math.isfinite(span_s) or span_s <= 0:
        return
    ax.xaxis.set_major_locator(MultipleLocator(_nice_step(span_s / unit / 8) * unit))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / unit:g}"))


def cdf_points(values: Any, most: int) -> tuple[np.ndarray, np.ndarray]:
    """The empirical CDF of `values` (NaN left out) as (x, y) steps, at most `most` of them
    (evenly spaced in rank: the curve's shape, not its every step)."""
    arr = np.asarray(values, dtype=float)
    x = np.sort(arr[~np.isnan(arr)])
    y = np.arange(1, x.size + 1, dtype=float) / max(x.size, 1)
    if x.size > most:
        keep = np.linspace(0, x.size - 1, most).round().astype(np.int64)
        x, y = x[keep], y[keep]
    return x, y


def log_x_when_wide(ax: Axes, lows: list[float], highs: list[float]) -> None:
    """A log x axis when the plotted samples span more than a decade (it cannot show zeros)."""
    if lows and min(lows) > 0 and max(highs) / min(lows) > 10:
        ax.set_xscale("log")
        log_ticks(ax.xaxis)
