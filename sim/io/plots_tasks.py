"""The plot of an agents or rollouts run's tasks (`sim.metrics.tasks`): `tasks`, beside the
per-request latency CDFs.

Left: the empirical CDF of each variant's task durations (a task: its first call's arrival to
its last answer; unfinished tasks left out). Right, for rollouts: each wave's makespan per
variant (its first call's arrival to its last answer: what the training step waits for) with
the median trajectory's duration marked, the gap between them the stragglers' cost.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sim.io.plot_units import cdf_points, log_x_when_wide

MAX_POINTS = 4000  # points per CDF line


def tasks_figure(tasks: pd.DataFrame) -> Figure:
    """The task durations' CDFs, and for rollouts the waves' makespans (see the module)."""
    waves = "wave" in tasks.columns and tasks["wave"].notna().any()
    fig = Figure(figsize=(10 if waves else 5.5, 4.5), layout="constrained")
    axes = fig.subplots(1, 2 if waves else 1, squeeze=False)[0]
    ax = axes[0]
    variants = [str(v) for v in pd.unique(tasks["variant"])]
    lows, highs = [], []
    for i, variant in enumerate(variants):
        durations = tasks.loc[tasks["variant"] == variant, "duration_s"].to_numpy(float)
        x, y = cdf_points(durations, MAX_POINTS)
        if not x.size:
            continue
        ax.plot(x, y, drawstyle="steps-post", color=f"C{i}", label=variant)
        lows.append(x[0])
        highs.append(x[-1])
    log_x_when_wide(ax, lows, highs)
    ax.set(title="Task duration CDF", xlabel="task duration (s)", ylabel="fraction of tasks",
           ylim=(0, 1.02))  # fmt: skip
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower right")
    if waves:
        ax = axes[1]
        width = 0.8 / max(len(variants), 1)
        count = int(tasks["wave"].max()) + 1
        ax.set_xticks(np.arange(count) + width * (len(variants) - 1) / 2, [str(w) for w in
                      range(count)])  # fmt: skip
        for i, variant in enumerate(variants):
            rows = tasks[tasks["variant"] == variant].groupby("wave")
            span = (rows["end_s"].max() - rows["start_s"].min()).to_numpy(float)
            median = rows["duration_s"].median().to_numpy(float)
            x = np.arange(len(span)) + i * width
            ax.bar(x, span, width=width, color=f"C{i}", label=variant)
            ax.plot(x, median, "_", color="black", markersize=12)
        ax.set(title="Wave makespan (bars) and median trajectory (marks)", xlabel="wave",
               ylabel="seconds")  # fmt: skip
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle("Tasks per variant")
    return fig
