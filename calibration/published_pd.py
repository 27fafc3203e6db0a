"""Published prefill/decode-disaggregated and MTP deployments as scenarios, and their errors.

The training file's rows the step model's fit leaves out (`calibration.published_events.
expressible`): MTP rows of one instance (the fit's scenario with the deployment's speculation),
and Dynamo with TensorRT-LLM or SGLang on GB200 NVL72 racks, and SGLang's own
disaggregation on MI355X, some with DeepSeek-R1's multi-token prediction (MTP). Each becomes a
`disaggregation:` scenario: a prefill pool of `prefill_workers` instances and a decode pool of
`decode_workers`, each instance `num_*_gpu / *_workers` GPUs laid out as the row says
(data-parallel attention with expert parallelism over all of its GPUs: wide EP; else tensor
parallel), the KV carried over each prefill GPU's link, the same closed-loop clients.

A pool's step depends on the other's through the clients' loop, so a point is no exact linear
function of the unit costs: the decode pools of the points without MTP enter the fit by their
mean TPOT, linear about the costs they were counted at (`calibration.pd_fit`), and
`python -m calibration.fit_unit_costs` judges every point here with a fit that left its
configuration out (MTP points, never fitted, with the whole fit) and writes
`calibration/training/pd_judged.csv`. Stated assumptions, since the rows do not publish them:

- MTP: the draft tokens each deployment's launch script sets and the acceptance by position
  that the training rows' streamed chunks count (`calibration.published_events.mtp_tokens`,
  `MTP_FIRST_RATE`: about 2.3 tokens a step with three drafts, 1.76-1.93 with one).
- KV transfer: over NVLink inside a GB200 NVL72 rack (NIXL; 0.8 of a GPU's 900 GB/s one way),
  over each GPU's 400 Gb/s NIC between MI355X nodes (0.8 of 50 GB/s); one link per prefill GPU.
- Cold starts: a point whose p99 TTFT shows the engine's first-use compilation
  (`published_events.cold_started`: the first point of some sweeps) waits the engine's fitted
  `cold_start_s`, as single instances do in the fit.
- Scheduling: each pool runs its engine's policy (`published_events.policy_fields`), prefill
  pools with no decode of their own.
- Redundant experts: Dynamo's SGLang pools place 32 replicas beside DeepSeek-R1's 256 experts
  (`--ep-num-redundant-experts 32`, prefill and decode, in Dynamo's
  components/backends/sglang/slurm_jobs/scripts/gb200-fp8.sh), which lets EP 48 hold them.

    python -m calibration.published_pd            # every point at the shipped unit costs
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import yaml

from calibration.published_events import (
    ENGINES as TRAINING_ENGINES,
)
from calibration.published_events import (
    GPUS,
    MODELS,
    cold_started,
    engine_version,
    memory_fields,
    model_fields,
    mtp_speculation,
    mtp_tokens,
    policy_fields,
    scenario,
)
from sim.costs.step_events import catalog_unit_costs, value_of
from sim.errors import ScenarioError
from sim.scenario.engine_loop import async_by_default
from sim.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
UNIT_COSTS = ROOT / "sim/costs/unit_costs.yaml"
TRAINING_NAME = {v: k for k, v in TRAINING_ENGINES.items()}  # trt-llm -> trt
ENGINES_PD = {"dynamo-trt": "trt-llm", "dynamo-sglang": "sglang", "sglang-disagg": "sglang"}
REDUNDANT_EXPERTS = {"dynamo-sglang": 32}  # --ep-num-redundant-experts of the pools' recipes
LINK_GB_PER_S = {"gb200": 0.8 * 900.0, "mi355x": 0.8 * 50.0}
LINK_LATENCY_S = {"gb200": 5e-6, "mi355x": 10e-6}


def expressible_pd(row: Any) -> str | None:
    """Why a disaggregated or MTP row cannot be mapped, or None."""
    if not bool(row.disagg):
        if str(row.spec_decoding) != "mtp":
            return "one instance without speculation: calibration.published_events maps it"
        if row.framework not in TRAINING_ENGINES:
            return f"engine {row.framework}"
        if row.model_key not in MODELS or row.gpu not in GPUS:
            return "model or GPU outside the catalog"
        return None
    if row.framework not in ENGINES_PD:
        return f"engine {row.framework}"
    if row.model_key not in MODELS or row.gpu not in GPUS or row.gpu not in LINK_GB_PER_S:
        return "model or GPU outside the catalog"
    return None


def _pool_hardware(row: Any, role: str) -> dict[str, Any]:
    workers = int(getattr(row, f"{role}_workers"))
    gpus = int(getattr(row, f"num_{role}_gpu")) // max(workers, 1)
    out: dict[str, Any] = {"name": GPUS[row.gpu], **memory_fields(str(row.framework))}
    dp_attention = bool(getattr(row, f"{role}_dp_attention"))
    ep = int(getattr(row, f"{role}_ep"))
    if dp_attention:
        out |= {"tensor_parallel": 1, "data_parallel": gpus}
        if row.model_key != "llama70b":
            out["expert_parallel"] = gpus  # wide EP: experts over every rank
            extra = REDUNDANT_EXPERTS.get(str(row.framework), 0)
            if extra and gpus > 1:
                out["redundant_experts"] = extra
    else:
        out["tensor_parallel"] = gpus
        if ep > 1:
            out["expert_parallel"] = min(ep, gpus)
    return out


WAVES = 4  # requests per client: the steady state of a closed loop, in a few minutes for all


def pd_scenario(row: Any, profile: Any = None, waves: int = WAVES) -> dict[str, Any]:
    """The scenario that reproduces one disaggregated (and maybe MTP) point, or one instance's
    MTP point (the fit's scenario with the deployment's speculation, as a user writes it)."""
    if not bool(row.disagg):
        return _single_mtp(row, profile, waves)
    conc = int(row.conc)
    ratio = float(row.random_range_ratio)
    name = ENGINES_PD[row.framework]
    version = engine_version(row)
    speculative = str(row.spec_decoding) == "mtp"
    engine: dict[str, Any] = {"name": name}
    if version is not None and row.framework == "sglang-disagg":
        engine["version"] = version
    if cold_started(row):  # the sweep's first point ran without warm-up, as single ones do
        engine["cold_start_s"] = _cold_start_s(row)
    # SGLang turns its overlap off with speculative decoding (sim/scenario/engine_loop.py)
    engine["async_scheduling"] = async_by_default(name, None) and not (
        speculative and name == "sglang"
    )
    # each pool schedules as its engine does alone (the training file's name for the engine)
    as_row = SimpleNamespace(framework=TRAINING_NAME[name], conc=row.conc)
    prefill_hw, decode_hw = _pool_hardware(row, "prefill"), _pool_hardware(row, "decode")
    decode_policy = dict(policy_fields(as_row, decode_hw.get("data_parallel", 1)))
    if speculative:
        tokens = mtp_tokens(str(row.framework), str(row.gpu), bool(row.decode_dp_attention))
        decode_policy["speculative"] = mtp_speculation(name, tokens)
    prefill_policy = dict(policy_fields(as_row, prefill_hw.get("data_parallel", 1)))

    def lengths(nominal: int) -> dict[str, Any]:
        low = int(nominal * ratio)
        if low >= nominal:
            return {"dist": "fixed", "value": nominal}
        return {"dist": "uniform", "low": low, "high": nominal}

    raw: dict[str, Any] = {
        "name": "published_pd",
        "seed": 1,
        "workload": {
            "num_requests": waves * conc,
            "clients": {
                "num_clients": conc,
                "prompt_tokens": lengths(int(row.isl)),
                "output_tokens": lengths(int(row.osl)),
            },
        },
        "model": model_fields(row),
        "hardware": decode_hw,
        "policy": decode_policy,
        "engine": engine,
        "disaggregation": {
            "prefill": {
                "count": int(row.prefill_workers),
                "hardware": prefill_hw,
                "policy": prefill_policy,
            },
            "decode": {
                "count": int(row.decode_workers),
                "hardware": decode_hw,
                "policy": decode_policy,
            },
            "link": {
                "bandwidth_gb_per_s": LINK_GB_PER_S[row.gpu],
                "latency_s": LINK_LATENCY_S[row.gpu],
                "num_links": int(row.num_prefill_gpu),
            },
        },
    }
    if profile is not None:
        raw["profile"] = profile
    return raw


def _single_mtp(row: Any, profile: Any, waves: int) -> dict[str, Any]:
    """One instance's MTP point: `published_events.scenario` with the deployment's drafts."""
    raw = scenario(row, profile=profile, cold_start_s=_cold_start_s(row))
    if profile is None:
        del raw["profile"]  # as a user writes it
    name = raw["engine"]["name"]
    raw["workload"]["num_requests"] = waves * int(row.conc)
    tokens = mtp_tokens(str(row.framework), str(row.gpu), bool(row.dp_attention))
    raw["policy"]["speculative"] = mtp_speculation(name, tokens)
    if name == "sglang":  # SGLang turns its overlap off with speculative decoding
        raw["engine"]["async_scheduling"] = False
    return raw


def _cold_start_s(row: Any) -> float:
    """The engine's fitted cold start (sim/costs/unit_costs.yaml `cold_start_s@<engine>`; its
    prior where the fit has none), for a point that ran cold (`published_events.cold_started`)."""
    name = ENGINES_PD.get(row.framework) or TRAINING_ENGINES[row.framework]
    return value_of(f"cold_start_s@{TRAINING_NAME[name]}", catalog_unit_costs())


def gpus_of(row: Any) -> int:
    """The GPUs a point's throughput divides by: every prefill and decode GPU, or the TP."""
    if bool(row.disagg):
        return int(row.num_prefill_gpu) + int(row.num_decode_gpu)
    return int(row.tp)


