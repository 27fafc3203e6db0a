"""Plots of a sweep table (`sim.sweep(...)`: one row per point and variant).

Two views of the central trade-off. Every decode step costs about `T_step = T_mem + B * T_flop`,
so as the batch-size limit `B` grows, throughput rises towards `1 / T_flop` tokens/s while every
token waits longer: `throughput_latency_figure` draws output tokens/s against per-token latency
(TPOT), one curve per variant, each point labelled with its `B`, next to both quantities against
`B`. `goodput_figure` draws goodput (requests/s meeting every SLO) against the offered arrival
rate, one line per policy, with the `goodput = rate` diagonal that a system meeting every SLO
would follow, and SLO attainment beside it when the table has any.

The table's columns are the grid paths (e.g. `policy.max_num_seqs`, `workload.arrival.rate`),
`variant` and the summary metrics (`output_tokens_per_s`, `tpot_p50_s`, `goodput_rps`,
`slo_attainment`, ...); any of them can be chosen by argument.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure


def _series(frame: pd.DataFrame, hue: str, x: str) -> list[tuple[str, pd.DataFrame]]:
    for column in (hue, x):
        if column not in frame.columns:
            raise KeyError(f"sweep table has no column {column!r}")
    if not len(frame):
        return []
    return [(str(name), rows.sort_values(x)) for name, rows in frame.groupby(hue, sort=False)]


def throughput_latency_figure(
    sweep: pd.DataFrame,
    *,
    batch_key: str = "policy.max_num_seqs",
    throughput: str = "output_tokens_per_s",
    latency: str = "tpot_p50_s",
    hue: str = "variant",
) -> Figure:
    """Throughput vs per-token latency as the batch limit `batch_key` grows, per `hue` value."""
    fig = Figure(figsize=(14, 5), layout="constrained")
    ax_curve, ax_batch = fig.subplots(1, 2)
    ax_lat = ax_batch.twinx()
    for i, (name, rows) in enumerate(_series(sweep, hue, batch_key)):
        lat_ms = rows[latency].to_numpy(dtype=float) * 1e3
        tput = rows[throughput].to_numpy(dtype=float)
        batch = rows[batch_key].to_numpy()
        ax_curve.plot(lat_ms, tput, "o-", color=f"C{i}", label=name)
        for x, y, b in zip(lat_ms, tput, batch, strict=True):
            if np.isfinite(x) and np.isfinite(y):
                ax_curve.annotate(f"B={b:g}", (x, y), textcoords="offset points", xytext=(4, 4),
                                  fontsize=8, color=f"C{i}")  # fmt: skip
        ax_batch.plot(batch, tput, "o-", color=f"C{i}", label=f"{name}: throughput")
        ax_lat.plot(batch, lat_ms, "s--", color=f"C{i}", alpha=0.7, label=f"{name}: latency")
    ax_curve.set_title("Throughput vs per-token latency as the batch limit grows")
    ax_curve.set_xlabel(f"{latency.removesuffix('_s')} (ms)")
    ax_curve.set_ylabel(f"{throughput} (tokens/s)")
    ax_batch.set_title(f"Both against the batch limit ({batch_key})")
    ax_batch.set_xlabel(f"{batch_key} (sequences)")
    ax_batch.set_ylabel(f"{throughput} (tokens/s), solid")
    ax_lat.set_ylabel(f"{latency.removesuffix('_s')} (ms), dashed")
    if len(sweep) and (pd.to_numeric(sweep[batch_key], errors="coerce") > 0).all():
        ax_batch.set_xscale("log", base=2)
    for ax in (ax_curve, ax_batch):
        ax.grid(True, alpha=0.3)
    if ax_curve.get_legend_handles_labels()[0]:
        ax_curve.legend(loc="lower right")
    return fig


def goodput_figure(
    sweep: pd.DataFrame,
    *,
    rate_key: str = "workload.arrival.rate",
    goodput: str = "goodput_rps",
    attainment: str = "slo_attainment",
    hue: str = "variant",
) -> Figure:
    """Goodput and SLO attainment against the offered arrival rate, one line per `hue` value;
    the attainment panel only when the table has attainment values."""
    judged = attainment in sweep.columns and bool(
        np.isfinite(pd.to_numeric(sweep[attainment], errors="coerce").to_numpy(dtype=float)).any()
    )
    fig = Figure(figsize=(14 if judged else 7, 5), layout="constrained")
    axes = list(fig.subplots(1, 2 if judged else 1, squeeze=False)[0])
    ax_good = axes[0]
    for i, (name, rows) in enumerate(_series(sweep, hue, rate_key)):
        rate = rows[rate_key].to_numpy(dtype=float)
        ax_good.plot(rate, rows[goodput].to_numpy(dtype=float), "o-", color=f"C{i}", label=name)
        if judged:
            values = rows[attainment].to_numpy(dtype=float) * 100.0
            axes[1].plot(rate, values, "o-", color=f"C{i}", label=name)
    if len(sweep):
        top = float(pd.to_numeric(sweep[rate_key]).max())
        ax_good.plot([0, top], [0, top], ":", color="0.5", label="every request meets its SLO")
    ax_good.set_title("Goodput vs offered load")
    ax_good.set_xlabel("arrival rate (requests/s)")
    ax_good.set_ylabel("goodput (requests/s meeting every SLO)")
    if judged:
        axes[1].set_title("SLO attainment vs offered load")
        axes[1].set_xlabel("arrival rate (requests/s)")
        axes[1].set_ylabel("SLO attainment (% of requests)")
        axes[1].set_ylim(0, 102)
    for ax in axes:
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best")
    return fig
