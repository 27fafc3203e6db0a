"""Command line: `batchsim run scenarios/x.yaml` (also `python -m sim run ...`).

User errors (bad scenario, bad trace, bad override) print one line naming the file, the key and
the reason, and exit with code 2; no traceback. Ctrl-C exits with 130 and leaves any earlier
results in place, since results are written to a temporary folder and swapped in at the end.
`run` reports progress on stderr (variant, simulated time, requests done; at most one line a
second, so short runs print only the variant lines) unless `-q`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path
from typing import Any

from sim.errors import ScenarioError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="batchsim", description="Discrete-event simulator of LLM-serving batching policies."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="simulate a scenario and write results/<name>/")
    run.add_argument("scenario", type=Path, help="scenario YAML file")
    run.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field by its dotted path, e.g. policy.max_num_seqs=64",
    )
    run.add_argument(
        "--out",
        type=Path,
        default=Path("results"),
        help="parent folder of the results (default: results)",
    )
    run.add_argument("--no-plots", action="store_true", help="skip the plots (PNG and SVG)")
    run.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    run.add_argument("--trace", action="store_true", help="also write trace.json (Perfetto)")
    run.add_argument(
        "--trace-requests",
        type=int,
        default=200,
        metavar="N",
        help="request tracks in the trace: the first N requests (default 200)",
    )
    run.set_defaults(handler=_run)
    report = sub.add_parser("report", help="rebuild report.html of a results folder")
    report.add_argument("folder", type=Path, help="results folder, e.g. results/quickstart")
    report.set_defaults(handler=_report)
    check = sub.add_parser("validate", help="check a scenario and print it fully resolved")
    check.add_argument("scenario", type=Path)
    check.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    check.set_defaults(handler=_validate)
    # further commands live in their own modules: `register(sub)` adds a parser with a `handler`
    from sim.cli.whatif import register as register_whatif

    register_whatif(sub)
    from sim.cli.catalog import register as register_catalog

    register_catalog(sub)
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
    from sim.io.output import write_results
    from sim.io.summary_table import format_summary
    from sim.scenario.load import load_scenario
    from sim.simulate import simulate

    if args.trace_requests < 0:
        raise ScenarioError(f"--trace-requests {args.trace_requests}: must be >= 0")
    scenario = load_scenario(args.scenario, args.overrides)
    say = (lambda _msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    started = time.perf_counter()
    results = simulate(scenario, progress=lambda msg: say(f"simulating {msg}"))
    elapsed = time.perf_counter() - started
    out_dir = write_results(
        results,
        args.out / scenario.name,
        scenario.dump(),
        plots=not args.no_plots,
        trace_requests=args.trace_requests if args.trace else None,
    )
    if not args.quiet:
        print(format_summary(results.summary()))
        print(
            f"\n{sum(len(v.requests) for v in results.variants.values())} requests simulated "
            f"in {elapsed:.2f} s; results in {out_dir}/"
        )
    return 0


def _report(args: argparse.Namespace) -> int:
    from sim.io.report import write_report

    if not (args.folder / "summary.json").is_file():
        raise ScenarioError("not a results folder (no summary.json)", file=str(args.folder))
    print(write_report(args.folder))
    return 0


def _validate(args: argparse.Namespace) -> int:
    from sim.scenario.load import load_scenario

    print(load_scenario(args.scenario, args.overrides).dump(), end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        code: int = args.handler(args)
        return code
    except ScenarioError as exc:
        print(f"batchsim: error: {exc.message()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("batchsim: interrupted; no results were written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
