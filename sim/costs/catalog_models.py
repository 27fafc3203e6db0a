"""The catalog's models: dimensions from each model's published configuration (source per row).

A data table (`sim.costs.catalog.ModelSpec` reads it); the field meanings are ModelSpec's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Real configs (Hugging Face `config.json`); parameter counts include embeddings and LM head
# (untied in every model here), checked by summing the weight shapes of each architecture
# (tests/costs/test_catalog_models.py does the sums from vocab and intermediate sizes;
# tests/costs/test_catalog_moe_models.py those of the mixture-of-experts, latent-attention and
# sliding-window models). A mixture of experts without num_active_parameters derives its active
# count from the expert fields (ModelSpec.active_parameters): the input embedding counts as
# active there, as in every dense model here, while some model cards leave it out.
MODEL_TABLE: dict[str, dict[str, Any]] = {
    "llama-2-7b": dict(
        num_parameters=6_738_415_616,
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_kv_heads=32,
        head_dim=128,
        max_model_len=4096,
    ),
    "llama-2-13b": dict(
        num_parameters=13_015_864_320,
        num_layers=40,
        hidden_size=5120,
        num_attention_heads=40,
        num_kv_heads=40,
        head_dim=128,
        max_model_len=4096,
    ),
    # meta-llama/Llama-2-70b-hf: vocab 32000, intermediate 28672, GQA with 8 KV heads
    "llama-2-70b": dict(
        num_parameters=68_976_648_192,
        num_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_kv_heads=8,
        head_dim=128,
        max_model_len=4096,
    ),
    "llama-3-8b": dict(
        num_parameters=8_030_261_248,
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_kv_heads=8,
        head_dim=128,
        max_model_len=8192,
    ),
    "llama-3-70b": dict(
        num_parameters=70_553_706_496,
        num_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_kv_heads=8,
        head_dim=128,
        max_model_len=8192,
    ),
    # Mistral-7B-v0.1: 32k positions (its 4k sliding window is not modelled: KV is kept in full)
    "mistral-7b": dict(
        num_parameters=7_241_732_096,
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_kv_heads=8,
        head_dim=128,
        max_model_len=32768,
    ),
    # codellama/CodeLlama-34b-hf (and -Instruct-hf): vocab 32000, intermediate 22016, GQA with 8
    # KV heads, 16k positions (rope theta 1e6)
    "codellama-34b": dict(
        num_parameters=33_743_970_304,
        num_layers=48,
        hidden_size=8192,
        num_attention_heads=64,
        num_kv_heads=8,
        head_dim=128,
        max_model_len=16384,
    ),
    # mistralai/Mixtral-8x7B-v0.1: vocab 32000, 8 experts of intermediate 14336, top-2 routing.
    # Total 46.7B (all experts: memory); active 12.9B (attention, router, 2 experts, embeddings),
    # which the expert fields below also give (dense part + 32 layers x 2 experts).
    "mixtral-8x7b": dict(
        num_parameters=46_702_792_704,
        num_active_parameters=12_879_925_248,
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_kv_heads=8,
        head_dim=128,
        max_model_len=32768,
        num_experts=8,
        experts_per_token=2,
        moe_intermediate_size=14336,
    ),
    # Qwen/Qwen2.5-7B: vocab 152064, intermediate 18944, QKV biases, untied LM head; 32k in the
    # config (128k needs YaRN rope scaling, not modelled)
    "qwen2.5-7b": dict(
        num_parameters=7_615_616_512,
        num_layers=28,
        hidden_size=3584,
        num_attention_heads=28,
        num_kv_heads=4,
        head_dim=128,
        max_model_len=32768,
    ),
    # Qwen/Qwen2.5-72B: vocab 152064, intermediate 29568, QKV biases, untied LM head
    "qwen2.5-72b": dict(
        num_parameters=72_706_203_648,
        num_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_kv_heads=8,
        head_dim=128,
        max_model_len=32768,
    ),
    # Hugging Face deepseek-ai/DeepSeek-V3 config.json (DeepSeek-R1 has the same architecture and
    # stands for it): 61 layers, the first 3 dense (first_k_dense_replace 3, intermediate 18432),
    # 58 MoE layers of 256 routed experts (moe_intermediate_size 2048, top-8) and 1 shared
    # expert; multi-head latent attention with q_lora_rank 1536, kv_lora_rank 512,
    # qk_nope_head_dim 128 + qk_rope_head_dim 64 = head_dim 192, v_head_dim 128 (num_kv_heads 128
    # is the config's; the KV cache holds the 576-element latent instead); vocab 129280; FP8
    # checkpoint (128 x 128 block scales, 0.02% more, not counted). num_parameters is the main
    # model's 671.0B; the one multi-token-prediction module (num_mtp_layers, about 13.5B more:
    # one MoE layer, its projection, embedding and head copies) is left out, as the model card's
    # "671B" does. Active: 37.6B derived (the card says 37B).
    "deepseek-v3": dict(
        num_parameters=671_026_419_200,
        num_layers=61,
        hidden_size=7168,
        num_attention_heads=128,
        num_kv_heads=128,
        head_dim=192,
        max_model_len=163840,
        weight_dtype="fp8",
        num_experts=256,
        experts_per_token=8,
        num_shared_experts=1,
        moe_intermediate_size=2048,
        num_moe_layers=58,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        v_head_dim=128,
        num_mtp_layers=1,
    ),
    # Hugging Face Qwen/Qwen3-235B-A22B config.json: vocab 151936, 94 layers, every one MoE
    # (128 experts of moe_intermediate_size 1536, top-8, no shared expert), 64 query heads and 4
    # KV heads of head_dim 128 (the config's, not hidden / heads), q/k RMSNorms, 40960 positions
    # (131072 needs YaRN rope scaling, not modelled). Card: 235B total, 22B active.
    "qwen3-235b-a22b": dict(
        num_parameters=235_093_634_560,
        num_layers=94,
        hidden_size=4096,
        num_attention_heads=64,
        num_kv_heads=4,
        head_dim=128,
        max_model_len=40960,
        num_experts=128,
        experts_per_token=8,
        moe_intermediate_size=1536,
    ),
    # Hugging Face Qwen/Qwen3-30B-A3B config.json: vocab 151936, 48 MoE layers of 128 experts
    # (moe_intermediate_size 768, top-8, no shared expert), 32 query and 4 KV heads of 128.
    # Card: 30.5B total, 3.3B active.
    "qwen3-30b-a3b": dict(
        num_parameters=30_532_122_624,
        num_layers=48,
        hidden_size=2048,
        num_attention_heads=32,
        num_kv_heads=4,
        head_dim=128,
        max_model_len=40960,
        num_experts=128,
        experts_per_token=8,
        moe_intermediate_size=768,
    ),
    # Hugging Face openai/gpt-oss-120b config.json: vocab 201088, hidden 2880, 36 layers of 128
    # experts (intermediate_size 2880, top-4), 64 query and 8 KV heads of head_dim 64, biases on
    # attention, router and experts (counted here: 40M of the experts' are bf16 outside the
    # MXFP4 blocks), layer_types alternating sliding_attention (window 128) and full_attention,
    # 131072 positions (YaRN from 4096, as the config states them). The routed experts' weights
    # are MXFP4, the rest bf16 (quantization_config). The per-head attention sinks (64 numbers a
    # layer) are counted but their effect on compute and KV is negligible and not modelled. Card:
    # 116.83B total; 5.13B active counts neither the input embedding nor unused expert biases
    # (5.75B derived here with them).
    "gpt-oss-120b": dict(
        num_parameters=116_829_156_672,
        num_layers=36,
        hidden_size=2880,
        num_attention_heads=64,
        num_kv_heads=8,
        head_dim=64,
        max_model_len=131072,
        num_experts=128,
        experts_per_token=4,
        moe_intermediate_size=2880,
        expert_weight_dtype="mxfp4",
        sliding_window=128,
        num_sliding_layers=18,
    ),
    # Hugging Face openai/gpt-oss-20b config.json: as gpt-oss-120b with 24 layers of 32 experts
    # (top-4). Card: 20.91B total, 3.61B active without the input embedding (4.19B derived).
    "gpt-oss-20b": dict(
        num_parameters=20_914_757_184,
        num_layers=24,
        hidden_size=2880,
        num_attention_heads=64,
        num_kv_heads=8,
        head_dim=64,
        max_model_len=131072,
        num_experts=32,
        experts_per_token=4,
        moe_intermediate_size=2880,
        expert_weight_dtype="mxfp4",
        sliding_window=128,
        num_sliding_layers=12,
    ),
    # Hugging Face meta-llama/Llama-4-Scout-17B-16E config.json (text_config): vocab 202048,
    # hidden 5120, 48 layers, every one MoE (interleave_moe_layer_step 1) with 16 experts of
    # intermediate_size 8192, top-1, plus one shared expert of the same width; 40 query and 8 KV
    # heads of 128 (QK L2 norm without weights). Three layers in four use chunked local
    # attention (attention_chunk_size 8192; every fourth is global without RoPE): modelled as a
    # sliding window of 8192 on 36 layers, an approximation (a chunk attends back 0 to 8191
    # tokens, a window always 8192). The text decoder only: the card's 109B also counts the
    # vision encoder (about 0.9B). Card: 17B active.
    "llama-4-scout": dict(
        num_parameters=107_769_861_120,
        num_layers=48,
        hidden_size=5120,
        num_attention_heads=40,
        num_kv_heads=8,
        head_dim=128,
        max_model_len=10_485_760,
        num_experts=16,
        experts_per_token=1,
        num_shared_experts=1,
        moe_intermediate_size=8192,
        sliding_window=8192,
        num_sliding_layers=36,
    ),
    # Hugging Face meta-llama/Llama-4-Maverick-17B-128E config.json (text_config): as Scout with
    # 128 experts, and MoE only in every second layer (interleave_moe_layer_step 2: 24 of 48;
    # the other 24 have a dense MLP of intermediate_size_mlp 16384); 1048576 positions; chunked
    # attention modelled as for Scout. Text decoder only. Card: 400B total, 17B active.
    "llama-4-maverick": dict(
        num_parameters=400_711_848_960,
        num_layers=48,
        hidden_size=5120,
        num_attention_heads=40,
        num_kv_heads=8,
        head_dim=128,
        max_model_len=1_048_576,
        num_experts=128,
        experts_per_token=1,
        num_shared_experts=1,
        moe_intermediate_size=8192,
        num_moe_layers=24,
        sliding_window=8192,
        num_sliding_layers=36,
    ),
    # Hugging Face mistralai/Mixtral-8x22B-v0.1 config.json: vocab 32000, hidden 6144, 56
    # layers of 8 experts (intermediate 16384, top-2), 48 query and 8 KV heads of 128, 65536
    # positions (Mixtral-8x22B-Instruct-v0.1's vocab of 32768 adds 9.4M). Card: 141B total, 39B
    # active.
    "mixtral-8x22b": dict(
        num_parameters=140_620_634_112,
        num_layers=56,
        hidden_size=6144,
        num_attention_heads=48,
        num_kv_heads=8,
        head_dim=128,
        max_model_len=65536,
        num_experts=8,
        experts_per_token=2,
        moe_intermediate_size=16384,
    ),
    # Hugging Face meta-llama/Llama-3.3-70B-Instruct config.json: the Llama-3-70B architecture
    # (vocab 128256, intermediate 28672) with 131072 positions (llama3 rope scaling).
    "llama-3.3-70b": dict(
        num_parameters=70_553_706_496,
        num_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_kv_heads=8,
        head_dim=128,
        max_model_len=131072,
    ),
    # Hugging Face Qwen/Qwen3-32B config.json: vocab 151936, 64 layers, intermediate 25600, 64
    # query and 8 KV heads of head_dim 128, q/k RMSNorms, no biases, untied LM head, 40960
    # positions. Card: 32.8B.
    "qwen3-32b": dict(
        num_parameters=32_762_123_264,
        num_layers=64,
        hidden_size=5120,
        num_attention_heads=64,
        num_kv_heads=8,
        head_dim=128,
        max_model_len=40960,
    ),
}


# Models read from the config.json their checkpoints publish (sim/costs/configs/, sources in its
# README.md), by the reader a scenario's `model: {config: ...}` uses (sim/costs/hf_config.py):
# their parameter counts are summed from the weight shapes the file implies.
CONFIGS_DIR = Path(__file__).parent / "configs"
CONFIG_MODELS = ("kimi-k2", "glm-4.5", "glm-4.5-air")


def _config_models() -> dict[str, dict[str, Any]]:
    from sim.costs.hf_config import load_model_config  # a reader, not a table: imported here

    out = {}
    for name in CONFIG_MODELS:
        fields = load_model_config(f"{name}.json", CONFIGS_DIR, name)
        del fields["name"], fields["config"]  # a catalog name, not a file a scenario gave
        out[name] = fields
    return out


MODEL_TABLE.update(_config_models())
