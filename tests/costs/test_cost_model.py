"""Cost model arithmetic: every form, exact values, two-regime continuity at the ridge."""

from __future__ import annotations

import pytest

from sim.core.plan import StepFeatures
from sim.costs.catalog import HARDWARE, MODELS
from sim.costs.cost_model import CostModel
from sim.costs.profile import Profile, roofline_profile


def profile(form: str, **coefficients: float) -> Profile:
    return Profile.model_validate(
        {
            "schema_version": 1,
            "name": "t",
            "source": "inline",
            "model_form": form,
            "coefficients": coefficients,
        }
    )


def test_seed_form() -> None:
    cost = CostModel(profile("seed", t_mem_s=0.004, t_flop_s_per_token=1e-5))
    assert cost.step_time(1, 10_000, 500) == pytest.approx(0.004 + 1e-5)
    assert cost.step_time(512, 0, 0) == pytest.approx(0.004 + 512e-5)


def test_extended_form_exact() -> None:
    cost = CostModel(
        profile(
            "extended",
            t_mem_s=0.005,
            t_flop_s_per_token=2e-5,
            t_kv_s_per_token=4e-8,
            t_attn_s_per_token2=1e-10,
        )
    )
    # 8 decodes over 1,000 tokens each plus a 256-token chunk at context 768
    expected = 0.005 + 2e-5 * 264 + 4e-8 * (8 * 1000 + 768) + 1e-10 * (256 * 768)
    assert cost.step_time(264, 8768, 256 * 768) == pytest.approx(expected, rel=1e-15)
    assert cost.t_kv_s_per_token == 4e-8


def test_two_regime_is_continuous_at_ridge() -> None:
    cost = CostModel(
        profile(
            "two_regime",
            t_mem_s=0.006,
            t_flop_s_per_token=1e-6,
            ridge_tokens=200,
            t_flop_high_s_per_token=3e-5,
        )
    )
    assert cost.step_time(200, 0, 0) == pytest.approx(0.006 + 200e-6)
    assert cost.step_time(201, 0, 0) == pytest.approx(0.006 + 200e-6 + 3e-5)
    assert cost.step_time(1200, 0, 0) == pytest.approx(0.006 + 200e-6 + 1000 * 3e-5)
    below, at, above = (cost.step_time(n, 0, 0) for n in (199, 200, 201))
    assert at - below == pytest.approx(1e-6) and above - at == pytest.approx(3e-5)
    # a fractional ridge: both slopes still meet at the ridge itself
    frac = CostModel(
        profile(
            "two_regime",
            t_mem_s=0.0,
            t_flop_s_per_token=1.0,
            ridge_tokens=10.5,
            t_flop_high_s_per_token=3.0,
        )
    )
    assert (frac.step_time(10, 0, 0), frac.step_time(11, 0, 0)) == (10.0, 10.5 + 1.5)


def test_a_run_is_priced_from_its_features() -> None:
    cost = CostModel(roofline_profile(MODELS["llama-2-7b"], HARDWARE["a100-80g"]))
    features = StepFeatures(
        num_seqs=4,
        num_tokens=131,
        num_prefill_tokens=128,
        num_decode_tokens=3,
        sum_context_tokens=3 * 900 + 128,
        prefill_attention_term=128 * 128,
        context_growth_per_step=3,
    )
    first, increment = cost.run_times(features)
    assert first == cost.step_time(131, 2828, 16384)
    assert first > cost.step_time(131, 0, 0) > cost.step_time(1, 0, 0)
    # each repeated step reads one more KV token per decoding slot
    assert increment == cost.t_kv_s_per_token * 3


def test_roofline_orders_of_magnitude() -> None:
    # llama-2-7b decode at batch 1 on an A100-80G: ~13.5 GB of weights at ~1.6 TB/s
    cost = CostModel(roofline_profile(MODELS["llama-2-7b"], HARDWARE["a100-80g"]))
    assert 0.007 < cost.step_time(1, 512, 0) < 0.010
    h200 = CostModel(roofline_profile(MODELS["llama-2-7b"], HARDWARE["h200"]))
    assert h200.step_time(1, 512, 0) < cost.step_time(1, 512, 0)
