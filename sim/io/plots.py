"""Plots of one scenario's results: latency CDFs and batch / queue / KV timelines per variant.

`save_plots` writes them, with the batch-slot chart of `sim.io.plots_slots`, as PNG and SVG; the
sweep plots (throughput vs latency, goodput vs rate) are in `sim.io.plots_sweep`.

Figures are built with matplotlib's object-oriented API (`matplotlib.figure.Figure`), never
through `pyplot`, so nothing leaks into global state, no GUI backend is touched and plots can be
made from worker threads; `Figure.savefig` renders PNG with the Agg canvas. The `*_figure`
functions return the Figure for notebooks and tests; `plot_*` save it.

The timeline must stay fast on runs with millions of steps, so it never draws step groups one by
one: each quantity is a piecewise-constant function of time, integrated exactly over at most
`MAX_POINTS` equal time bins (a cumulative sum over sorted interval ends), and each bin shows the
time-weighted mean. Instances of a variant are summed (batch size, queue) or pooled (KV %).
Batch size counts only while a step runs (an idle instance batches nothing); queue length and KV
use hold their last recorded value until the instance's next step, as requests keep waiting and
blocks stay allocated between steps.

A panel is drawn only when it carries something for the run: the queue panel when some request
waited, a latency's CDF when some request has a value of it (TPOT needs two output tokens).

With KV tiers below the GPU (`kv_tiers`), a last panel shows the blocks each tier holds: the
step table's `kv_dram_blocks`, `kv_nvme_blocks` and `kv_remote_blocks`, counted at each step
group's end and held from then until the instance's next count (to the plot's end after its
last). DRAM and NVMe are per instance and summed; the remote store is one for every instance, so
each count is the whole store and the latest count of any instance stands. Runs without tiers
have no such panel.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from sim.io.plot_units import cdf_points, latency_unit, log_x_when_wide, time_axis
from sim.io.plots_slots import slot_timeline_figure
from sim.io.plots_tasks import tasks_figure
from sim.metrics.tasks import is_agents, tasks_by_variant

if TYPE_CHECKING:
    from sim.metrics.results import Results, VariantResult

MAX_POINTS = 2000  # points per plotted line; plenty for a screen-wide PNG
FloatArray = npt.NDArray[np.float64]
LATENCIES = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E latency"))
# (steps column, label, line style) of each tier below the GPU, fastest first
TIERS = (
    ("kv_dram_blocks", "DRAM", "-"),
    ("kv_nvme_blocks", "NVMe", "--"),
    ("kv_remote_blocks", "remote", ":"),
)
SHARED_TIERS = frozenset({"kv_remote_blocks"})  # one store for every instance of a variant


def _variants(frame: pd.DataFrame) -> list[str]:
    return [str(v) for v in pd.unique(frame["variant"])] if "variant" in frame.columns else []


def _has_values(frame: pd.DataFrame, column: str) -> bool:
    return column in frame.columns and bool(np.isfinite(frame[column].to_numpy(dtype=float)).any())


def latency_cdf_figure(requests: pd.DataFrame) -> Figure:
    """A panel per latency (TTFT, TPOT, E2E) some request has a value of (TTFT when none has):
    the empirical CDF of each variant's finished requests."""
    shown = [(c, label) for c, label in LATENCIES if _has_values(requests, c)] or [LATENCIES[0]]
    fig = Figure(figsize=(5 * len(shown), 4.5), layout="constrained")
    axes = fig.subplots(1, len(shown), squeeze=False)[0]
    for ax, (column, label) in zip(axes, shown, strict=True):
        lows, highs = [], []
        scale, unit = (latency_unit(column.removesuffix("_s"), requests[column])
                       if column in requests.columns else (1.0, "s"))  # fmt: skip
        for i, variant in enumerate(_variants(requests)):
            rows = requests[requests["variant"] == variant]
            x, y = cdf_points(rows[column].to_numpy(dtype=float) * scale, MAX_POINTS)
            if x.size:
                ax.plot(x, y, drawstyle="steps-post", color=f"C{i}", label=variant)
                lows.append(x[0])
                highs.append(x[-1])
        log_x_when_wide(ax, lows, highs)
        ax.set_title(f"{label} CDF")
        ax.set_xlabel(f"{label} ({unit})")
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="lower right")
    fig.suptitle("Latency distributions per variant")
    return fig


