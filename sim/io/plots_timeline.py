"""The run over time: load, fleet, latency, SLO attainment and rent per window.

One figure, five panels sharing the time axis, drawn from each variant's timeline
(`sim.metrics.timeline`, the rows of `timeline.csv`) as steps over the windows:

1. arrival rate (requests/s, the same requests for every variant) and each variant's
   completions per second;
2. instances serving (solid) and billed (dashed, launched and not retired: provisioning and
   draining instances cost money without serving), with the autoscaler's events marked at the
   count of serving instances after each (launch, ready, drain, retire, cancel);
3. TTFT p90 of the requests arriving in each window, with the TTFT target as a dotted line (a
   log scale when the values span more than a factor of 50);
4. SLO attainment of those requests (TTFT and TPOT targets of their tier);
5. the fleet's rent, dollars per hour.

The time axis is in seconds, in minutes past 10 minutes and in hours past 2 hours, so a day-long
run reads in hours. Built with the object-oriented matplotlib API, like `sim.io.plots`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

# event -> (marker, label) of the scaling events
EVENT_MARKERS = {
    "launch": ("^", "launch"),
    "ready": ("o", "ready"),
    "drain": ("v", "drain"),
    "retire": ("s", "retire"),
    "cancel": ("x", "cancel"),
}
PLOT_NAME = "over_time"


def time_unit(span_s: float) -> tuple[float, str]:
    """(seconds per unit, unit name) of the time axis for a run of `span_s` seconds."""
    if span_s > 2 * 3600:
        return 3600.0, "h"
    if span_s > 600:
        return 60.0, "min"
    return 1.0, "s"


def windows_of(timelines: Mapping[str, pd.DataFrame]) -> int:
    """The most windows any variant's timeline has."""
    return max((len(t) for t in timelines.values()), default=0)


def _edges(frame: pd.DataFrame, unit: float) -> np.ndarray:
    starts = frame["window_start_s"].to_numpy(dtype=float)
    ends = frame["window_end_s"].to_numpy(dtype=float)
    return np.append(starts, ends[-1]) / unit


MAX_MARKED_EVENTS = 60  # per variant; more are left to fleet_events.csv


