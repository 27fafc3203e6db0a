"""Trace replay speed: the Azure LLM conversation trace through chunked prefill on one H100.

Llama-2-7B on one H100-SXM (roofline profile), chunked prefill with a 512-token budget, the
19,366-request conversation trace replayed at about 4 req/s (its timestamps scaled). Prints the
wall time of `simulate()` (best of `--repeats` runs in this process: the trace is read each time)
and of `batchsim run` with its default outputs, end to end, on a 100,000-request synthetic
scenario (tables, plots and report written), against that scenario's `simulate()` alone.

    python benchmarks/bench_trace.py --trace ../shared/traces/azure_llm_2023_conv.csv
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

SCENARIO = {
    "name": "azure-conv-chunked",
    "seed": 1,
    "workload": {"trace": {"path": None, "format": "azure", "rate_scale": 1.0}},
    "model": "llama-2-7b",
    "hardware": "h100-sxm",
    "profile": "roofline",
    "policy": {"name": "chunked", "max_num_batched_tokens": 512},
}
LARGE = {
    "name": "bench-100k",
    "seed": 7,
    "workload": {
        "num_requests": 100_000,
        "arrival": {"process": "poisson", "rate": 4.0},
        "prompt_tokens": {"dist": "lognormal", "median": 1020, "sigma": 0.5, "max": 3000},
        "output_tokens": {"dist": "lognormal", "median": 129, "sigma": 0.99, "max": 1000},
    },
    "model": "llama-2-7b",
    "hardware": "a100-80g",
    "profile": "roofline",
    "policy": {"name": "continuous"},
}


def best_of(repeats: int, fn: object) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, required=True, help="azure_llm_2023_conv.csv")
    parser.add_argument("--rate", type=float, default=4.0, help="replay rate, req/s")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-run", action="store_true", help="skip the batchsim run part")
    args = parser.parse_args()
    from sim import load_scenario_dict, simulate
    from sim.compiled import build

    print(f"batchsim {build()} core")

    raw = dict(SCENARIO)
    raw["workload"] = {"trace": {"path": str(args.trace.resolve()), "format": "azure"}}
    native = simulate(load_scenario_dict(raw))["default"]
    span = float(native.requests["arrival_s"].max())
    scale = args.rate / (len(native.requests) / span)
    raw["workload"]["trace"]["rate_scale"] = scale
    scenario = load_scenario_dict(raw)
    wall = best_of(args.repeats, lambda: simulate(scenario))
    print(f"{'case':<44} {'wall s':>8}")
    print("-" * 53)
    label = f"Azure conv trace at {args.rate:g} req/s, chunked 512, H100"
    print(f"{label:<44} {wall:>8.2f}")
    if args.skip_run:
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        path.write_text(yaml.safe_dump(LARGE))
        sim_only = best_of(1, lambda: simulate(load_scenario_dict(LARGE)))
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "sim", "run", str(path), "--out", str(Path(tmp) / "out"), "-q"],
            check=True,
            cwd=tmp,  # not the repository root, whose sources would shadow a compiled install
        )
        run = time.perf_counter() - start
    print(f"{'100k requests: simulate()':<44} {sim_only:>8.2f}")
    print(f"{'100k requests: batchsim run, default outputs':<44} {run:>8.2f}")
    print(f"{'  ratio':<44} {run / sim_only:>8.2f}")


if __name__ == "__main__":
    main()
