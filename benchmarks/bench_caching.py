"""What prefix caching costs the simulator: wall time with caching off and on, same workload.

Three workloads, each run with `prefix_caching` off and on and nothing else changed (Llama-2-7B
on one A100-80GB, roofline, continuous batching, the lengths of `bench_sim.py`), arriving at a
fraction of the caching-off saturation throughput, which the script measures first with every
request arriving at once:

- `shared`: 16 system prompts of 512 tokens (Zipf popularity) in front of every prompt, as
  `bench_sim.py --policy cached`;
- `sessions`: closed-loop multi-turn chats of 4 turns, each turn's prompt the whole history;
- `unique`: the `shared` spec with `fraction: 0` (so no system prompt): every prompt has
  content ids, all its own, so caching on finds nothing (bar a preempted request's own blocks,
  none at this load) and the schedule is the caching-off one step for step. Its ratio is the
  cost of hashing, lookups and the cached-block bookkeeping alone; the other workloads' ratios
  add what hits do (shared blocks to count, fewer prefill tokens, other batches).

Each run is in a fresh process; the best of `--repeat` runs is kept. `on/off` is the caching-on
wall time over caching-off's on the same workload; `steps` and `hit rate` show how far the
schedule moved.

    python benchmarks/bench_caching.py                     # 20k requests, best of 3
    python benchmarks/bench_caching.py --requests 5000 --repeat 1 --workloads unique
    python benchmarks/bench_caching.py --profile unique    # cProfile of one caching-on run

`--profile` prints the caching-on run's top functions by own and cumulative time. cProfile
charges each call of a C function (a dict pop, a numpy call) far more than it costs, so it
overstates per-block dict work; the table's wall times are unprofiled.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

LENGTHS: dict[str, Any] = {
    "prompt_tokens": {"dist": "lognormal", "median": 1020, "sigma": 0.5, "max": 3000},
    "output_tokens": {"dist": "lognormal", "median": 129, "sigma": 0.99, "max": 1000},
}
BASE: dict[str, Any] = {
    "name": "bench",
    "seed": 7,
    "model": "llama-2-7b",
    "hardware": "a100-80g",
    "profile": "roofline",
    "policy": {"name": "continuous"},
}
PREFIX = {"num_prefixes": 16, "zipf": 1.0, "length": {"dist": "fixed", "value": 512}}
TURNS = 4
# capped so that a session's last turn (history and all) fits Llama-2's 4,096-token context
SESSIONS: dict[str, Any] = {
    "turns": {"dist": "fixed", "value": TURNS},
    "first_prompt": {"dist": "lognormal", "median": 1020, "sigma": 0.5, "max": 1500},
    "user_tokens": {"dist": "lognormal", "median": 150, "sigma": 0.8, "max": 300},
    "output_tokens": {"dist": "lognormal", "median": 129, "sigma": 0.99, "max": 300},
    "think_time": {"dist": "exponential", "mean_s": 30.0},
}
WORKLOADS = ("shared", "sessions", "unique")


def scenario_dict(workload: str, num_requests: int, rate: float, caching: bool) -> dict[str, Any]:
    """The scenario of one run; `rate` is in requests per second (sessions start at rate/turns)."""
    raw = json.loads(json.dumps(BASE))
    raw["policy"]["prefix_caching"] = caching
    arrival = {"process": "poisson", "rate": rate}
    if workload == "sessions":
        sessions = {**SESSIONS, "arrival": {**arrival, "rate": rate / TURNS}}
        sessions["num_sessions"] = -(-num_requests // TURNS)
        raw["workload"] = {"num_requests": num_requests, "sessions": sessions}
    else:
        fraction = 0.0 if workload == "unique" else 1.0
        raw["workload"] = {
            "num_requests": num_requests,
            "arrival": arrival,
            **LENGTHS,
            "shared_prefix": {**PREFIX, "fraction": fraction},
        }
    return raw


def one_run(workload: str, num_requests: int, rate: float, caching: bool) -> dict[str, Any]:
    from sim import load_scenario_dict, simulate

    scenario = load_scenario_dict(scenario_dict(workload, num_requests, rate, caching))
    start = time.perf_counter()
    results = simulate(scenario)
    summary = results["default"].summary()
    wall = time.perf_counter() - start
    return {
        "requests": len(results["default"].requests),
        "wall_s": wall,
        "steps": int(summary["num_steps"]),
        "throughput_rps": summary["requests_per_s"],
        "hit_rate": summary.get("prefix_cache_hit_rate", float("nan")),
    }


def in_subprocess(workload: str, num_requests: int, rate: float, caching: bool) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", workload, str(num_requests), str(rate), str(caching)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def best_of(repeat: int, workload: str, n: int, rate: float, caching: bool) -> dict[str, Any]:
    runs = [in_subprocess(workload, n, rate, caching) for _ in range(repeat)]
    return min(runs, key=lambda r: r["wall_s"])


def profile(workload: str, num_requests: int, rate: float, top: int = 25) -> None:
    """cProfile one caching-on run in this process: top functions by own and cumulative time."""
    import cProfile
    import pstats

    from sim import load_scenario_dict, simulate

    scenario = load_scenario_dict(scenario_dict(workload, num_requests, rate, True))
    profiler = cProfile.Profile()
    profiler.runcall(simulate, scenario)
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs per case; the best is kept")
    parser.add_argument("--load", type=float, default=0.8, help="fraction of saturation")
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--profile", choices=WORKLOADS, help="cProfile one caching-on run")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        workload, n, rate, caching = args.child
        print(json.dumps(one_run(workload, int(n), float(rate), caching == "True")))
        return
    from sim.compiled import build

    workloads = [args.profile] if args.profile else args.workloads
    rates = {}
    for workload in workloads:
        saturation = in_subprocess(workload, 5_000, 1e6, False)["throughput_rps"]
        rates[workload] = args.load * saturation
    if args.profile:
        profile(args.profile, args.requests, rates[args.profile])
        return
    print(
        f"{build()} core; arrivals at {args.load:.0%} of each workload's caching-off "
        f"saturation; best of {args.repeat}"
    )
    header = (
        f"{'workload':>9} {'caching':>7} {'req/s':>6} {'requests':>8} {'wall s':>7} "
        f"{'us/req':>7} {'on/off':>6} {'steps':>8} {'hit rate':>8}"
    )
    print(header)
    print("-" * len(header))
    for workload in workloads:
        rate = rates[workload]
        off = best_of(args.repeat, workload, args.requests, rate, False)
        on = best_of(args.repeat, workload, args.requests, rate, True)
        for caching, r in (("off", off), ("on", on)):
            ratio = f"{r['wall_s'] / off['wall_s']:.2f}" if r is on else ""
            hits = f"{r['hit_rate']:.1%}" if r is on else "-"
            print(
                f"{workload:>9} {caching:>7} {rate:>6.2f} {r['requests']:>8} "
                f"{r['wall_s']:>7.2f} {1e6 * r['wall_s'] / r['requests']:>7.1f} {ratio:>6} "
                f"{r['steps']:>8} {hits:>8}"
            )


if __name__ == "__main__":
    main()