def over_time_figure(
    timelines: Mapping[str, pd.DataFrame],
    fleet_events: Mapping[str, pd.DataFrame] | None = None,
    slo_ttft_s: Mapping[str, float | None] | None = None,
) -> Figure:
    """The five panels (see the module docstring) for each variant's timeline."""
    fleet_events = fleet_events or {}
    slo_ttft_s = slo_ttft_s or {}
    drawn = {name: t for name, t in timelines.items() if len(t)}
    fig = Figure(figsize=(11, 12.5), layout="constrained")
    axes = fig.subplots(5, 1, sharex=True)
    rate_ax, fleet_ax, ttft_ax, slo_ax, usd_ax = axes
    if not drawn:
        rate_ax.set_title("no requests")
        return fig
    start = min(float(t["window_start_s"].iloc[0]) for t in drawn.values())
    end = max(float(t["window_end_s"].iloc[-1]) for t in drawn.values())
    unit, unit_name = time_unit(end - start)
    colors = {name: f"C{i % 10}" for i, name in enumerate(drawn)}

    def stairs(ax: Axes, values: pd.Series | np.ndarray, edges: np.ndarray, **style: Any) -> None:
        # no baseline: a line from window to window, not a bar down to zero at either end
        ax.stairs(np.asarray(values, dtype=float), edges, baseline=None, **style)

    first = next(iter(drawn.values()))
    stairs(rate_ax, first["arrival_rate"], _edges(first, unit), color="black", linewidth=1.4,
           label="arrivals")  # fmt: skip
    for name, frame in drawn.items():
        edges = _edges(frame, unit)
        color = colors[name]
        covered = frame["covered_s"].to_numpy(dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            done = np.where(covered > 0, frame["completed"].to_numpy(dtype=float) / covered, np.nan)
        stairs(rate_ax, done, edges, color=color, linewidth=1.0, label=f"{name} completed")
        stairs(fleet_ax, frame["instances_serving"], edges, color=color, linewidth=1.4,
               label=f"{name} serving")  # fmt: skip
        stairs(fleet_ax, frame["instances_billed"], edges, color=color, linewidth=1.0,
               linestyle="--", label=f"{name} billed")  # fmt: skip
        stairs(ttft_ax, frame["ttft_p90_s"], edges, color=color, linewidth=1.2, label=name)
        stairs(slo_ax, frame["slo_attainment"], edges, color=color, linewidth=1.2, label=name)
        stairs(usd_ax, frame["usd_per_hour"], edges, color=color, linewidth=1.2, label=name)
        events = fleet_events.get(name)
        # a day of scaling has hundreds of events: the stairs show them, markers would bury them
        if events is not None and 0 < len(events) <= MAX_MARKED_EVENTS:
            for kind, (marker, label) in EVENT_MARKERS.items():
                rows = events[events["event"] == kind]
                if len(rows):
                    fleet_ax.scatter(rows["time_s"].to_numpy(dtype=float) / unit,
                                     rows["serving"].to_numpy(dtype=float), marker=marker,
                                     color=colors[name], s=28, zorder=3,
                                     label=f"{name} {label}")  # fmt: skip
    targets = sorted({t for t in (slo_ttft_s.get(n) for n in drawn) if t is not None})
    for target in targets:
        ttft_ax.axhline(target, color="red", linestyle=":", linewidth=1.0,
                        label=f"TTFT target {target:g} s")  # fmt: skip
    rate_ax.set_ylabel("requests/s")
    rate_ax.set_title("Arrival rate and completions")
    fleet_ax.set_ylabel("instances")
    marked = all(len(e) <= MAX_MARKED_EVENTS for e in fleet_events.values())
    fleet_ax.set_title(
        "Instances serving (solid) and billed (dashed)"
        + ("; scaling events" if marked else " (scaling events: fleet_events.csv)")
    )
    fleet_ax.margins(y=0.12)
    fleet_ax.set_ylim(bottom=0)
    p90 = np.concatenate([t["ttft_p90_s"].to_numpy(dtype=float) for t in drawn.values()])
    p90 = p90[np.isfinite(p90) & (p90 > 0)]
    if p90.size and p90.max() > 50 * p90.min():  # variants or windows orders of magnitude apart
        ttft_ax.set_yscale("log")
    ttft_ax.set_ylabel("TTFT p90 (s)")
    ttft_ax.set_title("TTFT p90 of the requests arriving in each window")
    slo_ax.set_ylabel("SLO attainment")
    slo_ax.set_ylim(-0.03, 1.03)
    slo_ax.set_title("Share of each window's arrivals within their TTFT and TPOT targets")
    usd_ax.set_ylabel("$/hour")
    usd_ax.set_title("Fleet rent")
    usd_ax.set_ylim(bottom=0)
    usd_ax.set_xlabel(f"time ({unit_name})")
    usd_ax.set_xlim(start / unit, end / unit)
    for ax in axes:
        ax.grid(True, alpha=0.3)
        handles, _ = ax.get_legend_handles_labels()
        if handles:
            ax.legend(fontsize=7, loc="upper right", ncols=min(4, math.ceil(len(handles) / 3)))
    return fig


def plot_over_time(
    timelines: Mapping[str, pd.DataFrame],
    out_dir: Path,
    fleet_events: Mapping[str, pd.DataFrame] | None = None,
    slo_ttft_s: Mapping[str, float | None] | None = None,
    formats: tuple[str, ...] = ("png", "svg"),
) -> list[Path]:
    """Save `over_time_figure` as `over_time.<format>` in `out_dir` when some timeline has more
    than one window (a single window has no time to show); return the paths written."""
    if windows_of(timelines) < 2:
        return []
    fig = over_time_figure(timelines, fleet_events, slo_ttft_s)
    paths = []
    for fmt in formats:
        path = out_dir / f"{PLOT_NAME}.{fmt}"
        fig.savefig(path, dpi=110)
        fig.set_layout_engine("none")  # the layout solved by the first save serves the rest
        paths.append(path)
    return paths
