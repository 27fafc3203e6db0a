"""Summary metrics on small hand-made tables whose every value is worked out by hand."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from helpers_tables import NAN, REQUESTS, make_context, make_itl, make_requests, make_steps
from scenario_factory import run as run_scenario
from scenario_factory import scenario

from sim.metrics import percentiles
from sim.metrics.instances import stall_summary
from sim.metrics.steps import group_durations, step_summary
from sim.metrics.streaming import StreamSummary
from sim.metrics.summary import expand_steps, summarize, weighted_percentile


def run(**overrides: float | None) -> dict[str, float]:
    return summarize(make_requests(), make_steps(), make_itl(), make_context(**overrides))


def test_latency_percentiles_on_known_sample() -> None:
    s = run()
    # TTFT of the four served requests: .1, .5, .2, 1.0 -> sorted .1 .2 .5 1
    assert s["ttft_mean_s"] == pytest.approx(0.45)
    assert s["ttft_p50_s"] == pytest.approx(0.35)
    assert s["ttft_p90_s"] == pytest.approx(0.85)
    assert s["ttft_p99_s"] == pytest.approx(0.985)
    assert s["e2e_p50_s"] == pytest.approx(0.75)
    assert s["queue_mean_s"] == pytest.approx(0.7 / 4)


def test_tpot_excludes_single_token_requests() -> None:
    s = run()
    # .1, .4, .1: request 1 has one output token and no TPOT; a 0 would drag the mean down
    assert s["tpot_mean_s"] == pytest.approx(0.2)
    assert s["tpot_p50_s"] == pytest.approx(0.1)
    assert s["tpot_p90_s"] == pytest.approx(0.34)


def test_counts_and_throughput() -> None:
    s = run()
    assert (s["num_requests"], s["num_finished"], s["num_rejected"]) == (5, 4, 1)
    assert (s["num_preemptions"], s["num_recomputed_tokens"]) == (2, 15)
    assert s["duration_s"] == pytest.approx(6.0)
    assert s["output_tokens_per_s"] == pytest.approx(20 / 6)
    assert s["total_tokens_per_s"] == pytest.approx(90 / 6)
    assert s["requests_per_s"] == pytest.approx(4 / 6)


def test_goodput_and_attainment_count_rejected_requests() -> None:
    s = run(slo_ttft_s=0.5, slo_tpot_s=0.2)
    # pass: 0 (ttft .1, tpot .1) and 1 (ttft .5 at the limit, no TPOT); 2 fails TPOT, 4 TTFT
    assert s["goodput_rps"] == pytest.approx(2 / 6)
    assert s["slo_attainment"] == pytest.approx(2 / 5)  # the rejected one counts as a miss
    assert run()["slo_attainment"] == pytest.approx(4 / 5)  # no SLO: only the rejection misses


def test_unfinished_request_misses_slo_but_adds_no_throughput() -> None:
    rows = [*REQUESTS, (5, 4.0, 10, 2, 5.5, 5.9, NAN, False, 0.0)]
    requests = make_requests(rows)
    s = summarize(requests, make_steps(), make_itl(), make_context())
    assert s["num_finished"] == 4
    assert s["output_tokens_per_s"] == pytest.approx(20 / 6)
    assert s["slo_attainment"] == pytest.approx(4 / 6)


def test_warmup_and_cooldown_exclusion() -> None:
    s = run(warmup_s=1.5, slo_ttft_s=1.0)
    # measured: requests 2 and 4 (arrivals 2 and 4); request 3 is rejected inside the window
    assert s["ttft_p50_s"] == pytest.approx(0.6)
    assert s["duration_s"] == pytest.approx(4.0)
    assert s["output_tokens_per_s"] == pytest.approx(14 / 4)
    assert s["goodput_rps"] == pytest.approx(2 / 4)
    assert s["slo_attainment"] == pytest.approx(2 / 3)
    assert s["num_requests"] == 5  # counts cover the whole run
    c = run(warmup_s=1.5, cooldown_s=1.0)
    assert c["ttft_mean_s"] == pytest.approx(0.2)  # only request 2 is left
    assert c["slo_attainment"] == pytest.approx(1 / 2)


def test_itl_from_weighted_table_and_max_stall() -> None:
    s = run()
    pooled = np.repeat([0.1, 0.2, 0.05, 0.5], [10, 3, 1, 1])
    assert s["itl_mean_s"] == pytest.approx(pooled.mean())
    for q in (50, 90, 95, 99):
        assert s[f"itl_p{q}_s"] == pytest.approx(np.percentile(pooled, q))
    assert s["itl_max_s"] == pytest.approx(0.5)


@pytest.mark.parametrize("seed", range(5))
def test_weighted_percentile_matches_repeat(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = rng.exponential(size=200).round(3)  # rounding makes ties
    counts = rng.integers(0, 6, size=200)
    expanded = np.repeat(values, counts)
    for q in (0, 1, 12.5, 50, 90, 95, 99, 99.9, 100):
        assert weighted_percentile(values, counts, q) == pytest.approx(np.percentile(expanded, q))
        # integer counts are summed as integers (no float copy of a large table): same answer
        assert weighted_percentile(values, counts, q) == weighted_percentile(
            values, counts.astype(float), q
        )


@pytest.mark.parametrize("seed", range(5))
def test_ascending_samples_take_the_chunked_path_to_the_same_bits(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the gap table comes sorted: its quantiles are found by cumulative counts summed a chunk at
    # a time (chunks of 7 rows here), and must equal the argsort path's exactly
    monkeypatch.setattr(percentiles, "CHUNK", 7)
    rng = np.random.default_rng(seed)
    values = np.sort(rng.exponential(size=150).round(2))  # ties
    counts = rng.integers(0, 5, size=150)
    shuffled = rng.permutation(150)
    qs = (0, 1, 12.5, 50, 90, 95, 99, 99.9, 100)
    assert percentiles._ascending(values) and not percentiles._ascending(values[shuffled])
    chunked = percentiles.weighted_percentiles(values, counts, qs)
    sorted_by_argsort = percentiles.weighted_percentiles(values[shuffled], counts[shuffled], qs)
    assert chunked == sorted_by_argsort
    expanded = np.repeat(values, counts)
    assert chunked == pytest.approx(np.percentile(expanded, qs))
    stats = percentiles.weighted_stats("x", values, counts)
    assert stats["x_mean_s"] == pytest.approx(expanded.mean())


def test_weighted_percentile_edge_cases() -> None:
    assert math.isnan(weighted_percentile([], [], 50))
    assert math.isnan(weighted_percentile([1.0, 2.0], [0, 0], 50))
    assert weighted_percentile([7.0], [1], 99) == 7.0
    with pytest.raises(ValueError):
        weighted_percentile([1.0, 2.0], [1], 50)


def test_step_metrics_hand_computed() -> None:
    s = run()
    busy = 0.1 + 0.26
    assert s["num_steps"] == 5
    assert s["busy_s"] == pytest.approx(busy)
    assert s["mean_batch_size"] == pytest.approx(18 / 5)
    assert s["mean_batch_size_time_weighted"] == pytest.approx((2 * 0.1 + 4 * 0.26) / busy)
    assert s["max_batch_size"] == 4
    assert s["slot_utilization"] == pytest.approx(14 / 18)  # padded slots waste 4 of 18
    assert s["kv_utilization_mean"] == pytest.approx((4 * 0.1 + 6 * 0.26) / busy / 10)
    assert s["kv_utilization_peak"] == pytest.approx(0.6)
    assert s["busy_fraction"] == pytest.approx(busy / 0.5)  # first arrival 0, last end .5
    assert s["mfu"] == pytest.approx(2.0 * (30 + 4 * 3) / (busy * 1000.0))
    traffic = 100.0 * 5 + 2.0 * (30 + 40 + 43 + 46 + 49)
    assert s["bandwidth_utilization"] == pytest.approx(traffic / (busy * 10000.0))
    # time-average queue: 0.7 queued request-seconds over the 6 s from first arrival to last finish
    assert s["mean_queue_length"] == pytest.approx(0.7 / 6.0)
    assert run(num_instances=2)["busy_fraction"] == pytest.approx(busy / 1.0)


def test_kv_utilization_is_averaged_per_instance() -> None:
    steps = pd.DataFrame(
        {
            "instance": [0, 1, 1],
            "start_s": [0.0, 0.0, 1.0],
            "end_s": [1.0, 1.0, 4.0],
            "num_steps": [1, 1, 3],
            "duration_s": [1.0, 1.0, 1.0],
            "num_seqs": [1, 1, 1],
            "kv_blocks_used": [2, 8, 4],
        }
    )
    s = step_summary(steps, make_context(num_instances=2), first_arrival_s=0.0)
    assert s["kv_utilization_mean"] == pytest.approx((0.2 + 0.5) / 2)


def test_expand_steps_rows() -> None:
    rows = expand_steps(make_steps())
    assert len(rows) == 5
    assert rows["start_s"].tolist() == pytest.approx([0.14, 0.24, 0.29, 0.35, 0.42])
    assert rows["end_s"].tolist() == pytest.approx([0.24, 0.29, 0.35, 0.42, 0.50])
    assert rows["sum_context_tokens"].tolist() == [30, 40, 43, 46, 49]
    assert rows["num_seqs"].tolist() == [2, 4, 4, 4, 4]
    assert (rows["num_steps"] == 1).all()


@pytest.mark.parametrize("seed", range(3))
def test_closed_form_group_sums_equal_expanded_sums(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 50
    steps = pd.DataFrame(
        {
            "instance": rng.integers(0, 3, n),
            "start_s": np.cumsum(rng.uniform(0, 1, n)),
            "num_steps": rng.integers(1, 40, n),
            "duration_s": rng.uniform(0.01, 0.05, n),
            "duration_increment_s": rng.uniform(0, 1e-4, n),
            "num_seqs": rng.integers(1, 64, n),
            "num_active_seqs": rng.integers(1, 64, n),
            "num_prefill_tokens": rng.integers(0, 9, n),
            "num_decode_tokens": rng.integers(0, 64, n),
            "sum_context_tokens": rng.integers(0, 100_000, n),
            "context_growth_per_step": rng.integers(0, 64, n),
            "kv_blocks_used": rng.integers(0, 10, n),
            "num_waiting": rng.integers(0, 20, n),
        }
    )
    steps["end_s"] = steps["start_s"] + group_durations(steps)
    rows = expand_steps(steps)
    assert rows["duration_s"].sum() == pytest.approx(group_durations(steps).sum())
    assert rows["end_s"].groupby(np.repeat(np.arange(n), steps["num_steps"])).max().to_numpy() == (
        pytest.approx(steps["end_s"].to_numpy())
    )
    ctx = make_context(num_instances=3)
    grouped, expanded = step_summary(steps, ctx, 0.0), step_summary(rows, ctx, 0.0)
    assert grouped == pytest.approx(expanded)


def test_empty_tables_give_nan_and_zero_counts() -> None:
    for requests, steps, itl in [
        (make_requests([]), make_steps().iloc[:0], make_itl().iloc[:0]),
        (pd.DataFrame(), pd.DataFrame(), pd.DataFrame()),
    ]:
        s = summarize(requests, steps, itl, make_context(slo_ttft_s=1.0))
        assert s["num_requests"] == s["num_finished"] == s["num_steps"] == 0
        for key in ("ttft_p50_s", "tpot_p99_s", "itl_p99_s", "goodput_rps", "slo_attainment",
                    "mfu", "busy_fraction", "kv_utilization_mean"):  # fmt: skip
            assert math.isnan(s[key]), key


def test_values_are_plain_python_scalars() -> None:
    s = run(slo_ttft_s=1.0)
    assert all(type(v) in (int, float) for v in s.values())
    assert type(s["num_finished"]) is int and type(s["ttft_p50_s"]) is float


def test_tpot_definition_is_a_choice_named_in_the_summary() -> None:
    raw = scenario(policy={"name": "continuous"})
    after_first = run_scenario(raw)
    raw["metrics"] = {"tpot": "per_output_token"}
    per_token = run_scenario(raw)
    a, b = after_first.requests, per_token.requests
    decode_s = a["finish_s"] - a["first_token_s"]
    np.testing.assert_allclose(a["tpot_s"], decode_s / (a["num_output_tokens"] - 1))
    np.testing.assert_allclose(b["tpot_s"], decode_s / b["num_output_tokens"])
    assert (b["tpot_s"] < a["tpot_s"]).all()  # 10 output tokens: 9/10 of the other
    assert per_token.summary()["tpot_per_output_token"] == 1.0
    assert "tpot_per_output_token" not in after_first.summary()
    assert per_token.summary()["ttft_p50_s"] == after_first.summary()["ttft_p50_s"]


def test_a_streamed_summary_of_the_same_tables_is_the_exact_one() -> None:
    """Both summaries take their definitions from `sim.metrics.request_metrics`: fed the same
    rows in chunks (a served request unfinished, a warmup, two tiers with SLOs), the streamed
    summary has every key of the exact one, with the same value."""
    rows = [*REQUESTS, (5, 4.0, 10, 2, 5.5, 5.9, NAN, False, 0.0)]
    requests = make_requests(rows)
    requests["tier"] = ["a", "b", "a", "b", "b", "a"]
    requests["decode_instance"] = -1
    requests["num_swaps"] = requests["swapped_bytes"] = 0
    ctx = make_context(warmup_s=0.5, slo_ttft_s=0.5, slo_tpot_s=0.2)
    ctx = replace(ctx, slo_tiers=(("a", 0.3, None), ("b", 2.0, 0.2)))
    exact = summarize(requests, make_steps(), make_itl(), ctx)
    exact.update(stall_summary(requests, ctx))
    arrival = requests["arrival_s"].to_numpy()
    stream = StreamSummary(ctx, float(arrival.min()), float(arrival.max()))
    stream.add_requests(requests.iloc[:2])
    stream.add_requests(requests.iloc[2:])
    stream.add_steps(0, make_steps())
    stream.add_itl(make_itl()["gap_s"], make_itl()["count"])
    streamed = stream.summary()
    assert list(streamed) == list(exact)
    for key, value in exact.items():
        assert streamed[key] == pytest.approx(value, rel=1e-12, nan_ok=True), key
    # measured: 1 (b), 2 (a), 4 (b), 5 (a, unfinished); 3 (b) is rejected in the window
    assert exact["tier_a_num_requests"] == exact["tier_b_num_requests"] == 2
    assert exact["tier_a_slo_attainment"] == 0.5  # 2 within .3 s; 5 never finished
    assert exact["tier_b_slo_attainment"] == 1.0  # 1 (no TPOT) and 4 within 2 s and .2 s
    assert exact["slo_attainment"] == pytest.approx(3 / 5)
    # served requests queued .2 + .5 + 1.5 s (5 is unfinished but was served) over the 6 s
    # from the first arrival to the last finish
    assert exact["mean_queue_length"] == pytest.approx(2.2 / 6.0)
