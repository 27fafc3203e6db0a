"""Catalog mixture-of-experts, latent-attention and sliding-window models, and the newer dense
ones: parameter counts summed from each Hugging Face config.json's weight shapes, the active
counts the expert fields derive, the published totals and the KV bytes a token keeps."""

from __future__ import annotations

import pytest

from sim.costs.catalog import MODELS, ModelSpec


def gqa_attention(hidden: int, heads: int, kv_heads: int, head_dim: int) -> int:
    """q, k, v and o projections without biases."""
    q, kv = heads * head_dim, kv_heads * head_dim
    return hidden * q + 2 * hidden * kv + q * hidden


def gated_mlp(hidden: int, intermediate: int) -> int:
    return 3 * hidden * intermediate


def embeddings(vocab: int, hidden: int) -> int:
    """Untied input embedding and LM head, plus the final norm."""
    return 2 * vocab * hidden + hidden


def active_without_embedding(model: ModelSpec, vocab: int) -> int:
    return model.active_parameters - vocab * model.hidden_size


def test_deepseek_v3() -> None:
    # deepseek-ai/DeepSeek-V3 config.json
    vocab, hidden, layers, dense_layers, heads = 129280, 7168, 61, 3, 128
    q_lora, kv_lora, nope, rope, v_head = 1536, 512, 128, 64, 128
    experts, top_k, moe_inter, dense_inter = 256, 8, 2048, 18432
    attention = (
        hidden * q_lora + q_lora  # q_a_proj, q_a_layernorm
        + q_lora * heads * (nope + rope)  # q_b_proj
        + hidden * (kv_lora + rope) + kv_lora  # kv_a_proj_with_mqa, kv_a_layernorm
        + kv_lora * heads * (nope + v_head)  # kv_b_proj
        + heads * v_head * hidden  # o_proj
    )  # fmt: skip
    norms = 2 * hidden
    expert = gated_mlp(hidden, moe_inter)
    router = experts * hidden + experts  # gate weight and e_score_correction_bias
    moe_layer = attention + norms + router + (experts + 1) * expert  # one shared expert
    dense_layer = attention + norms + gated_mlp(hidden, dense_inter)
    moe_layers = layers - dense_layers
    total = dense_layers * dense_layer + moe_layers * moe_layer + embeddings(vocab, hidden)
    model = MODELS["deepseek-v3"]
    assert model.num_parameters == total
    assert model.num_parameters == pytest.approx(671e9, rel=0.01)  # card: 671B + 14B MTP
    assert (model.moe_layers, model.num_mtp_layers, model.weight_dtype) == (58, 1, "fp8")
    assert model.head_dim == nope + rope and model.v_head_dim == v_head
    assert model.routed_parameters == moe_layers * experts * expert
    # active: every dense part plus 8 routed experts a MoE layer; card: 37B
    assert model.active_parameters == total - moe_layers * (experts - top_k) * expert
    assert model.active_parameters == pytest.approx(37e9, rel=0.02)
    # latent attention: one 576-element latent a layer, 1 byte each at fp8 KV
    fp8_kv = ModelSpec.model_validate({"name": "deepseek-v3", "kv_dtype": "fp8"})
    assert fp8_kv.kv_bytes_per_token == 61 * 576 * 1 == 35_136
    assert model.kv_bytes_per_token == 61 * 576 * 2  # bf16 KV by default
    assert model.weight_bytes == total  # fp8: one byte a parameter


