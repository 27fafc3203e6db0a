"""Command line: `batchsim run scenarios/x.yaml` (also `python -m sim run ...`).

User errors (bad scenario, bad trace, bad override, bad flag) print one line naming the file,
the key and the reason, and exit with code 2; no traceback. argparse's own errors are one line
too. Ctrl-C exits with 130 and SIGTERM with 143, both after the same cleanup (temporary folders
removed, earlier results untouched), since results are written to a temporary folder and
swapped in at the end; the handlers are in place before anything heavy is imported, so an
interrupt in the first moments is as clean as a late one.

`run` checks where it will write before it simulates (`sim.io.destination`). A run with `--set`
overrides writes to `<out>/<name>--<overrides>/` (for example `quickstart--rate=4`), so it never
replaces the results of the unmodified scenario; `--set name=NAME` picks the folder instead.
It reports progress on stderr (variant, simulated time, requests done; at most one line a
second) unless `-q`, which also turns the progress machinery off entirely. `--seeds N` and
`--band X` add runs for error bars (`sim.whatif.error_bars`): planned and checked before the
first simulation, run after it (in `--workers` processes), written as `intervals.csv` in the
same folder and printed instead of the plain table.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

from sim.cli.args import band_percent, examples, nonnegative_int, positive_int, seed_count
from sim.cli.signals import interrupted, interrupts, raise_if_interrupted, report
from sim.compiled import build
from sim.errors import ScenarioError
from sim.version import __version__


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (`usage:` lines go to `--help`)."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="batchsim", description="Discrete-event simulator of LLM-serving batching policies."
    )
    parser.add_argument(
        "--version", action="version", version=f"batchsim {__version__} ({build()} core)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run",
        help="simulate a scenario and write results/<name>/",
        **examples(
            "batchsim run scenarios/quickstart.yaml",
            "batchsim run scenarios/quickstart.yaml --set workload.arrival.rate=4 --seeds 5",
            "batchsim run scenarios/autoscaling_day.yaml --stream",
        ),
    )
    run.add_argument("scenario", type=Path, help="scenario YAML file")
    run.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field by its dotted path, e.g. policy.max_num_seqs=64 (results then go "
        "to <out>/<name>--<overrides>/)",
    )
    run.add_argument(
        "--out",
        type=Path,
        default=Path("results"),
        help="parent folder of the results (default: results)",
    )
    run.add_argument(
        "--tables",
        choices=("summary", "requests", "all"),
        default="requests",
        help="tables to write: summary only, + per-request (default), + steps and inter-token",
    )
    run.add_argument(
        "--format",
        dest="table_format",
        choices=("parquet", "csv"),
        default="parquet",
        help="file format of the tables (default parquet)",
    )
    run.add_argument("--no-plots", action="store_true", help="skip the plots (PNG and SVG)")
    run.add_argument(
        "--stream",
        action="store_true",
        help="keep no tables, even in memory (runs of millions of requests: flat memory, "
        "percentiles from sketches); writes the summary only, no plots",
    )
    run.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    run.add_argument("--trace", action="store_true", help="also write trace.json (Perfetto)")
    run.add_argument(
        "--trace-requests",
        type=nonnegative_int,
        default=200,
        metavar="N",
        help="request tracks in the trace: the first N requests (default 200)",
    )
    run.add_argument(
        "--seeds",
        type=seed_count,
        default=1,
        metavar="N",
        help="run every variant N times (2 to 1000), on seeds seed .. seed+N-1, and report each "
        "headline metric's mean ± 95 %% interval (intervals.csv)",
    )
    run.add_argument(
        "--band",
        type=band_percent,
        default=None,
        metavar="X",
        help="also run every variant with each step's GPU time -X %% and +X %% and report each "
        "metric's range, and SLO verdicts that flip (intervals.csv)",
    )
    run.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="processes for the runs of --seeds and --band (default: every CPU)",
    )
    run.set_defaults(handler=_run)
    report = sub.add_parser(
        "report",
        help="rebuild report.html of a results folder",
        **examples("batchsim report results/quickstart"),
    )
    report.add_argument("folder", type=Path, help="results folder, e.g. results/quickstart")
    report.set_defaults(handler=_report)
    check = sub.add_parser(
        "validate",
        help="check a scenario and print it fully resolved",
        **examples("batchsim validate scenarios/quickstart.yaml --set policy.max_num_seqs=128"),
    )
    check.add_argument("scenario", type=Path)
    check.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    check.set_defaults(handler=_validate)
    # further commands live in their own modules: `register(sub)` adds a parser with a `handler`
    from sim.cli.whatif import register as register_whatif

    register_whatif(sub)
    from sim.cli.search import register as register_search

    register_search(sub)
    from sim.cli.catalog import register as register_catalog

    register_catalog(sub)
    from sim.cli.measured import register as register_measured

    register_measured(sub)
    from sim.cli.export import register as register_export

    register_export(sub)
    from sim.cli.replay import register as register_replay

    register_replay(sub)
    from sim.cli.workload import register as register_workload

    register_workload(sub)
    from sim.cli.serve import register as register_serve

    register_serve(sub)
    for name in PLUGINS:
        _plug_in(name, sub)
    return parser


# Subcommands that live outside `sim` (which must never import them): each module has a
# `register(sub)`. They are looked up by name, so an installation without them just lacks the
# commands.
PLUGINS = ("calibration.cli",)


def _plug_in(name: str, sub: Any) -> None:
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and name.startswith(exc.name):
            return  # the plug-in is not installed
        raise
    module.register(sub)


def _run(args: argparse.Namespace) -> int:
    from sim.cli.run_report import model_notes, rejection_check, simulated_line
    from sim.io.destination import check_destination, results_folder_name
    from sim.io.output import format_summary, write_results
    from sim.scenario.load import load_scenario
    from sim.simulate import simulate

    scenario = load_scenario(args.scenario, args.overrides)
    folder = results_folder_name(scenario.name, args.overrides)
    dest = check_destination(args.out, folder)  # before minutes of simulation, not after
    started = time.perf_counter()
    # `--tables summary` is what --stream writes anyway; `requests` is the default
    if args.stream and (args.trace or args.tables == "all"):
        what = "--trace" if args.trace else "--tables all"
        raise ScenarioError(
            f"keeps no tables: it writes the summary only, so {what} cannot be given with it",
            path="--stream",
        )
    bars = _error_bars(scenario, args) if args.seeds > 1 or args.band is not None else None
    results = simulate(scenario, progress=_progress(args.quiet), tables=not args.stream)
    # a variant whose every request was rejected measured nothing: a ScenarioError saying why
    notes = model_notes(scenario) + rejection_check(results, str(args.scenario))
    intervals = bars(results) if bars is not None else None
    elapsed = time.perf_counter() - started
    out_dir = write_results(
        results,
        dest,
        scenario.dump(),
        plots=not args.no_plots and not args.stream,
        over_time_plot=not args.no_plots,  # drawn from the timeline: a streamed run has it too
        trace_requests=args.trace_requests if args.trace else None,
        tables="summary" if args.stream else args.tables,
        table_format=args.table_format,
        progress=not args.quiet,
        before_commit=raise_if_interrupted,  # a Ctrl-C that a library swallowed still counts
        extra_files=None if intervals is None else partial(_write_intervals, intervals),
    )
    if not args.quiet:
        if intervals is None:
            print(format_summary(results.summary()))
        else:
            _print_intervals(intervals, results.summary(), args)
        for note in notes:
            print(note)
        named = " (a folder of its own: --set overrides)" if folder != scenario.name else ""
        runs = (args.seeds - 1) + (2 if args.band is not None else 0)
        more = f" (and {runs} more runs for error bars)" if runs else ""
        print(f"\n{simulated_line(results, elapsed)}{more}; results in {out_dir}/{named}")
    return 0


def _error_bars(scenario: Any, args: argparse.Namespace) -> Callable[[Any], Any]:
    """Plan the extra runs of --seeds and --band now (a bad one is refused before anything is
    simulated); the function that runs them and returns the interval table."""
    from sim.whatif.error_bars import interval_table, plan, run_extra
    from sim.whatif.sweep_backends import default_workers

    tasks = plan(scenario, seeds=args.seeds, band=args.band)
    workers = args.workers or default_workers()

    def run(results: Any) -> Any:
        runs = run_extra(tasks, workers, progress=not args.quiet)
        return interval_table(results.summary(), runs, args.seeds, args.band is not None)

    return run


def _write_intervals(table: Any, folder: Path) -> None:
    from sim.whatif.error_bars import write_intervals

    write_intervals(table, folder)


def _print_intervals(table: Any, summary: Any, args: argparse.Namespace) -> None:
    from sim.cli.run_report import flip_notes, format_intervals

    if args.seeds > 1:
        last = args.seeds - 1
        print(f"mean ± 95 % interval of the mean over {args.seeds} seeds (seed + 0..{last}):")
        print(format_intervals(table, summary, "seeds"))
    if args.band is not None:
        if args.seeds > 1:
            print()
        print(f"nominal [range] with each step's GPU time ±{args.band:g} % (scenario seed):")
        print(format_intervals(table, summary, "band"))
        for note in flip_notes(table, args.band):
            print(note)


def _progress(quiet: bool) -> Callable[[str], None] | None:
    """The progress callback of a run: lines on stderr, or none at all (no watcher) with -q."""
    if quiet:
        return None
    return lambda msg: print(f"simulating {msg}", file=sys.stderr)


def _report(args: argparse.Namespace) -> int:
    from sim.io.report import write_report

    print(write_report(args.folder))
    return 0


def _validate(args: argparse.Namespace) -> int:
    from sim.scenario.load import load_scenario

    print(load_scenario(args.scenario, args.overrides).dump(), end="")
    return 0


def _reader_gone() -> int:
    """The output's reader closed it (`batchsim measured RUN | head`): stop quietly, as Unix
    tools do. Standard output is pointed at /dev/null so that Python's own flush at exit does
    not fail again; whatever the command writes under its output folder is already complete or
    not started (results are written to a temporary folder and renamed)."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    with interrupts():
        try:
            try:
                args = _parser().parse_args(argv)
            except SystemExit as done:  # --help, --version
                return done.code if isinstance(done.code, int) else 0
            code: int = args.handler(args)
            sys.stdout.flush()  # a closed pipe fails here, inside the handler below
            return code
        except _UsageError as exc:
            print(f"batchsim: error: {exc}", file=sys.stderr)
            return 2
        except ScenarioError as exc:
            print(f"batchsim: error: {exc.message()}", file=sys.stderr)
            return 2
        except KeyboardInterrupt as exc:
            return report(exc)
        except BrokenPipeError:
            return _reader_gone()
        except Exception as exc:
            if not interrupted():
                raise
            return report(exc)  # an import or a library call cut short by the signal


if __name__ == "__main__":
    sys.exit(main())
