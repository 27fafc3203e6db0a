"""Step-cost profiles: roofline profiles computed from datasheets, and a scenario's `profile`.

A profile (schema and files: `sim.costs.profile_file`, re-exported here) holds the coefficients of
the step cost model, the model form they belong to, and where they came from. Measured profiles are
written by `calibration/`; roofline profiles are computed here from the model size and the GPU's
datasheet bandwidth and FLOP/s, so every scenario runs without a GPU (formulas in `roofline_profile`
and in each file's provenance).

The attention term prices `sum(chunk * context)` (QK^T and PV, 2 FLOPs per multiply-add each). For
a whole prompt this counts the causally masked half too; the flop efficiency, chosen against real
A100 step times (`calibration/check_roofline.py`), absorbs that along with kernel inefficiency.

Tensor parallelism, fp8/int4 weights and fp8 KV change the roofline as `roofline_profile` says:
every term divides by the tp degree, fp8 weights use the GPU's fp8 peak when it has one, and tp > 1
adds an all-reduce term (per token: bytes over the link; per step: a latency per all-reduce).

`python -m sim.costs.profile roofline calibration/profiles/roofline` regenerates the committed
roofline files: one per catalog model and GPU at the smallest tensor-parallel degree that fits (see
`write_roofline_profiles`). They carry no date, so regenerating them gives identical bytes.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sim.costs.catalog import HARDWARE, MODELS, HardwareSpec, ModelSpec, Placement, place
from sim.costs.fits import check_parallelism, layout_stem, min_tensor_parallel
from sim.costs.parallel import compute_peak, expert_terms, kv_seconds_per_token
from sim.costs.pipeline import pipeline_terms
from sim.costs.profile_file import (
    _SPLIT_DEFAULTS,
    Coefficients,
    FitSummary,
    Profile,
    _scenario_error,
    check_form,
    load_profile,
    save_profile,
)
from sim.costs.step_events import EVENTS_GENERATOR, events_profile
from sim.errors import ScenarioError

BUILTIN_PROFILES = ("roofline", "events")  # profile names that are not files


def is_builtin(raw: object) -> bool:
    """Whether a scenario's `profile` is computed for each model and GPU (unset: the default,
    counted events; "roofline"; "events") rather than a file or coefficients of its own."""
    return raw is None or raw in BUILTIN_PROFILES


def is_counted(profile: Profile) -> bool:
    """Whether `profile` is the counted-events step model (the default, or `events`)."""
    generator = profile.provenance.get("generator") if profile.provenance else None
    return isinstance(generator, str) and generator.startswith(EVENTS_GENERATOR)

__all__ = [  # the schema lives in sim.costs.profile_file; importers find it here too
    "Coefficients",
    "FitSummary",
    "Profile",
    "check_form",
    "load_profile",
    "resolve_profile",
    "roofline_profile",
    "save_profile",
    "write_roofline_profiles",
]

# Chosen against the A100 reference timings; the justification travels in each file's provenance.
ROOFLINE_MEM_EFFICIENCY = 0.8
ROOFLINE_FLOP_EFFICIENCY = 0.7
# Tensor parallelism only (tp > 1): not calibrated against measurements, stated assumptions.
ROOFLINE_LINK_EFFICIENCY = 0.8
# The roofline before measured latencies: 5 us per all-reduce (`--old` in
# benchmarks/bench_published.py); still the value for a tp degree given explicitly as a float.
ALLREDUCE_LATENCY_S = 5e-6
# Measured small-message NCCL all-reduce latency by node type and tp degree: Vidur's published
# collective timings (microsoft/vidur 7d47513, MIT; network/<node>/all_reduce.csv.gz), fitted by
# `python -m calibration.allreduce_fit` (median time of messages up to 64 KiB, one node).
ALLREDUCE_LATENCY_MEASURED_S: dict[str, dict[int, float]] = {
    "a100_dgx": {2: 46.0e-6, 4: 20.5e-6, 8: 32.5e-6},
    "h100_dgx": {2: 21.0e-6, 4: 38.0e-6, 8: 31.0e-6},
}
# Which measured node prices each catalog GPU's all-reduce: its own, else the nearest measured
# one (H200 and B200: the H100's NVSwitch node; A40, L40S: the A100 node; H100 PCIe: the H100).
ALLREDUCE_NODE = {
    "a100-40g": "a100_dgx", "a100-80g": "a100_dgx", "a40": "a100_dgx", "l40s": "a100_dgx",
    "h100-sxm": "h100_dgx", "h100-pcie": "h100_dgx", "h200": "h100_dgx", "b200": "h100_dgx",
}  # fmt: skip
_MEASURED_GPUS = {"a100-40g", "a100-80g", "h100-sxm"}  # the GPUs of Vidur's DGX nodes
# Host time of every engine step that no kernel covers (scheduling, input preparation, graph
# launch, sampling; vLLM V1 with CUDA graphs): a real vLLM 0.11 run of Llama-2-7B on one H100
# (inference-sim eval/ground_truth/jan21-llama7b-train-1, Apache-2.0) decodes alone at a median
# TPOT of 6.66 ms, of which Vidur's measured H100 kernels of that model (linear layers 5.60 ms
# at one token, plus the roofline's 0.10 ms LM head and 0.35 ms KV read at its ~1,800-token
# contexts) account for 6.05 ms. One number for every GPU and model, as the engine's own.
HOST_STEP_S = 0.6e-3
ACTIVATION_BYTES = 2  # bf16 activations cross the link, whatever the weight dtype
LINK_NOTE = (
    "Bandwidth assumed: NCCL ring all-reduce reaches about 80% of the one-way NVLink bandwidth "
    "(half the datasheet's two-way figure) on large messages (Vidur's H100 DGX timings give a "
    "bus bandwidth of 297-370 GB/s, 66-82% of 450 GB/s). Latency measured: the small-message "
    "all-reduce time of Vidur's published NCCL timings (allreduce_latency_source). Two "
    "all-reduces per layer."
)
HOST_NOTE = (
    "Host time per step (scheduling, launch, sampling) measured on vLLM 0.11 (V1, CUDA graphs): "
    "Llama-2-7B on one H100 decodes alone at 6.66 ms per token, 0.6 ms more than its measured "
    "kernels (Vidur H100 timings); added to t_mem_s of every roofline profile."
)


def allreduce_latency_for(hw: HardwareSpec) -> tuple[float, str]:
    """Seconds per all-reduce on `hw` at its tp degree, and where the number comes from: the
    measured node `ALLREDUCE_NODE` names at the nearest measured tp degree."""
    node = ALLREDUCE_NODE.get(hw.name)
    if node is None:  # a GPU the catalog gained without a measured node: the old assumption
        return ALLREDUCE_LATENCY_S, "assumed 5 us (no measured node for this GPU)"
    table = ALLREDUCE_LATENCY_MEASURED_S[node]
    tp = min(table, key=lambda n: (abs(n - hw.tensor_parallel), n))
    own = "" if hw.name in _MEASURED_GPUS else f", the nearest measured GPU to {hw.name}"
    return table[tp], f"Vidur {node} all_reduce, tp {tp}, small-message median{own}"


_EFFICIENCY_NOTE = (
    "Achieved fractions of datasheet HBM bandwidth and dense bf16 FLOP/s, chosen against 61 real "
    "A100-80GB SXM step times of Llama-2-7B and Llama-3-8B (Vidur kernel timings; "
    "calibration/check_roofline.py). Memory 0.8: weight streaming at batch 1 reaches about 70% "
    "of peak and long-context KV reads about 90%; one factor covers both. FLOP 0.7: large bf16 "
    "GEMMs reach 70-80% of tensor-core peak on A100. Roofline/measured with these: decode median "
    "0.97 (0.87-1.26), prefill median 1.11 (0.87-1.41); the worst cases are short prefills and "
    "large decode batches, where adding the memory and compute terms (no overlap) overestimates."
)


def _compute_flops(model: ModelSpec, hw: HardwareSpec) -> tuple[float, str]:
    """Per-GPU peak FLOP/s of the linear layers, and which peak it is.

    fp8 weights run fp8 x fp8 GEMMs (W8A8) on GPUs with fp8 tensor cores, else they are
    dequantized to bf16 (A100: weight-only fp8, as vLLM's Marlin kernels do); int4 weights are
    weight-only (W4A16), so their GEMMs run at the bf16 rate; fp4 weights (MXFP4, NVFP4) run on
    fp4 tensor cores where the GPU has them, else dequantized at the bf16 rate."""
    return compute_peak(model.weight_dtype or "bf16", hw)


def allreduce_terms(
    model: ModelSpec,
    hw: HardwareSpec,
    *,
    link_efficiency: float = ROOFLINE_LINK_EFFICIENCY,
    allreduce_latency_s: float | None = None,
) -> tuple[float, float]:
    """Seconds per step and per token of a step's all-reduces on `hw` (none at tp 1): two per
    layer of the step's activations, a ring over the one-way link (see `roofline_profile`);
    each pays `allreduce_latency_s`, by default the measured one (`allreduce_latency_for`)."""
    tp = hw.tensor_parallel
    if tp == 1:
        return 0.0, 0.0
    if allreduce_latency_s is None:
        allreduce_latency_s = allreduce_latency_for(hw)[0]
    assert hw.interconnect_bandwidth_bytes_per_s is not None  # check_parallelism
    one_way = hw.interconnect_bandwidth_bytes_per_s / 2 * link_efficiency
    per_token_bytes = 2 * (tp - 1) / tp * model.hidden_size * ACTIVATION_BYTES
    return (
        2 * model.num_layers * allreduce_latency_s,
        2 * model.num_layers * per_token_bytes / one_way,
    )


def roofline_profile(
    model: ModelSpec,
    hw: HardwareSpec,
    *,
    mem_efficiency: float = ROOFLINE_MEM_EFFICIENCY,
    flop_efficiency: float = ROOFLINE_FLOP_EFFICIENCY,
    link_efficiency: float = ROOFLINE_LINK_EFFICIENCY,
    allreduce_latency_s: float | None = None,
    host_step_s: float = HOST_STEP_S,
    placed: Placement | None = None,
) -> Profile:
    """The extended-form profile implied by datasheet bandwidth, FLOP/s and model size
    (`placed`: `model` on `hw`, as resolved; else placed here).

    With `tp = hw.tensor_parallel` GPUs each reads and computes its 1/tp shard at the same time,
    so every term divides by tp; tp > 1 adds two all-reduces per layer (after the attention output
    and the MLP down projections) of `num_tokens * hidden_size * 2` bytes (bf16 activations,
    whatever the weight dtype), priced as a ring: `2 (tp - 1) / tp * bytes` over the one-way link
    bandwidth (half the datasheet's two-way figure) at `link_efficiency`, which scales with the
    step's tokens (added to t_flop), plus `allreduce_latency_s` each (added to t_mem; default:
    measured, `allreduce_latency_for`). Every step also pays `host_step_s` of engine host time
    (added to t_mem)."""
    if placed is None:
        placed = place(model, hw)
    check_parallelism(model, hw, placed)
    latency_source = "given"
    if allreduce_latency_s is None:
        allreduce_latency_s, latency_source = allreduce_latency_for(hw)
    tp = hw.tensor_parallel
    bandwidth = tp * hw.hbm_bandwidth_bytes_per_s * mem_efficiency
    peak, compute_dtype = _compute_flops(model, hw)
    flops = tp * peak * flop_efficiency
    # attention (QK^T, PV) runs in bf16 even with an fp8 KV cache (dequantized on load)
    attn_flops = tp * hw.peak_flops * flop_efficiency
    attn_flops_per_pair = 4 * model.num_layers * model.num_attention_heads * model.head_dim
    allreduce_s_per_step, allreduce_s_per_token = allreduce_terms(
        model, hw, link_efficiency=link_efficiency, allreduce_latency_s=allreduce_latency_s
    )
    if hw.pipeline_parallel > 1:  # hand-overs between stages (sim/costs/pipeline.py)
        stage_step, stage_token = pipeline_terms(model, hw, link_efficiency, allreduce_latency_s)
        allreduce_s_per_step += stage_step
        allreduce_s_per_token += stage_token
    coefficients = Coefficients(
        t_mem_s=placed.weight_bytes / bandwidth + allreduce_s_per_step + host_step_s,
        t_flop_s_per_token=placed.flops_per_token / flops + allreduce_s_per_token,
        t_kv_s_per_token=placed.kv_bytes_per_token / bandwidth,
        t_attn_s_per_token2=attn_flops_per_pair / attn_flops,
    )
    experts = None
    if placed.is_moe:
        coefficients = _rank_coefficients(
            model, hw, bandwidth, flops, attn_flops, allreduce_s_per_step + host_step_s,
            allreduce_s_per_token, placed,
        )  # fmt: skip
        experts, expert_provenance = expert_terms(
            model, hw, mem_efficiency=mem_efficiency, flop_efficiency=flop_efficiency,
            link_efficiency=link_efficiency, latency_s=allreduce_latency_for(hw)[0],
            placed=placed,
        )  # fmt: skip
    efficiency: dict[str, Any] = {
        "mem": mem_efficiency,
        "flop": flop_efficiency,
        "justification": _EFFICIENCY_NOTE,
        "host_step_s": host_step_s,
        "host_justification": HOST_NOTE,
    }
    params = "num_parameters" if model.num_active_parameters is None else "num_active_parameters"
    formulas = {
        "t_mem_s": "weight_bytes / (hbm_bandwidth * mem) + host_step_s",
        "t_flop_s_per_token": f"2 * {params} / (peak_flops * flop)",
        "t_kv_s_per_token": "kv_bytes_per_token / (hbm_bandwidth * mem)",
        "t_attn_s_per_token2": "4 * layers * heads * head_dim / (peak_flops * flop)",
    }
    if tp > 1:
        efficiency |= {"link": link_efficiency, "allreduce_latency_s": allreduce_latency_s,
                       "allreduce_latency_source": latency_source,
                       "link_justification": LINK_NOTE}  # fmt: skip
        formulas = {
            "t_mem_s": "weight_bytes / (tp * hbm_bandwidth * mem) "
            "+ 2 * layers * allreduce_latency_s + host_step_s",
            "t_flop_s_per_token": f"2 * {params} / (tp * peak_flops * flop) "
            "+ 2 * layers * 2 * (tp - 1) / tp * hidden_size * 2 / (interconnect / 2 * link)",
            "t_kv_s_per_token": "kv_bytes_per_token(tp) / (tp * hbm_bandwidth * mem)",
            "t_attn_s_per_token2": "4 * layers * heads * head_dim / (tp * peak_flops * flop)",
        }
    provenance: dict[str, Any] = {
        "generator": "python -m sim.costs.profile roofline (batchsim sim/costs/profile.py)",
        "device": _dump(hw, exclude={"gpu_memory_utilization", "activation_reserve_bytes"})
        | {"source": "vendor datasheet (HBM bandwidth, dense bf16 tensor-core FLOP/s)"},
        "model": _dump(model)
        | {"weight_dtype": placed.weight_dtype_name, "kv_dtype": placed.kv_dtype_name},
        "dtype": placed.dtype_label,
        "efficiency": efficiency,
        "formulas": formulas,
        "date": None,  # deliberately absent: regenerating must give identical bytes
    }
    if compute_dtype != "bf16":
        provenance["compute_dtype"] = compute_dtype  # peak_flops above is then fp8_peak_flops
        formulas["t_flop_s_per_token"] = formulas["t_flop_s_per_token"].replace(
            "peak_flops", f"{compute_dtype}_peak_flops", 1
        )
    if experts is not None:
        formulas |= _RANK_FORMULAS
        provenance["experts"] = expert_provenance
    if hw.pipeline_parallel > 1:
        provenance["pipeline"] = (
            "one virtual engine's step: the whole model on one stage's GPUs, plus (pp - 1) "
            "hand-over latencies in t_mem_s and (pp - 1) * hidden * 2 bytes over the link per "
            "token in t_flop_s_per_token (sim/costs/pipeline.py)"
        )
    return Profile(
        schema_version=1,
        name=f"roofline-{roofline_stem(model, hw, placed)}",
        source="roofline",
        model_form="extended",
        coefficients=coefficients,
        provenance=provenance,
        experts=experts,
    )


_RANK_FORMULAS = {
    "t_mem_s": "dense_weight_bytes / (tp * hbm_bandwidth * mem) + 2 * layers * "
    "allreduce_latency_s (tp > 1) + host_step_s",
    "t_flop_s_per_token": "(2 * dense_parameters / (tp * peak_flops * flop) + all-reduce per "
    "token) / dp",
    "t_kv_s_per_token": "max(kv_bytes_per_token(tp) / (tp * hbm_bandwidth * mem), latent "
    "attention FLOPs per context token / (tp * peak_flops * flop)) / dp",
    "t_attn_s_per_token2": "2 * layers * heads * (head_dim + v_head_dim) / (tp * peak_flops * "
    "flop) / dp",
}


def _rank_coefficients(
    model: ModelSpec,
    hw: HardwareSpec,
    bandwidth: float,
    flops: float,
    attn_flops: float,
    per_step_s: float,
    allreduce_s_per_token: float,
    placed: Placement,
) -> Coefficients:
    """A mixture of experts' dense part per data-parallel rank, as the ranks' aggregate
    (sim/costs/parallel.py): the routed experts are priced by the `experts:` block."""
    dp = hw.data_parallel
    v_head = model.v_head_dim or model.head_dim
    attn_pair = 2 * model.num_layers * model.num_attention_heads * (model.head_dim + v_head)
    return Coefficients(
        t_mem_s=placed.dense_weight_bytes / bandwidth + per_step_s,
        t_flop_s_per_token=(2.0 * placed.dense_parameters / flops + allreduce_s_per_token) / dp,
        t_kv_s_per_token=kv_seconds_per_token(model, hw, bandwidth, attn_flops, placed) / dp,
        t_attn_s_per_token2=attn_pair / attn_flops / dp,
    )


# Fields a provenance names only where they differ from their defaults (a dense model on one
# data-parallel rank writes the same provenance as before these fields existed).
_QUIET_DEFAULTS = frozenset({
    "num_shared_experts", "num_sliding_layers", "num_mtp_layers", "data_parallel",
    "expert_parallel", "scaleup_domain_gpus", "scaleout_latency_s", "pipeline_parallel",
})  # fmt: skip


def _dump(spec: ModelSpec | HardwareSpec, exclude: set[str] | None = None) -> dict[str, Any]:
    """The spec's fields for a provenance: None and quiet defaults left out."""
    out = spec.model_dump(exclude=exclude, exclude_none=True)
    fields = type(spec).model_fields
    return {k: v for k, v in out.items() if not (k in _QUIET_DEFAULTS and v == fields[k].default)}


def roofline_stem(model: ModelSpec, hw: HardwareSpec, placed: Placement | None = None) -> str:
    """`<model>-<hardware>`, plus `-tp<N>`, `-w<dtype>`, `-kv<dtype>` where not the defaults."""
    return layout_stem(model, hw, placed)


def resolve_profile(
    raw: str | dict[str, Any] | None,
    model: ModelSpec,
    hw: HardwareSpec,
    base_dir: Path,
    *,
    key: str | None = None,
    engine: str | None = None,
    placed: Placement | None = None,
    overlapped: bool = False,
) -> Profile:
    """A scenario's `profile`: None (the default: counted events, as "events"), "roofline",
    "events" (priced for `engine`, default vLLM), a YAML
    path (relative to base_dir) or an inline mapping. (`placed`: `model` on `hw`, as resolved,
    what a roofline reads.)

    Inline needs only `coefficients` (source `inline`; form `two_regime` when a ridge is given,
    `split` when a split term is, `table` with a `table` block, else `extended`); `key` prefixes
    its error paths. `overlapped`: the engine schedules asynchronously, so the counted-events
    model hides its host time behind the GPU's."""
    if raw == "roofline":
        return roofline_profile(model, hw, placed=placed)
    if raw is None or raw == "events":
        chosen = "named" if raw else "default"
        return events_profile(model, hw, engine or "vllm", chosen=chosen, overlapped=overlapped)
    if isinstance(raw, str):
        path = Path(raw)
        return load_profile(path if path.is_absolute() else base_dir / path)
    if not isinstance(raw, dict):
        raise ScenarioError("expected 'roofline', a file path or a mapping", path=key)
    coefficients = raw.get("coefficients")
    given = coefficients if isinstance(coefficients, dict) else {}
    form = "extended"
    if "table" in raw:
        form = "table"
    elif given.get("ridge_tokens") is not None:
        form = "two_regime"
    elif any(given.get(k, v) != v for k, v in _SPLIT_DEFAULTS.items()):
        form = "split"
    data = {
        "schema_version": 1,
        "name": "inline",
        "source": "inline",
        "model_form": form,
    } | raw
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        raise _scenario_error(exc, None, key) from None


def roofline_file_name(model: ModelSpec, hw: HardwareSpec) -> str:
    """`<model>_<hardware>.yaml`, or `<model>_<hardware>_tp<N>.yaml` for tensor parallelism."""
    tp = f"_tp{hw.tensor_parallel}" if hw.tensor_parallel > 1 else ""
    return f"{model.name}_{hw.name}{tp}.yaml"


def write_roofline_profiles(out_dir: Path) -> list[Path]:
    """One file per catalog model and GPU, at the smallest tensor-parallel degree that fits.

    Models that fit on one GPU get `<model>_<hardware>.yaml` (tp 1); larger ones get
    `<model>_<hardware>_tp<N>.yaml` for the smallest N in `TP_CANDIDATES` whose GPUs hold the
    weights with room for KV. Every file is bf16. Other degrees and dtypes are computed on the fly
    by a scenario's `profile: roofline`."""
    written = []
    for model in MODELS.values():
        for base in HARDWARE.values():
            tp = min_tensor_parallel(model, base)
            if tp is None:
                continue
            hw = base.with_tensor_parallel(tp) if tp > 1 else base
            path = out_dir / roofline_file_name(model, hw)
            save_profile(roofline_profile(model, hw), path)
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sim.costs.profile", description="Generate step-cost profiles."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    roof = sub.add_parser("roofline", help="write roofline profiles for every catalog pair")
    roof.add_argument("out_dir", type=Path)
    args = parser.parse_args(argv)
    for path in write_roofline_profiles(args.out_dir):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
