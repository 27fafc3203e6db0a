"""Mixture-of-experts step cost: distinct experts touched, the two regimes, expert and data
parallelism, latent attention, fp4 and sliding windows (sim/costs/moe.py, parallel.py)."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import numpy as np
import pytest

from sim.costs.catalog import (
    HardwareSpec,
    ModelSpec,
    kv_bytes_per_token_on,
    kv_capacity_blocks,
    stored_weight_bytes,
)
from sim.costs.cost_model import CostModel, ExpertCostModel
from sim.costs.expert_terms import ExpertStepCost, ExpertTerms
from sim.costs.fits import check_fits
from sim.costs.moe import ExpertRouting, expected_distinct, replica_shares, routing_shares
from sim.costs.parallel import compute_peak, exchange_terms
from sim.costs.pricer import make_cost_model
from sim.costs.profile import (
    HOST_STEP_S,
    ROOFLINE_FLOP_EFFICIENCY,
    ROOFLINE_LINK_EFFICIENCY,
    ROOFLINE_MEM_EFFICIENCY,
    roofline_profile,
)

MEM, FLOP = ROOFLINE_MEM_EFFICIENCY, ROOFLINE_FLOP_EFFICIENCY

# a DeepSeek-V3-shaped model (dimensions of its config.json), explicit so the test stands alone
DEEPSEEK = dict(
    name="ds-like", num_parameters=671_026_419_712, num_layers=61, hidden_size=7168,
    num_attention_heads=128, num_kv_heads=128, head_dim=192, v_head_dim=128,
    max_model_len=163_840, num_experts=256, experts_per_token=8, num_shared_experts=1,
    moe_intermediate_size=2048, num_moe_layers=58, kv_lora_rank=512, qk_rope_head_dim=64,
    weight_dtype="fp8", kv_dtype="fp8",
)  # fmt: skip
SMALL_MOE = dict(
    name="small-moe", num_parameters=4_000_000_000, num_layers=16, hidden_size=2048,
    num_attention_heads=16, num_kv_heads=4, head_dim=128, max_model_len=8192, num_experts=32,
    experts_per_token=4, moe_intermediate_size=1024,
)  # fmt: skip
GPU = dict(
    name="gpu-x", memory_bytes=80 * 2**30, hbm_bandwidth_bytes_per_s=3e12, peak_flops=1e15,
    fp8_peak_flops=2e15, interconnect_bandwidth_bytes_per_s=900e9,
)  # fmt: skip


def features(n: int, seqs: int, context: int = 0) -> SimpleNamespace:
    return SimpleNamespace(
        num_seqs=seqs, num_tokens=n, num_prefill_tokens=0, sum_context_tokens=context,
        prefill_attention_term=0, context_growth_per_step=seqs, attention_growth_per_step=0,
        chunks=(),
    )  # fmt: skip


def sampled_distinct(q: np.ndarray, tokens: int, steps: int, rng: np.random.Generator) -> float:
    """Mean distinct experts over `steps` sampled steps of a router that picks exactly
    sum(q) distinct experts per token, expert i with probability q_i (systematic sampling
    over a shuffled order: exact marginals, no expert twice)."""
    e, k = len(q), round(q.sum())
    total = 0
    for _ in range(steps):
        touched = np.zeros(e, dtype=bool)
        for _ in range(tokens):
            order = rng.permutation(e)
            edges = np.cumsum(q[order])
            points = rng.random() + np.arange(k)
            touched[order[np.searchsorted(edges, points, side="right")]] = True
        total += touched.sum()
    return total / steps


@pytest.mark.parametrize(("e", "k", "tokens"), [(16, 2, 3), (64, 6, 5), (64, 6, 40), (32, 8, 9)])
def test_expected_distinct_experts_match_a_sampled_uniform_router(e, k, tokens) -> None:
    rng = np.random.default_rng(1)
    q = np.full(e, k / e)
    formula = expected_distinct(q, tokens)
    assert formula == pytest.approx(e * (1 - (1 - k / e) ** tokens), rel=1e-12)
    steps = 600
    sample = sampled_distinct(q, tokens, steps, rng)
    # distinct count has variance at most e^2 / 4; 4 standard errors of the mean
    assert abs(sample - formula) < 4 * (e / 2) / math.sqrt(steps)
    assert abs(sample - formula) / formula < 0.03


def test_expected_distinct_experts_match_a_sampled_skewed_router() -> None:
    rng = np.random.default_rng(2)
    e, k, share = 32, 4, 0.12
    p = routing_shares(e, share)
    assert p[0] == pytest.approx(share, rel=1e-9) and p.sum() == pytest.approx(1.0)
    assert np.all(np.diff(p) < 0)  # hottest first, strictly
    q = k * p
    for tokens in (2, 12):
        formula = expected_distinct(q, tokens)
        sample = sampled_distinct(q, tokens, 800, rng)
        assert abs(sample - formula) / formula < 0.03, (tokens, sample, formula)
        # skew touches fewer experts than uniform routing of as many tokens
        assert formula < expected_distinct(np.full(e, k / e), tokens)


def test_the_small_and_large_batch_limits() -> None:
    routing = ExpertRouting(256, 8)
    assert routing.experts_read(1) == pytest.approx(8.0)  # one token: its k experts
    assert routing.experts_read(100_000) == pytest.approx(256.0)  # every expert
    reads = [routing.experts_read(t) for t in (1, 2, 8, 64, 512, 4096)]
    assert reads == sorted(reads) and reads[-1] <= 256.0


def test_a_one_token_step_reads_the_active_parameters_and_a_large_one_all_of_them() -> None:
    model = ModelSpec.model_validate(SMALL_MOE)
    hw = HardwareSpec.model_validate(GPU)
    cost = ExpertCostModel(roofline_profile(model, hw))
    bandwidth, flops = hw.hbm_bandwidth_bytes_per_s * MEM, hw.peak_flops * FLOP
    active_bytes = model.active_parameters * model.weight_bytes_per_parameter
    one = cost.price(features(1, 1), 1, 1)[0]
    assert one == pytest.approx(
        HOST_STEP_S + active_bytes / bandwidth + 2 * model.active_parameters / flops, rel=1e-9
    )
    big = 1_000_000
    large = cost.price(features(big, big), big, big)[0]
    assert large == pytest.approx(
        HOST_STEP_S + model.weight_bytes / bandwidth + big * 2 * model.active_parameters / flops,
        rel=1e-9,
    )
    # the large-batch regime is compute-bound: the slope is the active parameters' FLOPs
    slope = (cost.price(features(2 * big, 2 * big), 2 * big, 2 * big)[0] - large) / big
    assert slope == pytest.approx(2 * model.active_parameters / flops, rel=1e-9)
    # derived active parameters: dense part plus k experts per MoE layer
    assert model.active_parameters == model.dense_parameters + 16 * 4 * 3 * 2048 * 1024


def test_expert_parallel_ranks_wait_for_the_busiest() -> None:
    uniform = ExpertRouting(64, 4, expert_parallel=8, gpus=8)
    assert uniform.compute_share == pytest.approx(1 / 8) and uniform.imbalance == pytest.approx(1)
    assert uniform.experts_read(1_000_000) == pytest.approx(8.0)  # its 64 / 8 experts
    skewed = ExpertRouting(64, 4, hottest_share=0.1, expert_parallel=8, gpus=8)
    assert skewed.imbalance > 1.05
    # the busiest GPU takes at least the hottest expert's tokens
    assert skewed.compute_share >= 0.1
    stated = ExpertRouting(64, 4, expert_parallel=8, gpus=8, imbalance=1.5)
    assert stated.compute_share == pytest.approx(1.5 / 8)
    assert stated.experts_read(3) == pytest.approx(8 * (1 - (1 - 1.5 * 4 / 64) ** 3))
    # experts split by tensor: each GPU reads an eighth of every touched expert
    split = ExpertRouting(64, 4, gpus=8)
    assert split.experts_read(5) == pytest.approx(expected_distinct(np.full(64, 4 / 64), 5) / 8)


def test_the_expert_exchange_is_priced_from_bytes_over_the_link() -> None:
    model = ModelSpec.model_validate(DEEPSEEK)
    node = HardwareSpec.model_validate(GPU | {"data_parallel": 8, "expert_parallel": 8})
    per_token, per_step = exchange_terms(model, node, ROOFLINE_LINK_EFFICIENCY, 20e-6)
    nvlink = 900e9 / 2 * ROOFLINE_LINK_EFFICIENCY
    assert per_token == pytest.approx(58 * 8 * 7168 * 3 * (7 / 8) / 8 / nvlink)
    assert per_step == pytest.approx(2 * 58 * 20e-6)
    two_nodes = HardwareSpec.model_validate(
        GPU | {"data_parallel": 16, "expert_parallel": 16,
               "scaleout_bandwidth_bytes_per_s": 50e9, "scaleout_latency_s": 4e-6}
    )  # fmt: skip
    per_token16, per_step16 = exchange_terms(model, two_nodes, ROOFLINE_LINK_EFFICIENCY, 20e-6)
    scaleout = 50e9 * ROOFLINE_LINK_EFFICIENCY
    outside = 8 / 15  # of the 15 other GPUs, 8 are in the other node
    assert per_token16 == pytest.approx(
        58 * 8 * 7168 * 3 * (15 / 16) / 16 * max((1 - outside) / nvlink, outside / scaleout)
    )
    assert per_step16 == pytest.approx(2 * 58 * 24e-6)
    one_rank = HardwareSpec.model_validate(GPU | {"tensor_parallel": 8})
    assert exchange_terms(model, one_rank, ROOFLINE_LINK_EFFICIENCY, 20e-6) == (0.0, 0.0)


def test_uneven_data_parallel_batches_cost_the_busiest_rank() -> None:
    terms = ExpertTerms(
        num_experts=8, experts_per_token=2, expert_parallel=4, gpus=4, data_parallel=4,
        t_expert_read_s=0.0, t_expert_pair_s=0.0,
    )  # fmt: skip
    experts = ExpertStepCost(terms)
    assert [experts.rank_factor(s) for s in (4, 5, 8, 9, 400)] == pytest.approx(
        [1.0, 1.6, 1.0, 4 * 3 / 9, 1.0]
    )
    model = ModelSpec.model_validate(SMALL_MOE)
    hw = HardwareSpec.model_validate(GPU | {"data_parallel": 4, "expert_parallel": 4})
    cost = ExpertCostModel(roofline_profile(model, hw))
    c = cost.profile.coefficients
    assert cost.experts is not None

    def rank_part(seqs: int) -> float:
        first = cost.price(features(seqs, seqs, 1000 * seqs), seqs, seqs)[0]
        return first - c.t_mem_s - cost.experts.seconds(seqs)  # type: ignore[union-attr]

    even = c.t_flop_s_per_token * 5 + c.t_kv_s_per_token * 5000
    assert rank_part(5) == pytest.approx(1.6 * even, rel=1e-9)  # one rank holds 2 of 5
    assert rank_part(8) == pytest.approx(c.t_flop_s_per_token * 8 + c.t_kv_s_per_token * 8000)
    # 5 sequences take as long on the ranks as 8 would
    assert rank_part(5) == pytest.approx(rank_part(8), rel=1e-9)


def test_latent_attention_keeps_one_latent_per_token_and_layer() -> None:
    model = ModelSpec.model_validate(DEEPSEEK)
    assert model.kv_bytes_per_token == 61 * (512 + 64) * 1  # fp8 KV
    tp8 = HardwareSpec.model_validate(GPU | {"tensor_parallel": 8})
    dp8 = HardwareSpec.model_validate(GPU | {"data_parallel": 8, "expert_parallel": 8})
    assert kv_bytes_per_token_on(model, tp8) == 8 * 61 * 576  # replicated on every TP GPU
    assert kv_bytes_per_token_on(model, dp8) == 61 * 576  # a token lives on one rank
    # decode attention over the latent is compute-bound: FLOPs, not bytes, set t_kv
    profile = roofline_profile(model, dp8)
    attention_flops = 61 * 2 * 128 * (2 * 512 + 64)
    assert profile.coefficients.t_kv_s_per_token == pytest.approx(
        attention_flops / (1e15 * FLOP) / 8
    )
    assert attention_flops / (1e15 * FLOP) > 61 * 576 / (3e12 * MEM)


def test_data_parallel_ranks_hold_the_dense_weights_each() -> None:
    model = ModelSpec.model_validate(DEEPSEEK)
    big = GPU | {"memory_bytes": 141 * 10**9}
    tp8 = HardwareSpec.model_validate(big | {"tensor_parallel": 8})
    dp8 = HardwareSpec.model_validate(big | {"data_parallel": 8, "expert_parallel": 8})
    check_fits(model, tp8)
    check_fits(model, dp8)
    blocks_tp = kv_capacity_blocks(model, tp8, 64)
    blocks_dp = kv_capacity_blocks(model, dp8, 64)
    free_dp = dp8.usable_bytes - model.weight_bytes - 7 * model.dense_weight_bytes - 8 * 2**30
    assert blocks_dp == int(free_dp // (64 * 61 * 576))
    assert blocks_dp > 5 * blocks_tp  # tensor parallelism keeps 8 copies of each latent


def test_fp4_weights_use_fp4_tensor_cores_where_the_gpu_has_them() -> None:
    blackwell = HardwareSpec.model_validate(GPU | {"fp4_peak_flops": 9e15})
    hopper = HardwareSpec.model_validate(GPU)
    assert compute_peak("mxfp4", blackwell) == (9e15, "fp4")
    assert compute_peak("nvfp4", hopper) == (1e15, "bf16")  # dequantized, weight-only
    assert compute_peak("fp8", hopper) == (2e15, "fp8")
    model = ModelSpec.model_validate(SMALL_MOE | {"expert_weight_dtype": "mxfp4"})
    assert model.weight_bytes == pytest.approx(
        model.dense_parameters * 2 + model.routed_parameters * 4.25 / 8
    )


def test_sliding_window_layers_set_aside_their_window_per_sequence() -> None:
    spec = SMALL_MOE | {"sliding_window": 128, "num_sliding_layers": 8}
    model = ModelSpec.model_validate(spec)
    hw = HardwareSpec.model_validate(GPU)
    assert model.kv_bytes_per_token == 8 * 2 * 4 * 128 * 2  # the 8 full layers only
    per_seq = 8 * 2 * 4 * 128 * 2 * 128
    free = hw.usable_bytes - model.weight_bytes - 2**30
    assert kv_capacity_blocks(model, hw, 16) == int(free // (16 * model.kv_bytes_per_token))
    assert kv_capacity_blocks(model, hw, 16, None, 256) == int(
        (free - 256 * per_seq) // (16 * model.kv_bytes_per_token)
    )


@pytest.mark.parametrize(
    ("model", "hardware", "message"),
    [
        ({}, {"data_parallel": 2}, "needs a mixture-of-experts model"),
        ({}, {"data_parallel": 2, "expert_parallel": 3}, "must be 1 (experts split by tensor)"),
        ({"num_experts": 24}, {"data_parallel": 16, "expert_parallel": 16}, "must divide"),
        ({}, {"data_parallel": 2, "expert_parallel": 2, "redundant_experts": 1},
         "must divide small-moe's num_experts + redundant_experts (32 + 1)"),
        ({}, {"tensor_parallel": 2, "redundant_experts": 2}, "needs expert_parallel > 1"),
        ({}, {"data_parallel": 16, "expert_parallel": 16}, "scaleout_bandwidth_bytes_per_s"),
        ({"experts_per_token": 40}, {}, "cannot exceed num_experts"),
        ({"expert_hottest_share": 0.5}, {}, "must lie between"),
        ({"kv_lora_rank": 64}, {}, "needs both kv_lora_rank and qk_rope_head_dim"),
        ({"num_sliding_layers": 4}, {}, "needs both sliding_window"),
        ({"moe_intermediate_size": 100_000}, {}, "the routed experts alone hold"),
    ],
)
def test_layouts_that_cannot_work_are_refused_with_the_reason(model, hardware, message) -> None:
    base = SMALL_MOE if "needs a mixture" not in message else {
        k: v for k, v in SMALL_MOE.items()
        if k not in ("num_experts", "experts_per_token", "moe_intermediate_size")
    }  # fmt: skip
    with pytest.raises(ValueError, match=re.escape(message)):
        spec = ModelSpec.model_validate(base | model)
        check_fits(spec, HardwareSpec.model_validate(GPU | hardware))


def test_a_profile_with_experts_is_priced_by_the_expert_model_only() -> None:
    model, hw = ModelSpec.model_validate(SMALL_MOE), HardwareSpec.model_validate(GPU)
    profile = roofline_profile(model, hw)
    with pytest.raises(ValueError, match="ExpertCostModel"):
        CostModel(profile)
    assert isinstance(make_cost_model(profile), ExpertCostModel)


def test_redundant_experts_split_the_hottest_experts_load_and_take_memory() -> None:
    # SGLang's --ep-num-redundant-experts: replicas go to the hottest experts in turn, and a
    # token goes to one of its expert's copies
    shares = routing_shares(4, 0.4)
    split = replica_shares(shares, 2)
    assert split.tolist() == pytest.approx(
        [shares[0] / 2, shares[0] / 2, shares[1] / 2, shares[1] / 2, shares[2], shares[3]]
    )
    assert replica_shares(shares, 5).tolist() == pytest.approx(
        [shares[0] / 3] * 3 + [shares[1] / 2] * 2 + [shares[2] / 2] * 2 + [shares[3] / 2] * 2
    )
    # 32 experts + 4 replicas over 12 ranks (32 alone would not divide): 3 per rank
    routing = ExpertRouting(32, 4, expert_parallel=12, gpus=12, redundant=4)
    assert routing.distinct(10**6) == pytest.approx(36)
    assert routing.experts_read(10**6) == pytest.approx(3)
    with pytest.raises(ValueError, match="must divide 36"):
        ExpertRouting(32, 4, expert_parallel=8, gpus=8, redundant=4)
    # each replica is one more expert of every MoE layer held in the instance's memory
    model = ModelSpec.model_validate(SMALL_MOE)
    hw = HardwareSpec.model_validate(GPU | {"data_parallel": 12, "expert_parallel": 12,
                                            "scaleup_domain_gpus": 16})  # fmt: skip
    more = HardwareSpec.model_validate(hw.model_dump() | {"redundant_experts": 4})
    one = model.moe_layers * model.expert_parameters * model.expert_bytes_per_parameter
    assert stored_weight_bytes(model, more) - stored_weight_bytes(model, hw) == 4 * one
