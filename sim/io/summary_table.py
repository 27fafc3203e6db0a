"""The side-by-side summary: curated metrics as rows, variants as columns (terminal and report)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

# (label, metric key, scale, format): the rows of the terminal table, in order
SUMMARY_ROWS: tuple[tuple[str, str, float, str], ...] = (
    ("requests finished", "num_finished", 1.0, "{:.0f}"),
    ("requests rejected", "num_rejected", 1.0, "{:.0f}"),
    ("output tok/s", "output_tokens_per_s", 1.0, "{:.1f}"),
    ("total tok/s", "total_tokens_per_s", 1.0, "{:.1f}"),
    ("requests/s", "requests_per_s", 1.0, "{:.3f}"),
    ("goodput req/s", "goodput_rps", 1.0, "{:.3f}"),
    ("SLO attainment %", "slo_attainment", 100.0, "{:.1f}"),
    ("TTFT p50 ms", "ttft_p50_s", 1e3, "{:.1f}"),
    ("TTFT p99 ms", "ttft_p99_s", 1e3, "{:.1f}"),
    ("TPOT p50 ms", "tpot_p50_s", 1e3, "{:.2f}"),
    ("TPOT p99 ms", "tpot_p99_s", 1e3, "{:.2f}"),
    ("ITL p99 ms", "itl_p99_s", 1e3, "{:.2f}"),
    ("ITL max stall ms", "itl_max_s", 1e3, "{:.1f}"),
    ("E2E p50 s", "e2e_p50_s", 1.0, "{:.3f}"),
    ("E2E p99 s", "e2e_p99_s", 1.0, "{:.3f}"),
    ("mean batch", "mean_batch_size", 1.0, "{:.2f}"),
    ("slot util %", "slot_utilization", 100.0, "{:.1f}"),
    ("KV util mean %", "kv_utilization_mean", 100.0, "{:.1f}"),
    ("preemptions", "num_preemptions", 1.0, "{:.0f}"),
)


def _cell(summary: pd.DataFrame, variant: Any, key: str, scale: float, fmt: str) -> str:
    if key not in summary.columns:
        return "-"
    value: Any = summary.at[variant, key]
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "-"
    return "-" if math.isnan(number) else fmt.format(number * scale)


def format_summary(summary: pd.DataFrame) -> str:
    """Side-by-side table for the terminal: curated metrics as rows, variants as columns."""
    variants = list(summary.index)
    header = ["metric", *(str(v) for v in variants)]
    rows = [
        [label, *(_cell(summary, v, key, scale, fmt) for v in variants)]
        for label, key, scale, fmt in SUMMARY_ROWS
    ]
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]

    def line(cells: list[str]) -> str:
        # labels left-aligned, numbers right-aligned so that digits line up
        first = cells[0].ljust(widths[0])
        rest = (cell.rjust(w) for cell, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(r) for r in rows)])
