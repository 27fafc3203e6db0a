"""The catalog's models read from their shipped config.json (sim/costs/configs/): each one's
parameter count summed by hand from its config's shapes, against its model card's total and
active figures, and the KV bytes a token keeps."""

from __future__ import annotations

import json

import pytest

from sim.costs.catalog import MODELS, ModelSpec
from sim.costs.catalog_models import CONFIG_MODELS, CONFIGS_DIR


def gated(hidden: int, width: int) -> int:
    return 3 * hidden * width


def test_every_config_model_is_in_the_catalog_and_says_what_it_leaves_out() -> None:
    for name in CONFIG_MODELS:
        config = json.loads((CONFIGS_DIR / f"{name}.json").read_text())
        assert MODELS[name].max_model_len == config["max_position_embeddings"]
    assert MODELS["kimi-k2"].unmapped == (
        "rope_scaling yarn x32 (max_model_len is the stated 131,072 positions)"
    )


def test_kimi_k2() -> None:
    # DeepSeek-V3's layout: latent attention, 1 dense layer then 60 MoE layers of 384 experts
    # (top-8) and one shared expert, a router with its correction bias; 64 heads; fp8 weights
    vocab, h, heads = 163840, 7168, 64
    q_lora, kv_lora, nope, rope, v = 1536, 512, 128, 64, 128
    attention = (h * q_lora + q_lora + q_lora * heads * (nope + rope) + h * (kv_lora + rope)
                 + kv_lora + kv_lora * heads * (nope + v) + heads * v * h)  # fmt: skip
    moe = 384 * gated(h, 2048) + gated(h, 2048) + 384 * h + 384
    total = (attention + 2 * h + gated(h, 18432)) + 60 * (attention + 2 * h + moe)  # 61 layers
    total += 2 * vocab * h + h
    model = MODELS["kimi-k2"]
    assert model.num_parameters == total
    assert model.num_parameters == pytest.approx(1.0e12, rel=0.03)  # card: "1T total"
    # card: 32B activated (derived 32.9B counts the input embedding, 1.2B, as every model here)
    assert model.active_parameters - vocab * h == pytest.approx(32e9, rel=0.02)
    assert (model.weight_dtype, model.moe_layers, model.num_mtp_layers) == ("fp8", 60, 0)
    assert model.kv_bytes_per_token == 61 * (512 + 64) * 2  # the latent and the rope key, bf16
    fp8 = ModelSpec.model_validate({"name": "kimi-k2", "kv_dtype": "fp8"})
    assert fp8.kv_bytes_per_token == 61 * 576


@pytest.mark.parametrize(
    ("name", "h", "layers", "dense", "experts", "width", "inter", "qk_norm", "total", "active"),
    [
        # card: 355B total, 32B active (the one MTP layer, about 3.8B, is left out here)
        ("glm-4.5", 5120, 92, 3, 160, 1536, 12288, True, 355e9, 32e9),
        # card: 106B total, 12B active
        ("glm-4.5-air", 4096, 46, 1, 128, 1408, 10944, False, 106e9, 12e9),
    ],
)
def test_glm_4_5(name: str, h: int, layers: int, dense: int, experts: int, width: int,
                 inter: int, qk_norm: bool, total: float, active: float) -> None:  # fmt: skip
    vocab, heads, kv_heads, head_dim = 151552, 96, 8, 128
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = h * q + 2 * h * kv + q * h + q + 2 * kv  # q, k and v biases, no o bias
    attention += 2 * head_dim if qk_norm else 0
    moe = experts * gated(h, width) + gated(h, width) + experts * h + experts
    summed = dense * (attention + 2 * h + gated(h, inter))
    summed += (layers - dense) * (attention + 2 * h + moe) + 2 * vocab * h + h
    model = MODELS[name]
    assert model.num_parameters == summed
    assert model.num_parameters == pytest.approx(total, rel=0.01)
    # GLM's cards count neither the embedding nor the LM head among the active parameters
    assert model.active_parameters - 2 * vocab * h == pytest.approx(active, rel=0.02)
    assert model.num_mtp_layers == 1 and model.moe_layers == layers - dense
    assert model.kv_bytes_per_token == layers * 2 * kv_heads * head_dim * 2  # GQA, bf16
