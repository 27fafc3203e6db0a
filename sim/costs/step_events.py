"""A step's time from counted events and unit costs: the `events` profile.

The roofline (`sim.costs.profile`) prices a step from datasheet bandwidth and FLOP/s at one
efficiency for every GPU and dtype. Measured decode steps carry more than that: a fixed time per
layer that does not shrink with tensor parallelism (kernel launches and tails), collectives whose
latency grows with the group, and GEMMs that reach less of the datasheet at small batch than at
large. This module counts those events for a model, layout and engine, and prices each with a
unit cost:

* **kernels**: `LAYER_KERNELS` per layer type (grouped-query or latent attention, dense MLP,
  routed experts, shared experts) plus `STEP_KERNELS` per step (`sim.costs.kernel_counts`),
  each charged `kernel_s[gen]`, the launch-and-tail floor of one small kernel on a GPU
  generation (graph-replayed decode);
* **all-reduces**: two per layer at tensor parallelism t > 1 (after attention's output projection
  and after the MLP or experts), each `allreduce_s[vendor] + allreduce_peer_s[vendor] * (t - 2)`
  (monotone in t: a one-shot all-reduce reads every peer's buffer), plus the bytes over the link;
  expert parallelism under tensor-parallel attention runs no all-to-all (every rank holds every
  token; the second all-reduce combines the experts' outputs); data-parallel attention with
  expert parallelism dispatches and combines once each per MoE layer (`dispatch_s[vendor]`,
  growing past 8 GPUs as DeepEP's published latencies do: `exchange_growth`); beyond the
  GPU's scale-up domain (8 GPUs of an HGX or MI355X node; 72 of a GB200 NVL72) the share of the
  bytes bound for other nodes crosses each GPU's scale-out NIC, whichever link is slower
  setting the time, plus the NIC's latency per exchange (as `sim.costs.parallel` prices it);
* **bytes and FLOPs**: weight and expert reads over HBM at `stream_eff[gen/storage]` (weight
  streaming at decode sizes; each packed 4-bit block format streams apart from plain
  bf16/fp16/fp8 weights),
  KV reads at `mem_eff[gen]`; GEMMs at the compute dtype's datasheet peak over
  `gemm_eff[gen/dtype]`, attention (prompt attention, latent decode attention) at the bf16
  peak over `attn_eff[gen]`. With `eff(M) = eff_max * M / (M + M_ridge)`
  a GEMM of M tokens takes `F * M / (peak * eff_max)` plus a fixed part; the weight read is that
  fixed part, so the sum of the two terms is the GEMM's efficiency against M;
* **host**: `host_s[engine]` per step in a synchronous loop, plus `workers_s[engine]` on a
  multi-GPU instance (each step handed to worker processes); an overlapped loop (asynchronous
  scheduling: `overlapped`) runs the host's time beside the GPU, a step taking max(GPU, host),
  and leaves `gap_s[engine]` per step of GPU idle between steps.

Every term is a unit cost times a count, so a step's time is linear in the unit costs: `basis`
returns each profile coefficient as `{unit cost: multiplier}`, which the profile evaluates with
the catalog's values (`sim/costs/unit_costs.yaml`) and `calibration/fit_unit_costs.py` fits
against published deployments (the same function, so the fit and the simulator agree exactly).
A generation's unit cost the fit had no deployment of takes its vendor's fitted value
(`vendor_key`: MI325X, a CDNA3 GPU, falls back to AMD's), else its stated prior (`PRIORS`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from sim.costs.catalog import HardwareSpec, ModelSpec, kv_bytes_per_token_on
from sim.costs.expert_terms import ExpertTerms
from sim.costs.fits import check_parallelism, layout_stem
from sim.costs.kernel_counts import kernels_per_step
from sim.costs.knobs import CpuOverheadSpec, PricingSpec
from sim.costs.parallel import COMBINE_BYTES, DISPATCH_BYTES, compute_peak, expert_layout
from sim.costs.profile_file import Coefficients, Profile
from sim.costs.unit_keys import (
    HIERARCHICAL,
    INVERSE_KINDS,
    dtype_label,
    generation,
    storage,
    unit_key,
    vendor_key,
)

# the unit costs' keys (sim.costs.unit_keys) and the kernel counts (sim.costs.kernel_counts)
# live apart; importers find them here too
__all__ = ["HIERARCHICAL", "INVERSE_KINDS", "basis", "events_profile", "kernels_per_step",
           "unit_key", "vendor_key"]  # fmt: skip

UNIT_COSTS_FILE = Path(__file__).with_name("unit_costs.yaml")
ENGINES = ("vllm", "sglang", "trt-llm", "atom")
ACTIVATION_BYTES = 2  # bf16 activations cross the link
LINK_EFFICIENCY = 0.8  # of the one-way link bandwidth on large messages (sim/costs/profile.py)

# Stated priors, each with its source: the value a unit cost takes where no fit covers it, and
# the value the fit is drawn towards (calibration/fit_unit_costs.py).
PRIORS: dict[str, tuple[float, str]] = {
    "kernel_s": (
        4e-6,
        "a small kernel's launch gap plus tail under CUDA-graph replay: 2-3 us "
        "of launch gap (NVIDIA CUDA Graphs blog, 2019; vLLM's graph capture notes) "
        "and a few us of a kernel that cannot fill the GPU at decode sizes",
    ),
    "allreduce_s": (
        10e-6,
        "one-shot all-reduce of a decode step's activations on one NVLink "
        "node: vLLM custom_all_reduce and FlashInfer trtllm all-reduce publish "
        "8-15 us for 8-256 KiB at 2-8 GPUs; NCCL small-message latency is 15-30 us "
        "(nccl-tests on DGX H100)",
    ),
    "allreduce_peer_s": (
        1e-6,
        "one-shot all-reduce reads each peer's buffer: about 1 us more "
        "per peer at small messages (same sources)",
    ),
    "dispatch_s": (
        60e-6,
        "DeepEP low-latency dispatch or combine at EP 8 and 128 tokens per "
        "rank: 77 us dispatch and 114 us combine over RDMA, less over NVLink "
        "(deepseek-ai/DeepEP README)",
    ),
    "mem_eff": (
        0.8,
        "long-context KV reads reach about 90 % of HBM bandwidth "
        "(calibration/check_roofline.py on A100 step times)",
    ),
    "stream_eff": (
        0.8,
        "weight streaming at batch 1 reaches about 70 % of HBM bandwidth "
        "(calibration/check_roofline.py on A100 step times)",
    ),
    "gemm_eff": (0.7, "large bf16 GEMMs reach 70-80 % of tensor-core peak (cuBLAS, A100/H100)"),
    "attn_eff": (
        0.5,
        "attention kernels (FlashAttention-2/3, FlashInfer, FlashMLA) reach "
        "35-75 % of bf16 peak on long prompts and latent decode (FlashAttention-3 "
        "paper: 0.6-0.75 on H100 forward; FlashMLA README: 660 TFLOPS of 989 on H800 "
        "decode at large batch, less at small)",
    ),
    "host_s": (
        0.3e-3,
        "host time per step an asynchronous scheduler does not hide "
        "(vLLM 0.11 decode: 0.6 ms synchronous, sim/costs/profile.py HOST_NOTE)",
    ),
    "token_s": (
        0.25e-6,
        "a token's per-layer work in a step below the GEMMs' ridge (norms, rotary, activations, "
        "the GEMMs' activation traffic): the slope of Vidur's measured linear-layer tables from "
        "1 to 64 tokens, per layer: 0.13 us (Llama-2-7B, H100), 0.24 us (CodeLlama-34B, H100), "
        "0.21 us (Llama-2-7B, A100), 0.69 us (CodeLlama-34B, A100); calibration/profiles/"
        "imported/vidur, docs/profiles.md",
    ),
    "workers_s": (
        0.2e-3,
        "host time per step that only a multi-GPU instance spends: the engine hands each step "
        "to worker processes and gathers their output (vLLM's MultiprocExecutor broadcasts the "
        "scheduler output over a shared-memory queue, vllm/v1/executor/multiproc_executor.py; "
        "one GPU runs in the engine's own process, UniProcExecutor)",
    ),
    "gap_s": (
        0.1e-3,
        "the GPU's idle time per step that an overlapped loop (asynchronous scheduling) "
        "leaves: it launches step k+1 only once step k's sampled tokens are copied to the host "
        "and its inputs updated (vllm/v1/engine/core.py step_with_batch_queue, "
        "sglang scheduler.py event_loop_overlap): one synchronization and a few launches, "
        "tens to a hundred microseconds",
    ),
    "cold_start_s": (
        60.0,
        "a benchmark run without warm-up: the engine's first requests wait for kernels "
        "compiled at their first use and graphs captured lazily; vLLM start-up compilation "
        "and capture are measured at tens of seconds to minutes (Tensorfuse, 2025; 'Breaking "
        "the Ice', MLSys 2026). Not a step cost: engine.cold_start_s of a scenario",
    ),
}
EVENTS_GENERATOR = "sim.costs.step_events.events_profile"
# what the provenance says priced the steps, by how the scenario chose the model
STEP_MODEL_NOTE = {
    "default": "counted events with fitted unit costs: the default (the scenario sets no "
    "profile)",
    "named": "counted events with fitted unit costs (profile: events)",
}
# unit costs kept at their priors by the fit (too few deployments to identify them)
FIXED: frozenset[str] = frozenset()


Basis = dict[str, dict[str, float]]  # coefficient -> {unit cost key: multiplier}


def _add(basis: Basis, coefficient: str, key: str, multiplier: float) -> None:
    if multiplier:
        terms = basis.setdefault(coefficient, {})
        terms[key] = terms.get(key, 0.0) + multiplier


def basis(
    model: ModelSpec, hw: HardwareSpec, engine: str = "vllm", overlapped: bool = False
) -> Basis:
    """Each coefficient of the step's profile as unit costs times counts (see the module doc).

    Coefficients: the extended form's `t_mem_s`, `t_flop_s_per_token`, `t_kv_s_per_token`,
    `t_attn_s_per_token2` (a data-parallel rank's, as the ranks' aggregate, as
    `sim.costs.profile` builds them) and, for a mixture of experts, the `experts:` block's
    `t_expert_read_s`, `t_expert_pair_s`, `t_exchange_s_per_token`, `t_exchange_s`. The key
    `const` holds terms with no unit cost to fit (link bytes at the stated link efficiency).
    `overlapped`: the engine schedules asynchronously, so its host time per step runs while
    the GPU computes (`events_profile` prices it as max(GPU, host)) and is no part of these
    coefficients."""
    check_parallelism(model, hw)
    tp, dp = hw.tensor_parallel, hw.data_parallel
    hbm = tp * hw.hbm_bandwidth_bytes_per_s
    mem = "inv:" + unit_key("mem_eff", hw, engine)
    out: Basis = {}
    # per step: host, kernels, all-reduce latencies, the dense weights
    # the host's time per step: serial in a synchronous loop; an overlapped loop hides it
    # (priced as max(GPU, host)) but for the gap its step leaves on the GPU
    _add(out, "t_mem_s", unit_key("gap_s" if overlapped else "host_s", hw, engine), 1.0)
    if hw.stage_gpus > 1 and not overlapped:  # workers in processes of their own
        _add(out, "t_mem_s", unit_key("workers_s", hw, engine), 1.0)
    _add(out, "t_mem_s", unit_key("kernel_s", hw, engine), float(kernels_per_step(model)))
    allreduces = 2 * model.num_layers if tp > 1 else 0
    _add(out, "t_mem_s", unit_key("allreduce_s", hw, engine), float(allreduces))
    _add(out, "t_mem_s", unit_key("allreduce_peer_s", hw, engine), float(allreduces * (tp - 2)))
    dense_bytes = model.dense_weight_bytes if model.is_moe else model.weight_bytes
    stream = "inv:" + unit_key("stream_eff", hw, engine, storage(model.weight_dtype_name))
    _add(out, "t_mem_s", stream, dense_bytes / hbm)
    # per token (a rank's share: / dp). Up to the dense GEMMs' ridge (`ridge_tokens`) their
    # FLOPs hide under the weight read already counted: a token costs its per-layer work at
    # decode sizes (`token_s`: norms, rotary, activations, the GEMMs' activation traffic).
    # Above it the GEMMs are compute-bound: their FLOPs at gemm_eff. The all-reduces' bytes
    # count in both.
    peak, dtype = compute_peak(model.weight_dtype_name, hw)
    params = 2.0 * (model.dense_parameters if model.is_moe else model.active_parameters)
    gemm = unit_key("gemm_eff", hw, engine, dtype_label(model.weight_dtype_name, dtype))
    _add(out, "t_flop_s_per_token", unit_key("token_s", hw, engine), model.num_layers / dp)
    _add(out, "t_flop_high_s_per_token", "inv:" + gemm, params / (tp * peak) / dp)
    if tp > 1:
        assert hw.interconnect_bandwidth_bytes_per_s is not None  # check_parallelism
        one_way = hw.interconnect_bandwidth_bytes_per_s / 2 * LINK_EFFICIENCY
        per_token = 2 * (tp - 1) / tp * model.hidden_size * ACTIVATION_BYTES
        link = 2 * model.num_layers * per_token / one_way / dp
        _add(out, "t_flop_s_per_token", "const", link)
        _add(out, "t_flop_high_s_per_token", "const", link)
    # attention: KV reads (or latent attention's FLOPs, if slower) and prompt attention FLOPs
    bf16 = "inv:" + unit_key("attn_eff", hw, engine)
    attn_peak = tp * hw.peak_flops
    read = kv_bytes_per_token_on(model, hw) / hbm
    if model.kv_lora_rank is not None and model.qk_rope_head_dim is not None:
        latent = 2 * model.kv_lora_rank + model.qk_rope_head_dim
        per_layer = 2 * model.num_attention_heads * latent
        flops = model.full_attention_layers * per_layer / attn_peak
        prior_mem, prior_gemm = PRIORS["mem_eff"][0], PRIORS["attn_eff"][0]
        if flops / prior_gemm > read / prior_mem:
            _add(out, "t_kv_s_per_token", bf16, flops / dp)
        else:
            _add(out, "t_kv_s_per_token", mem, read / dp)
    else:
        _add(out, "t_kv_s_per_token", mem, read / dp)
    v_head = model.v_head_dim or model.head_dim
    if model.is_moe:
        pair = 2 * model.num_layers * model.num_attention_heads * (model.head_dim + v_head)
    else:
        pair = 4 * model.num_layers * model.num_attention_heads * model.head_dim
    _add(out, "t_attn_s_per_token2", bf16, pair / attn_peak / dp)
    if model.is_moe:
        _expert_basis(out, model, hw, engine)
    return out


# DeepEP's published low-latency dispatch + combine latency by expert-parallel size (deepseek-ai/
# DeepEP README, MIT: 128 tokens per rank, hidden 7168, top-8; dispatch 77/118/155/173/192/194
# us and combine 114/195/273/314/369/360 us at EP 8/16/32/64/128/256): every rank signals and
# waits on more peers. Its growth over EP 8 scales `dispatch_s` (the level: fitted at EP <= 8).
EXCHANGE_EP = (8, 16, 32, 64, 128, 256)
EXCHANGE_US = (191.0, 313.0, 428.0, 487.0, 561.0, 554.0)


def exchange_growth(ep: int) -> float:
    """A dispatch-and-combine's latency at expert parallelism `ep` over its latency at EP 8
    (1 at 8 GPUs or fewer, one node's all-to-all; log-linear between DeepEP's sizes)."""
    if ep <= EXCHANGE_EP[0]:
        return 1.0
    if ep >= EXCHANGE_EP[-1]:
        return EXCHANGE_US[-1] / EXCHANGE_US[0]
    for i in range(1, len(EXCHANGE_EP)):
        if ep <= EXCHANGE_EP[i]:
            lo, hi = math.log2(EXCHANGE_EP[i - 1]), math.log2(EXCHANGE_EP[i])
            a = (math.log2(ep) - lo) / (hi - lo)
            us = EXCHANGE_US[i - 1] + a * (EXCHANGE_US[i] - EXCHANGE_US[i - 1])
            return us / EXCHANGE_US[0]
    return 1.0  # unreachable


def ridge_tokens(model: ModelSpec, hw: HardwareSpec) -> float:
    """The step's tokens (all data-parallel ranks') where the dense GEMMs turn from streaming
    their weights to computing: the datasheet's ridge, peak FLOP/s over HBM bytes/s times the
    weights' bytes per FLOP-pair (`peak * bytes per parameter / (2 * bandwidth)`: 295 tokens
    for bf16 or fp8 on an H100), per rank."""
    peak, _ = compute_peak(model.weight_dtype_name, hw)
    dense = model.dense_weight_bytes if model.is_moe else model.weight_bytes
    parameters = model.dense_parameters if model.is_moe else model.active_parameters
    per_parameter = dense / max(parameters, 1.0)
    return peak * per_parameter / (2.0 * hw.hbm_bandwidth_bytes_per_s) * hw.data_parallel


def _expert_basis(out: Basis, model: ModelSpec, hw: HardwareSpec, engine: str) -> None:
    """The `experts:` block's terms (sim/costs/expert_terms.py) as unit costs times counts."""
    g, layers = hw.stage_gpus, model.moe_layers
    dtype = model.expert_weight_dtype or model.weight_dtype_name
    peak, compute_dtype = compute_peak(dtype, hw)
    params = model.moe_layers * model.expert_parameters
    _add(
        out,
        "t_expert_read_s",
        "inv:" + unit_key("stream_eff", hw, engine, storage(dtype)),
        params * model.expert_bytes_per_parameter / hw.hbm_bandwidth_bytes_per_s,
    )
    gemm = unit_key("gemm_eff", hw, engine, dtype_label(dtype, compute_dtype))
    _add(out, "t_expert_pair_s", "inv:" + gemm, 2 * params / peak)
    if g == 1 or hw.data_parallel == 1:
        # one rank: every GPU holds every token, and the rank's second all-reduce per layer
        # combines the experts' outputs (expert parallel or split by tensor): no exchange
        return
    assert hw.interconnect_bandwidth_bytes_per_s is not None
    one_way = hw.interconnect_bandwidth_bytes_per_s / 2 * LINK_EFFICIENCY
    if hw.expert_parallel > 1:  # dispatch to the k experts' GPUs and combine back
        k = model.experts_per_token or 1
        sent = layers * k * model.hidden_size * (DISPATCH_BYTES + COMBINE_BYTES)
        per_token = sent * (g - 1) / g / g
        growth = exchange_growth(hw.expert_parallel)
        _add(out, "t_exchange_s", unit_key("dispatch_s", hw, engine), 2.0 * layers * growth)
    else:  # experts split by tensor over the ranks: gather the tokens, scatter the outputs
        per_token = float(layers * 2 * (g - 1) / g * model.hidden_size * ACTIVATION_BYTES)
        _add(out, "t_exchange_s", unit_key("allreduce_s", hw, engine), 2.0 * layers)
        _add(
            out,
            "t_exchange_s",
            unit_key("allreduce_peer_s", hw, engine),
            2.0 * layers * max(g - 2, 0),
        )
    seconds_per_byte = 1 / one_way
    domain = hw.scaleup_domain_gpus
    if g > domain:  # part of each exchange leaves the NVLink / Infinity Fabric domain
        assert hw.scaleout_bandwidth_bytes_per_s is not None  # check_parallelism
        outside = (g - domain) / (g - 1)
        scaleout = hw.scaleout_bandwidth_bytes_per_s * LINK_EFFICIENCY
        seconds_per_byte = max((1 - outside) / one_way, outside / scaleout)
        _add(out, "t_exchange_s", "const", 2.0 * layers * hw.scaleout_latency_s)
    _add(out, "t_exchange_s_per_token", "const", per_token * seconds_per_byte)


