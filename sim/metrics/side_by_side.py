"""The side-by-side summary: a curated set of metrics as rows, one column per variant.

The same table appears in three places, from this one definition: the terminal after
`batchsim run` (`format_summary`), the HTML report, and a notebook (`Results.side_by_side()`
returns it as a DataFrame; `Results._repr_html_` renders it). Values are scaled to the unit in
the row's label (milliseconds, percent); the full-precision metrics stay in `Results.summary()`.
"""

from __future__ import annotations

import html
import math
from typing import Any

import pandas as pd

# (label, metric key, scale, format): the rows, in order
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
    ("$ per 1M output tok", "usd_per_million_output_tokens", 1.0, "{:.3f}"),
)
# rows shown when a variant speculates (its summary has speculative decoding's metrics)
SPECULATIVE_ROWS: tuple[tuple[str, str, float, str], ...] = (
    ("spec accepted %", "spec_acceptance_rate", 100.0, "{:.1f}"),
    ("spec tokens/step", "spec_tokens_per_step", 1.0, "{:.2f}"),
    ("spec proposal time %", "spec_proposal_time_share", 100.0, "{:.1f}"),
)
# rows shown only when some variant has the metric (a feature it turned on)
OPTIONAL_ROWS: tuple[tuple[str, str, float, str], ...] = (
    ("prefix hit %", "prefix_cache_hit_rate", 100.0, "{:.1f}"),
    ("prefill saved M tok", "prefill_tokens_saved", 1e-6, "{:.2f}"),
    ("cache evictions", "prefix_cache_evictions", 1.0, "{:.0f}"),
    ("CPU overhead s", "cpu_overhead_s", 1.0, "{:.2f}"),
    ("steps off the tables", "profile_extrapolated_steps", 1.0, "{:.0f}"),
    ("workload dropped", "workload_dropped_requests", 1.0, "{:.0f}"),
    ("workload clipped", "workload_clipped_prompts", 1.0, "{:.0f}"),
    ("tasks finished", "num_tasks_finished", 1.0, "{:.0f}"),  # agents (sim/metrics/tasks.py)
    ("task p50 s", "task_duration_p50_s", 1.0, "{:.2f}"),
    ("task p99 s", "task_duration_p99_s", 1.0, "{:.2f}"),
    ("task SLO attainment %", "task_slo_attainment", 100.0, "{:.1f}"),
    ("task cache hit %", "task_cache_hit_rate", 100.0, "{:.1f}"),
    ("wave makespan mean s", "wave_makespan_mean_s", 1.0, "{:.2f}"),  # rollouts
    ("wave straggler ratio", "wave_straggler_ratio_mean", 1.0, "{:.2f}"),
)
# rows shown when some variant has KV tiers below the GPU (`kv_tiers`): where its prefix hits
# came from (token hit rates that add up to "prefix hit %"), each tier's traffic (GiB = 2**30
# bytes, the unit of a tier's capacity_gb), the seconds steps waited on loads, and the fleet's
# dollars per hour, which include the tiers' rent; a tier no variant has gets no row
TIER_ROWS: tuple[tuple[str, str, float, str], ...] = (
    ("prefix hit % GPU", "kv_token_hit_rate_gpu", 100.0, "{:.1f}"),
    ("prefix hit % DRAM", "kv_token_hit_rate_dram", 100.0, "{:.1f}"),
    ("prefix hit % NVMe", "kv_token_hit_rate_nvme", 100.0, "{:.1f}"),
    ("prefix hit % remote", "kv_token_hit_rate_remote", 100.0, "{:.1f}"),
    ("DRAM read GiB", "kv_dram_read_bytes", 2.0**-30, "{:.2f}"),
    ("DRAM written GiB", "kv_dram_written_bytes", 2.0**-30, "{:.2f}"),
    ("NVMe read GiB", "kv_nvme_read_bytes", 2.0**-30, "{:.2f}"),
    ("NVMe written GiB", "kv_nvme_written_bytes", 2.0**-30, "{:.2f}"),
    ("remote read GiB", "kv_remote_read_bytes", 2.0**-30, "{:.2f}"),
    ("remote written GiB", "kv_remote_written_bytes", 2.0**-30, "{:.2f}"),
    ("KV load wait s", "kv_load_wait_s", 1.0, "{:.3f}"),
    ("fleet $/h incl. KV tiers", "fleet_usd_per_hour", 1.0, "{:.2f}"),
)
TIERS_KEY = "kv_block_hit_rate_gpu"  # in the summary of every run with tiers


def has_tiers(summary: pd.DataFrame) -> bool:
    """Whether some variant ran with KV tiers below the GPU."""
    return TIERS_KEY in summary.columns and bool(summary[TIERS_KEY].notna().any())


def rows_for(summary: pd.DataFrame) -> tuple[tuple[str, str, float, str], ...]:
    """The standard rows, the speculative ones when a variant speculates, the optional ones
    some variant reports (a non-zero number), and with KV tiers the rows of the tiers some
    variant has (a zero there is news: a tier that served nothing)."""
    extra = tuple(
        row
        for row in OPTIONAL_ROWS
        if row[1] in summary.columns
        and (pd.to_numeric(summary[row[1]], errors="coerce").fillna(0) != 0).any()
    )
    speculative = SPECULATIVE_ROWS if "spec_acceptance_rate" in summary.columns else ()
    tiers: tuple[tuple[str, str, float, str], ...] = ()
    if has_tiers(summary):
        tiers = tuple(
            row
            for row in TIER_ROWS
            if row[1] in summary.columns
            and pd.to_numeric(summary[row[1]], errors="coerce").notna().any()
        )
    return SUMMARY_ROWS + speculative + extra + tiers


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def side_by_side(summary: pd.DataFrame) -> pd.DataFrame:
    """Curated metrics (rows, labelled with their unit) by variant (columns), scaled."""
    rows = rows_for(summary)
    data = {
        str(variant): [
            _number(summary.at[variant, key]) * scale if key in summary.columns else math.nan
            for _, key, scale, _ in rows
        ]
        for variant in summary.index
    }
    index = pd.Index([label for label, *_ in rows], name="metric")
    return pd.DataFrame(data, index=index)


def format_cell(value: Any, scale: float, fmt: str) -> str:
    number = _number(value)
    return "-" if math.isnan(number) else fmt.format(number * scale)


def _cells(summary: pd.DataFrame) -> list[list[str]]:
    return [
        [
            format_cell(summary.at[v, key] if key in summary.columns else None, scale, fmt)
            for v in summary.index
        ]
        for _, key, scale, fmt in rows_for(summary)
    ]


def format_summary(summary: pd.DataFrame) -> str:
    """Side-by-side table for the terminal: labels left-aligned, numbers right-aligned."""
    header = ["metric", *(str(v) for v in summary.index)]
    rows = [
        [label, *cells]
        for (label, *_), cells in zip(rows_for(summary), _cells(summary), strict=True)
    ]
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (cell.rjust(w) for cell, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


def summary_html(summary: pd.DataFrame) -> str:
    """The side-by-side table as an HTML `<table class="summary">`."""
    head = "".join(f"<th>{html.escape(str(v))}</th>" for v in summary.index)
    body = "\n".join(
        f"<tr><td>{html.escape(label)}</td>{''.join(f'<td>{c}</td>' for c in cells)}</tr>"
        for (label, *_), cells in zip(rows_for(summary), _cells(summary), strict=True)
    )
    return (
        f'<table class="summary"><thead><tr><th>metric</th>{head}</tr></thead>'
        f"<tbody>\n{body}\n</tbody></table>"
    )
