"""Published serving measurements against the default roofline: measured vs simulated
throughput per GPU and TPOT for every row of calibration/published/*.csv (columns in its README).

    python benchmarks/bench_published.py          # the defaults
    python benchmarks/bench_published.py --old    # the roofline before measured all-reduce
                                                  # latency and host time (5 us, no host step)

A row runs as a fixed concurrency C: a saturating arrival stream with `max_num_seqs = C`, so C
requests are always in flight, chunked prefill with 8,192 tokens per step (vLLM V1's default
engine), fixed prompt and output lengths; 10 x C requests (at least 50). Only TPOT and
throughput are compared: queueing in front of the engine differs from a closed-loop client's.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.costs import profile as profile_module  # noqa: E402
from sim.simulate import simulate  # noqa: E402


def scenario(row: Any) -> dict[str, Any]:
    conc = int(row.concurrency)
    return {
        "name": "published",
        "seed": 1,
        "workload": {
            "num_requests": max(50, 10 * conc),
            "arrival": {"process": "constant", "rate": 1000.0},
            "prompt_tokens": {"dist": "fixed", "value": int(row.isl)},
            "output_tokens": {"dist": "fixed", "value": int(row.osl)},
        },
        "model": {"name": row.model, "weight_dtype": row.weight_dtype},
        "hardware": {"name": row.gpu, "tensor_parallel": int(row.tensor_parallel)},
        "profile": "roofline",
        "policy": {"name": "chunked", "max_num_seqs": conc, "max_num_batched_tokens": 8192},
    }


def run(rows: pd.DataFrame, old: bool) -> pd.DataFrame:
    if old:  # the constants before this change
        profile_module.HOST_STEP_S = 0.0
        profile_module.ALLREDUCE_NODE = {}
        defaults = profile_module.roofline_profile.__kwdefaults__
        assert defaults is not None
        defaults["host_step_s"] = 0.0
    out = []
    for row in rows.itertuples():
        s = simulate(scenario(row)).variants
        summary = next(iter(s.values())).summary()
        tput = summary["total_tokens_per_s"] / int(row.tensor_parallel)
        tpot = summary["tpot_p50_s"] * 1e3
        out.append({"point": f"{row.gpu} tp{row.tensor_parallel} {row.model} "
                             f"{row.isl}/{row.osl} c{row.concurrency}",
                    "tput_meas": row.throughput_per_gpu_tok_s, "tput_sim": tput,
                    "tpot_meas": row.tpot_ms, "tpot_sim": tpot})  # fmt: skip
    table = pd.DataFrame(out)
    table["tput_err_%"] = (table.tput_sim / table.tput_meas - 1) * 100
    table["tpot_err_%"] = (table.tpot_sim / table.tpot_meas - 1) * 100
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", action="store_true", help="the roofline's old constants")
    parser.add_argument("--data", type=Path, default=ROOT / "calibration/published")
    args = parser.parse_args(argv)
    rows = pd.concat([pd.read_csv(p) for p in sorted(args.data.glob("*.csv"))], ignore_index=True)
    table = run(rows, args.old)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    for col in ("tput_err_%", "tpot_err_%"):
        errors = [abs(v) for v in table[col] if not math.isnan(v)]
        median = f"{statistics.median(errors):.1f} %" if errors else "no published values"
        print(f"median |{col[:-2]}|: {median} over {len(errors)} point(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
