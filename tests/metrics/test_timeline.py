"""The timeline (sim/metrics/timeline.py): exact figures on hand-built tables, the streamed fold
against the tables, and the invariants that tie it to the summary."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from helpers_tables import make_context, make_requests
from scenario_factory import scenario, tiny_hardware, tiny_model

import sim.metrics.timeline as tl
from sim import load_scenario_dict, simulate
from sim.errors import ScenarioError
from sim.metrics.results import VariantResult
from sim.metrics.timeline import (
    TIMELINE_COLUMNS,
    WindowFold,
    default_window_s,
    origin_of,
    overlap_per_window,
    timeline_of_tables,
)

NAN = math.nan
# the binned percentiles' stated bound (0.5 %, as the summary's sketches: docs/scenarios.md,
# `--stream`),
# stated here rather than read from the module under test
ALPHA = 0.005

# id, arrival, prompt, output tokens, first scheduled, first token, finish, rejected, max itl
THREE = [
    (0, 1.0, 10, 3, 1.2, 1.5, 3.5, False, 1.0),  # TTFT .5, TPOT 1.0 (misses .8), E2E 2.5
    (1, 4.0, 10, 0, NAN, NAN, NAN, True, NAN),  # rejected
    (2, 12.0, 10, 5, 12.1, 12.2, 14.2, False, 0.5),  # TTFT .2, TPOT .5, E2E 2.2
]
# one instance there from the start; one launched at 5, ready at 11, draining at 13, retired at
# 14; one launched at 8 and cancelled at 9 before it was ready
INSTANCES = pd.DataFrame(
    {
        "index": [0, 1, 2],
        "group": ["a", "b", "b"],
        "launch_s": [NAN, 5.0, 8.0],
        "ready_s": [NAN, 11.0, NAN],
        "drain_s": [NAN, 13.0, NAN],
        "retire_s": [NAN, 14.0, 9.0],
    }
)
# $0.001 a second each: 1 GPU at $3.60 an hour, 2 GPUs at $1.80; instance 2 is past the fleet
# tuple (launched during the run) and takes its group's price
FLEET = ((1, 3.6, 400.0, 100.0), (2, 1.8, 400.0, 100.0))
STEPS = pd.DataFrame({"start_s": [2.0, 9.5, 12.0], "end_s": [3.0, 10.5, 12.5]})


def three() -> pd.DataFrame:
    return timeline_of_tables(
        make_requests(THREE).assign(tier="default"),
        STEPS,
        make_context(slo_ttft_s=1.0, slo_tpot_s=0.8, fleet=FLEET),
        INSTANCES,
        window_s=10.0,
    )


def test_three_requests_in_two_windows_give_exact_counts_and_attainment() -> None:
    t = three()
    assert list(t.columns) == list(TIMELINE_COLUMNS)
    assert t["window_start_s"].tolist() == [0.0, 10.0]
    assert t["window_end_s"].tolist() == [10.0, 20.0]
    # the run goes from the first arrival (1) to the last finish (14.2)
    assert t["covered_s"].tolist() == pytest.approx([9.0, 4.2])
    assert t["arrivals"].tolist() == [2, 1]
    assert t["arrival_rate"].tolist() == pytest.approx([2 / 9, 1 / 4.2])
    assert t["completed"].tolist() == [1, 1]
    assert t["rejected"].tolist() == [1, 0]
    # window 0: request 0 misses its TPOT target, request 1 was rejected; window 1 meets both
    assert t["slo_attainment"].tolist() == [0.0, 1.0]
    assert t["ttft_p50_s"].tolist() == pytest.approx([0.5, 0.2])
    assert t["tpot_p90_s"].tolist() == pytest.approx([1.0, 0.5])
    assert t["e2e_p90_s"].tolist() == pytest.approx([2.5, 2.2])


def test_instance_lifetimes_and_rent_per_window() -> None:
    t = three()
    # serving: instance 0 all along, instance 1 from 11 to 13 (drain), instance 2 never
    assert t["instances_serving"].tolist() == pytest.approx([1.0, (4.2 + 2.0) / 4.2])
    # billed: instance 0 all along, 1 from 5 to 14, 2 from 8 to 9
    assert t["instances_billed"].tolist() == pytest.approx([(9 + 5 + 1) / 9, (4.2 + 4) / 4.2])
    # rent: billed seconds times $0.001
    assert t["usd"].tolist() == pytest.approx([0.015, 0.0082])
    assert t["usd_per_hour"].tolist() == pytest.approx([0.015 / 9 * 3600, 0.0082 / 4.2 * 3600])
    # busy: steps [2, 3), [9.5, 10.5) across the edge, [12, 12.5)
    assert t["busy_fraction"].tolist() == pytest.approx([1.5 / 15, 1.0 / 8.2])


def test_a_static_fleet_serves_and_is_billed_for_the_whole_run() -> None:
    ctx = make_context(slo_ttft_s=1.0, fleet=FLEET)
    static = INSTANCES.loc[:1, ["index", "group"]]
    t = timeline_of_tables(make_requests(THREE), STEPS, ctx, static, None, 10.0)
    assert t["instances_serving"].tolist() == pytest.approx([2.0, 2.0])
    assert t["instances_billed"].tolist() == pytest.approx([2.0, 2.0])
    assert t["usd_per_hour"].tolist() == pytest.approx([7.2, 7.2])
    # no table of instances: the context's
    t = timeline_of_tables(make_requests(THREE), STEPS, ctx, None, None, 10.0)
    assert t["usd"].sum() == pytest.approx(0.002 * 13.2)


def test_no_target_no_attainment_and_no_prices_no_rent() -> None:
    t = timeline_of_tables(make_requests(THREE), STEPS, make_context(), None, None, 10.0)
    assert t["slo_attainment"].isna().all()
    assert t["usd"].isna().all()
    assert t["instances_serving"].tolist() == pytest.approx([1.0, 1.0])


def test_kv_tier_rent_is_added_for_the_whole_run() -> None:
    ctx = make_context(fleet=FLEET[:1], memory_usd_per_hour=0.36)
    t = timeline_of_tables(make_requests(THREE), STEPS, ctx, None, None, 10.0)
    assert t["usd_per_hour"].tolist() == pytest.approx([3.96, 3.96])


def test_the_scaling_events_extend_the_run() -> None:
    events = pd.DataFrame({"time_s": [25.0], "event": ["retire"]})
    ctx = make_context(fleet=FLEET[:1])
    t = timeline_of_tables(make_requests(THREE), STEPS, ctx, None, events, 10.0)
    assert t["window_start_s"].tolist() == [0.0, 10.0, 20.0]
    assert t["covered_s"].tolist() == pytest.approx([9.0, 10.0, 5.0])
    assert t["usd"].sum() == pytest.approx(0.001 * 24)


def test_overlap_per_window_splits_long_intervals_exactly() -> None:
    start = np.array([0.5, 2.5, 7.0, 3.0])
    end = np.array([1.5, 7.5, 7.25, 3.0])  # the last is empty
    weight = np.array([1.0, 2.0, 4.0, 9.0])
    got = overlap_per_window(start, end, weight, 0.0, 2.0, 4)
    # windows [0,2) [2,4) [4,6) [6,8)
    assert got.tolist() == pytest.approx([1.0, 3.0, 4.0, 3.0 + 1.0])


def test_default_window_is_near_one_percent_of_the_span() -> None:
    assert default_window_s(86400.0) == 900.0  # a day: quarter hours
    assert default_window_s(1500.0) == 15.0
    assert default_window_s(3600.0) == 30.0
    assert default_window_s(50.0) == 1.0  # never below a second
    assert default_window_s(0.0) == 1.0
    assert origin_of(7.3, 5.0) == 5.0


def test_too_many_windows_name_the_field() -> None:
    with pytest.raises(ScenarioError, match=r"metrics\.window_s: .*windows"):
        timeline_of_tables(make_requests(THREE), STEPS, make_context(), None, None, 1e-6)


def _random_requests(n: int, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.uniform(0.0, 300.0, n))
    ttft = rng.lognormal(-2.0, 1.0, n)
    out = rng.integers(1, 200, n)
    tpot = rng.lognormal(-4.0, 0.5, n)
    rejected = rng.random(n) < 0.05
    first = arrival + ttft
    finish = first + tpot * (out - 1)
    return pd.DataFrame(
        {
            "arrival_s": arrival,
            "finish_s": np.where(rejected, NAN, finish),
            "rejected": rejected,
            "tier": "default",
            "ttft_s": np.where(rejected, NAN, ttft),
            "tpot_s": np.where(rejected | (out < 2), NAN, tpot),
            "e2e_s": np.where(rejected, NAN, finish - arrival),
        }
    )


def test_window_percentiles_are_numpys_on_each_window() -> None:
    requests = _random_requests(5000)
    t = timeline_of_tables(requests, STEPS.iloc[:0], make_context(), None, None, 7.0)
    window = np.floor(requests["arrival_s"] / 7.0).astype(int)
    for k in (0, 13, 42):
        rows = requests[(window == k) & ~requests["rejected"]]
        assert t.at[k, "ttft_p90_s"] == pytest.approx(np.percentile(rows["ttft_s"], 90), rel=1e-12)
        assert t.at[k, "ttft_p50_s"] == pytest.approx(np.percentile(rows["ttft_s"], 50), rel=1e-12)
        tpot = rows["tpot_s"].dropna()
        assert t.at[k, "tpot_p90_s"] == pytest.approx(np.percentile(tpot, 90), rel=1e-12)
        assert t.at[k, "arrivals"] == int((window == k).sum())


def test_binned_percentiles_are_within_the_sketch_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    requests = _random_requests(20000)
    ctx = make_context(slo_ttft_s=0.2, slo_tpot_s=0.03)
    exact = timeline_of_tables(requests, STEPS.iloc[:0], ctx, None, None, 7.0)
    monkeypatch.setattr(tl, "EXACT_ROWS", 100)  # bin after 100 values
    fold = WindowFold(ctx, 0.0, 7.0)
    for start in range(0, len(requests), 1000):  # in chunks, out of order
        fold.add_requests(requests.iloc[::-1].iloc[start : start + 1000])
    assert not fold.samples["ttft_s"].exact
    folded = fold.frame()
    for column in ("arrivals", "completed", "rejected", "slo_attainment", "window_start_s"):
        np.testing.assert_allclose(folded[column], exact[column], rtol=1e-12, equal_nan=True)
    for column in ("ttft_p50_s", "ttft_p90_s", "tpot_p90_s", "e2e_p90_s"):
        x, p = exact[column].to_numpy(), folded[column].to_numpy()
        assert np.isnan(x).sum() < 3 and (np.isnan(x) == np.isnan(p)).all()
        x, p = x[~np.isnan(x)], p[~np.isnan(p)]
        assert np.all(np.abs(p - x) <= ALPHA * x * (1 + 1e-9)), column


def _raw(**extra: object) -> dict:
    return scenario(
        policy={"name": "continuous", "max_num_seqs": 8, "max_num_batched_tokens": 128},
        workload={
            "num_requests": 600,
            "arrival": {"process": "poisson", "rate": 20.0},
            "prompt_tokens": {"dist": "uniform", "low": 5, "high": 60},
            "output_tokens": {"dist": "lognormal", "median": 20, "sigma": 0.8, "max": 120},
        },
        model=tiny_model(),
        hardware={**tiny_hardware(1500), "usd_per_gpu_hour": 2.5, "tdp_w": 300.0},
        slo={"ttft_s": 0.2, "tpot_s": 0.05},
        cluster={"router": "least_kv", "instances": [{"count": 2}]},
        **extra,
    )


@pytest.fixture(scope="module")
def both() -> tuple[VariantResult, VariantResult]:
    loaded = load_scenario_dict(_raw())
    return simulate(loaded)["default"], simulate(loaded, tables=False)["default"]


def test_a_real_run_keeps_the_summarys_totals(both: tuple[VariantResult, VariantResult]) -> None:
    table, _ = both
    t = table.timeline()
    s = table.summary()
    assert len(t) > 10  # the default window: a second over a 30 s run
    assert t["window_end_s"].iloc[0] - t["window_start_s"].iloc[0] == 1.0
    assert t["arrivals"].sum() == s["num_requests"] == 600
    assert t["completed"].sum() == s["num_finished"]
    assert t["rejected"].sum() == s["num_rejected"]
    # the fleet's rent: its price per hour over the run, first arrival to last finish
    req = table.requests
    run = max(req["finish_s"].max(), table.steps["end_s"].max()) - req["arrival_s"].min()
    assert t["usd"].sum() == pytest.approx(s["fleet_usd_per_hour"] * run / 3600, rel=1e-9)
    assert t["covered_s"].sum() == pytest.approx(run, rel=1e-12)
    assert t["instances_serving"].tolist() == pytest.approx([2.0] * len(t))
    # busy seconds add up to the steps' time
    busy = (t["busy_fraction"] * t["instances_billed"] * t["covered_s"]).sum()
    assert busy == pytest.approx((table.steps["end_s"] - table.steps["start_s"]).sum())
    # no warm-up here: the requests judged per window are the summary's
    good = (t["slo_attainment"] * t["arrivals"]).sum()
    assert good / 600 == pytest.approx(s["slo_attainment"])


def test_a_streamed_run_gives_the_tables_timeline(
    both: tuple[VariantResult, VariantResult],
) -> None:
    table, streamed = both
    a, b = table.timeline(), streamed.timeline()
    assert list(a.columns) == list(b.columns)
    # 600 requests are kept whole: every figure is the tables' own
    pd.testing.assert_frame_equal(a, b, rtol=1e-9)


def test_a_streamed_run_past_the_exact_size_stays_within_the_bound(
    monkeypatch: pytest.MonkeyPatch, both: tuple[VariantResult, VariantResult]
) -> None:
    table, _ = both
    monkeypatch.setattr(tl, "EXACT_ROWS", 50)
    streamed = simulate(load_scenario_dict(_raw()), tables=False)["default"]
    a, b = table.timeline(), streamed.timeline()
    assert not streamed.streamed.timeline_fold.samples["ttft_s"].exact
    for column in ("arrivals", "completed", "rejected", "slo_attainment", "usd", "busy_fraction"):
        np.testing.assert_allclose(b[column], a[column], rtol=1e-9, equal_nan=True)
    for column in ("ttft_p50_s", "ttft_p90_s", "tpot_p90_s", "e2e_p90_s"):
        x, p = a[column].to_numpy(), b[column].to_numpy()
        both_nan = np.isnan(x) & np.isnan(p)
        assert np.all(both_nan | (np.abs(p - x) <= ALPHA * x * (1 + 1e-9))), column


def test_the_scenarios_window_is_used_and_a_streamed_run_keeps_its_own(
    both: tuple[VariantResult, VariantResult],
) -> None:
    loaded = load_scenario_dict(_raw(metrics={"window_s": 5.0}))
    table = simulate(loaded)["default"]
    t = table.timeline()
    assert (t["window_end_s"] - t["window_start_s"]).eq(5.0).all()
    assert len(table.timeline(2.0)) > len(t)
    _, streamed = both
    with pytest.raises(ValueError, match="1 s windows it was folded with, not 5 s"):
        streamed.timeline(5.0)


def test_the_summary_of_a_static_run_has_no_window_key(
    both: tuple[VariantResult, VariantResult],
) -> None:
    table, streamed = both
    assert "worst_window_slo_attainment" not in table.summary()
    assert "worst_window_slo_attainment" not in streamed.summary()


def test_an_autoscaled_run_reports_its_worst_window() -> None:
    requests = make_requests(THREE).assign(tier="default")
    ctx = make_context(slo_ttft_s=1.0, slo_tpot_s=0.8, fleet=FLEET)
    events = pd.DataFrame({"time_s": [5.0], "group": ["b"], "event": ["launch"]})
    result = VariantResult("v", requests, STEPS, pd.DataFrame({"gap_s": [], "count": []}), ctx,
                           scenario={"metrics": {"window_s": 10.0}}, instances=INSTANCES,
                           fleet_events=events)  # fmt: skip
    assert result.summary()["worst_window_slo_attainment"] == 0.0


def test_finishes_far_past_the_arrivals_end_the_timeline_at_its_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A request finishing 1e10 s after the last arrival (behind a very slow KV link): the
    timeline keeps its first MAX_WINDOWS windows instead of allocating one per 10 s of 1e10 s
    (it used to ask for 74 GiB), and counts what finished inside them."""
    monkeypatch.setattr(tl, "MAX_WINDOWS", 50)
    rows = [THREE[0], THREE[2], (3, 13.0, 10, 2, 13.5, 14.0, 1e10, False, 0.5)]
    t = timeline_of_tables(make_requests(rows).assign(tier="default"), STEPS.assign(
        end_s=[3.0, 10.5, 1e10]), make_context(), window_s=10.0)
    assert len(t) == 50
    assert t["window_end_s"].iloc[-1] == 500.0
    assert t["arrivals"].sum() == 3 and t["completed"].sum() == 2