def binned_mean(
    start: FloatArray, end: FloatArray, value: FloatArray, edges: FloatArray
) -> FloatArray:
    """Time-weighted mean per bin of `sum_i value_i * [start_i <= t < end_i]`."""

    def integral(points: FloatArray, weights: FloatArray) -> FloatArray:
        # sum over points p <= t of weights * (t - p), at every edge t
        order = np.argsort(points)
        p, w = points[order], weights[order]
        cum_w = np.concatenate(([0.0], np.cumsum(w)))
        cum_wp = np.concatenate(([0.0], np.cumsum(w * p)))
        idx = np.searchsorted(p, edges, side="right")
        return edges * cum_w[idx] - cum_wp[idx]

    area = integral(start, value) - integral(end, value)
    return np.diff(area) / np.diff(edges)


def _held_until_next_step(instance: FloatArray, start: FloatArray, end: FloatArray) -> FloatArray:
    """Per group: the start of the same instance's next group (its own end for the last one)."""
    order = np.lexsort((start, instance))
    held = end.copy()
    same = instance[order][1:] == instance[order][:-1]
    held[order[:-1][same]] = start[order][1:][same]
    return held


def _held_after(instance: FloatArray, end: FloatArray, last: float) -> FloatArray:
    """Per group: the end of the same instance's next group (`last` for its last group)."""
    order = np.lexsort((end, instance))
    held = np.full_like(end, last)
    same = instance[order][1:] == instance[order][:-1]
    held[order[:-1][same]] = end[order][1:][same]
    return held


def _tier_columns(steps: pd.DataFrame) -> list[str]:
    """The tier columns some step group of the table counts blocks in (none without tiers)."""
    return [
        column
        for column, *_ in TIERS
        if column in steps.columns and steps[column].to_numpy(dtype=float).any()
    ]


def timeline_figure(
    steps: pd.DataFrame, kv_blocks_total: Mapping[str, int] | None = None
) -> Figure:
    """Batch size, queue length (when some request waited) and KV use over time, one line per
    variant; with KV tiers, the
    blocks each tier below the GPU holds (one line per variant and tier).

    `kv_blocks_total` maps a variant to its KV capacity in blocks, all its instances together
    (a cluster's KV use is its blocks used over its blocks, whatever each instance's size);
    without it the KV panel shows blocks used instead of a percentage.
    """
    tiers = _tier_columns(steps)
    # a queue that never held a request has nothing to show
    queued = "num_waiting" in steps.columns and bool(steps["num_waiting"].to_numpy().any())
    shown = ["batch", *(["queue"] if queued else []), "kv", *(["tiers"] if tiers else [])]
    fig = Figure(figsize=(12, 3 * len(shown)), layout="constrained")
    axes = fig.subplots(len(shown), 1, sharex=True, squeeze=False)[:, 0]
    panel = dict(zip(shown, axes, strict=True))
    ax_batch, ax_queue, ax_kv = panel["batch"], panel.get("queue"), panel["kv"]
    as_percent = kv_blocks_total is not None
    for i, variant in enumerate(_variants(steps)):
        groups = steps[steps["variant"] == variant]
        if groups.empty:
            continue
        if "instance" not in groups.columns:
            groups = groups.assign(instance=0)
        start = groups["start_s"].to_numpy(dtype=float)
        end = groups["end_s"].to_numpy(dtype=float)
        instance = pd.factorize(groups["instance"])[0].astype(float)
        held = _held_until_next_step(instance, start, end)
        edges = np.linspace(start.min(), max(end.max(), start.min() + 1e-9), MAX_POINTS + 1)
        kv = groups["kv_blocks_used"].to_numpy(dtype=float)
        if kv_blocks_total is not None:
            capacity = kv_blocks_total.get(variant, 0)
            kv = 100.0 * kv / capacity if capacity > 0 else np.full_like(kv, np.nan)
        series: list[tuple[Axes, FloatArray]] = [
            (ax_batch, binned_mean(start, end, groups["num_seqs"].to_numpy(dtype=float), edges)),
            (ax_kv, binned_mean(start, held, kv, edges)),
        ]
        if ax_queue is not None:
            waiting = groups["num_waiting"].to_numpy(dtype=float)
            series.append((ax_queue, binned_mean(start, held, waiting, edges)))
        for ax, y in series:
            ax.plot(
                edges, np.append(y, y[-1]), drawstyle="steps-post", color=f"C{i}", label=variant
            )
        cached = _cached_blocks(groups)
        if cached is not None:
            # Cached blocks are free (evictable on demand) yet still worth a hit: drawn on top
            # of the blocks in use, so the gap between the lines is what the cache keeps warm.
            if kv_blocks_total is not None:
                capacity = kv_blocks_total.get(variant, 0)
                cached = 100.0 * cached / capacity if capacity > 0 else np.full_like(cached, np.nan)
            y = binned_mean(start, held, kv + cached, edges)
            ax_kv.plot(
                edges,
                np.append(y, y[-1]),
                drawstyle="steps-post",
                color=f"C{i}",
                linestyle="--",
                label=f"{variant}: in use + cached",
            )
        if tiers:
            _plot_tiers(panel["tiers"], groups, tiers, instance, edges, f"C{i}", variant)
    ax_batch.set_title("Batch size over time (sum over instances, time-weighted per bin)")
    ax_batch.set_ylabel("batch size (sequences)")
    if ax_queue is not None:
        ax_queue.set_title("Waiting requests over time")
        ax_queue.set_ylabel("queue length (requests)")
    ax_kv.set_title("KV cache use over time")
    ax_kv.set_ylabel("KV blocks used (% of capacity)" if as_percent else "KV blocks used (blocks)")
    if tiers:
        panel["tiers"].set_title(
            "KV blocks held below the GPU (DRAM and NVMe summed over instances, the shared "
            "remote store once)"
        )
        panel["tiers"].set_ylabel("blocks held")
    if len(steps):
        time_axis(axes[-1], float(steps["end_s"].max() - steps["start_s"].min()))
    else:
        axes[-1].set_xlabel("simulated time (s)")
    for ax in axes:
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper right")
    return fig


