"""bench_summary.json: batchsim's summary under vLLM bench's field names, in milliseconds."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from scenario_factory import continuous, poisson, scenario, uniform

import sim
from sim.cli.main import main
from sim.io.bench_names import bench_summary


def test_a_hand_row_maps_to_the_vllm_names() -> None:
    row = {
        "duration_s": 4.0,
        "requests_per_s": 2.5,
        "output_tokens_per_s": 30.0,
        "total_tokens_per_s": 130.0,
        "num_rejected": 1,
        "ttft_mean_s": 0.25,
        "ttft_p50_s": 0.125,
        "ttft_p90_s": 0.5,
        "ttft_p95_s": 0.75,
        "ttft_p99_s": 1.0,
        "e2e_mean_s": 2.0,
        "tpot_mean_s": math.nan,  # undefined: left out
        "itl_p99_s": None,  # as summary.json holds an undefined metric
    }
    assert bench_summary(row) == {
        "duration": 4.0,
        "completed": 10,
        "total_output_tokens": 120,
        "total_input_tokens": 400,
        "failed": 1,
        "request_throughput": 2.5,
        "output_throughput": 30.0,
        "total_token_throughput": 130.0,
        "mean_ttft_ms": 250.0,
        "median_ttft_ms": 125.0,
        "p50_ttft_ms": 125.0,
        "p90_ttft_ms": 500.0,
        "p95_ttft_ms": 750.0,
        "p99_ttft_ms": 1000.0,
        "mean_e2el_ms": 2000.0,
    }


def test_nothing_is_made_up_for_an_empty_row() -> None:
    assert bench_summary({}) == {}
    # counts need the duration and every rate: without them they are not guessed
    assert "completed" not in bench_summary({"requests_per_s": 1.0, "duration_s": math.nan})


SCENARIO = scenario(
    name="bench",
    seed=2,
    workload=poisson(60, 6.0, uniform(20, 600), uniform(1, 60)),
    policy=continuous(max_num_seqs=8, max_num_batched_tokens=1024),
    profile=None,
)


def test_values_match_the_requests_table_in_milliseconds(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SCENARIO))
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path), "-q", "--no-plots",
                 "--tables", "all"]) == 0  # fmt: skip
    (line,) = (tmp_path / "bench" / "bench_summary.json").read_text().splitlines()
    bench = json.loads(line)  # one variant: exactly `vllm bench serve --save-result`'s object
    assert bench["label"] == "default" and bench["backend"] == "batchsim"
    assert bench["model_id"] == bench["tokenizer_id"] == "llama-2-7b"
    assert bench["num_prompts"] == 60 and bench["request_rate"] == 6.0
    assert bench["burstiness"] == 1.0 and bench["max_concurrency"] is None
    assert bench["request_goodput"] is None  # the scenario sets no SLO
    results = sim.simulate(SCENARIO)
    req = results.requests
    done = req[~req["rejected"] & req["finish_s"].notna()]
    # computed here from the table, independently of sim.metrics (no warm-up, no cool-down)
    duration = done["finish_s"].max() - req["arrival_s"].min()
    assert bench["completed"] == len(done) == 60
    assert bench["failed"] == 0
    assert bench["total_input_tokens"] == int(done["num_prompt_tokens"].sum())
    assert bench["total_output_tokens"] == int(done["num_output_tokens"].sum())
    assert bench["duration"] == pytest.approx(duration, rel=1e-12)
    assert bench["request_throughput"] == pytest.approx(60 / duration, rel=1e-12)
    for ours, theirs in (("ttft_s", "ttft"), ("tpot_s", "tpot"), ("e2e_s", "e2el")):
        values = done[ours].dropna().to_numpy()
        assert bench[f"mean_{theirs}_ms"] == pytest.approx(values.mean() * 1000, rel=1e-9)
        assert bench[f"median_{theirs}_ms"] == pytest.approx(np.median(values) * 1000, rel=1e-9)
        for q in (50, 90, 95, 99):
            expected = np.percentile(values, q) * 1000
            assert bench[f"p{q}_{theirs}_ms"] == pytest.approx(expected, rel=1e-9)
    itl = results["default"].itl
    gaps = np.repeat(itl["gap_s"].to_numpy(), itl["count"].to_numpy())
    assert bench["mean_itl_ms"] == pytest.approx(gaps.mean() * 1000, rel=1e-9)
    assert bench["p99_itl_ms"] == pytest.approx(np.percentile(gaps, 99) * 1000, rel=1e-9)
    assert not any(key.startswith("std_") for key in bench)
    # the most requests in flight at once, by a sweep over [arrival, finish)
    spans = list(zip(done["arrival_s"], done["finish_s"], strict=True))
    peak = max(sum(a <= t < f for a, f in spans) for t, _ in spans)
    assert bench["max_concurrent_requests"] == peak


def test_each_variant_is_a_line_a_vllm_result_loader_reads(tmp_path: Path) -> None:
    """Two variants: two lines (vLLM's `--append-result` file), each a flat result labelled
    with its variant; the SLOs make `request_goodput` the summary's goodput."""
    raw = dict(SCENARIO, slo={"ttft_s": 0.5}, variants={"a": {}, "b": {"seed": 3}})
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path), "-q", "--no-plots"]) == 0
    lines = (tmp_path / "bench" / "bench_summary.json").read_text().splitlines()
    docs = [json.loads(line) for line in lines]
    assert [d["label"] for d in docs] == ["a", "b"]
    summary = json.loads((tmp_path / "bench" / "summary.json").read_text())["variants"]
    for doc in docs:
        assert doc["request_goodput"] == summary[doc["label"]]["goodput_rps"]
        assert all(not isinstance(v, (dict, list)) for v in doc.values())  # flat
