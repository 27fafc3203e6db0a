"""What `batchsim run` says about a finished simulation besides the summary table.

* `simulated_line`: how many requests were simulated, counted once however many variants ran
  on them ("3000 requests x 2 variants"), and how long it took;
* `rejection_check`: a variant in which every request was rejected measured nothing, so the run
  fails like any bad input, saying why the requests were rejected (counts by cause); rejections
  in a run that otherwise worked become a note under the table. A variant with no requests at
  all (a trace whose every request `long_prompts: drop` dropped) is refused the same way;
* `format_intervals`: the error bars of `--seeds` (`mean ± half-width` of the 95 % interval) or
  of `--band` (`nominal [min, max]`) as the summary table's rows, and `flip_notes`, the
  variants whose SLO verdict changes within the band (`sim.whatif.error_bars`).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from sim.errors import ScenarioError
from sim.metrics.rejections import describe
from sim.metrics.results import Results, VariantResult
from sim.metrics.side_by_side import format_cell, rows_for

# headline metrics `intervals.csv` has beyond the summary table's rows: (label, key, scale, fmt)
EXTRA_ROWS = (("J per output tok", "energy_per_output_token_j", 1.0, "{:.3f}"),)


def simulated_line(results: Results, elapsed_s: float) -> str:
    counts = {name: v.num_requests for name, v in results.variants.items()}
    if len(set(counts.values())) == 1:
        n = next(iter(counts.values()))
        what = f"{n} requests" + (f" x {len(counts)} variants" if len(counts) > 1 else "")
    else:
        what = "requests: " + ", ".join(f"{name} {n}" for name, n in counts.items())
    return f"{what} simulated in {elapsed_s:.2f} s"


def format_intervals(table: pd.DataFrame, summary: pd.DataFrame, source: str) -> str:
    """The rows of `source` ("seeds" or "band") of an interval table as the summary table."""
    rows = table[table["source"] == source]
    variants = list(dict.fromkeys(rows["variant"]))
    cells = {(r.variant, r.metric): r for r in rows.itertuples(index=False)}
    header = ["metric", *variants]
    lines = []
    for label, key, scale, fmt in rows_for(summary) + EXTRA_ROWS:
        if not any((v, key) in cells for v in variants):
            continue
        line = [label]
        for variant in variants:
            row = cells.get((variant, key))
            line.append("-" if row is None else _cell(row, scale, fmt, source))
        lines.append(line)
    widths = [max(len(r[c]) for r in [header, *lines]) for c in range(len(header))]

    def text(cols: list[str]) -> str:
        rest = (c.rjust(w) for c, w in zip(cols[1:], widths[1:], strict=True))
        return "  ".join([cols[0].ljust(widths[0]), *rest]).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([text(header), rule, *(text(r) for r in lines)])


def _cell(row: Any, scale: float, fmt: str, source: str) -> str:
    mean = format_cell(row.mean, scale, fmt)
    if mean == "-":
        return mean
    if source == "band":
        low, high = (format_cell(getattr(row, k), scale, fmt) for k in ("min", "max"))
        return f"{mean} [{low}, {high}]"
    half = (float(row.ci_high) - float(row.ci_low)) / 2
    return mean if math.isnan(half) else f"{mean} ± {format_cell(half, scale, fmt)}"


def flip_notes(table: pd.DataFrame, band: float) -> list[str]:
    """One line per variant whose SLO verdict (attainment 100 %) differs at an end of the band."""
    rows = table[(table["source"] == "band") & (table["metric"] == "slo_attainment")]
    notes = []
    for row in rows.itertuples(index=False):
        if row.slo_flips is None or pd.isna(row.slo_flips) or not bool(row.slo_flips):
            continue
        verdict = "met" if float(row.mean) >= 1.0 else "missed"
        notes.append(
            f"{row.variant}: the SLO verdict flips within ±{band:g} % GPU time: {verdict} at "
            f"nominal, attainment {100 * float(row.min):.1f} % to {100 * float(row.max):.1f} % "
            "over the band"
        )
    return notes


def rejection_check(results: Results, file: str | None = None) -> list[str]:
    """Notes on rejected requests; a ScenarioError when a variant served none at all."""
    notes = []
    for name, variant in results.variants.items():
        if variant.num_requests == 0:
            _nothing_simulated(name, variant, file)
        causes = variant.rejections()
        if not causes:
            continue
        total = variant.num_requests
        rejected = sum(causes.values())
        if rejected == total:
            raise ScenarioError(
                f"variant {name!r}: every one of its {total} requests was rejected "
                f"({describe(causes)}); nothing was measured, so no results were written",
                file=file,
            )
        notes.append(f"{name}: {rejected} of {total} requests rejected ({describe(causes)})")
    return notes


def _nothing_simulated(name: str, variant: VariantResult, file: str | None) -> None:
    """A variant whose workload ended up empty (a trace whose every request `long_prompts:
    drop` dropped, a window the caps cut to nothing) measured nothing either: refused, naming
    what emptied it."""
    dropped = int(variant.counters.get("workload_dropped_requests", 0))
    if dropped:
        model = variant.scenario.get("model")
        context = model.get("max_model_len") if isinstance(model, dict) else None
        limit = f" (max_model_len {context})" if context is not None else ""
        raise ScenarioError(
            f"variant {name!r}: long_prompts: drop dropped every one of its {dropped} requests "
            f"(prompt + output longer than the model's context{limit}); nothing was measured, "
            "so no results were written (use clip, or a model with a longer context)",
            file=file,
            path="workload.trace.long_prompts",
        )
    raise ScenarioError(
        f"variant {name!r}: its workload has no requests (num_requests, duration_s or the "
        "trace window left none); nothing was measured, so no results were written",
        file=file,
        path="workload",
    )


def model_notes(scenario: Any) -> list[str]:
    """One line per model read from a config.json (or a catalog model read from one) that
    states what the spec does not carry (`ModelSpec.unmapped`)."""
    seen: dict[str, str] = {}
    for variant in scenario.variants:
        model = variant.spec.model
        if model.unmapped and model.name not in seen:
            where = f" (from {model.config})" if model.config else ""
            seen[model.name] = f"model {model.name}{where}: not priced: {model.unmapped}"
    return list(seen.values())
