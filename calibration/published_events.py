"""Published closed-loop points as linear functions of the step model's unit costs.

A row of `calibration/training/inferencex_train.csv` is one closed-loop benchmark point: C
clients, each sending its next request the moment the previous one finished, 10·C requests
(columns in calibration/training/README.md). `scenario(row)` is the batchsim scenario that
reproduces it.

In a closed loop with no think time every arrival falls on a step boundary (the finish that
frees its client), so which steps run, and with which tokens, contexts and sequences, does not
depend on how long the steps take: the schedule is fixed by token counts, seats and KV blocks.
One simulation at any unit costs therefore gives the counted events of every step, and the run's
duration, each request's TTFT and TPOT are sums of step times, each linear in the unit costs
(`sim.costs.step_events.basis`). `point_rows` turns one simulation into three linear rows: the
duration, mean TPOT and mean TTFT as `{unit cost key: seconds per unit}`; evaluating a row at
other unit costs gives exactly what simulating at them gives (tests/calibration/
test_published_events.py checks it).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from sim.costs.catalog import HardwareSpec, ModelSpec
from sim.costs.expert_terms import ExpertStepCost
from sim.costs.step_events import Basis, basis, evaluate, events_profile, value_of
from sim.scenario.engine_loop import async_by_default
from sim.simulate import simulate
from sim.whatif.calibrate_points import group_seconds, metric_weights

MODELS = {"llama70b": "llama-3.3-70b", "gptoss": "gpt-oss-120b", "dsr1": "deepseek-v3"}
GPUS = {
    "h100": "h100-sxm",
    "h200": "h200",
    "b200": "b200",
    "gb200": "gb200",
    "mi300x": "mi300x",
    "mi325x": "mi325x",
    "mi355x": "mi355x",
}
ENGINES = {"vllm": "vllm", "sglang": "sglang", "trt": "trt-llm", "atom": "atom"}
AMD = {"mi300x", "mi325x", "mi355x"}
# one configuration: the rows that differ only in concurrency
CONFIG = ["model_key", "precision", "gpu", "framework", "tp", "ep", "dp_attention", "isl", "osl"]


def expressible(row: Any) -> str | None:
    """Why batchsim cannot reproduce the row as one instance, or None when it can."""
    if bool(row.disagg):
        return "prefill/decode-disaggregated (multi-node pools)"
    if str(row.spec_decoding) != "none":
        return "speculative decoding (MTP): judged by calibration.published_pd, not fitted"
    if row.framework not in ENGINES:
        return f"engine {row.framework}"
    if row.model_key not in MODELS or row.gpu not in GPUS:
        return "model or GPU outside the catalog"
    return None


# DeepSeek-R1's multi-token prediction as the rows' deployments run it. Draft tokens per step,
# from their launch scripts: TensorRT-LLM 3 (InferenceX benchmarks/dsr1_*_trt_mtp.sh: 1 with
# data-parallel attention; .github/configs/nvidia-master.yaml DECODE_MTP_SIZE 3 for Dynamo-TRT,
# 1 only at its two highest-concurrency layouts), SGLang 1 on MI355X (billishyahao/sglang_disagg
# sglang_disagg_server.sh `--speculative-num-steps 1`), SGLang alone 2 on B200 and 3 on MI355X
# (InferenceX benchmarks/dsr1_fp8_b200_mtp.sh, dsr1_fp8_mi355x_mtp.sh), 3 for any other engine.
# Acceptance by position, each given the ones before: the rows publish no acceptance, but their
# streamed chunks count it. A chunk carries the tokens of `stream_interval` steps, so a row's
# mean ITL over its mean TPOT is the tokens per chunk; over the same deployment's chunk without
# MTP (Dynamo-TRT 19.8 tokens, SGLang on MI355X 1.0) it is the tokens each step emits. The
# training rows give 1.76 per step with one draft (TensorRT-LLM, NVFP4 experts: 6 points),
# 1.93 with one draft (SGLang, FP8: 29 points) and 2.32 with three (TensorRT-LLM: 24 points,
# 2.31 at 1k prompts and 2.44 at 8k): first-position rates 0.76 and 0.93, and 0.50 for each
# later position (1 + 0.76 + 0.76 * 0.5 + 0.76 * 0.5^2 = 2.33). A count, not a timing fit.
MTP_FIRST_RATE = {"trt-llm": 0.76, "sglang": 0.93}
MTP_LATER_RATE = 0.5


def mtp_tokens(framework: str, gpu: str, dp_attention: bool) -> int:
    """Draft tokens per step the row's deployment ran MTP with (`MTP_FIRST_RATE`'s note)."""
    if framework == "trt":
        return 1 if dp_attention else 3
    if framework == "sglang-disagg":
        return 1
    if framework == "sglang" and gpu in ("b200", "gb200"):
        return 2
    return 3


def mtp_speculation(engine: str, tokens: int) -> dict[str, Any]:
    """`policy.speculative` of an MTP row: `tokens` drafts at the stated rates by position."""
    first = MTP_FIRST_RATE.get(engine, MTP_FIRST_RATE["trt-llm"])
    rates = [first] + [MTP_LATER_RATE] * (tokens - 1)
    return {"method": "mtp", "num_speculative_tokens": tokens, "acceptance": {"rate": rates}}


def cold_started(row: Any) -> bool:
    """Whether the point ran without warm-up: its p99 TTFT is at least 20 s and 10x its median
    (the first wave of requests waited for the engine's first-use compilation; the rest did not).
    Such a point carries the cold start in its duration and mean TTFT, never in its TPOT."""
    p99, median = float(row.ttft_p99_s), float(row.ttft_median_s)
    if not math.isfinite(p99) or p99 < 20.0:
        return False
    return not math.isfinite(median) or p99 >= 10 * median


def weight_dtype(row: Any) -> str:
    """fp8, or the fp4 format the row's checkpoint uses (MXFP4 for gpt-oss and on AMD)."""
    if row.precision == "fp8":
        return "fp8"
    return "mxfp4" if row.model_key == "gptoss" or row.gpu in AMD else "nvfp4"


def model_fields(row: Any) -> dict[str, Any]:
    """The scenario's `model:`, its KV cache in the dtype the deployment ran (`kv_dtype`).

    The FP4 DeepSeek-R1 checkpoints (nvidia/DeepSeek-R1-FP4, amd/DeepSeek-R1-MXFP4) quantize
    the routed experts to FP4 and keep attention, dense layers and shared experts in FP8; the
    FP4 Llama checkpoint quantizes every linear layer; gpt-oss ships MXFP4 experts and bf16
    elsewhere (the catalog's)."""
    out: dict[str, Any] = {"name": MODELS[row.model_key]}
    if row.model_key == "dsr1" and row.precision == "fp4":
        out |= {"weight_dtype": "fp8", "expert_weight_dtype": weight_dtype(row)}
    elif row.model_key != "gptoss":
        out["weight_dtype"] = weight_dtype(row)
    out["kv_dtype"] = kv_dtype(row)
    return out


def kv_dtype(row: Any) -> str:
    """The KV cache's dtype as the row's launch script set it (InferenceX benchmarks/*.sh of the
    rows' dates): fp8 for Llama (`--kv-cache-dtype fp8`, the README), for TensorRT-LLM
    (`kv_cache_config: dtype: fp8`) but gpt-oss on Hopper (`auto`), for ATOM (`--kv_cache_dtype
    fp8`), for SGLang's DeepSeek-R1 on B200 and in FP4 on MI355X (`--kv-cache-dtype fp8_e4m3`),
    and for the disaggregated pools (Dynamo's and InferenceX's SGLang recipes,
    billishyahao/sglang_disagg); else the checkpoint's bf16 (SGLang's DeepSeek-R1 on H200,
    MI300X and in FP8 on MI355X; vLLM's gpt-oss: its B200 script set fp8 only from 2026-01)."""
    framework, gpu = str(row.framework), str(row.gpu)
    if row.model_key == "llama70b" or framework == "atom" or bool(getattr(row, "disagg", False)):
        return "fp8"
    if framework == "trt":
        return "bf16" if row.model_key == "gptoss" and gpu in ("h100", "h200") else "fp8"
    if framework == "sglang" and row.model_key == "dsr1":
        fp8 = gpu in ("b200", "gb200") or (gpu == "mi355x" and row.precision == "fp4")
        return "fp8" if fp8 else "bf16"
    return "bf16"


# InferenceX's SGLang and TensorRT-LLM launch scripts pass their own memory share
# (`--mem-fraction-static` 0.8 in its benchmarks/dsr1_fp4_mi355x_docker.sh; `free_gpu_memory_
# fraction` 0.8 in dsr1_*_trt_mtp.sh, DECODE_GPU_MEM_FRACTION 0.6-0.9 for Dynamo; the rows do not
# carry it): the catalog's memory stands in for it, stated, instead of the engine's computed
# default (sim/scenario/engine_limits.py), which a deployment that sets its own never runs with
STATED_MEMORY = {"gpu_memory_utilization": 0.9, "activation_reserve_bytes": 2**30}


def memory_fields(framework: str) -> dict[str, Any]:
    """The KV memory a row's deployment is taken to run with (`STATED_MEMORY` for SGLang and
    TensorRT-LLM)."""
    stated = "sglang" in framework or framework in ("trt", "dynamo-trt")
    return dict(STATED_MEMORY) if stated else {}


def hardware_fields(row: Any) -> dict[str, Any]:
    """`tp` GPUs: one tensor-parallel rank, or with DP attention `tp` ranks of one GPU, with
    expert parallelism over all of them where `ep` says so."""
    gpus, ep = int(row.tp), int(row.ep)
    out: dict[str, Any] = {"name": GPUS[row.gpu], "tensor_parallel": gpus}
    out |= memory_fields(str(row.framework))
    if bool(row.dp_attention):
        out |= {"tensor_parallel": 1, "data_parallel": gpus}
    if ep > 1:
        out["expert_parallel"] = ep
    return out


def policy_fields(row: Any, data_parallel: int = 1) -> dict[str, Any]:
    """The engine's scheduling: SGLang runs prompts as prefill batches of their own (its default
    `--chunked-prefill-size 8192`, no mixed chunks), the others mix prompt chunks into decode
    steps under an 8,192-token budget (vLLM V1's default; TensorRT-LLM and ATOM batch in flight
    the same way). With `data_parallel` attention ranks each rank chunks its own prompts
    (sim/scenario/engine_limits.py): TensorRT-LLM's ranks have 8,192 tokens each, SGLang's
    share its 16,384."""
    conc = int(row.conc)
    if row.framework in ("sglang", "dynamo-sglang", "sglang-disagg"):
        if data_parallel > 1:
            return {"name": "chunked", "max_num_seqs": conc, "max_num_batched_tokens": 16384,
                    "long_prefill_token_threshold": 16384 // data_parallel}  # fmt: skip
        return {
            "name": "continuous",
            "max_num_seqs": conc,
            "max_num_batched_tokens": 16384,
            "mode": "prefill_first",
        }
    if data_parallel > 1:
        return {"name": "chunked", "max_num_seqs": conc,
                "max_num_batched_tokens": 8192 * data_parallel,
                "long_prefill_token_threshold": 8192}  # fmt: skip
    return {"name": "chunked", "max_num_seqs": conc, "max_num_batched_tokens": 8192}


def _lengths(nominal: int, ratio: float) -> dict[str, Any]:
    low = int(nominal * ratio)
    if low >= nominal:
        return {"dist": "fixed", "value": nominal}
    return {"dist": "uniform", "low": low, "high": nominal}


def scenario(row: Any, profile: Any = "events", cold_start_s: float = 0.0) -> dict[str, Any]:
    """The scenario that reproduces one published point (a row of the training file), with
    `cold_start_s` when the point ran cold (`cold_started`)."""
    conc, ratio = int(row.conc), float(row.random_range_ratio)
    name = ENGINES[row.framework]
    # the engine's loop at the row's release (its image tag: vllm/vllm-openai:v0.13.0), stated,
    # so that the fit's schedule (an inline profile) is the judge's (sim/scenario/engine_loop.py)
    version = engine_version(row)
    engine: dict[str, Any] = {"name": name, "async_scheduling": async_by_default(name, version)}
    if version is not None:
        engine["version"] = version
    if cold_start_s and cold_started(row):
        engine["cold_start_s"] = cold_start_s
    return {
        "name": "published",
        "seed": 1,
        "workload": {
            "num_requests": 10 * conc,
            "clients": {
                "num_clients": conc,
                "prompt_tokens": _lengths(int(row.isl), ratio),
                "output_tokens": _lengths(int(row.osl), ratio),
            },
        },
        "model": model_fields(row),
        "hardware": hardware_fields(row),
        "profile": profile,
        "policy": policy_fields(row, hardware_fields(row).get("data_parallel", 1)),
        "engine": engine,
    }


def engine_version(row: Any) -> str | None:
    """The engine's release from the row's image (`...:v0.13.0` -> `0.13.0`), or None."""
    tag = str(getattr(row, "framework_version", "") or "").rpartition(":")[2]
    found = re.match(r"v?(\d+(?:\.\d+)+)", tag)
    return found.group(1) if found else None


def overlapped(row: Any) -> bool:
    """Whether the row's engine schedules asynchronously at its release: its host time per
    step then hides behind the GPU's (the events profile's `overlapped`)."""
    return async_by_default(ENGINES[row.framework], engine_version(row))


def specs(row: Any) -> tuple[ModelSpec, HardwareSpec, str]:
    model = ModelSpec.model_validate(model_fields(row))
    hw = HardwareSpec.model_validate(hardware_fields(row))
    return model, hw, ENGINES[row.framework]


@dataclass
class PointCounts:
    """One point's counted events: per profile coefficient, its count summed over the run's
    steps (`duration`), over each request's decode steps averaged as mean TPOT averages them
    (`tpot_mean`), and over each request's steps until its first token (`ttft_mean`). These do
    not depend on the unit costs; `rows` prices them with a basis."""

    duration: dict[str, float]
    tpot_mean: dict[str, float]
    ttft_mean: dict[str, float]
    total_tokens: int  # prompt + output tokens of every request
    gpus: int
    simulated: dict[str, float]  # the baseline run's summary (its duration, TPOT, TTFT)
    first_wave: float = 0.0  # share of the requests sent at the start (a cold start holds them)


@dataclass
class PointRows:
    """One point's linear rows: `{unit cost key: seconds per unit}` of each statistic."""

    duration: dict[str, float]
    tpot_mean: dict[str, float]
    ttft_mean: dict[str, float]
    total_tokens: int
    gpus: int


def _group_features(
    steps: pd.DataFrame,
    terms: Basis,
    model: ModelSpec,
    hw: HardwareSpec,
    engine: str,
    hidden: bool = False,
    costs: dict[str, float] | None = None,
) -> dict[str, np.ndarray]:
    """Per step group: each coefficient's count (seconds per unit of that coefficient), with
    the prompt-attention count backed out of the recorded durations (simulated at `costs`, by
    default every unit cost at its prior)."""
    n = steps["num_steps"].to_numpy(float)
    tokens = steps["num_tokens"].to_numpy(float)
    seqs = steps["num_seqs"].to_numpy(int)
    growth = steps["context_growth_per_step"].to_numpy(float)
    context = steps["sum_context_tokens"].to_numpy(float) * n + growth * n * (n - 1) / 2
    recorded = group_seconds(steps)
    profile = events_profile(model, hw, engine, costs=costs or {}, overlapped=hidden)
    c = profile.coefficients
    u = np.ones_like(n)
    features: dict[str, np.ndarray] = {"t_mem_s": n}
    expert_s = np.zeros_like(n)
    if profile.experts is not None:
        cost = ExpertStepCost(profile.experts)
        u = np.array([cost.rank_factor(int(s)) for s in seqs])
        read = np.array([cost.routing.experts_read(int(t)) for t in tokens])
        k_share = profile.experts.experts_per_token * cost.routing.compute_share
        features |= {
            "t_expert_read_s": n * read,
            "t_expert_pair_s": n * tokens * k_share,
            "t_exchange_s_per_token": n * tokens,
            "t_exchange_s": n,
        }
        expert_s = np.array([cost.seconds(int(t)) for t in tokens]) * n
    ridge = c.ridge_tokens if c.ridge_tokens is not None else float("inf")
    features["t_flop_s_per_token"] = u * n * np.minimum(tokens, ridge)
    features["t_flop_high_s_per_token"] = u * n * np.maximum(tokens - ridge, 0.0)
    features["t_kv_s_per_token"] = u * context
    rest = (
        n * c.t_mem_s
        + features["t_flop_s_per_token"] * c.t_flop_s_per_token
        + features["t_flop_high_s_per_token"] * (c.t_flop_high_s_per_token or 0.0)
        + features["t_kv_s_per_token"] * c.t_kv_s_per_token
        + expert_s
    )
    pairs = np.maximum(recorded - rest, 0.0) / c.t_attn_s_per_token2
    features["t_attn_s_per_token2"] = pairs
    return features


def inline_profile(row: Any, costs: dict[str, float]) -> dict[str, Any]:
    """The events profile of the row's model, layout and engine at `costs` (unit costs not
    given take their priors) as a scenario's inline `profile:`."""
    model, hw, engine = specs(row)
    profile = events_profile(model, hw, engine, costs=costs, overlapped=overlapped(row))
    dumped = profile.model_dump(exclude_none=True)
    return {k: dumped[k] for k in ("coefficients", "experts", "pricing") if k in dumped}


def _sums(features: dict[str, np.ndarray], weights: np.ndarray) -> dict[str, float]:
    return {c: float(np.dot(f, weights)) for c, f in features.items()}


def point_counts(row: Any) -> PointCounts:
    """Simulate the point once (unit costs at their priors) and count its events."""
    model, hw, engine = specs(row)
    result = next(iter(simulate(scenario(row, profile=inline_profile(row, {}))).variants.values()))
    steps, requests = result.steps, result.requests
    hidden = overlapped(row)
    features = _group_features(
        steps, basis(model, hw, engine, hidden), model, hw, engine, hidden
    )
    tpot_w, ttft_w = metric_weights(steps, requests)
    done = requests[~requests["rejected"]]
    summary = result.summary()
    return PointCounts(
        duration=_sums(features, np.ones(len(steps))),
        tpot_mean=_sums(features, tpot_w),
        ttft_mean=_sums(features, ttft_w),
        total_tokens=int(done["num_prompt_tokens"].sum() + done["num_output_tokens"].sum()),
        gpus=hw.num_gpus,
        first_wave=float((done["arrival_s"] <= 0.0).mean()),
        simulated={
            k: float(summary[k])
            for k in ("duration_s", "tpot_mean_s", "ttft_mean_s")
            if k in summary
        },
    )


def _priced(terms: Basis, counts: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for coefficient, multipliers in terms.items():
        total = counts.get(coefficient, 0.0)
        for key, m in multipliers.items():
            out[key] = out.get(key, 0.0) + m * total
    return out


def rows_for(row: Any, counts: PointCounts) -> PointRows:
    """The point's counted events priced by today's basis (`sim.costs.step_events.basis`)."""
    model, hw, engine = specs(row)
    terms = basis(model, hw, engine, overlapped(row))
    out = PointRows(
        duration=_priced(terms, counts.duration),
        tpot_mean=_priced(terms, counts.tpot_mean),
        ttft_mean=_priced(terms, counts.ttft_mean),
        total_tokens=counts.total_tokens,
        gpus=counts.gpus,
    )
    if cold_started(row):  # the whole schedule waits: the run and the first wave's TTFT
        key = f"cold_start_s@{engine}"
        out.duration[key] = out.duration.get(key, 0.0) + 1.0
        out.ttft_mean[key] = out.ttft_mean.get(key, 0.0) + counts.first_wave
    return out


def point_rows(row: Any) -> PointRows:
    """Simulate the point once and return its linear rows."""
    return rows_for(row, point_counts(row))


def seconds(row: dict[str, float], costs: dict[str, float]) -> float:
    """A linear row evaluated at unit costs (missing ones at their priors)."""
    return math.fsum(m * value_of(k, costs) for k, m in row.items())


__all__ = [
    "CONFIG",
    "PointCounts",
    "PointRows",
    "cold_started",
    "evaluate",
    "expressible",
    "inline_profile",
    "mtp_speculation",
    "mtp_tokens",
    "point_counts",
    "point_rows",
    "rows_for",
    "scenario",
    "seconds",
]


def simulated_errors(
    row: Any, frontend_s: float = 0.0, profile: Any = None
) -> dict[str, float]:
    """Simulate the point (by default with the default step model, as a scenario without a
    `profile` key gets it: counted events at the catalog's unit costs) and
    return its signed errors in % (simulated / measured - 1): throughput per GPU, mean TPOT,
    and mean TTFT with `frontend_s` added (the fitted front-end time of its engine)."""
    from sim.costs.step_events import catalog_unit_costs

    cold = value_of(f"cold_start_s@{ENGINES[row.framework]}", catalog_unit_costs())
    raw = scenario(row, profile=profile, cold_start_s=cold)
    if profile is None:
        del raw["profile"]  # as a user writes it
    result = next(iter(simulate(raw).variants.values()))
    summary = result.summary()
    done = result.requests[~result.requests["rejected"]]
    tokens = float(done["num_prompt_tokens"].sum() + done["num_output_tokens"].sum())
    gpus = HardwareSpec.model_validate(hardware_fields(row)).num_gpus
    tput = tokens / float(summary["duration_s"]) / gpus
    return {
        "tput_err": (tput / float(row.tput_per_gpu) - 1) * 100,
        "tpot_err": (float(summary["tpot_mean_s"]) / float(row.tpot_mean_s) - 1) * 100,
        "ttft_err": ((float(summary["ttft_mean_s"]) + frontend_s) / float(row.ttft_mean_s) - 1)
        * 100,
    }
