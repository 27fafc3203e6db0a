"""The whole training file simulated: measured vs simulated throughput per GPU, mean TPOT and
mean TTFT of every point batchsim can express, with the shipped unit costs (or the roofline).

    python benchmarks/bench_accuracy.py                     # profile: events
    python benchmarks/bench_accuracy.py --profile roofline  # the datasheet roofline, for contrast
    python benchmarks/bench_accuracy.py --limit 100         # the first 100 points only

Each row of calibration/training/inferencex_train.csv is simulated as
calibration/published_events.py `scenario` builds it (closed-loop clients, the engine's
scheduling). These are the shipped unit costs' errors on the points they were fitted on; the
errors on configurations left out of the fit are in docs/accuracy.md. Also printed: the
simulator's time per point (one closed-loop point should take well under a second).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calibration.accuracy_doc import GROUPINGS, _table  # noqa: E402
from calibration.fit_unit_costs import _label_columns, load_points  # noqa: E402
from calibration.published_events import simulated_errors  # noqa: E402
from sim.costs.step_events import UNIT_COSTS_FILE  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=("events", "roofline"), default="events")
    parser.add_argument("--limit", type=int, default=None, help="simulate the first N points")
    args = parser.parse_args(argv)
    points = load_points()
    if args.limit is not None:
        points = points.head(args.limit)
    # each engine's fitted front-end time, added to the simulated TTFT (docs/accuracy.md)
    frontend = yaml.safe_load(UNIT_COSTS_FILE.read_text()).get("frontend_s", {})
    records, times = [], []
    for row in points.itertuples():
        started = time.perf_counter()
        front = frontend.get(row.framework, 0.0) if args.profile == "events" else 0.0
        records.append(simulated_errors(row, front, profile=args.profile))
        times.append(time.perf_counter() - started)
    errs = pd.DataFrame(records, index=points.index)
    labelled = _label_columns(points).assign(**errs)
    print(
        f"profile: {args.profile}; {len(points)} points in "
        f"{points['config_id'].nunique()} configurations (fitted points: no configuration left "
        "out; docs/accuracy.md has those)"
    )
    for by, label in GROUPINGS:
        print()
        for line in _table(labelled, by, label):
            print(line)
    series = pd.Series(times)
    print()
    print(
        f"seconds per simulated point: median {series.median():.3f}, p90 "
        f"{series.quantile(0.9):.3f}, max {series.max():.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
