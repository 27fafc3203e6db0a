"""Routes and finish times of every fleet run, hashed: the check that a change to the fleet's
loop or its routers moves no answer.

Each shipped scenario with more than one instance (a cluster, P/D pools, an autoscaled fleet;
`scenarios/**/*.yaml`, its workload cut to `--requests` requests (an agents workload to a tenth
as many tasks) or `--hours` hours where it is longer), and the fleet shape of
`benchmarks/bench_fleet.py` behind every router of `sim.topology.router.ROUTERS` at 4 and 16
instances, open-loop and as closed-loop sessions, run with tables; each variant's hash covers
every request's id, instance, decode instance, first token and finish time (bit for bit) and
its step rows' count. `--write FILE` stores them;
`--check FILE` compares with a stored file and exits 1 when any differs. The package is the
installed one where there is one (`.venv-compiled/bin/python benchmarks/fleet_hashes.py` runs
the compiled core), else this tree's source.

    python benchmarks/fleet_hashes.py --write /tmp/before.json
    python benchmarks/fleet_hashes.py --check /tmp/before.json
    python benchmarks/fleet_hashes.py --check benchmarks/fleet_hashes.json

`benchmarks/fleet_hashes.json` holds the hashes at the shipped unit costs, on Linux x86-64 with
this repository's dependencies (floating point is bit-exact on one platform and library set, not
across them). It was first written by the loop of SimPy processes the fleet's clock replaced
(`sim/core/clock.py`), which gave every one of them on both cores; a change to pricing (a refit
of `sim/costs/unit_costs.yaml`) moves the answers of the scenarios it prices, and rewrites it.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("sim") is None:  # not installed: this tree's source
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def digest(result: Any) -> str:
    """The hash of one variant's routes and finish times."""
    table = result.requests.sort_values("id")
    h = hashlib.sha256()
    for column in ("id", "instance", "decode_instance"):
        h.update(np.ascontiguousarray(table[column].to_numpy(np.int64)).tobytes())
    for column in ("first_token_s", "finish_s"):
        h.update(np.ascontiguousarray(table[column].to_numpy(np.float64)).tobytes())
    h.update(str(len(result.steps)).encode())
    return h.hexdigest()[:16]


def _is_fleet(raw: dict[str, Any]) -> bool:
    if "disaggregation" in raw:
        return True
    cluster = raw.get("cluster") or {}
    groups = cluster.get("instances") or []
    return sum(int(g.get("count", 1)) for g in groups) > 1 or any("autoscale" in g for g in groups)


def _cut(raw: dict[str, Any], requests: int, hours: float) -> dict[str, Any]:
    work = raw.get("workload", {})
    if "num_requests" in work:
        work["num_requests"] = min(int(work["num_requests"]), requests)
    if "duration_s" in work:
        work["duration_s"] = min(float(work["duration_s"]), hours * 3600)
    agents = work.get("agents") or {}
    if agents.get("num_tasks"):  # agents' tasks: about ten calls each
        agents["num_tasks"] = min(int(agents["num_tasks"]), max(1, requests // 10))
    return raw


def shipped(requests: int, hours: float) -> list[tuple[str, Any]]:
    from sim.scenario.load import load_scenario_dict

    out = []
    for path in sorted((ROOT / "scenarios").rglob("*.yaml")):
        try:
            raw = yaml.safe_load(path.read_text())
        except yaml.YAMLError:
            continue
        if not isinstance(raw, dict) or "workload" not in raw:
            continue
        variants = raw.get("variants") or {}
        if not (_is_fleet(raw) or any(isinstance(v, dict) and _is_fleet({**raw, **v})
                                      for v in variants.values())):  # fmt: skip
            continue
        try:
            loaded = load_scenario_dict(_cut(raw, requests, hours), base_dir=path.parent)
        except Exception as exc:  # a public trace absent here
            print(f"skipped {path.relative_to(ROOT)}: {str(exc).splitlines()[0][:100]}")
            continue
        for resolved in loaded.variants:
            out.append((f"{path.relative_to(ROOT)}:{resolved.variant}", resolved))
    return out


def shapes(requests: int) -> list[tuple[str, Any]]:
    from bench_fleet import shape_scenario

    from sim.scenario.load import load_scenario_dict
    from sim.topology.router import ROUTERS

    out = []
    for router in ROUTERS:
        for n in (1, 4, 16) if router == "round_robin" else (4, 16):
            raw = shape_scenario(router, n, 6.0, requests)
            out.append((f"shape:{router}:{n}", load_scenario_dict(raw).variants[0]))
            closed = shape_scenario(router, n, 6.0, requests)
            work = closed["workload"]
            closed["workload"] = {"sessions": {
                "arrival": {"process": "poisson", "rate": 2.0 * n},
                "num_sessions": max(1, requests // 3),
                "turns": {"dist": "fixed", "value": 3},
                "first_prompt": work["prompt_tokens"],
                "user_tokens": {"dist": "uniform", "low": 20, "high": 200},
                "output_tokens": work["output_tokens"],
                "think_time": {"dist": "exponential", "mean_s": 1.0}}}
            try:
                resolved = load_scenario_dict(closed).variants[0]
            except Exception as exc:
                print(f"no sessions shape: {str(exc).splitlines()[0][:120]}")
                continue
            out.append((f"sessions:{router}:{n}", resolved))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path)
    parser.add_argument("--check", type=Path)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--hours", type=float, default=0.5)
    parser.add_argument("--only", default="", help="run only names containing this")
    args = parser.parse_args()
    from sim.compiled import build
    from sim.simulate import run_variant, workload_of

    print(f"{build()} core")

    runs = shipped(args.requests, args.hours) + shapes(args.requests)
    stored = json.loads(args.check.read_text()) if args.check else {}
    hashes: dict[str, str] = {}
    moved = 0
    for name, resolved in runs:
        if args.only and args.only not in name:
            continue
        started = time.perf_counter()
        result = run_variant(resolved, workload_of(resolved))
        hashes[name] = h = digest(result)
        verdict = ""
        if args.check:
            verdict = "same" if stored.get(name) == h else f"MOVED (was {stored.get(name)})"
            moved += verdict != "same"
        print(f"{name:<70}{h}  {time.perf_counter() - started:6.1f} s  {verdict}", flush=True)
    if args.write:
        args.write.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")
    if args.check:
        print(f"{moved} of {len(hashes)} moved")
        sys.exit(1 if moved else 0)


if __name__ == "__main__":
    main()
