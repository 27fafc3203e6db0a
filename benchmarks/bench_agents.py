"""What an agents workload costs the simulator per request, against the same requests without
the task graph and against plain requests.

Three runs of the same calls, each in a fresh process (so peak RSS is its own):

- `agents`: `workload.agents` tasks (the coder type of scenarios/coding_agents.yaml): each
  call arrives after the calls it waits for, its content a view of its context's ids;
- `replayed`: the same calls open loop, at the times they arrived in `agents`, with the same
  content ids (prefix caching sees the same reuse): what the task graph and its closed loop
  add;
- `unique`: the same arrivals and lengths, prefix caching on, every call's content its own (a
  plain workload that caches: each call's blocks are still looked up, registered and freed);
- `plain`: the same arrivals and lengths with no content (every token its own, nothing to
  look up): what prefix caching over long contexts adds on top.

`us/req` is the wall time per simulated request. Llama-3-8B on one H100 (its default step
model), chunked prefill with prefix caching, behind `--instances` instances (least-load).

    python benchmarks/bench_agents.py                     # 1,000 tasks
    python benchmarks/bench_agents.py --tasks 4000 --instances 4
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

CODER: dict[str, Any] = {
    "name": "coder",
    "system_tokens": 4000,
    "task_tokens": {"dist": "lognormal", "median": 400, "sigma": 0.8, "max": 8000},
    "turns": {"dist": "lognormal", "median": 6, "sigma": 0.7, "max": 40},
    "tool_result_tokens": {"dist": "lognormal", "median": 300, "sigma": 1.2, "max": 8000},
    "output_tokens": {"dist": "lognormal", "median": 120, "sigma": 1.0, "max": 4000},
    "tool_time": {"dist": "exponential", "mean_s": 4.0},
    "subagents": {
        "probability": 0.1,
        "count": {"dist": "uniform", "low": 2, "high": 4},
        "turns": {"dist": "lognormal", "median": 4, "sigma": 0.6, "max": 20},
        "task_tokens": {"dist": "lognormal", "median": 300, "sigma": 0.6, "max": 4000},
        "tool_result_tokens": {"dist": "lognormal", "median": 300, "sigma": 1.2, "max": 8000},
        "output_tokens": {"dist": "lognormal", "median": 120, "sigma": 1.0, "max": 4000},
        "tool_time": {"dist": "exponential", "mean_s": 3.0},
        "result_tokens": {"dist": "lognormal", "median": 400, "sigma": 0.7, "max": 4000},
    },
}

CHILD = """
import json, resource, sys, time
import numpy as np
from pathlib import Path
from sim import load_scenario_dict
from sim.compiled import build
from sim.simulate import run_variant
from sim.workload.arrays import Content, RequestArrays
from sim.workload.generate import generate_requests
raw, way = json.loads(sys.argv[1]), sys.argv[2]
resolved = load_scenario_dict(raw).variants[0]
arrays = generate_requests(resolved.spec.workload, np.random.default_rng(raw["seed"]), Path("."))
if way != "agents":  # the same calls, open loop at the times they arrived in the agents run
    first = run_variant(resolved, arrays).requests.sort_values("id")
    order = np.argsort(first["arrival_s"].to_numpy(), kind="stable")
    content = None
    if way == "unique":  # every call's own units, as long as its prompt and answer
        from sim.workload.content import build_content
        none = np.full(len(order), -1, dtype=np.int64)
        content = build_content(none, np.zeros(len(order), dtype=np.int64),
                                arrays.content.tokens[order].copy())
    if way == "replayed":
        c = arrays.content
        pieces = [c.of(int(i)) for i in order]
        offsets = np.zeros(len(order) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in pieces], out=offsets[1:])
        content = Content(np.concatenate(pieces), offsets, c.unit, c.tokens[order].copy())
    arrays = RequestArrays(
        arrival_s=first["arrival_s"].to_numpy()[order],
        prompt_tokens=arrays.prompt_tokens[order].copy(),
        output_tokens=arrays.output_tokens[order].copy(),
        class_index=np.zeros(len(order), dtype=np.int64),
        class_names=("default",),
        content=content,
    )
start = time.perf_counter()
summary = run_variant(resolved, arrays).summary()
wall = time.perf_counter() - start
print(json.dumps({"core": build(), "requests": len(arrays), "wall_s": wall,
                  "hit": summary.get("prefix_cache_hit_rate", 0.0),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def scenario(tasks: int, rate: float, instances: int) -> dict[str, Any]:
    return {
        "name": "bench_agents",
        "seed": 7,
        "workload": {"agents": {"arrival": {"process": "poisson", "rate": rate},
                                "num_tasks": tasks, "types": [CODER]}},
        "model": {"name": "llama-3-8b", "max_model_len": 131072},
        "hardware": "h100-sxm",
        "policy": {"name": "chunked", "max_num_seqs": 256, "max_num_batched_tokens": 8192,
                   "prefix_caching": True},
        "cluster": {"router": "least_outstanding_tokens", "instances": [{"count": instances}]},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=None, help="tasks/s (default 0.5 each)")
    parser.add_argument("--instances", type=int, default=1)
    args = parser.parse_args()
    rate = args.rate if args.rate is not None else 0.5 * args.instances
    raw = scenario(args.tasks, rate, args.instances)
    rows = {}
    for way in ("agents", "replayed", "unique", "plain"):
        out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(raw), way],
                             check=True, capture_output=True, text=True)  # fmt: skip
        rows[way] = json.loads(out.stdout.strip().splitlines()[-1])
    core = rows["agents"]["core"]
    print(f"{core} core; {args.tasks} coder tasks at {rate:g}/s on {args.instances} "
          f"Llama-3-8B H100 instance(s)")  # fmt: skip
    print(f"{'run':<10} {'requests':>9} {'wall s':>8} {'us/req':>8} {'vs agents':>10} "
          f"{'hit %':>6} {'RSS MB':>7}")  # fmt: skip
    base = rows["agents"]["wall_s"] / rows["agents"]["requests"]
    for way, r in rows.items():
        per = r["wall_s"] / r["requests"]
        print(f"{way:<10} {r['requests']:>9} {r['wall_s']:>8.2f} {per * 1e6:>8.0f} "
              f"{base / per:>9.2f}x {100 * r['hit']:>6.1f} {r['rss_mb']:>7.0f}")  # fmt: skip


if __name__ == "__main__":
    main()
