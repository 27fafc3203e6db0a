"""`batchsim search SCENARIO --autoscale SPACE`: the cheapest autoscaling policy over a
time-varying workload (`sim.whatif.autoscale_search`).

Prints the candidates best first (those meeting the SLOs on every seed, cheapest first), the
fixed fleet each instance type needs, the answer with its saving over the cheapest fixed fleet,
and the check on unseen seeds; writes `<out>/` (default `results/<name>-autoscale/`): the
chosen policy's own run (summary, timeline.csv, fleet_events.csv, over_time plot, report) and
`autoscale_search.csv` (every candidate and fixed fleet tried) and `autoscale_search.json`
(the answer).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sim.errors import ScenarioError

COLUMNS = (
    ("candidate", "candidate", "{}"),
    ("slo_met", "SLOs", "{}"),
    ("fleet_usd_per_day", "$/day", "{:,.0f}"),
    ("mean_instances", "mean inst", "{:.2f}"),
    ("peak_instances", "peak", "{:.0f}"),
    ("ttft_p99_s", "TTFT p99 s", "{:.3f}"),
    ("tpot_p99_s", "TPOT p99 s", "{:.4f}"),
)


def _table_text(table: Any, top: int) -> str:
    rows = [[heading for _, heading, _ in COLUMNS]]
    for _, row in table.head(top).iterrows():
        cells = []
        for column, _, fmt in COLUMNS:
            value = row[column]
            if fmt == "{}":
                cells.append("met" if value is True else "no" if value is False else str(value))
            else:
                cells.append("-" if value != value else fmt.format(value))
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in rows
    )


def answer_document(result: Any) -> dict[str, Any]:
    """The answer as plain data (autoscale_search.json)."""

    def value(x: float) -> float | None:
        return None if x != x or math.isinf(x) else x

    base = result.baseline
    chosen = result.chosen
    return {
        "slos": [str(s) for s in result.slos],
        "chosen": None
        if chosen is None
        else {
            "candidate": chosen.key,
            "gpu": chosen.gpu,
            "autoscale": result.chosen_autoscale,
            "usd_per_day": value(chosen.mean("fleet_usd_per_day")),
            "usd_per_day_over_seeds": [value(x) for x in chosen.spread("fleet_usd_per_day")],
            "slo_margins": {s.metric: value(chosen.margin(s)) for s in result.slos},
            "mean_instances": value(chosen.mean("mean_instances")),
            "peak_instances": value(chosen.mean("peak_instances")),
        },
        "fixed": {
            gpu: {"instances": o.instances, "usd_per_day": value(o.mean("fleet_usd_per_day"))}
            for gpu, o in result.fixed.items()
        },
        "baseline": None if base is None else {"gpu": base.gpu, "instances": base.instances},
        "saving": value(result.saving),
        "saving_over_seeds": [value(x) for x in result.saving_spread],
        "verify_seeds": result.verify_seeds,
        "verified_met": result.verified_met,
        "verified": [
            {"seed": seed, **{s.metric: value(x.get(s.metric, math.nan)) for s in result.slos}}
            for seed, x in zip(result.verify_seeds, result.verified, strict=True)
        ],
    }


def run(args: argparse.Namespace, out_folder: Callable[[argparse.Namespace, str], Path]) -> int:
    """Run ``batchsim search --autoscale``; ``out_folder`` names the default results folder."""
    from sim.io.output import write_results
    from sim.simulate import simulate
    from sim.whatif.autoscale_search import _doc, autoscale_search
    from sim.whatif.autoscale_space import read_space
    from sim.whatif.capacity import parse_slos
    from sim.whatif.sweep_backends import default_workers

    if args.space is not None:
        raise ScenarioError("give --space (a fleet search) or --autoscale, not both",
                            path="--autoscale")  # fmt: skip
    if args.robust is not None or args.rate is not None:
        raise ScenarioError(
            "--robust and --rate apply to the fleet search (--space); the autoscaling search "
            "replays the scenario's own workload",
            path="--autoscale",
        )
    space = read_space(args.autoscale)
    slos = parse_slos(args.slo, 0)
    out = out_folder(args, "autoscale")
    from sim.io.destination import check_destination

    check_destination(out.parent, out.name)  # a bad --out fails before any simulation

    def say(text: str) -> None:
        if not args.quiet:
            print(f"\r{text[:100]:<100}", end="", flush=True)

    result = autoscale_search(
        str(args.scenario), space, slos, seeds=1 + args.repeats, verify=args.verify,
        workers=args.workers or default_workers(), backend=args.backend, address=args.address,
        overrides=args.overrides, progress=say,
    )  # fmt: skip
    if not args.quiet:
        print()
    table = result.table()
    doc = answer_document(result)
    chosen_results = None
    if result.chosen is not None:  # its own run: the timeline, the events, the plot
        from sim.whatif.autoscale_search import _base

        raw, file, base_dir, seed, _ = _base(str(args.scenario), args.overrides)
        group = {"hardware": result.chosen.gpu, "count": result.chosen.instances,
                 "autoscale": result.chosen_autoscale}  # fmt: skip
        chosen_doc = _doc(raw, group, space.router, seed)
        from sim.scenario.load import load_scenario_dict

        loaded = load_scenario_dict(chosen_doc, file=file, base_dir=Path(base_dir))
        chosen_results = (simulate(loaded, tables=False), loaded.dump())

    def extra(folder: Path) -> None:
        table.to_csv(folder / "autoscale_search.csv", index=False)
        (folder / "autoscale_search.json").write_text(json.dumps(doc, indent=2) + "\n")

    if chosen_results is not None:
        write_results(
            chosen_results[0], out, chosen_results[1], plots=False, over_time_plot=True,
            tables="summary", extra_files=extra,
        )  # fmt: skip
    if args.quiet:
        return 0
    said = ", ".join(str(s) for s in slos)
    print(f"{len(result.outcomes)} autoscaling policies, {len(result.probes)} fixed fleets; "
          f"{said} on every one of {1 + args.repeats} seeds")  # fmt: skip
    print(_table_text(table, args.top))
    for gpu, o in result.fixed.items():
        print(f"fixed fleet for the whole workload on {gpu}: {o.instances} instances, "
              f"${o.mean('fleet_usd_per_day'):,.0f}/day")  # fmt: skip
    if result.chosen is None:
        print("Answer: none: no autoscaling policy of the space meets the SLOs on every seed")
        return 0
    c = result.chosen
    saving = 100 * result.saving
    print(f"Answer: {c.key}, ${c.mean('fleet_usd_per_day'):,.0f}/day, "
          f"{c.mean('mean_instances'):.2f} instances on average, {c.mean('peak_instances'):.0f} "
          f"at most; saves {saving:.1f} % against the cheapest fixed fleet")  # fmt: skip
    if len(c.summaries) > 1:
        low, high = c.spread("fleet_usd_per_day")
        s_low, s_high = result.saving_spread
        print(f"  over the {len(c.summaries)} seeds: ${low:,.2f} to ${high:,.2f}/day, saving "
              f"{100 * s_low:.1f} to {100 * s_high:.1f} %")  # fmt: skip
    margins = ", ".join(f"{s.metric} {100 * c.margin(s):.0f} %" for s in result.slos)
    print(f"  SLO margins on its worst seed (of the limit): {margins}")
    if result.verify_seeds:
        verdict = "meets" if result.verified_met else "does NOT meet"
        seen = "; ".join(
            f"seed {seed}: " + ", ".join(f"{s.metric} {x.get(s.metric, math.nan):.4g}"
                                         for s in result.slos)
            for seed, x in zip(result.verify_seeds, result.verified, strict=True)
        )  # fmt: skip
        print(f"On unseen seeds {result.verify_seeds}: it {verdict} the SLOs ({seen})")
        if not result.verified_met:
            print("  its margin is thinner than the seeds showed: search with more --repeats, "
                  "or take a policy with more margin from the table")  # fmt: skip
    print(f"results in {out}/ (autoscale_search.csv, timeline.csv, over_time.png)")
    return 0
