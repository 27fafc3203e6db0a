"""The run over time: load, fleet, latency, SLO attainment and rent per window.

One figure, up to five panels sharing the time axis, drawn from each variant's timeline
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

A panel is drawn only when it carries something for the run (`panels_of`): the fleet panel when
some variant's instance count changes or the autoscaler acted, the rent panel when some
variant's rent changes, the TTFT and attainment panels when some window has a value (attainment
needs SLO targets). A fixed fleet's flat lines are in the summary already.

The time axis is in seconds, in minutes past 10 minutes and in hours past 2 hours, so a day-long
run reads in hours. Built with the object-oriented matplotlib API, like `sim.io.plots`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from sim.io.plot_units import latency_unit, log_ticks, time_unit

# event -> (marker, label) of the scaling events
EVENT_MARKERS = {
    "launch": ("^", "launch"),
    "ready": ("o", "ready"),
    "drain": ("v", "drain"),
    "retire": ("s", "retire"),
    "cancel": ("x", "cancel"),
}
PLOT_NAME = "over_time"




def windows_of(timelines: Mapping[str, pd.DataFrame]) -> int:
    """The most windows any variant's timeline has."""
    return max((len(t) for t in timelines.values()), default=0)


def _edges(frame: pd.DataFrame, unit: float) -> np.ndarray:
    starts = frame["window_start_s"].to_numpy(dtype=float)
    ends = frame["window_end_s"].to_numpy(dtype=float)
    return np.append(starts, ends[-1]) / unit


MAX_MARKED_EVENTS = 60  # per variant; more are left to fleet_events.csv
PANELS = ("rate", "fleet", "ttft", "slo", "usd")
PANEL_HEIGHT_IN = 2.5


def _changes(values: pd.Series) -> bool:
    finite = values.to_numpy(dtype=float)
    finite = finite[np.isfinite(finite)]
    return bool(finite.size) and bool(np.ptp(finite) > 1e-9 * max(1.0, float(np.abs(finite).max())))


def panels_of(
    timelines: Mapping[str, pd.DataFrame],
    fleet_events: Mapping[str, pd.DataFrame] | None = None,
) -> tuple[str, ...]:
    """The panels of `PANELS` that carry something for these timelines: the load always; the
    fleet when an instance count changes or some variant has scaling events; TTFT and SLO
    attainment when some window has a value; the rent when it changes."""
    frames = [t for t in timelines.values() if len(t)]

    def any_finite(column: str) -> bool:
        return any(np.isfinite(t[column].to_numpy(dtype=float)).any() for t in frames)

    shown = {
        "rate": True,
        "fleet": any(
            _changes(t["instances_serving"]) or _changes(t["instances_billed"]) for t in frames
        )
        or any(len(e) for e in (fleet_events or {}).values()),
        "ttft": any_finite("ttft_p90_s"),
        "slo": any_finite("slo_attainment"),
        "usd": any(_changes(t["usd_per_hour"]) for t in frames),
    }
    return tuple(name for name in PANELS if shown[name])


def _stairs(ax: Axes, values: pd.Series | np.ndarray, edges: np.ndarray, **style: Any) -> None:
    # no baseline: a line from window to window, not a bar down to zero at either end
    ax.stairs(np.asarray(values, dtype=float), edges, baseline=None, **style)


@dataclass(frozen=True)
class _Run:
    """What every panel draws from: the variants' timelines, their colors and the time unit."""

    drawn: Mapping[str, pd.DataFrame]
    fleet_events: Mapping[str, pd.DataFrame]
    slo_ttft_s: Mapping[str, float | None]
    unit: float

    def color(self, name: str) -> str:
        return f"C{list(self.drawn).index(name) % 10}"

    def edges(self, frame: pd.DataFrame) -> np.ndarray:
        return _edges(frame, self.unit)