def prior(key: str) -> float:
    """A unit cost's stated prior (`PRIORS`), by its catalog key."""
    return PRIORS[key.split("@", 1)[0]][0]


@lru_cache(maxsize=1)
def _shipped_unit_costs() -> dict[str, float]:
    doc = yaml.safe_load(UNIT_COSTS_FILE.read_text())
    return {key: float(entry["value"]) for key, entry in doc["unit_costs"].items()}


_PINNED: list[dict[str, float]] = []  # `pinned_unit_costs`' stack, innermost last


def catalog_unit_costs() -> dict[str, float]:
    """The fitted unit costs shipped in `sim/costs/unit_costs.yaml` (key -> value), or those
    `pinned_unit_costs` holds."""
    return _PINNED[-1] if _PINNED else _shipped_unit_costs()


def reread_unit_costs() -> None:
    """Forget the shipped unit costs read so far: the next scenario reads the file again
    (after the fit rewrites it)."""
    _shipped_unit_costs.cache_clear()


@contextmanager
def pinned_unit_costs(costs: dict[str, float]) -> Iterator[None]:
    """Inside the block, scenarios priced by the default step model take `costs` instead of
    the shipped unit costs (a unit cost `costs` lacks takes its vendor's value or its prior,
    as `lookup` says): how calibration judges a fit that left a deployment out."""
    _PINNED.append(dict(costs))
    try:
        yield
    finally:
        _PINNED.pop()


