"""`batchsim workload ...`: commands that make workload inputs.

    batchsim workload day-profile TRACE --out day.csv [--period-s 86400] [--mean-rate 20]
        [--peak-to-trough 3] [--peak-hour 15] [--bin-s 60] [--seed 0] [--format F] [--force]

`day-profile` writes a day-long piecewise rate profile (`time_s,rate`) calibrated to a trace's
minute-to-minute burstiness (`sim.workload.day_profile`) and prints what it measured in the
trace. The trace is an Azure LLM inference csv, batchsim's trace csv or a Mooncake jsonl; the
format is told by the file (`.jsonl`, or the csv's header) unless `--format` names it.

The output is written atomically (a temporary file beside it, then a rename). It is refused when
it is a folder, lies in a folder that does not exist, or is an existing file that is not a rate
profile (its first line is not `time_s,rate`), unless `--force`; all this is checked before the
trace is read.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from sim.cli.args import examples
from sim.errors import ScenarioError

TRACE_FORMATS = ("azure", "csv", "mooncake")
HEADER = "time_s,rate"
# the core's parameter names, as the command's flags
FLAGS = {
    "period_s": "--period-s",
    "mean_rate": "--mean-rate",
    "peak_to_trough": "--peak-to-trough",
    "peak_hour": "--peak-hour",
    "bin_s": "--bin-s",
}


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _positive(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be above 0")
    return value


def _ratio(text: str) -> float:
    value = _number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1 (1: a flat day)")
    return value


def _hour(text: str) -> float:
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be at least 0")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"{value} must be from 0 to 2^63 - 1")
    return value


# the defaults of sim.workload.day_profile, here so that building the command line imports no
# tables (tests/cli/test_workload_defaults.py checks they agree)
DEFAULT_PERIOD_S = 86_400.0
DEFAULT_MEAN_RATE = 50.0
DEFAULT_PEAK_TO_TROUGH = 3.0
DEFAULT_PEAK_HOUR = 15.0
DEFAULT_BIN_S = 60.0
DAY_PROFILE_EXAMPLE = (
    "batchsim workload day-profile azure_llm_2023_conv.csv --out day.csv --mean-rate 50"
)


def register(sub: Any) -> None:
    """Add the `workload` command group to the CLI's subparsers."""
    group = sub.add_parser(
        "workload",
        help="make workload inputs (rate profiles from traces)",
        **examples(DAY_PROFILE_EXAMPLE),
    )
    verbs = group.add_subparsers(dest="workload_command", required=True)
    day = verbs.add_parser(
        "day-profile",
        help="a day-long rate profile (csv) with a trace's minute-to-minute burstiness",
        description="Write a day-long piecewise rate profile: a smooth diurnal curve times the "
        "trace's own burstiness, tiled over the day.",
        **examples(DAY_PROFILE_EXAMPLE),
    )
    day.add_argument("trace", type=Path, help="Azure LLM csv, batchsim trace csv or Mooncake jsonl")
    day.add_argument("--out", type=Path, required=True, help="the profile csv to write")
    day.add_argument(
        "--format",
        dest="trace_format",
        choices=TRACE_FORMATS,
        help="the trace's format (default: told by the file)",
    )
    day.add_argument(
        "--period-s",
        type=_positive,
        default=DEFAULT_PERIOD_S,
        help="length of the profile in seconds (default 86400: a day)",
    )
    day.add_argument(
        "--mean-rate",
        type=_positive,
        default=DEFAULT_MEAN_RATE,
        help="mean requests/s over the period (default %(default)g)",
    )
    day.add_argument(
        "--peak-to-trough",
        type=_ratio,
        default=DEFAULT_PEAK_TO_TROUGH,
        help="peak / trough of the smooth diurnal curve (default %(default)g)",
    )
    day.add_argument(
        "--peak-hour",
        type=_hour,
        default=DEFAULT_PEAK_HOUR,
        help="hour of the smooth curve's peak (default %(default)g)",
    )
    day.add_argument(
        "--bin-s",
        type=_positive,
        default=DEFAULT_BIN_S,
        help="width of the burst bins and of the profile's steps (default %(default)g s)",
    )
    day.add_argument(
        "--seed",
        type=_seed,
        default=0,
        help="seed of the tiling of the trace over the day (default 0)",
    )
    day.add_argument("--force", action="store_true", help="replace any existing file")
    day.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    day.set_defaults(handler=_day_profile)


