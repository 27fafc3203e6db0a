"""Published serving measurements against the default step model: measured vs simulated
throughput, TPOT and TTFT for every row of calibration/published/*.csv (columns in its README).

    python benchmarks/bench_published.py          # as a user writes each scenario (no profile)
    python benchmarks/bench_published.py --profile roofline   # the datasheet roofline
    python benchmarks/bench_published.py --old    # the roofline before measured all-reduce
                                                  # latency and host time (5 us, no host step)
    python benchmarks/bench_published.py --assume-kv fp8   # KV dtype where a row gives none
    python benchmarks/bench_published.py --profile events  # the events profile (fitted unit
                                                           # costs, the row's engine)

A row is a fixed-concurrency benchmark: `concurrency` closed-loop clients (`workload.clients`,
as `vllm bench serve --max-concurrency`, AIPerf and GuideLLM run them), each sending its next
request as soon as the previous one ended; `max_num_seqs` is the concurrency (the published
runs set it so, or leave the engine's limit above it), chunked prefill with
`max_num_batched_tokens` tokens per step (8,192 when the row gives none: vLLM V1's default).
Prompt and output lengths are fixed at `isl`/`osl`, or uniform integers in `isl_min..isl`
(`osl_min..osl`) where the benchmark drew them so (InferenceX: random range ratio 0.8). The
run sends `num_requests` requests (10 x concurrency, at least 50, when not given).

Throughput is compared as the row publishes it: total (input + output) tokens per second per
GPU, or else the instance's output tokens per second. TPOT and TTFT are compared with the
simulated median or mean, after the row's `statistic`. Errors are simulated / measured - 1;
the medians of their absolute values are printed overall and per engine (vLLM rows check the
defaults; the TensorRT-LLM and NIM rows are other engines, shown apart).
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
from sim.costs.catalog import MODELS  # noqa: E402
from sim.simulate import simulate  # noqa: E402

DEFAULT_BATCHED_TOKENS = 8192
PROFILE = "default"  # --profile: the step-cost profile every row is simulated with
# a row's engine as the events profile names it (NIM serves Llama through TensorRT-LLM)
EVENTS_ENGINE = {"vllm": "vllm", "sglang": "sglang", "trt-llm": "trt-llm", "nim": "trt-llm"}
METRICS = ("tput", "tpot", "ttft")


def _given(value: Any) -> bool:
    """True for a number the CSV gives (pandas reads an empty cell as NaN)."""
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _lengths(high: Any, low: Any) -> dict[str, Any]:
    if _given(low) and int(low) < int(high):
        return {"dist": "uniform", "low": int(low), "high": int(high)}
    return {"dist": "fixed", "value": int(high)}


def scenario(row: Any, step_s: float = 0.0) -> dict[str, Any]:
    """The scenario that reproduces one published point (a pandas row), with `step_s` more
    engine time per step than the roofline's (`engine.pricing.cpu_overhead.per_step_s`)."""
    conc = int(row.concurrency)
    requests = int(row.num_requests) if _given(row.num_requests) else max(50, 10 * conc)
    batched = (
        int(row.max_num_batched_tokens)
        if _given(row.max_num_batched_tokens)
        else DEFAULT_BATCHED_TOKENS
    )
    model: dict[str, Any] = {"name": row.model, "weight_dtype": row.weight_dtype}
    if isinstance(row.kv_dtype, str):
        model["kv_dtype"] = row.kv_dtype
    if _given(row.max_model_len):  # the served context (the catalog's is the model's first)
        model["max_model_len"] = int(row.max_model_len)
    raw: dict[str, Any] = {
        "name": "published",
        "seed": 1,
        "workload": {
            "num_requests": requests,
            "clients": {
                "num_clients": conc,
                "prompt_tokens": _lengths(row.isl, row.isl_min),
                "output_tokens": _lengths(row.osl, row.osl_min),
            },
        },
        "model": model,
        "hardware": hardware(row),
        "profile": PROFILE,
        "policy": {"name": "chunked", "max_num_seqs": conc, "max_num_batched_tokens": batched},
        "engine": {"pricing": {"cpu_overhead": {"per_step_s": step_s}}}
        | ({"name": EVENTS_ENGINE.get(str(row.engine), "vllm")} if PROFILE == "events" else {}),
    }
    if PROFILE == "default":  # as a user writes it: the engine's name, no profile, no host term
        del raw["profile"]
        raw["engine"] = {"name": EVENTS_ENGINE.get(str(row.engine), "vllm")}
    return raw


def _degree(value: Any) -> int:
    return int(value) if _given(value) else 1