def lookup(name: str, costs: dict[str, float]) -> tuple[float, str]:
    """A unit cost and where it comes from: fitted for its generation, else its vendor's
    fitted value (a GPU generation the fit had no deployment of), else its stated prior."""
    if name in costs:
        return costs[name], "fitted"
    parent = vendor_key(name)
    if parent is not None and parent in costs:
        return costs[parent], f"fitted for {parent}"
    return prior(name), "prior"


def value_of(key: str, costs: dict[str, float]) -> float:
    """One basis key's factor: `const` 1, an `inv:` efficiency's inverse, else the unit cost
    (`lookup`)."""
    if key == "const":
        return 1.0
    if key.startswith("inv:"):
        return 1.0 / lookup(key[4:], costs)[0]
    return lookup(key, costs)[0]


def evaluate(terms: Basis, costs: dict[str, float]) -> dict[str, float]:
    """Each coefficient's seconds: the basis with the unit costs put in."""
    return {c: sum(m * value_of(k, costs) for k, m in t.items()) for c, t in terms.items()}


def events_profile(
    model: ModelSpec,
    hw: HardwareSpec,
    engine: str = "vllm",
    costs: dict[str, float] | None = None,
    chosen: str = "named",
    overlapped: bool = False,
) -> Profile:
    """The extended-form profile of `model` on `hw` under `engine`, priced from counted events
    and the catalog's unit costs (or `costs`), with each term's provenance (`chosen`: whether
    the scenario named it, `profile: events`, or left `profile` unset: the default).
    `overlapped` (asynchronous scheduling): the host time per step hides behind the GPU's, a
    step taking max(GPU, host) (`pricing.cpu_overhead` with `overlap`)."""
    costs = catalog_unit_costs() if costs is None else costs
    terms = basis(model, hw, engine, overlapped)
    seconds = evaluate(terms, costs)
    coefficients = Coefficients(
        t_mem_s=seconds.get("t_mem_s", 0.0),
        t_flop_s_per_token=seconds.get("t_flop_s_per_token", 0.0),
        t_flop_high_s_per_token=seconds.get("t_flop_high_s_per_token", 0.0),
        ridge_tokens=ridge_tokens(model, hw),
        t_kv_s_per_token=seconds.get("t_kv_s_per_token", 0.0),
        t_attn_s_per_token2=seconds.get("t_attn_s_per_token2", 0.0),
    )
    experts = None
    if model.is_moe:
        experts = ExpertTerms(
            **expert_layout(model, hw),
            t_expert_read_s=seconds.get("t_expert_read_s", 0.0),
            t_expert_pair_s=seconds.get("t_expert_pair_s", 0.0),
            t_exchange_s_per_token=seconds.get("t_exchange_s_per_token", 0.0),
            t_exchange_s=seconds.get("t_exchange_s", 0.0),
        )
    used = sorted({k for t in terms.values() for k in t if k != "const"})
    pricing = None
    if overlapped:
        host = unit_key("host_s", hw, engine)
        used = sorted({*used, host})
        per_step = lookup(host, costs)[0]
        pricing = PricingSpec(cpu_overhead=CpuOverheadSpec(per_step_s=per_step, overlap=True))
    units: dict[str, Any] = {}
    for key in used:
        name = key.removeprefix("inv:")
        value, source = lookup(name, costs)
        units[name] = {"value": value, "source": source}
    provenance: dict[str, Any] = {
        "generator": f"{EVENTS_GENERATOR} (batchsim)",
        "step_model": STEP_MODEL_NOTE[chosen],
        "engine": engine,
        "generation": generation(hw),
        "kernels_per_step": kernels_per_step(model),
        "unit_costs": units,
        "unit_costs_file": "sim/costs/unit_costs.yaml",
        "counts": {c: dict(sorted(t.items())) for c, t in sorted(terms.items())},
        "host_time": "hidden behind the GPU's (asynchronous scheduling): max(GPU, host) per "
        "step" if overlapped else "added to the GPU's (a synchronous loop)",
        "date": None,
    }
    return Profile(
        schema_version=1,
        name=f"events-{engine}-{layout_stem(model, hw)}",
        source="roofline",
        model_form="two_regime",
        coefficients=coefficients,
        provenance=provenance,
        experts=experts,
        pricing=pricing,
    )
