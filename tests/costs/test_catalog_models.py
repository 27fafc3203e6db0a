"""Catalog models: parameter counts summed from the Hugging Face configs' weight shapes."""

from __future__ import annotations

from typing import Any

import pytest

from sim.costs.catalog import MODELS


def dense_params(
    *,
    vocab: int,
    hidden: int,
    layers: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    intermediate: int,
    qkv_bias: bool = False,
    experts: int = 1,
) -> tuple[int, int]:
    """(total, per-token active with top-2 routing when experts > 1) of a Llama-style decoder:
    untied embedding and LM head, RMSNorm weights, gated MLP (gate, up, down)."""
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = hidden * q + 2 * hidden * kv + q * hidden
    if qkv_bias:
        attention += q + 2 * kv
    mlp = 3 * hidden * intermediate
    norms = 2 * hidden
    router = hidden * experts if experts > 1 else 0
    outside = 2 * vocab * hidden + hidden  # embedding, LM head, final norm
    total = layers * (attention + experts * mlp + router + norms) + outside
    active_experts = min(experts, 2)
    active = layers * (attention + active_experts * mlp + router + norms) + outside
    return total, active


@pytest.mark.parametrize(
    ("name", "config"),
    [
        # meta-llama/Llama-2-70b-hf config.json
        ("llama-2-70b", dict(vocab=32000, hidden=8192, layers=80, heads=64, kv_heads=8,
                             head_dim=128, intermediate=28672)),
        # codellama/CodeLlama-34b-Instruct-hf config.json
        ("codellama-34b", dict(vocab=32000, hidden=8192, layers=48, heads=64, kv_heads=8,
                               head_dim=128, intermediate=22016)),
        # meta-llama/Meta-Llama-3-70B config.json
        ("llama-3-70b", dict(vocab=128256, hidden=8192, layers=80, heads=64, kv_heads=8,
                             head_dim=128, intermediate=28672)),
        # Qwen/Qwen2.5-7B config.json: biases on q, k, v only
        ("qwen2.5-7b", dict(vocab=152064, hidden=3584, layers=28, heads=28, kv_heads=4,
                            head_dim=128, intermediate=18944, qkv_bias=True)),
        ("qwen2.5-72b", dict(vocab=152064, hidden=8192, layers=80, heads=64, kv_heads=8,
                             head_dim=128, intermediate=29568, qkv_bias=True)),
        # mistralai/Mixtral-8x7B-v0.1 config.json: 8 local experts, 2 per token
        ("mixtral-8x7b", dict(vocab=32000, hidden=4096, layers=32, heads=32, kv_heads=8,
                              head_dim=128, intermediate=14336, experts=8)),
    ],
)  # fmt: skip
def test_parameter_counts_add_up(name: str, config: dict[str, Any]) -> None:
    model = MODELS[name]
    total, active = dense_params(**config)
    assert model.num_parameters == total
    assert model.active_parameters == active
    assert (model.num_layers, model.num_kv_heads) == (config["layers"], config["kv_heads"])
    assert model.hidden_size == config["hidden"]


def test_published_sizes_and_gqa() -> None:
    assert MODELS["mixtral-8x7b"].num_parameters == 46_702_792_704  # "46.7B"
    assert MODELS["mixtral-8x7b"].num_active_parameters == 12_879_925_248  # "12.9B active"
    assert MODELS["qwen2.5-7b"].num_parameters == 7_615_616_512  # "7.61B"
    assert MODELS["qwen2.5-72b"].num_parameters == 72_706_203_648  # "72.7B"
    assert MODELS["llama-2-70b"].num_parameters == 68_976_648_192  # "69B"
    assert MODELS["codellama-34b"].num_parameters == 33_743_970_304  # "33.7B"
    # grouped-query attention: KV heads per model (Llama-2-7B/13B are plain multi-head)
    kv_heads = {m.name: m.num_kv_heads for m in MODELS.values()}
    assert kv_heads == {
        "llama-2-7b": 32, "llama-2-13b": 40, "llama-2-70b": 8, "llama-3-8b": 8,
        "llama-3-70b": 8, "codellama-34b": 8, "mistral-7b": 8, "mixtral-8x7b": 8, "qwen2.5-7b": 4,
        "qwen2.5-72b": 8, "deepseek-v3": 128, "qwen3-235b-a22b": 4, "qwen3-30b-a3b": 4,
        "gpt-oss-120b": 8, "gpt-oss-20b": 8, "llama-4-scout": 8, "llama-4-maverick": 8,
        "mixtral-8x22b": 8, "llama-3.3-70b": 8, "qwen3-32b": 8, "kimi-k2": 64, "glm-4.5": 8,
        "glm-4.5-air": 8,
    }  # fmt: skip
    # only the mixtures of experts have fewer active than total parameters
    assert [m.name for m in MODELS.values() if m.active_parameters < m.num_parameters] == [
        "mixtral-8x7b", "deepseek-v3", "qwen3-235b-a22b", "qwen3-30b-a3b", "gpt-oss-120b",
        "gpt-oss-20b", "llama-4-scout", "llama-4-maverick", "mixtral-8x22b", "kimi-k2", "glm-4.5",
        "glm-4.5-air",
    ]  # fmt: skip
    assert all(m.is_moe == (m.active_parameters < m.num_parameters) for m in MODELS.values())
