"""Priority tiers: tiers from the workload and traces, per-tier SLOs and metrics, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scenario_factory import run, tiny_scenario

from sim.errors import ScenarioError
from sim.scenario.load import load_scenario_dict
from sim.simulate import simulate

MIX = {
    "num_requests": 200,
    "arrival": {"process": "poisson", "rate": 60.0},
    "mix": [
        {
            "name": "p",
            "weight": 1,
            "tier": "paid",
            "prompt_tokens": {"dist": "fixed", "value": 20},
            "output_tokens": {"dist": "fixed", "value": 10},
        },
        {
            "name": "f",
            "weight": 1,
            "tier": "free",
            "prompt_tokens": {"dist": "fixed", "value": 20},
            "output_tokens": {"dist": "fixed", "value": 10},
        },
    ],
}
SLO = {"ttft_s": 1.0, "tiers": {"paid": {"ttft_s": 0.5}, "free": {"ttft_s": 5.0, "tpot_s": 1.0}}}
TIERS = {"paid": {"rank": 0, "weight": 3}, "free": {"rank": 1, "weight": 1}}


def _raw(queue: dict, slo: dict = SLO, coalesce: bool = True) -> dict:
    policy = {
        "name": "continuous",
        "max_num_seqs": 2,
        "max_num_batched_tokens": 64,
        "block_size": 4,
        "queue": queue,
    }
    return tiny_scenario(policy, 10_000, coalesce=coalesce, workload=MIX, slo=slo)


@pytest.mark.parametrize("mode", ["strict", "weighted"])
def test_priority_serves_the_paid_tier_faster(mode):
    res = run(_raw({"order": "priority", "priority_mode": mode, "tiers": TIERS}))
    s = res.summary()
    assert set(res.requests["tier"]) == {"paid", "free"}
    assert s["tier_paid_ttft_p50_s"] < s["tier_free_ttft_p50_s"]
    assert s["tier_paid_e2e_p99_s"] < s["tier_free_e2e_p99_s"]
    assert s["tier_paid_oldest_wait_s"] < s["tier_free_oldest_wait_s"] == s["oldest_wait_s"]
    fcfs = run(_raw({"order": "fcfs"})).summary()
    assert s["tier_paid_ttft_p99_s"] < fcfs["tier_paid_ttft_p99_s"]


def test_each_request_is_judged_by_its_tier_slo():
    res = run(_raw({"order": "fcfs"}))
    req, s = res.requests, res.summary()
    target = np.where(req["tier"] == "paid", 0.5, 5.0)
    tpot_ok = (req["tier"] == "paid") | (req["tpot_s"] <= 1.0)
    good = (req["ttft_s"] <= target) & tpot_ok
    assert s["slo_attainment"] == pytest.approx(good.mean())
    paid = req["tier"] == "paid"
    assert s["tier_paid_slo_attainment"] == pytest.approx(good[paid].mean())
    assert s["tier_paid_num_requests"] == paid.sum()


def test_edf_and_priority_runs_coalesce_exactly():
    for queue in (
        {"order": "edf"},
        {"order": "priority", "priority_mode": "weighted", "tiers": TIERS},
    ):
        a = run(_raw(queue)).requests
        b = run(_raw(queue, coalesce=False)).requests
        assert np.allclose(a["finish_s"], b["finish_s"], rtol=1e-9), queue


def test_a_tier_missing_from_the_slo_table_is_named():
    with pytest.raises(ScenarioError, match=r"slo\.tiers lacks tier 'free'"):
        load_scenario_dict(_raw({"order": "fcfs"}, slo={"tiers": {"paid": {"ttft_s": 1.0}}}))


def test_a_tier_missing_from_the_queue_table_is_named():
    with pytest.raises(ScenarioError, match=r"policy\.queue\.tiers lacks tier 'free'"):
        load_scenario_dict(_raw({"order": "priority", "tiers": {"paid": {"rank": 0}}}))


def test_edf_needs_a_ttft_target():
    with pytest.raises(ScenarioError, match="edf"):
        load_scenario_dict(_raw({"order": "edf"}, slo={}))


def test_trace_tier_column_is_read_and_checked_at_generation(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,tier\n0,5,3,paid\n0.1,5,3,gold\n")
    raw = _raw({"order": "fcfs"})
    raw["workload"] = {"trace": {"path": str(trace), "tier_column": "tier"}}
    with pytest.raises(ScenarioError, match=r"slo\.tiers lacks tier 'gold'"):
        simulate(load_scenario_dict(raw))
    raw["slo"] = {"ttft_s": 1.0, "tiers": {"paid": {}, "gold": {}}}
    res = simulate(load_scenario_dict(raw))["default"]
    assert res.requests["tier"].tolist() == ["paid", "gold"]
    assert not math.isnan(res.summary()["tier_gold_ttft_p50_s"])


def test_predicted_lengths_use_their_own_stream():
    base = {
        "num_requests": 50,
        "arrival": {"process": "poisson", "rate": 5.0},
        "prompt_tokens": {"dist": "fixed", "value": 5},
        "output_tokens": {"dist": "uniform", "low": 1, "high": 100},
    }
    noisy = {**base, "output_prediction_sigma": 0.5}
    a = run(tiny_scenario({"name": "continuous"}, 10_000, workload=base)).requests
    b = run(tiny_scenario({"name": "continuous"}, 10_000, workload=noisy)).requests
    assert (a["arrival_s"] == b["arrival_s"]).all()
    assert (a["max_output_tokens"] == b["max_output_tokens"]).all()
    assert (a["predicted_output_tokens"] == a["max_output_tokens"]).all()
    assert (b["predicted_output_tokens"] != b["max_output_tokens"]).mean() > 0.5
    assert (b["predicted_output_tokens"] >= 1).all()
