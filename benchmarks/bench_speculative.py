"""What speculative decoding costs the simulator: wall time with speculation on and off.

A speculating request emits its own number of tokens per step, so steps that speculate cannot be
coalesced into runs (`docs/speculative.md`): the engine plans and applies them one by one, and
each decoding request is stepped on its own. This script measures that cost on the workload of
`bench_sim.py` (Azure-conversation-like lengths, Llama-2-7B on one A100-80GB, roofline,
continuous batching), at two loads given as fractions of the plain policy's saturation, for
k = 0 (off), 2 and 4 (EAGLE-style heads, 10 % of the target's decode step per pass, acceptance
0.7 per position), and with speculation configured but switched off by batch size
(`disable_by_batch_size: 1`: the plain path, which must cost the same as off). Each run is in a
fresh process; `slowdown` is the wall time over the k = 0 run's at the same load.

    python benchmarks/bench_speculative.py                 # 10k requests, loads 0.2 and 0.8
    python benchmarks/bench_speculative.py --requests 100000 --loads 0.5
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

BASE: dict[str, Any] = {
    "name": "bench",
    "seed": 7,
    "workload": {
        "num_requests": 10_000,
        "arrival": {"process": "poisson", "rate": 1.0},
        "prompt_tokens": {"dist": "lognormal", "median": 1020, "sigma": 0.5, "max": 3000},
        "output_tokens": {"dist": "lognormal", "median": 129, "sigma": 0.99, "max": 1000},
    },
    "model": "llama-2-7b",
    "hardware": "a100-80g",
    "profile": "roofline",
    "policy": {"name": "continuous"},
}
CASES: dict[str, dict[str, Any] | None] = {
    "off": None,
    "k2": {"num_speculative_tokens": 2},
    "k4": {"num_speculative_tokens": 4},
    "k4, disabled": {"num_speculative_tokens": 4, "disable_by_batch_size": 1},
}


def one_run(num_requests: int, rate: float, case: str) -> dict[str, Any]:
    from sim import load_scenario_dict, simulate

    raw = json.loads(json.dumps(BASE))
    raw["workload"]["num_requests"] = num_requests
    raw["workload"]["arrival"]["rate"] = rate
    extra = CASES[case]
    if extra is not None:
        raw["policy"]["speculative"] = {
            "method": "heads",
            "acceptance": {"rate": 0.7},
            "head_fraction": 0.1,
            **extra,
        }
    scenario = load_scenario_dict(raw)
    start = time.perf_counter()
    results = simulate(scenario)
    summary = results["default"].summary()
    wall = time.perf_counter() - start
    return {
        "wall_s": wall,
        "steps": int(summary["num_steps"]),
        "step_groups": len(results["default"].steps),
        "throughput_rps": summary["requests_per_s"],
        "mean_batch": summary["mean_batch_size"],
        "tpot_ms": summary["tpot_p50_s"] * 1e3,
    }


def in_subprocess(num_requests: int, rate: float, case: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(num_requests), str(rate), case],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--loads", type=float, nargs="+", default=[0.2, 0.8])
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        n, rate, case = args.child
        print(json.dumps(one_run(int(n), float(rate), case)))
        return
    saturation = in_subprocess(5_000, 1e6, "off")["throughput_rps"]
    print(f"{args.requests} requests; plain continuous batching saturates at {saturation:.2f} rps")
    header = (
        f"{'load':>5} {'case':>13} {'wall s':>7} {'us/req':>7} {'steps':>9} {'groups':>8} "
        f"{'mean batch':>10} {'TPOT p50 ms':>11} {'slowdown':>8}"
    )
    print(header)
    print("-" * len(header))
    for load in args.loads:
        base = None
        for case in CASES:
            r = in_subprocess(args.requests, load * saturation, case)
            base = base or r["wall_s"]
            print(
                f"{load:>5.2f} {case:>13} {r['wall_s']:>7.2f} "
                f"{1e6 * r['wall_s'] / args.requests:>7.1f} {r['steps']:>9} "
                f"{r['step_groups']:>8} {r['mean_batch']:>10.1f} {r['tpot_ms']:>11.2f} "
                f"{r['wall_s'] / base:>7.1f}x"
            )


if __name__ == "__main__":
    main()