def hardware(row: Any) -> dict[str, Any]:
    """The row's GPUs: tensor parallel, and data-parallel attention ranks with expert
    parallelism over all of them where the row says so. A row's `tensor_parallel` counts every
    GPU of the instance where `num_gpus` says so (SGLang's `--tp` with `--dp`): each attention
    rank then has `num_gpus / data_parallel` of them."""
    dp, ep = _degree(row.data_parallel), _degree(row.expert_parallel)
    out: dict[str, Any] = {"name": row.gpu, "tensor_parallel": num_gpus(row) // dp}
    if dp > 1:
        out["data_parallel"] = dp
    if ep > 1:
        out["expert_parallel"] = ep
    return out


def num_gpus(row: Any) -> int:
    if _given(row.num_gpus):
        return int(row.num_gpus)
    return int(row.tensor_parallel) * _degree(row.data_parallel)


def use_old_constants() -> None:
    """The roofline's constants before measured all-reduce latency and host time per step."""
    profile_module.HOST_STEP_S = 0.0
    profile_module.ALLREDUCE_NODE = {}
    defaults = profile_module.roofline_profile.__kwdefaults__
    assert defaults is not None
    defaults["host_step_s"] = 0.0


def simulated(row: Any, step_s: float = 0.0) -> dict[str, float]:
    return next(iter(simulate(scenario(row, step_s)).variants.values())).summary()


# one deployment: the rows that differ only in concurrency
DEPLOYMENT = ["source_id", "engine", "engine_version", "gpu", "model", "weight_dtype",
              "tensor_parallel", "data_parallel", "expert_parallel", "isl", "osl"]  # fmt: skip


def lowest_point_steps(rows: pd.DataFrame) -> dict[int, float]:
    """For each deployment measured at two or more concurrencies: the engine time per step
    beyond the roofline that makes its lowest-concurrency TPOT match (two fixed-point steps),
    by row index, for the rows above that concurrency only (the lowest one is the fit, not a
    prediction). At low concurrency a decode step is almost all fixed cost, so the difference
    is the deployment's per-step time the roofline does not see (kernel floors, host work)."""
    scales: dict[int, float] = {}
    keyed = rows.assign(**{c: rows[c].fillna(-1) for c in DEPLOYMENT if rows[c].isna().any()})
    for _, group in keyed.groupby(DEPLOYMENT, sort=False):
        if group["concurrency"].nunique() < 2:
            continue
        first = rows.loc[group["concurrency"].idxmin()]
        stat = "mean" if first.statistic == "mean" else "p50"
        step = 0.0
        for _ in range(2):
            tpot = simulated(first, step)[f"tpot_{stat}_s"]
            step = min(10.0, max(0.0, step + float(first.tpot_ms) / 1e3 - tpot))
        for index in group.index:
            if rows.loc[index, "concurrency"] > first.concurrency:
                scales[index] = step
    return scales


def compare(row: Any, step_s: float = 0.0) -> dict[str, Any]:
    """Measured and simulated throughput, TPOT and TTFT of one row."""
    summary = simulated(row, step_s)
    gpus = num_gpus(row)
    tp = gpus // _degree(row.data_parallel)
    stat = "mean" if row.statistic == "mean" else "p50"
    if _given(row.throughput_per_gpu_tok_s):
        kind, tput_meas = "total/gpu", float(row.throughput_per_gpu_tok_s)
        tput_sim = summary["total_tokens_per_s"] / gpus
    else:  # the instance's output tokens per second (NaN where the row publishes neither)
        kind, tput_meas = "output", float(row.output_throughput_tok_s)
        tput_sim = summary["output_tokens_per_s"]
    lengths = f"{int(row.isl)}/{int(row.osl)}"
    layout = f"tp{tp}" + (f" dp{_degree(row.data_parallel)}" if gpus > tp else "")
    layout += f" ep{_degree(row.expert_parallel)}" if _degree(row.expert_parallel) > 1 else ""
    return {
        "engine": row.engine,
        "model": row.model,
        "gpu": row.gpu,
        "concurrency": int(row.concurrency),
        "point": f"{row.engine} {row.gpu} {layout} {row.model} {lengths} c{int(row.concurrency)}",
        "tput": kind,
        "tput_meas": tput_meas,
        "tput_sim": tput_sim,
        "tpot_meas": float(row.tpot_ms),
        "tpot_sim": summary[f"tpot_{stat}_s"] * 1e3,
        "ttft_meas": float(row.ttft_ms),
        "ttft_sim": summary[f"ttft_{stat}_s"] * 1e3,
    }


def run(
    rows: pd.DataFrame, old: bool, assume_kv: str | None = None, calibrated: bool = False
) -> pd.DataFrame:
    """Every row compared; `calibrated`: only the rows above their deployment's lowest
    concurrency, each at the GPU time scale fitted on that lowest point."""
    if old:
        use_old_constants()
    if assume_kv is not None:  # a row that does not publish its KV dtype gets this one
        rows = rows.assign(kv_dtype=rows["kv_dtype"].where(rows["kv_dtype"].notna(), assume_kv))
    if calibrated:
        scales = lowest_point_steps(rows)
        picked = rows.loc[list(scales)]
        table = pd.DataFrame([compare(row, scales[row.Index]) for row in picked.itertuples()])
        table.insert(1, "step_ms", [scales[i] * 1e3 for i in picked.index])
    else:
        table = pd.DataFrame([compare(row) for row in rows.itertuples()])
    for metric in METRICS:
        table[f"{metric}_err_%"] = (table[f"{metric}_sim"] / table[f"{metric}_meas"] - 1) * 100
    return table


def median_errors(table: pd.DataFrame) -> list[str]:
    """One line per group (all rows, then each engine): median |error| of each metric."""
    groups = [("all", table)] + [(str(e), g) for e, g in table.groupby("engine", sort=True)]
    lines = []
    for name, group in groups:
        parts = []
        for metric in METRICS:
            errors = [abs(v) for v in group[f"{metric}_err_%"] if not math.isnan(v)]
            value = f"{statistics.median(errors):5.1f} %" if errors else "    -  "
            parts.append(f"{metric} {value} (n={len(errors)})")
        lines.append(f"median |error| {name:8s}: " + ", ".join(parts))
    return lines


def class_rows(table: pd.DataFrame) -> list[str]:
    """`class_errors` as the Markdown rows of docs/moe.md's summary tables."""
    moe = table["model"].map(lambda name: MODELS[name].is_moe)
    rows = []
    for label, group in (("mixture of experts", table[moe]), ("dense", table[~moe])):
        cells = []
        for metric in ("tput", "tpot"):
            errors = [abs(v) for v in group[f"{metric}_err_%"] if not math.isnan(v)]
            cells.append(f"median {statistics.median(errors):.1f} %, worst {max(errors):.1f} % "
                         f"({len(errors)} points)")
        rows.append(f"| {label} | {cells[0]} | {cells[1]} |")
    return rows


def class_errors(table: pd.DataFrame) -> list[str]:
    """Median and worst |error| of throughput per GPU and TPOT, for mixture-of-experts and
    dense models apart."""
    moe = table["model"].map(lambda name: MODELS[name].is_moe)
    lines = []
    for label, group in (("mixture of experts", table[moe]), ("dense", table[~moe])):
        parts = []
        for metric in ("tput", "tpot"):
            errors = [abs(v) for v in group[f"{metric}_err_%"] if not math.isnan(v)]
            if errors:
                parts.append(f"{metric} median {statistics.median(errors):.1f} %, worst "
                             f"{max(errors):.1f} % (n={len(errors)})")
        lines.append(f"{label}: " + "; ".join(parts))
    return lines


def markdown(table: pd.DataFrame) -> str:
    """The per-point table as Markdown: measured, simulated and error of each metric."""
    head = ("| point | throughput measured | simulated | error | TPOT ms measured | simulated "
            "| error | TTFT ms measured | simulated | error |")
    lines = [head, "|" + "---|" * 10]
    for row in table.to_dict("records"):
        cells = [str(row["point"])]
        for metric in METRICS:
            meas, sim, err = row[f"{metric}_meas"], row[f"{metric}_sim"], row[f"{metric}_err_%"]
            if math.isnan(meas):
                cells += ["-", f"{sim:.1f}", "-"]
            else:
                cells += [f"{meas:.1f}", f"{sim:.1f}", f"{err:+.0f} %"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def read_rows(folder: Path) -> pd.DataFrame:
    frames = [pd.read_csv(p) for p in sorted(folder.glob("*.csv"))]
    rows = pd.concat(frames, ignore_index=True)
    # columns a file may leave out (older files predate them)
    for column in ("kv_dtype", "isl_min", "osl_min", "num_requests", "max_num_batched_tokens",
                   "max_model_len", "throughput_per_gpu_tok_s", "output_throughput_tok_s",
                   "statistic", "data_parallel", "expert_parallel", "num_gpus"):
        if column not in rows:
            rows[column] = float("nan")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", action="store_true", help="the roofline's old constants")
    parser.add_argument("--profile", choices=("default", "roofline", "events"),
                        default="default",
                        help="the step-cost profile: default, none named (a scenario as a user "
                        "writes it: counted events, fitted unit costs, the engine's own terms); "
                        "roofline; events (named, with the roofline's host term)")
    parser.add_argument("--data", type=Path, default=ROOT / "calibration/published")
    parser.add_argument("--calibrated", action="store_true",
                        help="fit each deployment's engine time per step on its lowest-"
                        "concurrency point and predict its other points")
    parser.add_argument("--markdown", type=Path, default=None,
                        help="also write the per-point table as Markdown to this file")
    parser.add_argument("--assume-kv", choices=("bf16", "fp16", "fp8"), default=None,
                        help="KV dtype for rows that publish none (default: the catalog's bf16)")
    args = parser.parse_args(argv)
    global PROFILE
    PROFILE = args.profile
    table = run(read_rows(args.data), args.old, args.assume_kv, args.calibrated)
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        shown = table.drop(columns=["engine", "model", "gpu", "concurrency"])
        print(shown.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    for line in median_errors(table):
        print(line)
    for line in class_errors(table):
        print(line)
    if args.markdown is not None:
        args.markdown.write_text(markdown(table))
        print(f"wrote {args.markdown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
