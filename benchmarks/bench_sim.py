"""Simulator speed and memory: wall time, simulated requests per second and peak RSS.

Workload: Azure-conversation-like lengths (lognormal fits of the 2023 Azure LLM conversation
trace: prompt median 1020 / mean 1155 tokens, output median 129 / mean 211), Llama-2-7B on one
A100-80GB (roofline profile), continuous batching (vLLM defaults), Poisson arrivals at 80 % of the
saturation throughput, which the script measures first with every request arriving at once.
Each size runs in a fresh process, so peak RSS belongs to that run alone.

    python benchmarks/bench_sim.py                  # 10k and 100k requests
    python benchmarks/bench_sim.py --sizes 1000000  # any sizes
    python benchmarks/bench_sim.py --policy static  # another policy (chunked, mixed, ...)
    python benchmarks/bench_sim.py --policy cached  # prefix caching (vs --policy uncached)
    python benchmarks/bench_sim.py --stream --sizes 10000000   # no tables: summary streamed
    python benchmarks/bench_sim.py --deployment moe  # a mixture of experts (moe-ep: 4 DP ranks)
    python benchmarks/bench_sim.py --workload --sizes 1000000 10000000  # generation alone

`us/req` is the wall time per simulated request: flat across sizes means the cost is linear in
the number of requests. With `--stream` the run keeps no per-request, per-step or gap tables
(`simulate(..., tables=False)`), so peak RSS stays flat.

`--workload` times the workload alone, in a fresh process per size and way: generated whole
(what variants that keep tables share) against regenerated in chunks as a streamed run reads it
(`sim.workload.stream`: the pass that counts the arrivals, then every chunk), with each way's
peak RSS; a streamed variant pays the regeneration once per run.
"""

from __future__ import annotations

import argparse
import json
import resource
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
POLICIES = {
    "continuous": {"name": "continuous"},
    "mixed": {"name": "continuous", "mode": "mixed"},
    "chunked": {"name": "chunked"},
    "static": {"name": "static", "max_batch_size": 32},
    # prefix caching, on the same lengths behind 16 shared 512-token system prompts (Zipf)
    "cached": {"name": "continuous", "prefix_caching": True},
    "uncached": {"name": "continuous"},  # the same prompts, caching off: the baseline for it
}
# model and GPUs: the dense default, or a mixture of experts (its step prices the distinct
# experts a step touches), on one GPU or as four data-parallel ranks with expert parallelism
DEPLOYMENTS: dict[str, tuple[str, Any]] = {
    "dense": ("llama-2-7b", "a100-80g"),
    "moe": ("qwen3-30b-a3b", "h100-sxm"),
    "moe-ep": ("qwen3-30b-a3b", {"name": "h100-sxm", "data_parallel": 4, "expert_parallel": 4}),
}
SHARED_PREFIX = {"num_prefixes": 16, "zipf": 1.0, "length": {"dist": "fixed", "value": 512}}


