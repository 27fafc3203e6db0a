"""Determinism (docs/scenarios.md, `seed`): one seed, one outcome; variants share
their requests; coalescing identical decode steps is exact.

The coalescing checks run on a tiny GPU whose KV pool forces preemptions, with a cost model whose
decode steps grow longer with context (t_kv > 0), so runs use the closed-form step times.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scenario_factory import scenario, tiny_hardware, tiny_model

from sim.metrics.summary import expand_steps, weighted_percentile
from sim.scenario.load import load_scenario_dict
from sim.simulate import simulate

COEFFS = {
    "t_mem_s": 0.01,
    "t_flop_s_per_token": 1e-4,
    "t_kv_s_per_token": 1e-5,
    "t_attn_s_per_token2": 1e-7,
}
WORKLOAD = {
    "num_requests": 300,
    "arrival": {"process": "poisson", "rate": 12.0},
    "prompt_tokens": {"dist": "uniform", "low": 10, "high": 120},
    "output_tokens": {"dist": "lognormal", "median": 30, "sigma": 1.0, "max": 200},
}
POLICIES = {
    "static": {"name": "static", "max_batch_size": 6, "max_wait_s": 0.02},
    "prefill_first": {
        "name": "continuous",
        "max_num_seqs": 12,
        "block_size": 8,
        "max_num_batched_tokens": 512,
        "mode": "prefill_first",
    },
    "mixed": {
        "name": "continuous",
        "max_num_seqs": 12,
        "block_size": 8,
        "max_num_batched_tokens": 512,
        "mode": "mixed",
    },
}
KV_TOKENS = 1200  # a few requests' worth: continuous batching preempts, static batches shrink


def _raw(seed: int = 7, policy: str = "mixed", **extra) -> dict:
    return scenario(
        policy=POLICIES[policy],
        workload=WORKLOAD,
        seed=seed,
        coefficients=COEFFS,
        model=tiny_model(),
        hardware=tiny_hardware(KV_TOKENS),
        **extra,
    )


def _all_variants(**extra) -> dict:
    variants = {name: {"policy": spec} for name, spec in POLICIES.items()}
    return _raw(variants=variants, **extra)


def _sim(raw: dict):
    return simulate(load_scenario_dict(raw))


def test_same_seed_gives_identical_tables_and_summary():
    a, b = _sim(_all_variants()), _sim(_all_variants())
    for name in POLICIES:
        pd.testing.assert_frame_equal(a[name].requests, b[name].requests)
        pd.testing.assert_frame_equal(a[name].steps, b[name].steps)
        pd.testing.assert_frame_equal(a[name].itl, b[name].itl)
    pd.testing.assert_frame_equal(a.summary(), b.summary())


def test_different_seed_gives_different_requests():
    a, b = _sim(_raw(seed=7))["default"], _sim(_raw(seed=8))["default"]
    assert not np.array_equal(a.requests["arrival_s"], b.requests["arrival_s"])
    assert not np.array_equal(a.requests["max_output_tokens"], b.requests["max_output_tokens"])
    assert a.summary()["e2e_mean_s"] != b.summary()["e2e_mean_s"]


def test_variants_see_identical_requests():
    res = _sim(_all_variants())
    cols = ["id", "arrival_s", "num_prompt_tokens", "max_output_tokens"]
    base = res["static"].requests[cols]
    for name in ("prefill_first", "mixed"):
        pd.testing.assert_frame_equal(res[name].requests[cols], base)
    # and a variant run alone sees the same requests as inside the set
    alone = _sim(_raw(policy="mixed"))["default"].requests
    pd.testing.assert_frame_equal(alone, res["mixed"].requests)


def test_the_workload_produces_preemptions_and_batches():
    res = _sim(_all_variants())
    for name in ("prefill_first", "mixed"):
        assert res[name].requests["num_preemptions"].sum() > 0, name
    for name in POLICIES:
        assert (res[name].steps["num_steps"] > 1).any(), name  # coalesced runs exist
        assert not res[name].requests["rejected"].any()


@pytest.mark.parametrize("policy", list(POLICIES))
def test_stepwise_engine_matches_coalesced_runs(policy):
    raw = _raw(
        policy=policy,
        variants={"coalesced": None, "stepwise": {"engine": {"coalesce_decode_steps": False}}},
    )
    res = _sim(raw)
    fast, slow = res["coalesced"], res["stepwise"]
    assert (slow.steps["num_steps"] == 1).all()
    for col in ("first_scheduled_s", "first_token_s", "finish_s", "max_itl_s"):
        np.testing.assert_allclose(
            fast.requests[col], slow.requests[col], rtol=1e-9, atol=0, err_msg=col
        )
    for col in ("num_output_tokens", "num_preemptions", "num_recomputed_tokens", "rejected"):
        assert (fast.requests[col] == slow.requests[col]).all(), col
    # the coalesced step groups expand to exactly the steps run one by one
    expanded = expand_steps(fast.steps)
    assert len(expanded) == len(slow.steps)
    for col in (
        "num_seqs",
        "num_tokens",
        "num_prefill_tokens",
        "num_decode_tokens",
        "sum_context_tokens",
    ):
        assert (expanded[col].to_numpy() == slow.steps[col].to_numpy()).all(), col
    for col in ("start_s", "end_s", "duration_s"):
        np.testing.assert_allclose(expanded[col], slow.steps[col], rtol=1e-9, err_msg=col)
    # the same inter-token-latency distribution
    assert fast.itl["count"].sum() == slow.itl["count"].sum()
    for q in (0, 10, 50, 90, 99, 99.9, 100):
        f = weighted_percentile(fast.itl["gap_s"], fast.itl["count"], q)
        s = weighted_percentile(slow.itl["gap_s"], slow.itl["count"], q)
        assert f == pytest.approx(s, rel=1e-9), q
    mean_fast = np.average(fast.itl["gap_s"], weights=fast.itl["count"])
    mean_slow = np.average(slow.itl["gap_s"], weights=slow.itl["count"])
    assert mean_fast == pytest.approx(mean_slow, rel=1e-9)
    # and so the same summary, up to float rounding
    sf, ss = fast.summary(), slow.summary()
    assert sf.keys() == ss.keys()
    for key in sf:
        assert sf[key] == pytest.approx(ss[key], rel=1e-9, nan_ok=True), key


@pytest.mark.parametrize("coalesce", [True, False], ids=["coalesced", "stepwise"])
def test_kv_utilization_mean_of_one_request_is_its_reservation(coalesce):
    # static batching reserves prompt + output tokens at admission and frees them when the batch
    # ends, so KV use is exactly 110 of 1000 tokens during every busy second, however the steps
    # are grouped (a group's KV must be counted before its finished requests release theirs)
    raw = scenario(
        policy={"name": "static", "max_batch_size": 1},
        workload={
            "num_requests": 1,
            "arrival": {"process": "constant", "rate": 1.0},
            "prompt_tokens": {"dist": "fixed", "value": 100},
            "output_tokens": {"dist": "fixed", "value": 10},
        },
        coefficients=COEFFS,
        model=tiny_model(),
        hardware=tiny_hardware(1000),
        engine={"coalesce_decode_steps": coalesce},
    )
    summary = _sim(raw)["default"].summary()
    assert summary["kv_utilization_peak"] == pytest.approx(0.11)
    assert summary["kv_utilization_mean"] == pytest.approx(0.11)