def _rate_panel(ax: Axes, run: _Run) -> None:
    first = next(iter(run.drawn.values()))
    _stairs(ax, first["arrival_rate"], run.edges(first), color="black", linewidth=1.4,
            label="arrivals")  # fmt: skip
    for name, frame in run.drawn.items():
        covered = frame["covered_s"].to_numpy(dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            done = np.where(covered > 0, frame["completed"].to_numpy(dtype=float) / covered, np.nan)
        _stairs(ax, done, run.edges(frame), color=run.color(name), linewidth=1.0,
                label=f"{name} completed")  # fmt: skip
    ax.set_ylabel("requests/s")
    ax.set_title("Arrival rate and completions")


def _fleet_panel(ax: Axes, run: _Run) -> None:
    for name, frame in run.drawn.items():
        edges, color = run.edges(frame), run.color(name)
        _stairs(ax, frame["instances_serving"], edges, color=color, linewidth=1.4,
                label=f"{name} serving")  # fmt: skip
        _stairs(ax, frame["instances_billed"], edges, color=color, linewidth=1.0,
                linestyle="--", label=f"{name} billed")  # fmt: skip
        events = run.fleet_events.get(name)
        # a day of scaling has hundreds of events: the stairs show them, markers would bury them
        if events is not None and 0 < len(events) <= MAX_MARKED_EVENTS:
            for kind, (marker, label) in EVENT_MARKERS.items():
                rows = events[events["event"] == kind]
                if len(rows):
                    ax.scatter(rows["time_s"].to_numpy(dtype=float) / run.unit,
                               rows["serving"].to_numpy(dtype=float), marker=marker,
                               color=color, s=28, zorder=3, label=f"{name} {label}")  # fmt: skip
    ax.set_ylabel("instances")
    marked = all(len(e) <= MAX_MARKED_EVENTS for e in run.fleet_events.values())
    ax.set_title(
        "Instances serving (solid) and billed (dashed)"
        + ("; scaling events" if marked else " (scaling events: fleet_events.csv)")
    )
    ax.margins(y=0.12)
    ax.set_ylim(bottom=0)


def _ttft_panel(ax: Axes, run: _Run) -> None:
    targets = sorted({t for t in (run.slo_ttft_s.get(n) for n in run.drawn) if t is not None})
    p90 = np.concatenate([t["ttft_p90_s"].to_numpy(dtype=float) for t in run.drawn.values()])
    scale, unit = latency_unit("ttft", np.append(p90, targets))
    for name, frame in run.drawn.items():
        _stairs(ax, frame["ttft_p90_s"] * scale, run.edges(frame), color=run.color(name),
                linewidth=1.2, label=name)  # fmt: skip
    for target in targets:
        ax.axhline(target * scale, color="red", linestyle=":", linewidth=1.0,
                   label=f"TTFT target {target * scale:g} {unit}")  # fmt: skip
    p90 = p90[np.isfinite(p90) & (p90 > 0)]
    if p90.size and p90.max() > 50 * p90.min():  # variants or windows orders of magnitude apart
        ax.set_yscale("log")
        log_ticks(ax.yaxis)
    ax.set_ylabel(f"TTFT p90 ({unit})")
    ax.set_title("TTFT p90 of the requests arriving in each window")


def _slo_panel(ax: Axes, run: _Run) -> None:
    for name, frame in run.drawn.items():
        _stairs(ax, frame["slo_attainment"], run.edges(frame), color=run.color(name),
                linewidth=1.2, label=name)  # fmt: skip
    ax.set_ylabel("SLO attainment")
    ax.set_ylim(-0.03, 1.03)
    ax.set_title("Share of each window's arrivals within their TTFT and TPOT targets")


def _usd_panel(ax: Axes, run: _Run) -> None:
    for name, frame in run.drawn.items():
        _stairs(ax, frame["usd_per_hour"], run.edges(frame), color=run.color(name),
                linewidth=1.2, label=name)  # fmt: skip
    ax.set_ylabel("$/hour")
    ax.set_title("Fleet rent")
    ax.set_ylim(bottom=0)


DRAW_PANEL = {
    "rate": _rate_panel,
    "fleet": _fleet_panel,
    "ttft": _ttft_panel,
    "slo": _slo_panel,
    "usd": _usd_panel,
}


def over_time_figure(
    timelines: Mapping[str, pd.DataFrame],
    fleet_events: Mapping[str, pd.DataFrame] | None = None,
    slo_ttft_s: Mapping[str, float | None] | None = None,
) -> Figure:
    """The panels of `panels_of` (see the module docstring) for each variant's timeline."""
    drawn = {name: t for name, t in timelines.items() if len(t)}
    shown = panels_of(drawn, fleet_events) if drawn else ("rate",)
    fig = Figure(figsize=(11, 1.0 + PANEL_HEIGHT_IN * len(shown)), layout="constrained")
    axes = list(fig.subplots(len(shown), 1, sharex=True, squeeze=False)[:, 0])
    if not drawn:
        axes[0].set_title("no requests")
        return fig
    start = min(float(t["window_start_s"].iloc[0]) for t in drawn.values())
    end = max(float(t["window_end_s"].iloc[-1]) for t in drawn.values())
    unit, unit_name = time_unit(end - start)
    run = _Run(drawn, fleet_events or {}, slo_ttft_s or {}, unit)
    for name, ax in zip(shown, axes, strict=True):
        DRAW_PANEL[name](ax, run)
        ax.grid(True, alpha=0.3)
        handles, _ = ax.get_legend_handles_labels()
        if handles:
            ax.legend(fontsize=7, loc="upper right", ncols=min(4, math.ceil(len(handles) / 3)))
    axes[-1].set_xlabel(f"time ({unit_name})")
    axes[-1].set_xlim(start / unit, end / unit)
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