def one_run(
    num_requests: int, rate: float, policy: str, stream: bool = False, deployment: str = "dense"
) -> dict[str, Any]:
    from sim import load_scenario_dict, simulate

    raw = json.loads(json.dumps(BASE))
    raw["model"], raw["hardware"] = DEPLOYMENTS[deployment]
    raw["workload"]["num_requests"] = num_requests
    raw["workload"]["arrival"]["rate"] = rate
    raw["policy"] = POLICIES[policy]
    if policy in ("cached", "uncached"):
        raw["workload"]["shared_prefix"] = SHARED_PREFIX
    scenario = load_scenario_dict(raw)
    start = time.perf_counter()
    results = simulate(scenario, tables=not stream)
    summary = results["default"].summary()
    wall = time.perf_counter() - start
    return {
        "requests": num_requests,
        "wall_s": wall,
        "sim_req_per_s": num_requests / wall,
        "steps": int(summary["num_steps"]),
        "step_groups": len(results["default"].steps) if not stream else -1,
        "throughput_rps": summary["requests_per_s"],
        "mean_batch": summary["mean_batch_size"],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


WORKLOAD_CHILD = """
import json, resource, sys, time
from pathlib import Path
import numpy as np
from sim.workload import generate_requests
from sim.workload.spec import WorkloadSpec
from sim.workload.stream import Workload
spec = WorkloadSpec.model_validate(json.loads(sys.argv[1]))
way = sys.argv[2]
start = time.perf_counter()
if way == "whole":
    count = len(generate_requests(spec, np.random.default_rng(7), Path(".")))
else:
    workload = Workload.streamed(spec, 7, Path("."))
    count = sum(len(arrays) for _, arrays in workload.chunks())
    assert count == workload.num_requests
wall = time.perf_counter() - start
print(json.dumps([count, wall, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024]))
"""


def workload_costs(sizes: list[int], policy: str) -> None:
    """Generating the workload whole against regenerating it in chunks, per size."""
    print("the workload alone (lengths as the runs'; rate 1000 req/s), a fresh process per row")
    header = f"{'requests':>11} {'way':>12} {'wall s':>8} {'us/req':>7} {'peak RSS MB':>11}"
    print(header)
    print("-" * len(header))
    for n in sizes:
        raw = json.loads(json.dumps(BASE["workload"]))
        raw["num_requests"] = n
        raw["arrival"]["rate"] = 1000.0
        if policy in ("cached", "uncached"):
            raw["shared_prefix"] = SHARED_PREFIX
        for way in ("whole", "regenerated"):
            out = subprocess.run(
                [sys.executable, "-c", WORKLOAD_CHILD, json.dumps(raw), way],
                check=True, capture_output=True, text=True,
            )  # fmt: skip
            count, wall, peak = json.loads(out.stdout)
            print(f"{count:>11} {way:>12} {wall:>8.2f} {1e6 * wall / count:>7.2f} {peak:>11.0f}")


def in_subprocess(
    num_requests: int, rate: float, policy: str, stream: bool, deployment: str
) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(num_requests), str(rate), policy, str(stream),
         deployment],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--policy", choices=sorted(POLICIES), default="continuous")
    parser.add_argument("--load", type=float, default=0.8, help="fraction of saturation")
    parser.add_argument("--stream", action="store_true", help="keep no tables (flat memory)")
    parser.add_argument("--deployment", choices=sorted(DEPLOYMENTS), default="dense",
                        help="model and GPUs (moe: a mixture of experts)")
    parser.add_argument("--workload", action="store_true",
                        help="time generating the workload alone: whole vs regenerated")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if min(args.sizes) < 1:
        parser.error("--sizes must be >= 1")
    if args.child:
        n, rate, policy, stream, deployment = args.child
        print(json.dumps(one_run(int(n), float(rate), policy, stream == "True", deployment)))
        return
    if args.workload:
        workload_costs(args.sizes, args.policy)
        return
    from sim.compiled import build

    saturation = in_subprocess(5_000, 1e6, args.policy, False, args.deployment)["throughput_rps"]
    rate = args.load * saturation
    print(
        f"{build()} core; {args.deployment} {DEPLOYMENTS[args.deployment][0]}; "
        f"policy {args.policy}: saturation {saturation:.2f} req/s; "
        f"arrivals at {args.load:.0%} = {rate:.2f} req/s; "
        f"{'summary streamed, no tables' if args.stream else 'with tables'}"
    )
    header = (
        f"{'requests':>9} {'wall s':>8} {'us/req':>7} {'steps':>10} {'groups':>9} "
        f"{'mean batch':>10} {'peak RSS MB':>11}"
    )
    print(header)
    print("-" * len(header))
    for n in args.sizes:
        r = in_subprocess(n, rate, args.policy, args.stream, args.deployment)
        groups = str(r["step_groups"]) if r["step_groups"] >= 0 else "-"
        print(
            f"{r['requests']:>9} {r['wall_s']:>8.2f} {1e6 * r['wall_s'] / n:>7.1f} "
            f"{r['steps']:>10} {groups:>9} {r['mean_batch']:>10.1f} {r['peak_rss_mb']:>11.0f}"
        )


if __name__ == "__main__":
    main()
