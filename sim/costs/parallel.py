"""Roofline terms of a mixture-of-experts instance: data-parallel attention, experts, exchange.

An instance of a mixture-of-experts model has `data_parallel` (dp) attention ranks of
`tensor_parallel` (tp) GPUs each; the routed experts are spread over all `G = tp * dp` GPUs,
whole (`expert_parallel = G`: E / G experts per GPU) or split by tensor (`expert_parallel = 1`).

Per rank (the extended form's coefficients, as the aggregate of the dp ranks; sim/costs/
expert_terms.py scales them by the busiest rank's share):

* every step reads the dense weights (attention, dense layers, shared experts, embeddings) at
  the rank's bandwidth: `t_mem = dense_bytes / (tp * hbm * mem) + all-reduce latency + host`;
* every token multiplies through the dense parameters: `2 * dense_parameters / (tp * peak)`;
* KV reads: bytes per context token over the bandwidth, or with latent attention the larger of
  that and the absorbed attention's FLOPs per context token (`2 * heads * (2 * kv_lora_rank +
  qk_rope_head_dim)` per layer: decode attention over a latent is compute-bound on every GPU
  here), and prompt attention at `2 * layers * heads * (head_dim + v_head_dim)` FLOPs per pair.

Experts (the `experts:` block): one GPU reads a whole expert of every MoE layer in
`moe_layers * 3 * hidden * moe_intermediate * expert_bytes / (hbm * mem)` and computes one token
through it in `2 * moe_layers * 3 * hidden * moe_intermediate / (peak * flop)`, at the experts'
dtype's peak (fp8 or fp4 tensor cores where the GPU has them).

Exchange. With whole experts on G > 1 GPUs, each MoE layer dispatches every token to its k
experts and combines their outputs back (DeepEP-style: fp8 dispatch, bf16 combine, so 3 bytes
per hidden element and expert), of which `(G - 1) / G` leaves the GPU: per step token,
`moe_layers * k * hidden * 3 * (G - 1) / G / G` bytes per GPU (the mean GPU). Inside one
scale-up domain it crosses NVLink (one-way: half the datasheet's two-way figure, at the link
efficiency); with more GPUs than the domain holds the share bound for other domains crosses the
scale-out NIC, and the slower of the two sets the time. Each all-to-all also pays a latency: the
measured small-message all-reduce time of the node (the same figure as tensor parallelism's),
plus the scale-out latency when it leaves the domain; two per MoE layer. With experts split by
tensor over several ranks, each MoE layer gathers every rank's tokens and scatters the reduced
outputs back (2 (G - 1) / G * hidden * 2 bytes per token).
"""

from __future__ import annotations

from typing import Any

from sim.costs.catalog import FP4_DTYPES, HardwareSpec, ModelSpec, Placement, place
from sim.costs.expert_terms import ExpertTerms

ACTIVATION_BYTES = 2  # bf16 activations
DISPATCH_BYTES = 1  # fp8 dispatch (DeepEP's low-latency and normal kernels both send fp8)
COMBINE_BYTES = 2  # bf16 combine


def compute_peak(dtype: str, hw: HardwareSpec) -> tuple[float, str]:
    """Per-GPU peak FLOP/s of GEMMs with weights of `dtype`, and which peak it is: fp8 on fp8
    tensor cores, fp4 (MXFP4/NVFP4) on fp4 tensor cores, else dequantized to bf16."""
    if dtype == "fp8" and hw.fp8_peak_flops:
        return hw.fp8_peak_flops, "fp8"
    if dtype in FP4_DTYPES and hw.fp4_peak_flops:
        return hw.fp4_peak_flops, "fp4"
    return hw.peak_flops, "bf16"


def kv_seconds_per_token(
    model: ModelSpec,
    hw: HardwareSpec,
    bandwidth: float,
    attn_flops: float,
    placed: Placement | None = None,
) -> float:
    """Seconds one rank takes per context token a decode step attends to: its KV bytes over the
    rank's bandwidth, or with latent attention the absorbed attention's FLOPs if slower.
    (`placed`, here and below: `model` on `hw`, as resolved; else placed here.)"""
    if placed is None:
        placed = place(model, hw)
    read = placed.kv_bytes_per_token / bandwidth
    if model.kv_lora_rank is None or model.qk_rope_head_dim is None:
        return read
    per_layer = 2 * model.num_attention_heads * (2 * model.kv_lora_rank + model.qk_rope_head_dim)
    return max(read, placed.full_attention_layers * per_layer / attn_flops)


