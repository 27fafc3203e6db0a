"""Fleet speed: scenarios/autoscaling_day.yaml's variants over the first `--hours` of the day,
streamed (no tables), one variant at a time in this process.

Prints per variant the simulated requests, wall time, microseconds per request, the scaling
events and the mean instances, and this process's peak RSS so far. A fixed fleet of six
instances and the autoscaled ones route every arrival among several instances: each instance
runs its own SimPy process and each routing decision weighs every candidate, which is where a
cluster's time per request goes beyond one instance's (bench_sim.py).

    python benchmarks/bench_fleet.py --hours 2
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.scenario.load import load_scenario  # noqa: E402
from sim.simulate import run_variant  # noqa: E402
from sim.workload import generate_requests  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=2.0, help="hours of the day (max 24)")
    parser.add_argument("--variants", nargs="*", default=None, help="default: every variant")
    args = parser.parse_args()
    if not 0 < args.hours <= 24:
        parser.error("--hours must be in (0, 24]")
    scenario = load_scenario(
        ROOT / "scenarios" / "autoscaling_day.yaml",
        [f"workload.duration_s={args.hours * 3600:g}"],
    )
    import numpy as np

    first = scenario.variants[0]
    requests = generate_requests(
        first.spec.workload, np.random.default_rng(first.spec.seed), first.base_dir,
        first.spec.model.max_model_len,
    )  # fmt: skip
    print(f"autoscaling_day.yaml, first {args.hours:g} h: {len(requests):,} requests, streamed")
    print(f"{'variant':<16}{'wall s':>9}{'us/req':>9}{'events':>8}{'mean inst':>11}"
          f"{'peak RSS MB':>13}")  # fmt: skip
    for resolved in scenario.variants:
        if args.variants and resolved.variant not in args.variants:
            continue
        started = time.perf_counter()
        result = run_variant(resolved, requests, tables=False)
        wall = time.perf_counter() - started
        summary = result.summary()
        mean = summary.get("mean_instances", float(len(result.instances)))
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{resolved.variant:<16}{wall:>9.1f}{wall / len(requests) * 1e6:>9.1f}"
              f"{len(result.fleet_events):>8}{mean:>11.2f}{rss:>13.0f}")  # fmt: skip


if __name__ == "__main__":
    main()