@pytest.mark.parametrize(
    ("name", "layers", "hidden", "heads", "kv_heads", "inter", "experts", "total", "active"),
    [
        # Qwen/Qwen3-235B-A22B config.json; card: 235B total, 22B active
        ("qwen3-235b-a22b", 94, 4096, 64, 4, 1536, 128, 235e9, 22e9),
        # Qwen/Qwen3-30B-A3B config.json; card: 30.5B total, 3.3B active
        ("qwen3-30b-a3b", 48, 2048, 32, 4, 768, 128, 30.5e9, 3.3e9),
    ],
)
def test_qwen3_moe(
    name: str,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    inter: int,
    experts: int,
    total: float,
    active: float,
) -> None:
    vocab, head_dim, top_k = 151936, 128, 8
    attention = gqa_attention(hidden, heads, kv_heads, head_dim) + 2 * head_dim  # q/k norms
    expert = gated_mlp(hidden, inter)
    layer = attention + 2 * hidden + experts * hidden + experts * expert  # norms, router
    count = layers * layer + embeddings(vocab, hidden)
    model = MODELS[name]
    assert model.num_parameters == count
    assert model.num_parameters == pytest.approx(total, rel=0.01)
    assert model.num_shared_experts == 0 and model.moe_layers == layers
    assert model.active_parameters == count - layers * (experts - top_k) * expert
    assert model.active_parameters == pytest.approx(active, rel=0.03)
    assert model.kv_bytes_per_token == layers * 2 * kv_heads * head_dim * 2


def test_qwen3_32b() -> None:
    # Qwen/Qwen3-32B config.json; card: 32.8B
    vocab, hidden, layers, heads, kv_heads, head_dim, inter = 151936, 5120, 64, 64, 8, 128, 25600
    layer = gqa_attention(hidden, heads, kv_heads, head_dim) + 2 * head_dim
    layer += gated_mlp(hidden, inter) + 2 * hidden
    count = layers * layer + embeddings(vocab, hidden)
    model = MODELS["qwen3-32b"]
    assert model.num_parameters == model.active_parameters == count
    assert model.num_parameters == pytest.approx(32.8e9, rel=0.01)
    assert not model.is_moe


@pytest.mark.parametrize(
    ("name", "layers", "experts", "total", "active"),
    [
        # openai/gpt-oss-120b config.json; model card: 116.83B total, 5.13B active
        ("gpt-oss-120b", 36, 128, 116.83e9, 5.13e9),
        # openai/gpt-oss-20b config.json; model card: 20.91B total, 3.61B active
        ("gpt-oss-20b", 24, 32, 20.91e9, 3.61e9),
    ],
)
def test_gpt_oss(name: str, layers: int, experts: int, total: float, active: float) -> None:
    vocab, hidden, heads, kv_heads, head_dim, inter, top_k = 201088, 2880, 64, 8, 64, 2880, 4
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = gqa_attention(hidden, heads, kv_heads, head_dim) + q + 2 * kv + hidden  # biases
    sinks = heads
    router = hidden * experts + experts
    expert_weights = gated_mlp(hidden, inter)
    expert_biases = 2 * inter + hidden  # gate_up_proj_bias and down_proj_bias
    layer = attention + sinks + 2 * hidden + router + experts * (expert_weights + expert_biases)
    count = layers * layer + embeddings(vocab, hidden)
    model = MODELS[name]
    assert model.num_parameters == count
    assert model.num_parameters == pytest.approx(total, rel=0.001)
    # derived: all but the unused experts' weights (their biases count as dense); the card's
    # active count also leaves out the input embedding (a lookup, no multiply)
    assert model.active_parameters == count - layers * (experts - top_k) * expert_weights
    assert active_without_embedding(model, vocab) == pytest.approx(active, rel=0.01)
    # MXFP4 experts (4.25 bits), bf16 rest: the published checkpoints' 60.8 and 12.8 GiB
    routed = layers * experts * expert_weights
    assert model.routed_parameters == routed
    assert model.weight_bytes == pytest.approx(routed * 4.25 / 8 + (count - routed) * 2)
    size_gib = {"gpt-oss-120b": 60.8, "gpt-oss-20b": 12.8}[name]
    assert model.weight_bytes / 2**30 == pytest.approx(size_gib, abs=0.1)
    # every second layer slides over 128 tokens; the other half keeps every token's KV
    per_layer = 2 * kv_heads * head_dim * 2
    assert model.num_sliding_layers == layers // 2
    assert model.kv_bytes_per_token == layers // 2 * per_layer
    assert model.sliding_kv_bytes_per_seq == layers // 2 * per_layer * 128