def _plot_tiers(
    ax: Axes,
    groups: pd.DataFrame,
    columns: list[str],
    instance: FloatArray,
    edges: FloatArray,
    color: str,
    variant: str,
) -> None:
    """One variant's tier lines: each count holds from its group's end to the next count."""
    end = groups["end_s"].to_numpy(dtype=float)
    for column, label, style in TIERS:
        if column not in columns:
            continue
        held = groups[column].to_numpy(dtype=float)
        if not held.any():
            continue
        # a shared store: every instance counts all of it, so one series over all of them
        owner = np.zeros_like(instance) if column in SHARED_TIERS else instance
        until = _held_after(owner, end, float(edges[-1]))
        y = binned_mean(end, until, held, edges)
        ax.plot(
            edges,
            np.append(y, y[-1]),
            drawstyle="steps-post",
            color=color,
            linestyle=style,
            label=f"{variant}: {label}",
        )


def _cached_blocks(groups: pd.DataFrame) -> FloatArray | None:
    """The cached-but-free blocks after each group, or None when no block was ever cached."""
    if "kv_blocks_cached" not in groups.columns:
        return None
    cached = groups["kv_blocks_cached"].to_numpy(dtype=float)
    return cached if cached.any() else None


def plot_latency_cdfs(requests: pd.DataFrame, path: Path) -> None:
    """Save `latency_cdf_figure(requests)` to `path` (format from the suffix)."""
    latency_cdf_figure(requests).savefig(path, dpi=110)


def plot_timeline(
    steps: pd.DataFrame, path: Path, kv_blocks_total: Mapping[str, int] | None = None
) -> None:
    """Save `timeline_figure(steps, kv_blocks_total)` to `path`."""
    timeline_figure(steps, kv_blocks_total).savefig(path, dpi=110)


PLOT_NAMES = ("latency_cdf", "timeline", "slots")


def total_kv_blocks(variant: VariantResult) -> int:
    """KV blocks of all of a variant's instances (from its instance table)."""
    table = variant.instances
    if len(table) and "kv_blocks_total" in table.columns:
        return int(table["kv_blocks_total"].sum())
    return variant.context.kv_blocks_total * variant.context.num_instances


def _is_static(results: Results, name: str) -> bool:
    policy = results[name].scenario.get("policy") or {}
    return isinstance(policy, dict) and policy.get("name") == "static"


def save_plots(
    results: Results, out_dir: Path, formats: tuple[str, ...] = ("png", "svg")
) -> list[Path]:
    """Write `latency_cdf`, `timeline` and `slots` (and for agents or rollouts `tasks`,
    `sim.io.plots_tasks`) in every format into `out_dir`.

    Returns the paths, figure by figure in `PLOT_NAMES` order, formats in the given order.
    """
    capacity = {name: total_kv_blocks(v) for name, v in results.variants.items()}
    requests = results.requests
    static = {name: _is_static(results, name) for name in results.variants}
    figures = [
        latency_cdf_figure(requests),
        timeline_figure(results.steps, capacity),
        slot_timeline_figure(requests, static),
    ]
    names = list(PLOT_NAMES)
    if is_agents(requests):  # agents' tasks or rollouts: their durations and waves
        names.append("tasks")
        figures.append(tasks_figure(tasks_by_variant(requests)))
    paths = []
    for name, fig in zip(names, figures, strict=True):
        for fmt in formats:
            path = out_dir / f"{name}.{fmt}"
            fig.savefig(path, dpi=110)
            # the layout is solved by the first save; the other formats reuse it (a third of the
            # plotting time)
            fig.set_layout_engine("none")
            paths.append(path)
    return paths
