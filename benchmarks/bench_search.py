"""Deployment search speed: Llama-3-70B at 20 req/s over GPUs, degrees, layouts and policies.

The question of scenarios/search/llama3_70b_azure.yaml over the space of
scenarios/search/space_70b.yaml (144 configurations: A100-80GB, H100-SXM, H200; tensor
parallelism 1, 2, 4, 8; colocated, P/D 1:1 and 1:2; continuous batching with 128 or 256
sequences, chunked prefill with a 512- or 2048-token budget), under TTFT p99 <= 2 s and TPOT p99
<= 100 ms, 2,000 requests per probe, confirmed on 2 more seeds. Prints what the search did
(configurations set aside, probed on one unit, pruned, fleets searched and confirmed, probes,
simulated requests), its wall time on `--workers` processes and the best configurations.
Without `--trace` the workload is synthetic and Azure-like (lognormal prompts, median 1020
tokens; outputs median 129), so the benchmark runs anywhere.

    python benchmarks/bench_search.py --trace scenarios/traces/azure_llm_2023_conv_6000.csv
    python benchmarks/bench_search.py --exhaustive      # every fleet sized, nothing pruned
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "search" / "llama3_70b_azure.yaml"
SPACE = ROOT / "scenarios" / "search" / "space_70b.yaml"
SYNTHETIC = {
    "arrival": {"process": "poisson", "rate": 20.0},
    "prompt_tokens": {"dist": "lognormal", "median": 1020, "sigma": 0.5, "max": 3072},
    "output_tokens": {"dist": "lognormal", "median": 129, "sigma": 1.0, "max": 1024},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=None, help="azure_llm_2023_conv.csv")
    parser.add_argument("--requests", type=int, default=2000, help="requests per probe")
    parser.add_argument("--workers", type=int, default=None, help="default: every CPU")
    parser.add_argument("--exhaustive", action="store_true", help="prune nothing")
    parser.add_argument("--backend", choices=("local", "ray"), default="local")
    args = parser.parse_args()

    from sim.whatif.search import search

    raw = yaml.safe_load(SCENARIO.read_text())
    raw["workload"]["num_requests"] = args.requests
    if args.trace is not None:
        raw["workload"]["trace"]["path"] = str(args.trace.resolve())
    else:
        raw["workload"] = {"num_requests": args.requests, **SYNTHETIC}
    started = time.perf_counter()
    result = search(
        raw,
        SPACE,
        ["ttft_p99=2", "tpot_p99=0.1"],
        rate=20.0,
        exhaustive=args.exhaustive,
        backend=args.backend,
        workers=args.workers,
    )
    wall = time.perf_counter() - started
    workload = f"trace {args.trace}" if args.trace else "synthetic Azure-like"
    print(f"Llama-3-70B, {workload}, 20 req/s, {args.requests} requests per probe")
    print(result.describe())
    c = result.counts
    print(f"wall time {wall:.1f} s: {c['requests'] / wall:,.0f} simulated requests/s overall, "
          f"{wall / max(c['configurations'], 1):.2f} s per configuration of the space")  # fmt: skip
    columns = ["configuration", "instances", "num_gpus", "fleet_usd_per_hour",
               "usd_per_million_output_tokens", "ttft_p99_s", "tpot_p99_s"]  # fmt: skip
    print(result.ranked[columns].head(8).to_string(index=False, float_format="{:.4g}".format))


if __name__ == "__main__":
    main()
