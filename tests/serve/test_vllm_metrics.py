"""`/metrics` as vLLM records it: every inter-token gap (a stall included), the first token's
counts and latency at the first token, aborted requests as aborted (and not as rejections or
SLO misses in the summary), the phase histograms, process and HTTP metrics; scraped during a
run with stalls and checked against the server's own per-token record."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import numpy as np
import pytest
from helpers_serve import Clock, get, post, serving
from prometheus_client.parser import text_string_to_metric_families
from scenario_factory import continuous, scenario

from sim.scenario.load import load_scenario_dict
from sim.serve.live import LiveEngine
from sim.serve.metrics import ITL_BUCKETS, Histogram, ServeMetrics

# a decode under way, a long prompt arriving mid-decode (its prefill stalls the decode: no
# chunked prefill), and a short one
ARRIVALS = [(0.0, 100, 120), (0.4, 3500, 4), (0.41, 30, 20)]


def metered_run(raw: dict[str, Any], arrivals: list[tuple[float, int, int]],
                aborts: dict[int, float] | None = None,
                at: float | None = None) -> tuple[Any, ServeMetrics, dict[str, Any]]:  # fmt: skip
    """`arrivals` on a hand-set clock with a `ServeMetrics` told of them as the engine
    applies steps (aborting request i at `aborts[i]`); (results, metrics, a snapshot of the
    metrics' counts at simulated time `at`)."""
    clock = Clock()
    engine = LiveEngine(load_scenario_dict(raw).variants[0], clock=clock)
    metrics = ServeMetrics("m", "0", engine.state, frontend_s=engine.frontend_s)
    engine.watch(metrics)
    events = sorted([(t, 0, i) for i, (t, _, _) in enumerate(arrivals)]
                    + [(t, 1, i) for i, t in (aborts or {}).items()]
                    + ([(at, 2, -1)] if at is not None else []))  # fmt: skip
    lives: dict[int, Any] = {}
    snapshot: dict[str, Any] = {}

    def step_to(t: float) -> None:
        while engine.next_s() < t:
            clock.t = engine.wall_of(engine.next_s()) + 1e-9
            engine.advance()
        clock.t = engine.wall_of(t)
        engine.advance()

    for t, kind, i in events:
        step_to(t)
        if kind == 0:
            lives[i] = engine.submit(arrivals[i][1], arrivals[i][2], lambda: None,
                                     meter=metrics)  # fmt: skip
        elif kind == 1:
            engine.abort(lives[i])
        else:
            snapshot = {"prompt": metrics.prompt_tokens, "generated": metrics.generation_tokens,
                        "ttft": sum(metrics["ttft"].counts), "e2e": sum(metrics["e2e"].counts),
                        "itl": sum(metrics["itl"].counts),
                        "emitted": [live.req.num_output_tokens for live in lives.values()]}
    while engine.live:
        clock.t = engine.wall_of(engine.next_s()) + 1e-9
        engine.advance()
    return engine.close("t"), metrics, snapshot


def expected_buckets(gaps: np.ndarray, counts: np.ndarray) -> list[int]:
    """The server's own gaps in the ITL histogram's buckets (`le`: at most the bound)."""
    where = np.searchsorted(np.asarray(ITL_BUCKETS), gaps, side="left")
    return np.bincount(where, weights=counts, minlength=len(ITL_BUCKETS) + 1).astype(int).tolist()


def quantile_bucket(counts: list[int], q: float) -> int:
    """The bucket holding quantile `q` (what `histogram_quantile` interpolates within)."""
    running = np.cumsum(counts)
    return int(np.searchsorted(running, q * running[-1], side="left"))


def test_the_itl_histogram_holds_every_gap_of_the_record_a_stall_included() -> None:
    results, metrics, _ = metered_run(scenario(profile=None), ARRIVALS)
    itl = next(iter(results.variants.values())).itl
    gaps, counts = itl["gap_s"].to_numpy(), itl["count"].to_numpy()
    assert gaps.max() > 10 * np.median(np.repeat(gaps, counts))  # the long prefill's stall
    assert metrics["itl"].counts == expected_buckets(gaps, counts)
    assert metrics["itl"].sum == pytest.approx(float((gaps * counts).sum()), rel=1e-9)
    # a request's mean gap, n - 1 times, would hide the stall in its mean
    assert metrics["itl"].counts[-1] + sum(metrics["itl"].counts[5:]) >= 1


def test_first_token_counts_and_latency_are_recorded_at_the_first_token() -> None:
    _, metrics, seen = metered_run(scenario(profile=None), ARRIVALS[:1], at=0.5)
    assert 0 < seen["emitted"][0] < 120  # mid-decode at the snapshot
    assert seen["prompt"] == 100 and seen["ttft"] == 1 and seen["e2e"] == 0
    assert seen["generated"] == seen["emitted"][0]
    assert seen["itl"] == seen["emitted"][0] - 1  # every gap so far, recorded as it came
    assert metrics.generation_tokens == 120 and sum(metrics["e2e"].counts) == 1


def test_aborted_requests_count_as_aborted_not_as_rejected_nor_missed() -> None:
    raw = scenario(profile=None, slo={"ttft_s": 100.0})
    arrivals = [(0.0, 100, 200), (0.05, 50, 200), (0.1, 80, 5)]
    results, metrics, _ = metered_run(raw, arrivals, aborts={0: 0.5, 1: 0.06})
    assert metrics.finished == {"stop": 0, "length": 1, "abort": 2}
    assert sum(metrics["e2e"].counts) == 1  # an aborted request enters no end histogram
    summary = results.summary().iloc[0]
    assert summary["num_rejected"] == 0 and summary["aborted_requests"] == 2
    assert summary["slo_attainment"] == 1.0  # the one served met its SLO


def test_phase_histograms_follow_the_request_record() -> None:
    results, metrics, _ = metered_run(scenario(profile=None), ARRIVALS)
    req = next(iter(results.variants.values())).requests
    h = metrics.histograms
    assert sum(h["prefill"].counts) == sum(h["decode"].counts) == len(req) == 3
    prefill = (req["first_token_s"] - req["first_scheduled_s"]).sum()
    decode = (req["finish_s"] - req["first_token_s"]).sum()
    assert h["prefill"].sum == pytest.approx(prefill, rel=1e-9)
    assert h["decode"].sum == pytest.approx(decode, rel=1e-9)
    assert h["inference"].sum == pytest.approx(prefill + decode, rel=1e-9)
    tpot = ((req["finish_s"] - req["first_token_s"]) / (req["num_output_tokens"] - 1)).sum()
    assert h["tpot"].sum == pytest.approx(tpot, rel=1e-9)
    assert sum(h["iteration"].counts) > 0


def _families(raw: bytes) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(raw.decode())}


