"""The catalog's models: dimensions from each model's published configuration (source per row).

A data table (`sim.costs.catalog.ModelSpec` reads it); the field meanings are ModelSpec's.
"""

from __future__ import annotations

from typing import Any

# Real configs (Hugging Face `config.json`); parameter counts include embeddings and LM head
# (untied in every model here), checked by summing the weight shapes of each architecture
# (tests/costs/test_catalog_models.py does the sums from vocab and intermediate sizes).
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
    # Total 46.7B (all experts: memory); active 12.9B (attention, router, 2 experts, embeddings).
    "mixtral-8x7b": dict(
        num_parameters=46_702_792_704,
        num_active_parameters=12_879_925_248,
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_kv_heads=8,
        head_dim=128,
        max_model_len=32768,
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
}