def _check_out(out: Path, force: bool) -> None:
    """Before the trace is read: the output is a file we may write."""
    where = f"--out {out}"
    if out.is_dir():
        raise ScenarioError("is a folder; give a file name", path=where)
    if not out.parent.is_dir():
        raise ScenarioError(f"folder {str(out.parent)!r} does not exist", path=where)
    if out.exists() or out.is_symlink():
        if not out.is_file():
            raise ScenarioError("exists and is not a regular file", path=where)
        if not force and not _is_profile(out):
            raise ScenarioError(
                "exists and is not a rate profile csv (use --force to replace it)", path=where
            )


def _is_profile(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            first = handle.readline(4096).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return first.strip() == HEADER


def _trace_format(path: Path) -> str:
    """The format of a trace file, from its name or its header."""
    from sim.inputs.text import check_regular_file
    from sim.workload.traces import COLUMNS

    check_regular_file(path, "trace file")
    if path.suffix.lower() == ".jsonl":
        return "mooncake"
    try:
        with path.open("rb") as handle:
            first = handle.readline(4096).decode("utf-8", errors="replace")
    except OSError as exc:
        reason = f"cannot read trace file: {exc.strerror or exc}"
        raise ScenarioError(reason, file=str(path)) from None
    names = {name.strip() for name in first.strip().split(",")}
    for fmt, columns in COLUMNS.items():
        if columns[0] in names:
            return fmt
    if first.lstrip().startswith("{"):
        return "mooncake"
    raise ScenarioError(
        "cannot tell the trace's format from its first line (expected a TIMESTAMP or an "
        "arrival_s column, or JSON lines): give --format",
        file=str(path),
        path="line 1",
    )


def read_arrivals(path: Path, fmt: str | None) -> Any:
    """The arrival times (seconds from the first) of a trace file."""
    from sim.workload.mooncake import read_mooncake
    from sim.workload.traces import read_trace

    fmt = fmt or _trace_format(path)
    if fmt == "mooncake":
        return read_mooncake(path).arrival_s
    return read_trace(path, "azure" if fmt == "azure" else "csv").arrival_s


def _day_profile(args: argparse.Namespace) -> int:
    from sim.io.workload_export import write_atomically
    from sim.workload.day_profile import day_profile

    _check_out(args.out, args.force)
    arrivals = read_arrivals(args.trace, args.trace_format)
    try:
        profile = day_profile(
            arrivals,
            period_s=args.period_s,
            mean_rate=args.mean_rate,
            peak_to_trough=args.peak_to_trough,
            peak_hour=args.peak_hour,
            bin_s=args.bin_s,
            seed=args.seed,
        )
    except ScenarioError as exc:
        flag = FLAGS.get(exc.path or "", exc.path)
        # a trace too short for the bins is the trace's fault as much as the flag's
        file = str(args.trace) if exc.path == "bin_s" and "trace" in exc.reason else None
        raise ScenarioError(exc.reason, file=file, path=flag) from None
    write_atomically(args.out, profile.csv_text())
    if not args.quiet:
        shape = profile.shape
        print(
            f"trace {args.trace}: {shape.requests} requests over {shape.span_s:.1f} s, mean "
            f"{shape.mean_rate:.3f} req/s; per-{shape.bin_s:g}-s rate CV {shape.bin_cv:.3f} "
            f"({shape.burst_cv:.3f} without Poisson noise); inter-arrival CV "
            f"{shape.interarrival_cv:.3f}"
        )
        rates = profile.rates
        print(
            f"profile: {len(rates)} steps of {args.bin_s:g} s over {args.period_s:g} s, mean "
            f"{profile.mean_rate():.4g} req/s, min {rates.min():.4g}, max {rates.max():.4g}; "
            f"diurnal peak/trough {args.peak_to_trough:g} peaking at hour {args.peak_hour:g}; "
            f"written to {args.out}"
        )
    return 0