def _buckets(family: Any) -> list[int]:
    cumulative = [int(s.value) for s in family.samples if s.name.endswith("_bucket")]
    return [cumulative[0], *np.diff(cumulative).tolist()]


def test_a_scrape_during_a_stalled_run_matches_the_servers_own_record() -> None:
    """A stream decodes while a long prompt arrives (its prefill stalls the stream). Scraped
    mid-run, the ITL histogram already holds the gaps so far; scraped at the end, its p50, p90
    and p99 fall in the buckets of the server's own per-token record."""
    with serving(scenario(profile=None), speed=4.0) as (ports, srv):
        port = ports[0]
        long = threading.Thread(target=post, args=(port, "/v1/completions", {
            "prompt": "a" * 400, "max_tokens": 250, "stream": True}))  # fmt: skip
        long.start()
        time.sleep(0.3)
        assert post(port, "/v1/completions", {"prompt": "b" * 14000, "max_tokens": 2})[0] == 200
        mid = _families(get(port, "/metrics")[1])
        running = long.is_alive()
        long.join(60)
        end = _families(get(port, "/metrics")[1])

        async def record() -> tuple[np.ndarray, np.ndarray]:
            gaps, counts, _ = srv.engine.cluster.instances[0].engine.itl.arrays()
            return gaps.copy(), counts.copy()

        import asyncio

        gaps, counts = asyncio.run_coroutine_threadsafe(record(), srv.driver.loop).result(10)
    if running:  # the scrape came while the stream was still going (a busy machine may be late)
        itl_mid = sum(_buckets(mid["vllm:inter_token_latency_seconds"]))
        e2e_mid = sum(_buckets(mid["vllm:e2e_request_latency_seconds"]))
        assert itl_mid > 0 and e2e_mid == 1  # the short one ended, the stream has gaps already
    got = _buckets(end["vllm:inter_token_latency_seconds"])
    want = expected_buckets(gaps, counts)
    assert got == want
    assert max(gaps) > 0.1  # a stall: the long prefill
    for q in (0.5, 0.9, 0.99):
        assert abs(quantile_bucket(got, q) - quantile_bucket(want, q)) <= 1
    samples = end["vllm:request_success"].samples
    success = {s.labels["finished_reason"]: s.value for s in samples if s.name.endswith("_total")}
    assert success == {"stop": 0.0, "length": 2.0, "abort": 0.0}


def test_dashboards_find_their_series() -> None:
    with serving(scenario(profile=None), speed=20.0) as (ports, _):
        port = ports[0]
        assert post(port, "/v1/completions", {"prompt": "abcd" * 8, "max_tokens": 4})[0] == 200
        assert post(port, "/v1/completions", {"prompt": 5})[0] == 400
        families = _families(get(port, "/metrics")[1])
    for name in ("vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
                 "vllm:request_queue_time_seconds", "vllm:request_inference_time_seconds",
                 "vllm:request_time_per_output_token_seconds", "vllm:iteration_tokens_total",
                 "vllm:request_params_max_tokens", "process_cpu_seconds", "python_info",
                 "http_request_duration_seconds", "http_request_duration_highr_seconds",
                 "http_request_size_bytes", "http_response_size_bytes"):  # fmt: skip
        assert name in families, name
    (info,) = families["vllm:cache_config_info"].samples
    assert info.value == 1 and info.labels["block_size"] == "16"
    assert int(info.labels["num_gpu_blocks"]) > 0
    requests = {(s.labels["handler"], s.labels["method"], s.labels["status"]): s.value
                for s in families["http_requests"].samples
                if s.name.endswith("_total")}  # fmt: skip
    assert requests == {("/v1/completions", "POST", "2xx"): 1.0,
                        ("/v1/completions", "POST", "4xx"): 1.0}  # /metrics is not counted


def test_the_histogram_counts_repeated_observations() -> None:
    h = Histogram((0.1, 1.0))
    h.observe(0.1, 3)
    h.observe(2.0)
    assert h.buckets() == [("0.1", 3.0), ("1.0", 3.0), ("+Inf", 4.0)]
    assert h.sum == pytest.approx(2.3)


def test_cached_prompt_tokens_are_reported_in_usage() -> None:
    with serving(scenario(profile=None, policy=continuous(prefix_caching=True)),
                 speed=20.0) as (ports, _):  # fmt: skip
        body = {"prompt": "shared system prompt " * 60, "max_tokens": 2}
        first = json.loads(post(ports[0], "/v1/completions", body)[1])["usage"]
        second = json.loads(post(ports[0], "/v1/completions", body)[1])["usage"]
    assert "prompt_tokens_details" not in first  # nothing cached yet
    cached = second["prompt_tokens_details"]["cached_tokens"]
    assert 0 < cached <= second["prompt_tokens"]
