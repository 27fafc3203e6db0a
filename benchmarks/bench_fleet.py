"""Fleet speed: the cost per simulated request against the number of instances, per router,
and an autoscaled day streamed.

`--shape` (the default): Llama-3-8B on H100s, chunked prefill, Poisson arrivals at `--rate`
requests per second per instance (6: each instance about half busy), `--requests` requests in
all, for fleets of `--instances` (1, 4, 16, 64) behind each router of `--routers`, tables kept.
`us/req` is wall time per request; `x one` divides it by one instance's figure (the same run
behind any router, timed best of three): 1.0 would mean a fleet costs no more per request than
a lone instance. Fleets differ from one instance in that every arrival is routed among the
fleet's candidates and each instance runs its own SimPy process (a lone instance pulls its
arrivals and runs whole runs without events).

`--day`: scenarios/autoscaling_day.yaml's variants over its first `--hours`, streamed (no
tables), one variant at a time: wall time, us/request, scaling events, mean instances and this
process's peak RSS so far.

    python benchmarks/bench_fleet.py                         # the shape, every router
    python benchmarks/bench_fleet.py --routers least_outstanding_requests --instances 1 64
    python benchmarks/bench_fleet.py --day --hours 2
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))



ROUTERS = (
    "round_robin",
    "least_outstanding_requests",
    "least_outstanding_tokens",
    "least_kv",
    "prefix_affinity",
    "slo_headroom",
)


def shape_scenario(router: str, instances: int, rate: float, requests: int) -> dict[str, Any]:
    """`instances` H100s behind `router`, each offered `rate` requests per second."""
    raw: dict[str, Any] = {
        "name": "fleet-shape",
        "seed": 11,
        "workload": {
            "num_requests": requests,
            "arrival": {"process": "poisson", "rate": rate * instances},
            "prompt_tokens": {"dist": "lognormal", "median": 1020, "sigma": 0.5, "max": 3000},
            "output_tokens": {"dist": "lognormal", "median": 129, "sigma": 0.99, "max": 1000},
        },
        "model": "llama-3-8b",
        "hardware": "h100-sxm",
        "policy": {"name": "chunked"},
        "slo": {"ttft_s": 1.0, "tpot_s": 0.05},
    }
    if instances > 1 or router != "round_robin":
        raw["cluster"] = {"router": router, "instances": [{"count": instances}]}
    return raw


def shape(args: argparse.Namespace) -> None:
    from sim.compiled import build
    from sim.scenario.load import load_scenario_dict
    from sim.simulate import simulate

    print(f"{build()} core; Llama-3-8B on H100, chunked prefill, {args.rate:g} req/s per "
          f"instance, {args.requests:,} requests per run, tables kept")  # fmt: skip
    def timed(router: str, n: int) -> float:
        scenario = load_scenario_dict(shape_scenario(router, n, args.rate, args.requests))
        started = time.perf_counter()
        simulate(scenario)
        return (time.perf_counter() - started) / args.requests * 1e6

    # one instance is the same run behind any router (nothing to choose): the best of three
    one = min(timed("round_robin", 1) for _ in range(3))
    print(f"one instance: {one:.1f} us/req (best of 3); fleets: best of {args.repeat}")
    print(f"{'router':<28}{'instances':>10}{'us/req':>9}{'x one':>8}")
    for router in args.routers:
        for n in args.instances:
            per = one if n == 1 else min(timed(router, n) for _ in range(args.repeat))
            print(f"{router:<28}{n:>10}{per:>9.1f}{per / one:>8.2f}", flush=True)


def day(args: argparse.Namespace) -> None:
    if not 0 < args.hours <= 24:
        raise SystemExit("--hours must be in (0, 24]")
    import numpy as np

    from sim.scenario.load import load_scenario
    from sim.simulate import run_variant
    from sim.workload import generate_requests

    scenario = load_scenario(
        ROOT / "scenarios" / "autoscaling_day.yaml",
        [f"workload.duration_s={args.hours * 3600:g}"],
    )
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--day", action="store_true", help="the autoscaled day instead")
    parser.add_argument("--instances", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--routers", nargs="+", default=list(ROUTERS), choices=ROUTERS)
    parser.add_argument("--rate", type=float, default=6.0, help="req/s per instance")
    parser.add_argument("--requests", type=int, default=20_000, help="requests per run")
    parser.add_argument("--repeat", type=int, default=1, help="runs per fleet (the best)")
    parser.add_argument("--hours", type=float, default=2.0, help="--day: hours of the day")
    parser.add_argument("--variants", nargs="*", default=None, help="--day: default every one")
    args = parser.parse_args()
    if min(args.instances) < 1 or min(args.requests, args.repeat) < 1 or not args.rate > 0:
        parser.error("--instances, --requests and --repeat must be >= 1, --rate > 0")
    day(args) if args.day else shape(args)


if __name__ == "__main__":
    main()