def pd_errors(row: Any, waves: int = WAVES) -> dict[str, float]:
    """Simulate the point with the default step model; signed errors in % (simulated /
    measured - 1) of throughput per GPU (every prefill and decode GPU), mean TPOT and TTFT.
    `waves` requests per client (the benchmark sent 10: fewer keep the judge fast; a closed
    loop's throughput and TPOT are those of its steady state)."""
    result = next(iter(simulate(pd_scenario(row, waves=waves)).variants.values()))
    summary = result.summary()
    done = result.requests[~result.requests["rejected"]]
    tokens = float(done["num_prompt_tokens"].sum() + done["num_output_tokens"].sum())
    tput = tokens / float(summary["duration_s"]) / gpus_of(row)
    engine = ENGINES_PD.get(row.framework) or TRAINING_ENGINES[row.framework]
    ttft = float(summary["ttft_mean_s"]) + frontend_s(engine)
    return {
        "tput_err": (tput / float(row.tput_per_gpu) - 1) * 100,
        "tpot_err": (float(summary["tpot_mean_s"]) / float(row.tpot_mean_s) - 1) * 100,
        "ttft_err": (ttft / float(row.ttft_mean_s) - 1) * 100,
    }


@cache
def frontend_s(engine: str) -> float:
    """The engine's front-end time the fit found on single instances (sim/costs/unit_costs.yaml
    `frontend_s`, by the training file's engine names), added to TTFT as there."""
    doc = yaml.safe_load(UNIT_COSTS.read_text())
    names = {"trt-llm": "trt", "sglang": "sglang", "vllm": "vllm", "atom": "atom"}
    return float((doc.get("frontend_s") or {}).get(names[engine], 0.0))