@pytest.mark.parametrize(
    ("name", "experts", "moe_every", "total", "published_total"),
    [
        # meta-llama/Llama-4-Scout-17B-16E config.json: every layer MoE; card: 109B with the
        # vision encoder (about 0.9B), 17B active
        ("llama-4-scout", 16, 1, 107_769_861_120, 109e9),
        # meta-llama/Llama-4-Maverick-17B-128E config.json: interleave_moe_layer_step 2; card:
        # 400B, 17B active
        ("llama-4-maverick", 128, 2, 400_711_848_960, 400e9),
    ],
)
def test_llama_4(
    name: str, experts: int, moe_every: int, total: int, published_total: float
) -> None:
    vocab, hidden, layers, heads, kv_heads, head_dim = 202048, 5120, 48, 40, 8, 128
    inter, inter_mlp = 8192, 16384
    attention = gqa_attention(hidden, heads, kv_heads, head_dim)  # QK L2 norm has no weights
    expert = gated_mlp(hidden, inter)
    moe_layer = attention + 2 * hidden + experts * hidden + (experts + 1) * expert  # shared
    dense_layer = attention + 2 * hidden + gated_mlp(hidden, inter_mlp)
    moe_layers = layers // moe_every
    count = moe_layers * moe_layer + (layers - moe_layers) * dense_layer
    count += embeddings(vocab, hidden)
    model = MODELS[name]
    assert model.num_parameters == count == total
    assert model.num_parameters == pytest.approx(published_total, rel=0.015)
    assert model.moe_layers == moe_layers and model.num_shared_experts == 1
    assert model.active_parameters == count - moe_layers * (experts - 1) * expert
    assert model.active_parameters == pytest.approx(17e9, rel=0.02)
    # chunked attention (8192) in 3 of 4 layers, as sliding windows; 12 global layers
    assert (model.num_sliding_layers, model.sliding_window) == (36, 8192)
    assert model.kv_bytes_per_token == 12 * 2 * kv_heads * head_dim * 2


@pytest.mark.parametrize(
    ("name", "vocab", "hidden", "layers", "heads", "inter", "total", "active"),
    [
        # mistralai/Mixtral-8x7B-v0.1 config.json; card: 46.7B total, 12.9B active
        ("mixtral-8x7b", 32000, 4096, 32, 32, 14336, 46.7e9, 12.9e9),
        # mistralai/Mixtral-8x22B-v0.1 config.json; card: 141B total, 39B active
        ("mixtral-8x22b", 32000, 6144, 56, 48, 16384, 141e9, 39e9),
    ],
)
def test_mixtral(
    name: str,
    vocab: int,
    hidden: int,
    layers: int,
    heads: int,
    inter: int,
    total: float,
    active: float,
) -> None:
    experts, top_k, kv_heads, head_dim = 8, 2, 8, 128
    expert = gated_mlp(hidden, inter)
    layer = gqa_attention(hidden, heads, kv_heads, head_dim) + 2 * hidden + experts * hidden
    count = layers * (layer + experts * expert) + embeddings(vocab, hidden)
    model = MODELS[name]
    assert model.num_parameters == count
    assert model.num_parameters == pytest.approx(total, rel=0.01)
    derived = count - layers * (experts - top_k) * expert
    assert model.active_parameters == derived
    assert model.active_parameters == pytest.approx(active, rel=0.01)
    # the expert fields alone give the same active count as a stated one
    assert model.model_copy(update={"num_active_parameters": None}).active_parameters == derived


def test_llama_3_3_70b_is_llama_3_70b_with_long_context() -> None:
    # meta-llama/Llama-3.3-70B-Instruct config.json: vocab 128256, intermediate 28672
    vocab, hidden, layers, heads, kv_heads, head_dim, inter = 128256, 8192, 80, 64, 8, 128, 28672
    layer = gqa_attention(hidden, heads, kv_heads, head_dim) + gated_mlp(hidden, inter)
    count = layers * (layer + 2 * hidden) + embeddings(vocab, hidden)
    new, old = MODELS["llama-3.3-70b"], MODELS["llama-3-70b"]
    assert new.num_parameters == old.num_parameters == count
    assert new.num_parameters == pytest.approx(70e9, rel=0.01)
    assert (new.max_model_len, old.max_model_len) == (131072, 8192)
