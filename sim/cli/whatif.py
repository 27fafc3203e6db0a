"""The what-if commands: `batchsim sweep`, `batchsim capacity` and `batchsim regress`.

`register(sub)` adds them to the main parser; each handler returns the exit code. Bad input
raises `ScenarioError`, which the main CLI turns into one line and exit code 2. `regress` exits 1
when a metric moved beyond its tolerance. An interrupted sweep exits 130 and says how to resume.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

from sim.cli.args import examples, nonnegative_int, positive_int

SWEEP_COLUMNS = ("requests_per_s", "goodput_rps", "ttft_p90_s", "tpot_p99_s", "e2e_p99_s")


def _add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field before the sweep/search",
    )


def register(sub: Any) -> None:
    sweep = sub.add_parser(
        "sweep",
        help="run a scenario over a grid of parameter values",
        **examples(
            "batchsim sweep scenarios/quickstart.yaml --grid policy.max_num_seqs=16,64,256 "
            "--grid workload.arrival.rate=1,2,4 --workers 2"
        ),
    )
    sweep.add_argument("scenario", type=Path)
    sweep.add_argument(
        "--grid",
        action="append",
        required=True,
        metavar="KEY=V1,V2,...",
        help="dotted path and values; several grids make a product",
    )
    _add_set(sweep)
    sweep.add_argument("--backend", choices=("local", "ray"), default="local")
    sweep.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="parallel points (default: every CPU this process may use)",
    )
    sweep.add_argument("--address", default=None, help="Ray cluster address (default: local)")
    sweep.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output folder (default: results/<scenario name>-sweep)",
    )
    sweep.add_argument("--fresh", action="store_true", help="rerun points already saved")
    sweep.add_argument("-q", "--quiet", action="store_true", help="no progress, no table")
    sweep.set_defaults(handler=_sweep)

    cap = sub.add_parser(
        "capacity",
        help="largest arrival rate meeting every SLO, per variant",
        **examples(
            "batchsim capacity scenarios/quickstart.yaml --slo ttft_p90=0.5 --slo tpot_p99=0.1"
        ),
    )
    cap.add_argument("scenario", type=Path)
    cap.add_argument(
        "--slo",
        action="append",
        required=True,
        metavar="METRIC=VALUE",
        help="metric <= value, e.g. ttft_p90=0.5 (METRIC>=VALUE for 'more is better')",
    )
    _add_set(cap)
    cap.add_argument(
        "--tolerance",
        type=float,
        default=0.02,
        help="stop when (fail - pass) / pass < this (default 0.02)",
    )
    cap.add_argument(
        "--repeats",
        type=nonnegative_int,
        default=2,
        help="extra seeds for probes near the boundary (default 2)",
    )
    cap.add_argument(
        "--instances",
        action="store_true",
        help="search the fewest instances for the scenario's rate instead",
    )
    cap.add_argument("-v", "--verbose", action="store_true", help="list every probe")
    cap.set_defaults(handler=_capacity)

    reg = sub.add_parser(
        "regress",
        help="rerun scenarios/ci and compare with the baselines",
        **examples("batchsim regress", "batchsim regress --update   # after an intended change"),
    )
    reg.add_argument("--update", action="store_true", help="rewrite the baselines")
    reg.add_argument("--scenarios", type=Path, default=Path("scenarios/ci"))
    reg.add_argument("--baselines", type=Path, default=Path("results/baselines"))
    reg.set_defaults(handler=_regress)


def _sweep(args: argparse.Namespace) -> int:
    from sim.cli.signals import report_resumable
    from sim.io.destination import results_folder_name
    from sim.scenario.load import load_scenario
    from sim.whatif.sweep import sweep

    if args.out is None:
        name = load_scenario(args.scenario, args.overrides).name
        out = Path("results") / f"{results_folder_name(name, args.overrides)}-sweep"
    else:
        out = args.out
    started = time.perf_counter()
    try:
        table = sweep(
            args.scenario,
            args.grid,
            overrides=args.overrides,
            backend=args.backend,
            workers=args.workers,
            address=args.address,
            out=out,
            resume=not args.fresh,
            progress=not args.quiet,
        )
    except KeyboardInterrupt as exc:
        saved = len(list((out / "points").glob("*.json")))
        return report_resumable(exc, f"{saved} points", f"{out}/points/")
    if not args.quiet:
        columns = list(table.columns)
        keys = columns[1 : columns.index("variant") + 1]  # the grid keys, then the variant
        shown = table[[*keys, *(c for c in SWEEP_COLUMNS if c in table.columns)]]
        print(shown.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
        print(
            f"\n{table['point_id'].nunique()} points x variants = {len(table)} rows in "
            f"{time.perf_counter() - started:.1f} s; table in {out}/sweep.parquet and .csv"
        )
    return 0


def _capacity(args: argparse.Namespace) -> int:
    from sim.whatif.capacity import RATE_KEY, parse_slo, search

    slos = [parse_slo(s) for s in args.slo]
    if args.instances:
        return _instances(args, slos)
    results = search(
        args.scenario,
        slos,
        overrides=args.overrides,
        tolerance=args.tolerance,
        repeats=args.repeats,
        progress=lambda msg: print(f"searched {msg}", file=sys.stderr),
    )
    print(f"largest {RATE_KEY} meeting: {', '.join(str(s) for s in slos)}")
    print(
        f"bisection until (fail - pass) / pass < {args.tolerance:g}; a passing probe within "
        f"2 x tolerance of the boundary is repeated with {args.repeats} more seeds and passes "
        "only if every seed passes"
    )
    header = (
        "variant",
        "capacity req/s",
        "per GPU",
        "GPUs",
        "fails at",
        "probes",
        "requests/probe",
    )
    rows = [header]
    for r in results:
        row = r.row()
        rows.append(
            (
                r.variant,
                f"{r.capacity_rps:.4g}",
                f"{row['capacity_rps_per_gpu']:.4g}",
                str(row["num_gpus"]),
                f"{r.failing_rps:.4g}",
                str(len(r.probes)),
                str(r.requests_per_probe),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for cells in rows:
        print(
            "  ".join(
                cell.rjust(w) if i else cell.ljust(w)
                for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
            )
        )
    for r in results:
        if r.note:
            print(f"{r.variant}: {r.note}")
        if args.verbose:
            for rate, seed, ok in r.probes:
                print(f"  {r.variant}: rate {rate:.6g} seed {seed}: {'pass' if ok else 'FAIL'}")
    return 0


def _instances(args: argparse.Namespace, slos: list[Any]) -> int:
    from sim.whatif.capacity_instances import search_instances

    results = search_instances(
        args.scenario,
        slos,
        overrides=args.overrides,
        repeats=args.repeats,
        progress=lambda msg: print(f"searched {msg}", file=sys.stderr),
    )
    print(f"fewest instances meeting: {', '.join(str(s) for s in slos)}")
    print(
        "doubling from 1, then bisection over counts; the answer is confirmed with "
        f"{args.repeats} more seeds and raised until every seed passes"
    )
    print(
        f"{'variant':<16} {'instances':>9} {'req/s':>8} {'per GPU':>8} {'probes':>6} "
        f"{'requests/probe':>14}"
    )
    for r in results:
        row = r.row()
        print(
            f"{r.variant:<16} {r.instances:>9} {r.rate_rps:>8.4g} "
            f"{row['capacity_rps_per_gpu']:>8.4g} {len(r.probes):>6} "
            f"{r.requests_per_probe:>14}"
        )
        if r.note:
            print(f"{r.variant}: {r.note}")
        if args.verbose:
            for count, seed, ok in r.probes:
                print(f"  {r.variant}: {count} instances seed {seed}: {'pass' if ok else 'FAIL'}")
    return 0


def _fmt(value: float | None) -> str:
    return "null" if value is None else f"{value:.6g}"


def _regress(args: argparse.Namespace) -> int:
    from sim.whatif.regress import regress

    moves = regress(args.scenarios, args.baselines, update=args.update)
    failed = [m for m in moves if m.regression]
    if args.update:
        print(f"baselines rewritten in {args.baselines}/ ({len(moves)} metrics had moved)")
        return 0
    if failed:
        rows = [("scenario", "variant", "metric", "baseline", "now", "change", "tolerance")]
        for m in failed:
            change = "-" if math.isnan(m.change) else f"{100 * m.change:+.4g}%"
            rows.append(
                (
                    m.scenario,
                    m.variant,
                    m.metric,
                    _fmt(m.baseline),
                    _fmt(m.now),
                    change,
                    f"{m.rtol:g}",
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        print(
            f"\nregress: {len(failed)} metrics moved beyond tolerance; if intended, run "
            f"batchsim regress --update",
            file=sys.stderr,
        )
        return 1
    within = len(moves)
    print(f"regress: every metric within tolerance ({within} moved within it)")
    return 0
