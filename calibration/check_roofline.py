"""Compare roofline step times with real A100 measurements.

Reads the reference step times (`shared/reference-timings/a100_step_times.csv`: one forward step of
Llama-2-7B and Llama-3-8B on an A100-80GB SXM, GPU kernel time) and prices the same steps with the
roofline profile of the matching catalog model and GPU, then prints one row per step and the
median and worst roofline/measured ratio for decode and prefill.

Each row is priced as the simulator would price that step: a decode step of B sequences over L
cached tokens computes B tokens and reads B * (L + 1) context tokens (context after the step, as in
`StepPlan.sum_context_tokens`); a prefill of N tokens with an empty cache computes N tokens, reads N
context tokens and has a prefill attention term of N * N. Rows without a time are skipped.

    python -m calibration.check_roofline [CSV] [--mem-efficiency X] [--flop-efficiency Y]
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from sim.costs.catalog import HARDWARE, MODELS
from sim.costs.cost_model import CostModel
from sim.costs.profile import ROOFLINE_FLOP_EFFICIENCY, ROOFLINE_MEM_EFFICIENCY, roofline_profile

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CSV = REPO_ROOT / ".." / "shared" / "reference-timings" / "a100_step_times.csv"
# CSV device names -> catalog names
GPU_ALIASES = {"a100-80g-sxm": "a100-80g", "a100-40g-sxm": "a100-40g", "h100-80g-sxm": "h100-sxm"}


@dataclass(frozen=True)
class Comparison:
    gpu: str
    model: str
    kind: str
    size: int  # decode: sequences; prefill: prompt tokens
    context: int  # decode: cached tokens per sequence; prefill: 0
    measured_s: float
    roofline_s: float

    @property
    def ratio(self) -> float:
        return self.roofline_s / self.measured_s


def compare(csv_path: Path, mem_efficiency: float, flop_efficiency: float) -> list[Comparison]:
    rows = []
    with csv_path.open(newline="") as f:
        for row in csv.DictReader(f):
            if not row["step_s"]:
                continue
            gpu = GPU_ALIASES.get(row["gpu"], row["gpu"])
            profile = roofline_profile(
                MODELS[row["model"]],
                HARDWARE[gpu],
                mem_efficiency=mem_efficiency,
                flop_efficiency=flop_efficiency,
            )
            cost = CostModel(profile)
            num_seqs, num_tokens = int(row["num_seqs"]), int(row["num_tokens"])
            context = int(row["context_tokens_per_seq"])
            if row["kind"] == "decode":
                seconds = cost.step_time(num_tokens, num_seqs * (context + 1), 0)
                size = num_seqs
            else:
                seconds = cost.step_time(num_tokens, num_tokens, num_tokens * num_tokens)
                size = num_tokens
            rows.append(
                Comparison(
                    gpu, row["model"], row["kind"], size, context, float(row["step_s"]), seconds
                )
            )
    return rows


def summarize(rows: list[Comparison]) -> dict[str, tuple[float, float, float]]:
    """Per kind: (median ratio, lowest ratio, highest ratio)."""
    out = {}
    for kind in sorted({r.kind for r in rows}):
        ratios = [r.ratio for r in rows if r.kind == kind]
        out[kind] = (statistics.median(ratios), min(ratios), max(ratios))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Roofline vs measured A100 step times.")
    parser.add_argument("csv", nargs="?", type=Path, default=DEFAULT_CSV)
    parser.add_argument("--mem-efficiency", type=float, default=ROOFLINE_MEM_EFFICIENCY)
    parser.add_argument("--flop-efficiency", type=float, default=ROOFLINE_FLOP_EFFICIENCY)
    args = parser.parse_args(argv)
    rows = compare(args.csv, args.mem_efficiency, args.flop_efficiency)
    print(f"efficiency: mem {args.mem_efficiency}, flop {args.flop_efficiency}")
    header = ("gpu", "model", "kind", "B/tokens", "context", "measured_ms", "roofline_ms", "ratio")
    print("{:<10} {:<11} {:<8} {:>8} {:>8} {:>12} {:>12} {:>6}".format(*header))
    for r in rows:
        print(
            f"{r.gpu:<10} {r.model:<11} {r.kind:<8} {r.size:>8} {r.context:>8} "
            f"{r.measured_s * 1e3:>12.3f} {r.roofline_s * 1e3:>12.3f} {r.ratio:>6.3f}"
        )
    print()
    for kind, (median, low, high) in summarize(rows).items():
        # "worst" is the ratio farthest from 1 on a log scale, whichever side it is on
        worst = max((low, high), key=lambda x: abs(math.log(x)))
        print(
            f"{kind:<8} n={sum(r.kind == kind for r in rows):<3} median {median:.3f}  "
            f"range {low:.3f}..{high:.3f}  worst {worst:.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
