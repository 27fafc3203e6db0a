"""What `batchsim calibrate-engine --points` buys a user who has load sweeps of their own
deployment: for each published deployment with two or more sweeps (lengths) in
calibration/training/inferencex_train.csv, its rows are the user's points file, the scenario is
the deployment on the events profile with the shipped unit costs, and the engine terms are
fitted with each sweep predicted by a fit on the others (leave one sweep out).

    python benchmarks/bench_calibrate_points.py                 # every such deployment
    python benchmarks/bench_calibrate_points.py --limit 4       # the first four

Prints, per deployment, the median |error| (%) of throughput per GPU, mean TPOT and mean TTFT:
shipped (no preset), predicted for held-out sweeps, and re-simulated at the fit on all points;
then the same over all deployments, and the seconds spent.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calibration.fit_unit_costs import load_points  # noqa: E402
from calibration.published_events import scenario  # noqa: E402
from sim.measured.points import read_points  # noqa: E402
from sim.whatif.calibrate_points import fit_points  # noqa: E402

DEPLOYMENT = ["model_key", "precision", "gpu", "framework", "tp", "ep", "dp_attention"]
TERMS = ("gpu_time_scale", "per_step_s", "frontend_s")
METRICS = ("tput_err", "tpot_err", "ttft_err")


def deployment_base(rows: pd.DataFrame) -> dict:
    """The deployment's scenario: its first row's, with seats for its largest concurrency."""
    first = rows.iloc[0]
    raw = scenario(first, profile="events")
    raw["policy"]["max_num_seqs"] = int(rows["conc"].max())
    return raw


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=0, help="first N deployments only")
    args = parser.parse_args(argv)
    points = load_points()
    groups = [(k, g) for k, g in points.groupby(DEPLOYMENT, sort=True)
              if g["config_id"].nunique() > 1]  # fmt: skip
    if args.limit:
        groups = groups[: args.limit]
    started = time.time()
    lines, everything = [], []
    with tempfile.TemporaryDirectory() as folder:
        for key, rows in groups:
            path = Path(folder) / "points.csv"
            rows.to_csv(path, index=False)
            loaded = read_points([path])
            fit = fit_points(deployment_base(rows), loaded, TERMS)
            label = " ".join(str(k) for k in key)
            cells = []
            for frame in (fit.before, fit.cross_validated, fit.simulated):
                cells += [f"{frame[m].abs().median():5.1f}" for m in METRICS]
            terms = ", ".join(f"{k} {v:.3g}" for k, v in fit.terms.items())
            lines.append(f"| {label} | {len(rows)} | {' | '.join(cells)} | {terms} |")
            everything.append((fit.before, fit.cross_validated, fit.simulated))
            print(lines[-1], flush=True)
    print("\n| deployment | points | shipped tput | TPOT | TTFT | held-out sweep tput | TPOT "
          "| TTFT | re-simulated tput | TPOT | TTFT | fitted |")
    print("|---|---|" + "---|" * 10)
    print("\n".join(lines))
    total = []
    for i in range(3):
        frame = pd.concat([e[i] for e in everything])
        total += [f"{np.nanmedian(frame[m].abs()):.1f}" for m in METRICS]
    print(f"| all ({len(groups)} deployments) | {sum(len(g) for _, g in groups)} | "
          + " | ".join(total) + " | |")
    print(f"\n{time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
