"""How long `batchsim replay` takes on measured runs of 1,000 to 10,000 requests.

The measured run is made here: a synthetic workload (Llama-2-7B on an H100, chunked prefill,
Poisson arrivals at 60 % of the GPU's capacity) is simulated once and its requests are written as
vLLM OTLP request spans, the format a real run's traces come in. The table times reading the
spans, the replay's simulation and the comparison, each on its own.

    python benchmarks/bench_replay.py [--sizes 1000 10000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import sim
from sim.measured import read_measured
from sim.metrics.compare import compare
from sim.whatif.replay import load_replay, replay_raw

SCENARIO = {
    "name": "bench-replay",
    "seed": 3,
    "model": "llama-2-7b",
    "hardware": "h100-sxm",
    "policy": {"name": "chunked", "max_num_seqs": 256, "max_num_batched_tokens": 4096},
    "workload": {
        "arrival": {"process": "poisson", "rate": 6.0},
        "prompt_tokens": {"dist": "lognormal", "median": 1200, "sigma": 0.7, "max": 3500},
        "output_tokens": {"dist": "lognormal", "median": 250, "sigma": 0.6, "max": 500},
    },
}


def write_spans(path: Path, n: int) -> None:
    raw = {**SCENARIO, "workload": {**SCENARIO["workload"], "num_requests": n}}
    table = sim.simulate(raw).requests
    t0 = 1_700_000_000 * 10**9
    with path.open("w") as out:
        for row in table.itertuples(index=False):
            start = t0 + int(row.arrival_s * 1e9)
            attrs = [
                {"key": "gen_ai.latency.time_to_first_token", "value": {"doubleValue": row.ttft_s}},
                {"key": "gen_ai.latency.e2e", "value": {"doubleValue": row.e2e_s}},
                {"key": "gen_ai.usage.prompt_tokens",
                 "value": {"intValue": str(row.num_prompt_tokens)}},
                {"key": "gen_ai.usage.completion_tokens",
                 "value": {"intValue": str(row.num_output_tokens)}},
                {"key": "gen_ai.request.id", "value": {"stringValue": f"r{row.id}"}},
            ]  # fmt: skip
            span = {"name": "llm_request", "startTimeUnixNano": str(start),
                    "endTimeUnixNano": str(start + int(row.e2e_s * 1e9)), "attributes": attrs}
            doc = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
            out.write(json.dumps(doc) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    args = parser.parse_args()
    print(f"{'requests':>9} {'read spans':>11} {'replay':>8} {'compare':>8} {'total':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            path = Path(tmp) / f"spans-{n}.jsonl"
            write_spans(path, n)
            started = time.perf_counter()
            run = read_measured(path)
            read_s = time.perf_counter() - started
            raw, _ = replay_raw({k: v for k, v in SCENARIO.items() if k != "workload"}, path)
            scenario = load_replay(raw, "<bench>", Path.cwd())
            t = time.perf_counter()
            results = sim.simulate(scenario)
            sim_s = time.perf_counter() - t
            t = time.perf_counter()
            comparison = compare(run, next(iter(results.variants.values())).requests)
            cmp_s = time.perf_counter() - t
            total = time.perf_counter() - started
            # the same engine on nanosecond-rounded times: agreement to the rounding
            err = comparison.error("e2e", "p50")
            print(f"{n:>9,} {read_s:>10.2f}s {sim_s:>7.2f}s {cmp_s:>7.2f}s {total:>6.2f}s"
                  f"   (E2E p50 error {err:+.4f} %)")


if __name__ == "__main__":
    main()
