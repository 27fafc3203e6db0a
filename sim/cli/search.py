"""`batchsim search`: the cheapest fleet that serves a scenario's workload under its SLOs.

    batchsim search scenario.yaml --space space.yaml --slo ttft_p99=2 --slo tpot_p99=0.1 --rate 20

prints the configurations that meet the SLOs, best first (fleet size, GPUs, dollars per hour and
per million output tokens, joules per output token, SLO attainment, goodput, TTFT and TPOT p99),
what the search did (set aside, pruned, simulated, confirmed) and the answer, and writes the
table, the cost-against-TTFT plot and the report page to `results/<name>-search/` (`--out`).
`--robust X` judges every candidate at nominal and over a band of +/- X % on the GPU step time,
ranks by the fleets that meet the SLOs over the whole band, flags the configurations whose
nominal fleet flips within it, and prints both choices and what robustness costs.
Each configuration's results are saved as they finish: an interrupted search (exit 130, or 143
on SIGTERM) resumes when the same command runs again; `--fresh` recomputes. Bad input is one
line and exit code 2, before anything runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sim.cli.args import band_percent, examples, nonnegative_int, positive_int

# (column, heading, scale, format) of the printed table
COLUMNS = (
    ("rank", "#", 1.0, "{:.0f}"),
    ("configuration", "configuration", 1.0, "{}"),
    ("instances", "instances", 1.0, "{}"),
    ("num_gpus", "GPUs", 1.0, "{:.0f}"),
    ("fleet_usd_per_hour", "$/h", 1.0, "{:,.2f}"),
    ("usd_per_million_output_tokens", "$/1M tok", 1.0, "{:.3f}"),
    ("energy_per_output_token_j", "J/tok", 1.0, "{:.2f}"),
    ("slo_attainment", "SLO %", 100.0, "{:.1f}"),
    ("goodput_rps", "goodput", 1.0, "{:.2f}"),
    ("ttft_p99_s", "TTFT p99 ms", 1e3, "{:.0f}"),
    ("tpot_p99_s", "TPOT p99 ms", 1e3, "{:.1f}"),
)
# over a band: the nominal fleet, and whether it flips within the band
BAND_COLUMNS = (
    ("nominal_instances", "nominal", 1.0, "{:.0f}"),
    ("nominal_fleet_usd_per_hour", "nominal $/h", 1.0, "{:,.2f}"),
    ("flips", "flips", 1.0, "{}"),
)


def register(sub: Any) -> None:
    cmd = sub.add_parser(
        "search",
        help="cheapest fleet (GPU, TP, layout, policy, count) meeting the SLOs",
        **examples(
            "batchsim search scenarios/search/llama3_70b_azure.yaml --space "
            "scenarios/search/space_70b.yaml --slo ttft_p99=2 --slo tpot_p99=0.1 --rate 20",
            "batchsim search scenarios/autoscaling_day.yaml --autoscale "
            "scenarios/autoscaling_space.yaml --slo ttft_p99=2 --slo tpot_p99=0.1",
        ),
    )
    cmd.add_argument("scenario", type=Path, help="scenario YAML: workload, model, SLO targets")
    cmd.add_argument("--space", type=Path, default=None, help="search space YAML (fleets)")
    cmd.add_argument(
        "--autoscale",
        type=Path,
        default=None,
        metavar="SPACE",
        help="search autoscaling policies over the scenario's time-varying workload instead "
        "(instance types and policies; docs/autoscaling.md)",
    )
    cmd.add_argument(
        "--verify",
        type=nonnegative_int,
        default=2,
        help="--autoscale: unseen seeds the chosen policy is re-run on (default 2)",
    )
    cmd.add_argument(
        "--slo",
        action="append",
        required=True,
        metavar="METRIC=VALUE",
        help="metric <= value, e.g. ttft_p99=2 (METRIC>=VALUE for slo_attainment, goodput)",
    )
    cmd.add_argument(
        "--rate", type=float, default=None, help="requests/s to serve (default: the workload's)"
    )
    cmd.add_argument("--objective", choices=("cost", "energy"), default="cost")
    cmd.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario field first",
    )
    cmd.add_argument(
        "--repeats",
        type=nonnegative_int,
        default=2,
        help="extra seeds every fleet must pass (default 2)",
    )
    cmd.add_argument(
        "--exhaustive",
        action="store_true",
        help="size every fleet, pruning nothing after the fit checks",
    )
    cmd.add_argument(
        "--robust",
        type=band_percent,
        default=None,
        metavar="X",
        help="choose the cheapest fleet meeting the SLOs with every GPU step time scaled by "
        "1 -/+ X/100 too (percent, e.g. 10), and print the nominal choice beside it",
    )
    cmd.add_argument("--backend", choices=("local", "ray"), default="local")
    cmd.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="parallel configurations (default: every CPU this process may use)",
    )
    cmd.add_argument("--address", default=None, help="Ray cluster address (default: local)")
    cmd.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output folder (default: results/<scenario name>-search)",
    )
    cmd.add_argument("--fresh", action="store_true", help="recompute configurations saved before")
    cmd.add_argument("--top", type=positive_int, default=10, help="rows printed (default 10)")
    cmd.add_argument("-q", "--quiet", action="store_true", help="no progress, no table")
    cmd.set_defaults(handler=_search)


def _cell(value: Any, scale: float, fmt: str) -> str:
    if fmt == "{}":
        return str(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "-"
    return "-" if number != number else fmt.format(number * scale)


def format_ranked(table: Any, top: int) -> str:
    """The best `top` configurations as an aligned text table (over a band, with the nominal
    fleet and whether it flips)."""
    import pandas as pd

    from sim.io.report_search import fleet_text

    def shown(row: Any, column: str) -> Any:
        if column == "instances":
            return fleet_text(row)
        if column == "flips":
            return "-" if pd.isna(row[column]) else "yes" if row[column] else "no"
        return row[column]

    columns = COLUMNS + (BAND_COLUMNS if "flips" in table.columns else ())
    found = table[table["status"] == "found"].head(top)
    rows = [[heading for _, heading, _, _ in columns]]
    for _, row in found.iterrows():
        rows.append([_cell(shown(row, c), scale, fmt) for c, _, scale, fmt in columns])
    widths = [max(len(r[i]) for r in rows) for i in range(len(columns))]
    return "\n".join(
        "  ".join(
            cell.ljust(w) if i == 1 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()
        for cells in rows
    )


def format_robustness(robustness: dict[str, Any]) -> str:
    """The nominal choice, and what choosing over the band costs (`SearchResult.robustness`)."""
    unit = "$/h" if robustness["objective"] == "fleet_usd_per_hour" else "W"

    def value(choice: dict[str, Any]) -> str:
        return f"${choice['value']:,.2f}/h" if unit == "$/h" else f"{choice['value']:,.0f} W"

    nominal, robust = robustness["nominal_choice"], robustness["robust_choice"]
    band = f"±{robustness['band_percent']:g} %"
    lines = []
    if nominal is None:
        lines.append("Nominal answer: none: no configuration meets the SLOs at nominal")
    else:
        lines.append(
            f"Nominal answer: {nominal['configuration']}, {nominal['instances']} instances "
            f"({nominal['num_gpus']} GPUs), {value(nominal)}"
            + ("" if robustness["differs"] else f": the same fleet, robust over the {band} band")
        )
    if robust is not None and nominal is not None:
        lines.append(
            f"Cost of robustness over the {band} band: {robustness['cost_pct']:+.1f} % "
            f"({value(robust)} against {value(nominal)})"
        )
    flipped = robustness["flipped"]
    lines.append(
        f"{len(flipped)} configuration(s) whose nominal fleet fails the SLOs at an end of the "
        f"band (flips){': ' + '; '.join(flipped) if flipped else ''}"
    )
    return "\n".join(lines)


def _out_folder(args: argparse.Namespace, suffix: str = "search") -> Path:
    from sim.errors import ScenarioError
    from sim.io.destination import results_folder_name
    from sim.scenario.load import source_of
    from sim.scenario.schema import check_folder_name

    if args.out is not None:
        return Path(args.out)
    raw, file, _ = source_of(args.scenario, args.overrides)
    name = raw.get("name")
    if not isinstance(name, str):
        raise ScenarioError("missing, or not a string", file=file, path="name")
    try:
        check_folder_name(name)
    except ValueError as exc:
        raise ScenarioError(str(exc), file=file, path="name") from None
    return Path("results") / f"{results_folder_name(name, args.overrides)}-{suffix}"


def _search(args: argparse.Namespace) -> int:
    from sim.cli.signals import report_resumable
    from sim.io.report_search import fleet_text
    from sim.whatif.search import search

    if args.autoscale is not None:
        from sim.cli.search_autoscale import run

        return run(args, _out_folder)
    if args.space is None:
        from sim.errors import ScenarioError

        raise ScenarioError("give --space (a fleet search) or --autoscale SPACE", path="--space")
    out = _out_folder(args)
    try:
        result = search(
            args.scenario,
            args.space,
            args.slo,
            rate=args.rate,
            objective=args.objective,
            overrides=args.overrides,
            repeats=args.repeats,
            exhaustive=args.exhaustive,
            backend=args.backend,
            workers=args.workers,
            address=args.address,
            out=out,
            resume=not args.fresh,
            progress=not args.quiet,
            robust=args.robust,
        )
    except KeyboardInterrupt as exc:
        saved = len(list((out / "configs").glob("*.json")))
        return report_resumable(exc, f"{saved} configuration results", f"{out}/configs/")
    recomputed = result.counts.get("recomputed", 0)
    if recomputed:  # saved results that did not validate: said even with -q
        print(
            f"batchsim: note: {recomputed} saved result(s) in {out}/configs/ did not validate and "
            f"were recomputed (first: {result.counts['first_recomputed']})",
            file=sys.stderr,
        )
    if args.quiet:
        return 0
    q = result.question
    print(
        f"fewest instances serving {q['rate_rps']:.4g} req/s ({q['workload']} workload) with "
        f"{', '.join(q['slos'])} on every one of {len(q['seeds'])} seeds; ranked by "
        f"{'fleet $/h' if q['objective'] == 'cost' else 'energy per output token'}"
    )
    print(format_ranked(result.table, args.top))
    print(f"\n{result.describe()}")
    best = result.best
    if best is None:
        print(f"Answer: none: {result.no_answer()}")
    else:
        print(
            f"Answer: {best['configuration']}, {fleet_text(best)} instances "
            f"({int(best['num_gpus'])} GPUs), ${best['fleet_usd_per_hour']:,.2f}/h, "
            f"${best['usd_per_million_output_tokens']:.3f} per million output tokens"
            + (f" (meets the SLOs over the ±{q['robust_percent']:g} % band)"
               if "robust_percent" in q else "")
        )  # fmt: skip
    robustness = result.robustness()
    if robustness is not None:
        print(format_robustness(robustness))
    print(f"table in {out}/search.csv and .parquet; plot {out}/pareto.png; page {out}/report.html")
    return 0
