"""A deployment search's folder: its table, its question and counts, its plot and its page.

Next to `configs/` (each configuration's phase results, kept for resuming) a search writes:

* `search.csv` and `search.parquet`: the table of `sim.whatif.search_result`;
* `search.json`: the question (scenario, rate, SLOs, objective, seeds, ...), the counts of what
  was set aside, pruned, simulated and confirmed, and the same as one sentence; over a band
  (`--robust X`), `robustness` too: both choices, the cost of robustness and the flips
  (`SearchResult.robustness`);
* `pareto.png` and `pareto.svg`: cost against TTFT p99 (`sim.io.plots_search`);
* `report.html`: the page (`sim.io.report_search`).

Each file is written to a temporary name and renamed into place. The folder is new, empty or
marked as a search folder (`sim.io.destination.check_sweep_folder`); nothing else is adopted.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

from sim.io.destination import check_sweep_folder, mark_sweep_folder
from sim.io.plots_search import pareto_figure
from sim.io.report_search import render_search_report
from sim.whatif.search_result import SearchResult
from sim.whatif.sweep_store import write_atomic


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def write_search(result: SearchResult, out: Path) -> None:
    check_sweep_folder(out, "search")  # from Python too: only a search folder is adopted
    out.mkdir(parents=True, exist_ok=True)
    mark_sweep_folder(out, "search")
    table = result.table.copy()
    for column in table.columns:  # one type per column for Parquet
        if table[column].dtype == object:
            table[column] = table[column].map(lambda v: "" if v is None else str(v))
    write_atomic(out / "search.csv", lambda p: table.to_csv(p, index=False))
    write_atomic(out / "search.parquet", lambda p: table.to_parquet(p, index=False))
    document = {
        "question": result.question,
        "counts": result.counts,
        "described": result.describe(),
    }
    robustness = result.robustness()
    if robustness is not None:
        document["robustness"] = robustness
    text = json.dumps(_plain(document), indent=1, allow_nan=False)
    write_atomic(out / "search.json", lambda p: p.write_text(text))
    figure = pareto_figure(result.table)
    png = io.BytesIO()
    figure.savefig(png, format="png", dpi=110)
    write_atomic(out / "pareto.png", lambda p: p.write_bytes(png.getvalue()))
    write_atomic(out / "pareto.svg", lambda p: figure.savefig(p, format="svg"))
    page = render_search_report(result.table, result.question, result.describe(), png.getvalue())
    write_atomic(out / "report.html", lambda p: p.write_text(page, encoding="utf-8"))