def exchange_terms(
    model: ModelSpec,
    hw: HardwareSpec,
    link_efficiency: float,
    latency_s: float,
    placed: Placement | None = None,
) -> tuple[float, float]:
    """(seconds per step token, seconds per step) of the expert layers' token exchange."""
    if placed is None:
        placed = place(model, hw)
    g, layers = placed.stage_gpus, placed.moe_layers
    if g == 1:
        return 0.0, 0.0
    assert hw.interconnect_bandwidth_bytes_per_s is not None  # expert_layout_problem
    scaleup = hw.interconnect_bandwidth_bytes_per_s / 2 * link_efficiency
    if hw.expert_parallel > 1:
        k = model.experts_per_token or 1
        per_token = (
            layers * k * model.hidden_size * (DISPATCH_BYTES + COMBINE_BYTES) * (g - 1) / g / g
        )
    elif hw.data_parallel > 1:
        per_token = float(layers * 2 * (g - 1) / g * model.hidden_size * ACTIVATION_BYTES)
    else:  # experts split by tensor on one rank: the rank's all-reduces already price it
        return 0.0, 0.0
    seconds_per_byte = 1 / scaleup
    latency = latency_s
    domain = hw.scaleup_domain_gpus
    if g > domain:
        assert hw.scaleout_bandwidth_bytes_per_s is not None  # expert_layout_problem
        outside = (g - domain) / (g - 1)
        scaleout = hw.scaleout_bandwidth_bytes_per_s * link_efficiency
        seconds_per_byte = max((1 - outside) / scaleup, outside / scaleout)
        latency += hw.scaleout_latency_s
    return per_token * seconds_per_byte, 2 * layers * latency


def expert_layout(
    model: ModelSpec, hw: HardwareSpec, placed: Placement | None = None
) -> dict[str, Any]:
    """The `experts:` block's layout fields: the routing and where the experts live."""
    if placed is None:
        placed = place(model, hw)
    assert model.num_experts is not None and model.experts_per_token is not None
    return {
        "num_experts": model.num_experts,
        "experts_per_token": model.experts_per_token,
        "hottest_share": model.expert_hottest_share,
        "expert_parallel": hw.expert_parallel,
        "gpus": placed.stage_gpus,
        "imbalance": hw.expert_imbalance,
        "data_parallel": hw.data_parallel,
        "redundant_experts": hw.redundant_experts,
    }


def expert_terms(
    model: ModelSpec,
    hw: HardwareSpec,
    *,
    mem_efficiency: float,
    flop_efficiency: float,
    link_efficiency: float,
    latency_s: float,
    placed: Placement | None = None,
) -> tuple[ExpertTerms, dict[str, Any]]:
    """The `experts:` block of `model` on `hw`, and the provenance of its terms."""
    if placed is None:
        placed = place(model, hw)
    assert model.num_experts is not None and model.experts_per_token is not None
    dtype = model.expert_weight_dtype or placed.weight_dtype_name
    peak, compute_dtype = compute_peak(dtype, hw)
    expert_params = placed.moe_layers * placed.expert_parameters
    per_token, per_step = exchange_terms(model, hw, link_efficiency, latency_s, placed)
    terms = ExpertTerms(
        **expert_layout(model, hw, placed),
        t_expert_read_s=expert_params
        * placed.expert_bytes_per_parameter
        / (hw.hbm_bandwidth_bytes_per_s * mem_efficiency),
        t_expert_pair_s=2 * expert_params / (peak * flop_efficiency),
        t_exchange_s_per_token=per_token,
        t_exchange_s=per_step,
    )
    provenance = {
        "expert_dtype": dtype,
        "expert_compute_dtype": compute_dtype,
        "formulas": {
            "t_expert_read_s": "moe_layers * 3 * hidden * moe_intermediate * expert_bytes "
            "/ (hbm_bandwidth * mem)",
            "t_expert_pair_s": "2 * moe_layers * 3 * hidden * moe_intermediate "
            f"/ ({compute_dtype} peak_flops * flop)",
            "t_exchange_s_per_token": "expert parallel: moe_layers * k * hidden * 3 bytes "
            "* (G - 1) / G / G over the link; tensor-split over ranks: moe_layers * 2 (G - 1) "
            "/ G * hidden * 2 bytes over the link",
            "t_exchange_s": "2 * moe_layers * (all-reduce latency + scale-out latency beyond "
            "the scale-up domain)",
        },
    }
    return terms, provenance
