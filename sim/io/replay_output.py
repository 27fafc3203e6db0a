"""The files `batchsim replay` adds to a results folder, and their plots.

* `comparison.json`: per variant, measured vs simulated mean/p50/p90/p99 of TTFT, TPOT, ITL
  (when measured) and E2E with the signed error, throughput, the per-request agreement (median
  absolute percentage error, bias, Pearson r) and the counts (requests compared, rejected by the
  simulator by reason, unfinished); the measured run's file, format and what it says of itself;
  what the engine log pinned;
* `comparison.csv`: the same distributions as one tidy table (a `variant` column);
* `measured_requests.csv`: the measured requests as replayed (arrival, lengths, TTFT, TPOT,
  E2E), so the folder holds both sides;
* `replay_scatter.png`/`.svg`: per request, simulated against measured TTFT, TPOT and E2E on log
  axes with the diagonal (points on it agree); `replay_cdf.png`/`.svg`: the measured CDF (black)
  over each variant's simulated one. A latency the run measured for no request (no TPOT when
  every answer is one token) has no panel.

`report.html` is rebuilt afterwards so that it carries the "Measured vs simulated" section.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sim.io.plot_units import latency_unit, log_ticks
from sim.metrics.compare import PER_REQUEST

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E"}


def _unit(metric: str, measured: np.ndarray, result: Any) -> tuple[float, str]:
    """The panel's unit (`latency_unit`) over both sides' values."""
    n = len(result.run)
    both = [measured, *(_simulated(v.requests, n)[metric]
                        for v in result.results.variants.values())]  # fmt: skip
    return latency_unit(metric, np.concatenate(both))


def _measured(run: Any) -> dict[str, np.ndarray]:
    return {"ttft": run.ttft_s, "tpot": run.tpot_s, "e2e": run.e2e_s}


def _simulated(requests: pd.DataFrame, n: int) -> dict[str, np.ndarray]:
    table = requests.set_index("id").reindex(np.arange(n))
    return {m: table[f"{m}_s"].to_numpy(dtype=float) for m in PER_REQUEST}


def _panels(measured: dict[str, np.ndarray]) -> list[str]:
    """The latencies the run measured for some request (TTFT when it measured none)."""
    shown = [m for m in PER_REQUEST if (np.isfinite(measured[m]) & (measured[m] > 0)).any()]
    return shown or [PER_REQUEST[0]]


def scatter_figure(result: Any) -> Figure:
    run = result.run
    measured = _measured(run)
    shown = _panels(measured)
    fig = Figure(figsize=(13 * len(shown) / 3, 4.2), layout="constrained")
    axes = fig.subplots(1, len(shown), squeeze=False)[0]
    for ax, metric in zip(axes, shown, strict=True):
        scale, unit = _unit(metric, measured[metric], result)
        meas = measured[metric] * scale
        low, high = np.inf, 0.0
        for k, (name, variant) in enumerate(result.results.variants.items()):
            simv = _simulated(variant.requests, len(run))[metric] * scale
            ok = np.isfinite(meas) & np.isfinite(simv) & (meas > 0) & (simv > 0)
            if not ok.any():
                continue
            ax.scatter(meas[ok], simv[ok], s=8, alpha=0.6, color=COLORS[k % len(COLORS)],
                       label=name)  # fmt: skip
            low = min(low, float(meas[ok].min()), float(simv[ok].min()))
            high = max(high, float(meas[ok].max()), float(simv[ok].max()))
        if high > 0:
            ax.plot([low, high], [low, high], color="black", lw=0.8, ls="--")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlim(low / 1.1, high * 1.1)
            ax.set_ylim(low / 1.1, high * 1.1)
            log_ticks(ax.xaxis)
            log_ticks(ax.yaxis)
        ax.set_xlabel(f"measured {NAMES[metric]} ({unit})")
        ax.set_ylabel(f"simulated {NAMES[metric]} ({unit})")
        ax.set_title(f"{metric.upper()} per request")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(loc="upper left", fontsize=8)
    return fig


def cdf_figure(result: Any) -> Figure:
    run = result.run
    measured = _measured(run)
    shown = _panels(measured)
    fig = Figure(figsize=(13 * len(shown) / 3, 4.2), layout="constrained")
    axes = fig.subplots(1, len(shown), squeeze=False)[0]
    for ax, metric in zip(axes, shown, strict=True):
        scale, unit = _unit(metric, measured[metric], result)
        _cdf(ax, measured[metric] * scale, "measured", "black", 2.0)
        for k, (name, variant) in enumerate(result.results.variants.items()):
            simv = _simulated(variant.requests, len(run))[metric] * scale
            _cdf(ax, simv, f"simulated: {name}", COLORS[k % len(COLORS)], 1.2)
        ax.set_xscale("log")
        log_ticks(ax.xaxis)
        ax.set_xlabel(f"{NAMES[metric]} ({unit})")
        ax.set_ylabel("fraction of requests")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(loc="lower right", fontsize=8)
    return fig


def _cdf(ax: Any, values: np.ndarray, label: str, color: str, width: float) -> None:
    values = np.sort(values[np.isfinite(values) & (values > 0)])
    if not len(values):
        return
    ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post", color=color,
            lw=width, label=label)  # fmt: skip


def write_replay_files(result: Any, folder: Path, plots: bool = True) -> None:
    """Write the comparison files (and plots) into results folder `folder`, then its report."""
    from sim.io.report import write_report

    folder = Path(folder)
    doc = result.to_dict()
    (folder / "comparison.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    frames = []
    for name, comparison in result.comparisons.items():
        frame = comparison.table.copy()
        frame.insert(0, "variant", name)
        frames.append(frame)
    pd.concat(frames, ignore_index=True).to_csv(folder / "comparison.csv", index=False)
    run = result.run
    pd.DataFrame(
        {
            "id": np.arange(len(run)),
            "request_id": run.request_id,
            "arrival_s": run.arrival_s,
            "prompt_tokens": run.prompt_tokens,
            "output_tokens": run.output_tokens,
            "ttft_s": run.ttft_s,
            "tpot_s": run.tpot_s,
            "e2e_s": run.e2e_s,
        }
    ).to_csv(folder / "measured_requests.csv", index=False)
    if plots:
        for stem, figure in (("replay_scatter", scatter_figure(result)),
                             ("replay_cdf", cdf_figure(result))):  # fmt: skip
            for suffix in ("png", "svg"):
                figure.savefig(folder / f"{stem}.{suffix}", dpi=110)
    write_report(folder)
