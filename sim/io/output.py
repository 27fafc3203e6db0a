"""Writing a scenario's results folder atomically.

`write_results` builds the whole folder next to its destination (`.<name>.batchsim-tmp-<pid>`),
then swaps it in with renames: the old folder is renamed aside, the new one renamed into place,
the old one deleted. A reader therefore sees the old folder or the new one, never a half-written
one, and a run that fails (or is interrupted) while writing leaves the previous results
untouched; the temporary folder is removed in `finally`. Renames are atomic only within one
filesystem, which the sibling location guarantees. What may be replaced at all, the marker that
says batchsim wrote a folder, and the cleanup of folders left by killed runs are the business of
`sim.io.destination`; the destination is checked again here, since a folder may have appeared
there while the simulation ran.

Folder content: `.batchsim` (the marker), `scenario.yaml` (the resolved scenario text),
`summary.json` (per variant: metric -> value with NaN as null, plus the scenario name),
`summary.csv` (variants as rows), `bench_summary.json` (the summary as the flat object of `vllm
bench serve --save-result`, one line per variant as `--append-result` writes them,
`sim.io.bench_names`), `timeline.csv` (metrics per window of the run, `sim.metrics.timeline`,
with a `variant` column; streamed runs too) and, for an autoscaled run, `fleet_events.csv` (its
scaling events); the tables asked for (`tables`: `summary` writes none, `requests` the
per-request table (and for agents the per-task table, `tasks`, `sim.metrics.tasks`), `all` adds
`steps` (step groups) and `itl`), each with a `variant` column, as Parquet (default: a tenth of
the size of CSV, and typed) or CSV; the PNG and SVG plots of `sim.io.plots.save_plots` and, for
runs of more than one window, `over_time` (`sim.io.plots_timeline`); `report.html`
(`sim.io.report`) and, when asked for, `trace.json` (`sim.io.trace_export`). The report is built
last, from the files already in the temporary folder, so it is part of the same atomic swap.
With `progress`, a bar on stderr names each file as it is written (large tables take seconds),
once writing has taken half a second.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd

from sim.io.bench_names import bench_lines
from sim.io.destination import MARKER, check_destination, clean_leftovers, mark, temp_paths
from sim.metrics.side_by_side import SUMMARY_ROWS, format_summary
from sim.metrics.tasks import is_agents, tasks_by_variant

if TYPE_CHECKING:
    from sim.metrics.results import Results

__all__ = ["SUMMARY_ROWS", "format_summary", "summary_document", "write_results"]

# the writing bar appears only once writing has taken this long (small runs print nothing)
PROGRESS_DELAY_S = 0.5
Tables = Literal["summary", "requests", "all"]
TableFormat = Literal["parquet", "csv"]
TABLE_CHOICES: tuple[str, ...] = ("summary", "requests", "all")
FORMAT_CHOICES: tuple[str, ...] = ("parquet", "csv")


def _write_text(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def _write_csv(frame: pd.DataFrame, path: Path, *, index: bool = False) -> None:
    frame.to_csv(path, index=index)


def _write_table(frame: pd.DataFrame, path: Path) -> None:
    if path.suffix == ".csv":
        _write_csv(frame, path)
    else:
        frame.to_parquet(path, index=False)


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


def _steps(
    results: Results,
    folder: Path,
    scenario_yaml: str,
    options: dict[str, Any],
) -> list[tuple[str, Callable[[], object]]]:
    """(file name, writer) for every file of the folder, in the order they are written."""
    from sim.io.plots import save_plots
    from sim.io.plots_timeline import plot_over_time
    from sim.io.report import write_report
    from sim.io.trace_export import write_trace

    def summary() -> None:
        table = results.summary()
        _write_text(folder / "scenario.yaml", scenario_yaml)
        document = summary_document(results.scenario_name, table)
        text = json.dumps(document, indent=2, allow_nan=False) + "\n"
        _write_text(folder / "summary.json", text)
        _write_csv(table, folder / "summary.csv", index=True)
        # the same numbers in vLLM bench's result file, a line per variant (sim.io.bench_names)
        _write_text(folder / "bench_summary.json", bench_lines(results, document["variants"]))

    def itl() -> pd.DataFrame:
        parts = [v.itl.assign(variant=name) for name, v in results.variants.items()]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()

    found: dict[str, pd.DataFrame] = {}

    def timelines() -> dict[str, pd.DataFrame]:  # computed once, for the CSV and the plot
        if not found:
            found.update({name: v.timeline() for name, v in results.variants.items()})
        return found

    def timeline_csv() -> None:
        parts = [t.assign(variant=name) for name, t in timelines().items()]
        table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
        _write_csv(table[["variant", *(c for c in table.columns if c != "variant")]],
                   folder / "timeline.csv")  # fmt: skip

    def fleet_events_csv() -> None:
        parts = [v.fleet_events.assign(variant=name) for name, v in results.variants.items()
                 if len(v.fleet_events)]  # fmt: skip
        table = pd.concat(parts, ignore_index=True)
        _write_csv(table[["variant", *(c for c in table.columns if c != "variant")]],
                   folder / "fleet_events.csv")  # fmt: skip

    def over_time() -> None:
        events = {name: v.fleet_events for name, v in results.variants.items()}
        slo = {name: v.context.slo_ttft_s for name, v in results.variants.items()}
        plot_over_time(timelines(), folder, events, slo)

    ext = options["table_format"]
    steps: list[tuple[str, Callable[[], object]]] = [("summary.json", summary)]
    steps.append(("timeline.csv", timeline_csv))
    if any(len(v.fleet_events) for v in results.variants.values()):
        steps.append(("fleet_events.csv", fleet_events_csv))
    if options["tables"] in ("requests", "all"):
        steps.append(
            (f"requests.{ext}", lambda: _write_table(results.requests, folder / f"requests.{ext}"))
        )
        if is_agents(results.requests):  # agents' tasks: one row per task
            tasks = folder / f"tasks.{ext}"
            by_task = lambda: _write_table(tasks_by_variant(results.requests), tasks)  # noqa: E731
            steps.append((tasks.name, by_task))
    if options["tables"] == "all":
        steps.append((f"steps.{ext}", lambda: _write_table(results.steps, folder / f"steps.{ext}")))
        steps.append((f"itl.{ext}", lambda: _write_table(itl(), folder / f"itl.{ext}")))
    if options["plots"]:
        steps.append(("plots", lambda: save_plots(results, folder)))
    if options["over_time_plot"]:
        steps.append(("over_time.png", over_time))
    if options["trace_requests"] is not None:
        n = options["trace_requests"]
        steps.append(
            ("trace.json", lambda: write_trace(results, folder / "trace.json", max_requests=n))
        )
    if options["report"]:
        steps.append(("report.html", lambda: write_report(folder)))
    return steps


def _write_folder(
    results: Results, folder: Path, scenario_yaml: str, options: dict[str, Any]
) -> None:
    steps = _steps(results, folder, scenario_yaml, options)
    if not options["progress"]:
        for _, write in steps:
            write()
        return
    from tqdm import tqdm

    bar = tqdm(
        total=len(steps),
        desc="writing",
        unit="file",
        file=sys.stderr,
        leave=False,
        delay=PROGRESS_DELAY_S,
    )
    with bar:
        for name, write in steps:
            bar.set_postfix_str(name)
            write()
            bar.update(1)


def write_results(
    results: Results,
    out_dir: Path,
    scenario_yaml: str,
    *,
    plots: bool = True,
    over_time_plot: bool | None = None,
    report: bool = True,
    trace_requests: int | None = None,
    tables: Tables = "requests",
    table_format: TableFormat = "parquet",
    progress: bool = False,
    before_commit: Callable[[], None] | None = None,
    extra_files: Callable[[Path], None] | None = None,
) -> Path:
    """Write the results folder `out_dir` atomically (see the module docstring); return it.

    `trace_requests`: write `trace.json` with request tracks for that many requests (None: no
    trace). `before_commit` runs once everything is written, just before the swap; an exception
    from it leaves the previous results as they were. A destination batchsim may not replace is
    a `ScenarioError`.
    """
    if tables not in TABLE_CHOICES or table_format not in FORMAT_CHOICES:
        raise ValueError(f"tables {tables!r} / table_format {table_format!r}: unknown")
    out_dir = check_destination(Path(out_dir).parent, Path(out_dir).name)
    over_time_plot = plots if over_time_plot is None else over_time_plot
    options = {"plots": plots, "over_time_plot": over_time_plot, "report": report,
               "trace_requests": trace_requests, "tables": tables,
               "table_format": table_format, "progress": progress}  # fmt: skip
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    clean_leftovers(out_dir.parent)
    tmp, old = temp_paths(out_dir)
    for leftover in (tmp, old):  # this pid's own, from an earlier process with the same pid
        if (leftover / MARKER).is_file():
            shutil.rmtree(leftover)
    try:
        tmp.mkdir()
        mark(tmp, "results")
        _write_folder(results, tmp, scenario_yaml, options)
        if extra_files is not None:  # a command's own files (a replay's comparison)
            extra_files(tmp)
        if before_commit is not None:
            before_commit()
        if os.path.lexists(out_dir):
            mark(out_dir, "results")  # check_destination found it ours (or empty): claim it
            out_dir.rename(old)
        try:
            tmp.rename(out_dir)
        except BaseException:
            if old.exists() and not out_dir.exists():
                old.rename(out_dir)  # put the previous results back
            raise
        shutil.rmtree(old, ignore_errors=True)
    finally:
        if (tmp / MARKER).is_file():
            shutil.rmtree(tmp, ignore_errors=True)
    return out_dir
