"""Fleet speed: the cost per simulated request against the number of instances, per router,
and an autoscaled day streamed.

`--shape` (the default): Llama-3-8B on H100s, chunked prefill, Poisson arrivals at `--rate`
requests per second per instance (6: each instance about half busy), `--requests` requests in
all but at least `--per-instance` per instance (so that a large fleet's warm-up and drain weigh
no more than a small one's), for fleets of `--instances` (1, 4, 16, 64, 256) behind each router
of `sim.topology.router.ROUTERS`, tables kept. `us/req` is this process's CPU time per
request (what the run costs, less the time a shared machine gives others); `one` is one
instance's (the same run behind any router), timed beside the fleet, run for run, `--repeat`
times each, the least of each, so that on a machine whose speed drifts over minutes a ratio
still compares like with like; `x one` divides the two: 1.0 would mean a fleet costs no more per
request than a lone instance. Fleets differ from one
instance in that every arrival is routed among the fleet's candidates and the fleet's clock
(`sim.core.clock.Clock`) merges the instances' step ends and the arrivals (a lone instance
pulls its arrivals and runs whole runs without the clock).

`--day`: scenarios/autoscaling_day.yaml's variants over its first `--hours`, streamed (no
tables), one variant at a time, and the same day on prefill/decode pools that scale apart
(`pd_autoscaled`: prefill on queue length, decode on running requests): wall time, us/request,
milliseconds of wall time per simulated second, scaling events, mean instances, this
process's peak RSS so far, and the whole day's wall time at that cost per request (`day min`:
the day's requests at this load, from its rate profile, times `us/req`). `--load X` multiplies
the day's load and every fleet's counts and bounds by X (100: 1,000 req/s on average); the
workload is regenerated as each run goes.

`--rss`: peak RSS against the number of requests of a streamed run (the shape's workload on
`--rss-instances` instances behind least_outstanding_tokens), each run in a fresh process so
its peak is its own: flat memory would show the same figure on every row.

    python benchmarks/bench_fleet.py                         # the shape, every router
    python benchmarks/bench_fleet.py --routers least_outstanding_requests --instances 1 64
    python benchmarks/bench_fleet.py --day --hours 2
    python benchmarks/bench_fleet.py --day --hours 0.25 --load 100   # 1,000 req/s on average
    python benchmarks/bench_fleet.py --rss --sizes 100000 300000 1000000
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import math
import resource
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("sim") is None:  # not installed: this tree's source
    sys.path.insert(0, str(ROOT))



def _routers() -> list[str]:
    from sim.topology.router import ROUTERS

    return list(ROUTERS)


ROUTERS = _routers()


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
        requests = max(args.requests, args.per_instance * n)
        scenario = load_scenario_dict(shape_scenario(router, n, args.rate, requests))
        started = time.process_time()
        simulate(scenario)
        return (time.process_time() - started) / requests * 1e6

    # one instance is the same run behind any router (nothing to choose); it is timed again
    # beside every fleet, run for run, so that a ratio compares runs of the same minutes
    print(f"CPU time per request; each fleet and one instance timed alternately, "
          f"{args.repeat} runs each, the least of each")  # fmt: skip
    print(f"{'router':<28}{'instances':>10}{'us/req':>9}{'one':>8}{'x one':>8}")
    for router in args.routers:
        for n in args.instances:
            fleet, one = math.inf, math.inf
            for _ in range(args.repeat):
                one = min(one, timed("round_robin", 1))
                if n > 1:
                    fleet = min(fleet, timed(router, n))
            per = one if n == 1 else fleet
            print(f"{router:<28}{n:>10}{per:>9.1f}{one:>8.1f}{per / one:>8.2f}", flush=True)


def day(args: argparse.Namespace) -> None:
    if not 0 < args.hours <= 24:
        raise SystemExit("--hours must be in (0, 24]")
    if not 0 < args.load <= 1000:
        raise SystemExit("--load must be in (0, 1000]")
    from sim.simulate import run_variant, workload_of

    variants = day_variants(args.hours, args.load)
    if args.variants:
        variants = [v for v in variants if v.variant in args.variants]
    span_s = args.hours * 3600
    workload = workload_of(variants[0], tables=False)  # regenerated as each run goes
    n = workload.num_requests
    print(f"autoscaling_day.yaml at {args.load:g}x its load ({10 * args.load:g} req/s mean), "
          f"first {args.hours:g} h: {n:,} requests, streamed")  # fmt: skip
    whole = workload_of(day_variants(24.0, args.load)[0], tables=False).num_requests
    print(f"{'variant':<16}{'wall s':>9}{'us/req':>9}{'ms/sim s':>10}{'events':>8}"
          f"{'mean inst':>11}{'peak RSS MB':>13}{'day min':>9}")  # fmt: skip
    for resolved in variants:
        started = time.perf_counter()
        result = run_variant(resolved, workload, tables=False)
        wall = time.perf_counter() - started
        summary = result.summary()
        mean = summary.get("mean_instances", float(len(result.instances)))
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{resolved.variant:<16}{wall:>9.1f}{wall / n * 1e6:>9.1f}"
              f"{wall / span_s * 1e3:>10.2f}{len(result.fleet_events):>8}{mean:>11.2f}"
              f"{rss:>13.0f}{wall / n * whole / 60:>9.1f}", flush=True)  # fmt: skip


def _scaled(group: dict[str, Any], load: float) -> dict[str, Any]:
    """An instance group (or pool) sized for `load` times the day's load: its count and its
    autoscaling bounds (targets and a predictive policy's capacity are per instance)."""
    out = dict(group)
    out["count"] = max(1, math.ceil(group.get("count", 1) * load))
    if "autoscale" in group:
        scale = dict(group["autoscale"])
        for key in ("min", "max"):
            if key in scale:
                scale[key] = max(1, math.ceil(scale[key] * load))
        out["autoscale"] = scale
    return out


def day_variants(hours: float, load: float) -> list[Any]:
    """autoscaling_day.yaml's variants over its first `hours`, at `load` times its load with
    every fleet scaled alike, and the same day on P/D pools that scale apart (`pd_day`)."""
    import yaml

    from sim.scenario.load import load_scenario_dict

    raw = yaml.safe_load((ROOT / "scenarios" / "autoscaling_day.yaml").read_text())
    raw["workload"]["duration_s"] = hours * 3600
    raw["workload"]["arrival"]["scale"] *= load
    raw["cluster"]["instances"] = [_scaled(g, load) for g in raw["cluster"]["instances"]]
    for override in raw["variants"].values():
        if "cluster" in override:
            cluster = override["cluster"]
            cluster["instances"] = [_scaled(g, load) for g in cluster["instances"]]
    variants = list(load_scenario_dict(raw, base_dir=ROOT / "scenarios").variants)
    return [*variants, pd_day(hours, load)]


def pd_day(hours: float, load: float = 1.0) -> Any:
    """autoscaling_day.yaml's day on a prefill pool and a decode pool that scale apart."""
    import yaml

    from sim.scenario.load import load_scenario_dict

    raw = yaml.safe_load((ROOT / "scenarios" / "autoscaling_day.yaml").read_text())
    raw.pop("variants")
    raw.pop("cluster")
    raw["name"] = "pd_autoscaled"
    raw["workload"]["duration_s"] = hours * 3600
    raw["workload"]["arrival"]["scale"] *= load
    scale = {"min": 1, "max": 8, "scale_in_cooldown_s": 300}
    raw["disaggregation"] = {
        "prefill": _scaled({"count": 1, "router": "least_outstanding_tokens",
                            "autoscale": {"signal": "queue_length", "target": 2, **scale}}, load),
        "decode": _scaled({"count": 2, "autoscale": {"signal": "running", "target": 24,
                                                      **scale}}, load),
    }  # fmt: skip
    resolved = load_scenario_dict(raw, base_dir=ROOT / "scenarios").variants[0]
    return dataclasses.replace(resolved, variant="pd_autoscaled")


RSS_CHILD = """
import resource, sys
sys.path.insert(0, {root!r})
from bench_fleet import shape_scenario
from sim.scenario.load import load_scenario_dict
from sim.simulate import simulate
import time
raw = shape_scenario("least_outstanding_tokens", {n}, {rate}, {size})
started = time.perf_counter()
simulate(load_scenario_dict(raw), tables=False)
wall = time.perf_counter() - started
print(wall, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def rss(args: argparse.Namespace) -> None:
    import subprocess

    from sim.compiled import build

    n = args.rss_instances
    print(f"{build()} core; the shape's workload on {n} instances behind "
          "least_outstanding_tokens, streamed (tables=False), a fresh process per row")
    print(f"{'requests':>12}{'wall s':>9}{'us/req':>9}{'peak RSS MB':>13}{'B/request':>11}")
    base = None
    for size in args.sizes:
        code = RSS_CHILD.format(root=str(ROOT / "benchmarks"), n=n, rate=args.rate, size=size)
        out = subprocess.run(
            [sys.executable, "-c", code], check=True, capture_output=True, text=True,
            cwd=ROOT,
        ).stdout.split()  # fmt: skip
        wall, peak = float(out[-2]), float(out[-1])
        base = peak if base is None else base
        per = (peak - base) * 2**20 / max(1, size - args.sizes[0]) if size != args.sizes[0] else 0
        print(f"{size:>12,}{wall:>9.1f}{wall / size * 1e6:>9.1f}{peak:>13.0f}{per:>11.0f}",
              flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--day", action="store_true", help="the autoscaled day instead")
    parser.add_argument("--instances", type=int, nargs="+", default=[1, 4, 16, 64, 256])
    parser.add_argument("--routers", nargs="+", default=list(ROUTERS), choices=ROUTERS)
    parser.add_argument("--rate", type=float, default=6.0, help="req/s per instance")
    parser.add_argument("--requests", type=int, default=20_000, help="requests per run")
    parser.add_argument("--per-instance", type=int, default=250,
                        help="at least this many requests per instance")
    parser.add_argument("--repeat", type=int, default=2,
                        help="runs of each fleet and of one instance beside it (the least)")
    parser.add_argument("--hours", type=float, default=2.0, help="--day: hours of the day")
    parser.add_argument("--load", type=float, default=1.0,
                        help="--day: times the day's load (10 req/s mean), fleets scaled alike")
    parser.add_argument("--variants", nargs="*", default=None, help="--day: default every one")
    parser.add_argument("--rss", action="store_true", help="peak RSS against requests")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 300_000, 1_000_000],
                        help="--rss: requests per run")  # fmt: skip
    parser.add_argument("--rss-instances", type=int, default=4, help="--rss: fleet size")
    args = parser.parse_args()
    if min(args.instances) < 1 or min(args.requests, args.repeat, args.per_instance) < 1 or (
        not args.rate > 0
    ):
        parser.error("--instances, --requests and --repeat must be >= 1, --rate > 0")
    if min(args.sizes) < 1 or args.rss_instances < 1:
        parser.error("--sizes and --rss-instances must be >= 1")
    if args.rss:
        rss(args)
    elif args.day:
        day(args)
    else:
        shape(args)


if __name__ == "__main__":
    main()
