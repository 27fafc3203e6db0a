"""Writing a scenario's results folder atomically, and the terminal summary table.

`write_results` builds the whole folder next to its destination (`.<name>.tmp-<pid>`), then swaps
it in with renames: the old folder is renamed aside, the new one renamed into place, the old one
deleted. A reader therefore sees the old folder or the new one, never a half-written one, and a
run that fails (or is interrupted) while writing leaves the previous results untouched; the
temporary folders are removed in `finally`. Renames are atomic only within one filesystem, which
the sibling location guarantees. Between the two renames the destination briefly does not exist;
a crash exactly there leaves `.<name>.old-<pid>` holding the previous results.

Folder content: `scenario.yaml` (the resolved scenario text), `summary.json` (per variant: metric
-> value with NaN as null, plus the scenario name), `summary.csv` (variants as rows),
`requests.csv`, `steps.csv` (step groups) and `itl.csv`, each with a `variant` column, the PNG
and SVG plots of `sim.io.plots.save_plots`, `report.html` (`sim.io.report`) and, when asked for,
`trace.json` (`sim.io.trace_export`). The report is built last, from the files already in the
temporary folder, so it is part of the same atomic swap.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from sim.io.plots import save_plots
from sim.io.report import write_report
from sim.io.trace_export import write_trace

if TYPE_CHECKING:
    from sim.metrics.results import Results


def _write_text(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def _write_csv(frame: pd.DataFrame, path: Path, *, index: bool = False) -> None:
    frame.to_csv(path, index=index)


def _json_value(value: Any) -> Any:
    # JSON has no NaN: undefined metrics become null so strict parsers accept the file
    if isinstance(value, float) and math.isnan(value):
        return None
    return value.item() if hasattr(value, "item") else value


def summary_document(scenario_name: str, summary: pd.DataFrame) -> dict[str, Any]:
    """The `summary.json` content: `{"scenario": name, "variants": {variant: {metric: value}}}`."""
    variants = {
        str(variant): {str(k): _json_value(v) for k, v in row.items()}
        for variant, row in summary.to_dict(orient="index").items()
    }
    return {"scenario": scenario_name, "variants": variants}


def _write_folder(
    results: Results,
    folder: Path,
    scenario_yaml: str,
    plots: bool,
    report: bool,
    trace_requests: int | None,
) -> None:
    summary = results.summary()
    _write_text(folder / "scenario.yaml", scenario_yaml)
    document = summary_document(results.scenario_name, summary)
    _write_text(folder / "summary.json", json.dumps(document, indent=2, allow_nan=False) + "\n")
    _write_csv(summary, folder / "summary.csv", index=True)
    _write_csv(results.requests, folder / "requests.csv")
    _write_csv(results.steps, folder / "steps.csv")
    itl = [v.itl.assign(variant=name) for name, v in results.variants.items()]
    _write_csv(pd.concat(itl, ignore_index=True) if itl else pd.DataFrame(), folder / "itl.csv")
    if plots:
        save_plots(results, folder)
    if trace_requests is not None:
        write_trace(results, folder / "trace.json", max_requests=trace_requests)
    if report:
        write_report(folder)


def write_results(
    results: Results,
    out_dir: Path,
    scenario_yaml: str,
    *,
    plots: bool = True,
    report: bool = True,
    trace_requests: int | None = None,
) -> Path:
    """Write the results folder `out_dir` atomically (see the module docstring); return it.

    `trace_requests`: write `trace.json` with request tracks for that many requests (None: no
    trace).
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
    try:
        # leftovers of an earlier crashed run with the same pid must not leak into this one
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        _write_folder(results, tmp, scenario_yaml, plots, report, trace_requests)
        if out_dir.exists():
            shutil.rmtree(old, ignore_errors=True)
            out_dir.rename(old)
        try:
            tmp.rename(out_dir)
        except BaseException:
            if old.exists() and not out_dir.exists():
                old.rename(out_dir)  # put the previous results back
            raise
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir
