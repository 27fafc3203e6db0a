"""Kernels a decode step launches: each layer's by its type (grouped-query or latent attention,
dense MLP, routed experts, shared experts), plus the step's own. The events profile
(`sim.costs.step_events`) charges each one `kernel_s`, the launch-and-tail floor of one small
kernel on a GPU generation.
"""

from __future__ import annotations

from sim.costs.catalog import ModelSpec

# Kernels one layer launches in a decode step, by layer type, as the engines' model code runs
# them (vLLM vllm/model_executor/models/llama.py, gpt_oss.py, deepseek_v2.py and
# layers/fused_moe; SGLang python/sglang/srt/models/deepseek_v2.py runs the same sequence):
LAYER_KERNELS: dict[str, int] = {
    # fused add + RMSNorm, QKV GEMM, rotary embedding, KV-cache write, attention, O GEMM
    "attention_gqa": 6,
    # fused add + RMSNorm, fused q_a/kv_a GEMM, q_a and kv_a RMSNorms, q_b GEMM, rotary, W_UK
    # batched GEMM (absorbed), KV-cache write, latent attention (split-KV kernel and combine),
    # W_UV batched GEMM, O GEMM
    "attention_mla": 12,
    # fused add + RMSNorm, gate_up GEMM, SiLU-and-mul, down GEMM
    "mlp_dense": 4,
    # fused add + RMSNorm, router GEMM, top-k softmax, block alignment (moe_align_block_size),
    # grouped GEMM 1, activation, grouped GEMM 2, weighted sum of the k outputs
    "moe": 8,
    # the shared expert's gate_up GEMM, activation and down GEMM
    "shared_expert": 3,
}
# per step: embedding, final RMSNorm, LM head GEMM, logits processing, softmax, sampling
STEP_KERNELS = 6


def kernels_per_step(model: ModelSpec) -> int:
    """Kernels one decode step launches: every layer's by type, plus the step's own."""
    attention = "attention_mla" if model.kv_lora_rank is not None else "attention_gqa"
    moe_layers = model.moe_layers
    dense_layers = model.num_layers - moe_layers
    per_moe = LAYER_KERNELS["moe"] + (
        LAYER_KERNELS["shared_expert"] if model.num_shared_experts else 0
    )
    return (
        model.num_layers * LAYER_KERNELS[attention]
        + dense_layers * LAYER_KERNELS["mlp_dense"]
        + moe_layers * per_moe
        + STEP_KERNELS
    )