def pd_points(path: Any = None) -> pd.DataFrame:
    from calibration.fit_unit_costs import TRAINING

    rows = pd.read_csv(path or TRAINING).rename_axis("row_index").reset_index()
    return rows[[expressible_pd(r) is None for r in rows.itertuples()]].reset_index(drop=True)


JUDGED = ROOT / "calibration/training/pd_judged.csv"


def _label(row: Any) -> str:
    head = f"{row.framework} {row.gpu} {row.model_key} {row.precision} {row.isl}/{row.osl}"
    if not bool(row.disagg):
        return f"{head} mtp={row.spec_decoding} TP{int(row.tp)} EP{int(row.ep)}" + (
            " DP-attention" if bool(row.dp_attention) else "")
    return (f"{head} mtp={row.spec_decoding} P{int(row.prefill_workers)}x"
            f"{int(row.num_prefill_gpu)} D{int(row.decode_workers)}x{int(row.num_decode_gpu)}")


def _judge(fields: dict[str, Any]) -> dict[str, Any]:
    row = SimpleNamespace(**fields)
    out: dict[str, Any] = {"row_index": int(row.row_index), "config": _label(row),
                           "conc": int(row.conc), "framework": row.framework,
                           "mtp": str(row.spec_decoding) == "mtp"}  # fmt: skip
    try:
        out |= pd_errors(row)
    except ScenarioError as exc:  # a layout the catalog cannot place, said so
        out["not_simulated"] = exc.message()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N points")
    parser.add_argument("--jobs", type=int, default=2, help="points simulated at once")
    args = parser.parse_args(argv)
    points = pd_points().sort_values("conc", kind="stable")
    if args.limit is not None:
        points = points.head(args.limit)
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        judged = list(pool.map(_judge, points.to_dict("records")))
    for j in judged:
        if "not_simulated" in j:
            print(f"{j['config']} c{j['conc']}: not simulated: {j['not_simulated']}")
        else:
            print(f"{j['config']} c{j['conc']}: tput {j['tput_err']:+.1f} % "
                  f"tpot {j['tpot_err']:+.1f} % ttft {j['ttft_err']:+.1f} %")  # fmt: skip
    table = pd.DataFrame(judged)
    done = table[table.get("not_simulated", pd.Series(dtype=object)).isna()] if (
        "not_simulated" in table) else table
    for metric in ("tput_err", "tpot_err", "ttft_err"):
        values = done[metric].abs()
        print(f"{metric}: median {values.median():.1f} %, worst {values.max():.1f} % "
              f"({len(values)} points)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
