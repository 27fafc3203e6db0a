"""What a table profile costs in simulator speed: the same run priced by a linear (analytic) profile
and by table profiles, and with the pricing knobs on.

The workload is that of `bench_sim.py` (Azure-conversation-like lengths, continuous batching at
80 % of each profile's own saturation, measured first with every request arriving at once),
Llama-2-7B on one H100 SXM: `roofline` (extended form), the imported Vidur table profile (linear
layers by token count, decode and prefill attention grids), and a table profile without
attention grids (linear table, attention from the coefficients). Each run is a fresh process;
the best of `--repeats` interleaved runs counts, since the machine may be shared. The last
column compares wall time per step group (the profiles' different speeds give slightly different
schedules) with the linear profile's.

    python benchmarks/bench_profiles.py [--sizes 10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import bench_sim

ROOT = Path(__file__).resolve().parents[1]
VIDUR = ROOT / "calibration" / "profiles" / "imported" / "vidur"
# bench_sim.py's workload and model, on an H100 (the GPU the Vidur table profile measured)
BASE: dict[str, Any] = {**copy.deepcopy(bench_sim.BASE), "hardware": "h100-sxm"}
KNOBS = {
    "cuda_graph_capture_sizes": "vllm",
    "pad_tokens_to": 8,
    "cpu_overhead": {"per_step_s": 0.002, "per_seq_s": 1e-5, "overlap": True},
}
CASES: dict[str, dict[str, Any]] = {
    "roofline (linear)": {},
    "vidur table": {"profile": str(VIDUR / "llama-2-7b_h100-sxm.yaml")},
    "table, no attention grids": {
        "profile": str(VIDUR / "llama-2-7b_a100-80g.yaml"),
        "hardware": "a100-80g",
    },
    "roofline + knobs": {"engine": {"pricing": KNOBS}},
    "vidur table + knobs": {
        "profile": str(VIDUR / "llama-2-7b_h100-sxm.yaml"),
        "engine": {"pricing": KNOBS},
    },
}


def one_run(case: str, num_requests: int, rate: float) -> dict[str, Any]:
    from sim import load_scenario_dict, simulate

    raw = json.loads(json.dumps(BASE)) | CASES[case]
    raw["workload"]["num_requests"] = num_requests
    raw["workload"]["arrival"]["rate"] = rate
    scenario = load_scenario_dict(raw)
    start = time.perf_counter()
    results = simulate(scenario)
    summary = results["default"].summary()
    wall = time.perf_counter() - start
    return {
        "wall_s": wall,
        "steps": int(summary["num_steps"]),
        "groups": len(results["default"].steps),
        "throughput_rps": summary["requests_per_s"],
    }


def in_subprocess(case: str, num_requests: int, rate: float) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", case, str(num_requests), str(rate)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        case, n, rate = args.child
        print(json.dumps(one_run(case, int(n), float(rate))))
        return
    header = (
        f"{'case':<28} {'requests':>8} {'wall s':>7} {'groups':>8} {'us/group':>9} {'vs linear':>9}"
    )
    print(header)
    print("-" * len(header))
    for n in args.sizes:
        rates = {c: args.load * in_subprocess(c, 5_000, 1e6)["throughput_rps"] for c in CASES}
        runs: dict[str, list[dict[str, Any]]] = {c: [] for c in CASES}
        for _ in range(args.repeats):  # interleaved, so a busy spell hits every case alike
            for case in CASES:
                runs[case].append(in_subprocess(case, n, rates[case]))
        base = None
        for case in CASES:
            best = min(runs[case], key=lambda r: r["wall_s"])
            per_group = 1e6 * best["wall_s"] / best["groups"]
            base = base or per_group
            print(
                f"{case:<28} {n:>8} {best['wall_s']:>7.2f} {best['groups']:>8} "
                f"{per_group:>9.1f} {per_group / base:>8.2f}x"
            )


if __name__ == "__main__":
    main()
