"""The readers of `vllm bench serve` results, GuideLLM reports, AIPerf profile exports and
batchsim's requests tables, on small files written here in each tool's real layout."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from sim.errors import ScenarioError
from sim.measured import detect_format, read_measured

T0 = 1_769_021_450.0  # seconds since the epoch (2026-01-21)


def write(tmp_path: Path, name: str, content: Any) -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


# ---- vllm bench serve -----------------------------------------------------------------------


def bench_result(**changes: Any) -> dict[str, Any]:
    result: dict[str, Any] = {
        "date": "20260121-105000", "backend": "vllm", "model_id": "meta-llama/Llama-2-7b-hf",
        "tokenizer_id": "meta-llama/Llama-2-7b-hf", "num_prompts": 3, "request_rate": 2.0,
        "burstiness": 1.0, "max_concurrency": None, "duration": 3.1, "completed": 2, "failed": 1,
        "input_lens": [100, 200, 300], "output_lens": [3, 0, 2], "ttfts": [0.5, 0.0, 0.25],
        "itls": [[0.125, 0.375], [], [0.5]], "errors": ["", "Bad Request", ""],
        "generated_texts": ["abc", "", "de"],
    }  # fmt: skip
    result.update(changes)
    return result


def test_vllm_bench_start_times_itls_and_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "r.json", bench_result(start_times=[10.5, 10.0, 10.25]))
    run = read_measured(path)
    assert run.format == "vllm_bench" and len(run) == 2 and run.num_failed == 1
    assert list(run.request_id) == ["2", "0"]  # sorted by start time
    np.testing.assert_allclose(run.arrival_s, [0.0, 0.25])
    np.testing.assert_allclose(run.e2e_s, [0.75, 1.0])  # ttft + sum(itls)
    np.testing.assert_allclose(run.tpot_s, [0.5, 0.25])
    assert run.itl_s is not None and [g.tolist() for g in run.itl_s] == [[0.5], [0.125, 0.375]]
    assert run.origin_unix_s is None and run.meta["model_id"] == "meta-llama/Llama-2-7b-hf"
    assert run.meta["arrival_times"].startswith("measured")


def test_vllm_bench_without_start_times_spaces_arrivals_at_the_rate(tmp_path: Path) -> None:
    run = read_measured(write(tmp_path, "r.json", bench_result(latencies=[1.5, 0.0, 0.75])))
    np.testing.assert_allclose(run.arrival_s, [0.0, 1.0])  # requests 0 and 2 at i / 2.0
    np.testing.assert_allclose(run.e2e_s, [1.5, 0.75])  # latencies win over ttft + itls
    assert "evenly spaced at request_rate 2/s" in run.meta["arrival_times"]
    infinite = read_measured(
        write(tmp_path, "i.json", bench_result(request_rate="inf", max_concurrency=8))
    )
    assert infinite.arrival_s.tolist() == [0.0, 0.0]
    assert infinite.meta["arrival_times"] == (
        "not in the file: all at 0 (request_rate inf); max_concurrency 8 gated sending by "
        "completions"
    )


def test_vllm_bench_appended_results_are_benchmarks(tmp_path: Path) -> None:
    second = bench_result(input_lens=[7, 8, 9])
    path = write(tmp_path, "a.json", json.dumps(bench_result()) + "\n" + json.dumps(second))
    assert read_measured(path, benchmark=1).prompt_tokens.tolist() == [7, 9]
    assert read_measured(path).meta["results_in_file"] == 2
    with pytest.raises(ScenarioError, match="benchmark 2 asked for; the file holds 2"):
        read_measured(path, benchmark=2)


@pytest.mark.parametrize(
    ("changes", "expect"),
    [
        ({"ttfts": [0.5, 0.0, -1.0]}, "request 2: ttft is negative"),
        (
            {"ttfts": [0.5, 0.0, 9.0], "latencies": [1, 0, 1]},
            "request 2: time to first token 9 s exceeds",
        ),
        ({"input_lens": [100, 200]}, "input_lens holds 2 entries for 3 requests"),
        ({"input_lens": [0, 1, 1]}, "request 0: input_lens is 0, below 1"),
        ({"itls": [[0.1, "x"], [], [0.5]]}, "request 0: inter-token gap 'x' is not a number"),
        ({"start_times": [1.0, 2.0, 3.0e7]}, "request [02]: arrival times span 347 days"),
        ({"errors": ["a", "b", "c"]}, "holds no completed request"),
    ],
)
def test_vllm_bench_bad_values(tmp_path: Path, changes: dict[str, Any], expect: str) -> None:
    path = write(tmp_path, "r.json", bench_result(**changes))
    with pytest.raises(ScenarioError, match=expect.replace("(", r"\(")):
        read_measured(path, "vllm_bench")


def test_vllm_bench_without_detail_asks_for_save_detailed(tmp_path: Path) -> None:
    summary = {k: v for k, v in bench_result().items() if k not in ("input_lens", "ttfts")}
    with pytest.raises(ScenarioError, match="--save-detailed"):
        read_measured(write(tmp_path, "r.json", summary), "vllm_bench")


# ---- GuideLLM -------------------------------------------------------------------------------


def request_v04(start: float, ttft: float, e2e: float, prompt: int, output: int) -> dict[str, Any]:
    return {
        "type_": "generative_request_stats", "request_id": f"r{start}",
        "request_type": "text_completions",
        "info": {"timings": {"request_start": start, "first_token_iteration": start + ttft,
                             "last_token_iteration": start + e2e, "request_end": start + e2e}},
        "input_metrics": {"text_tokens": prompt}, "output_metrics": {"text_tokens": output},
        "request_start_time": start, "request_end_time": start + e2e,
        "prompt_tokens": prompt, "output_tokens": output,
    }  # fmt: skip


def request_v02(start: float, ttft: float, e2e: float, prompt: int, output: int) -> dict[str, Any]:
    return {
        "request_id": f"o{start}", "prompt": "x", "output": "y", "prompt_tokens": prompt,
        "output_tokens": output, "start_time": start, "end_time": start + e2e,
        "first_token_time": start + ttft, "last_token_time": start + e2e,
    }  # fmt: skip


def request_v03(start: float, ttft: float, e2e: float, prompt: int, output: int) -> dict[str, Any]:
    timings = {"request_start": start, "first_iteration": start + ttft,
               "last_iteration": start + e2e, "request_end": start + e2e}  # fmt: skip
    return {"request_id": f"m{start}", "scheduler_info": {"request_timings": timings},
            "prompt_tokens": prompt, "output_tokens": output}  # fmt: skip


def report(*benches: list[dict[str, Any]], errored: int = 0) -> dict[str, Any]:
    out = []
    for i, requests in enumerate(benches):
        strategy = {"type_": "constant", "rate": float(i + 1)}
        out.append({"type_": "generative_benchmark", "config": {"strategy": strategy},
                    "requests": {"successful": requests, "incomplete": [],
                                 "errored": [{"request_id": "e"}] * errored}})  # fmt: skip
    return {"metadata": {"guidellm_version": "0.4.0"}, "benchmarks": out}


@pytest.mark.parametrize("layout", [request_v04, request_v03, request_v02])
def test_guidellm_layouts_give_the_same_run(tmp_path: Path, layout: Any) -> None:
    first = [layout(T0 + 1.0, 0.25, 1.25, 10, 5), layout(T0, 0.5, 2.5, 20, 1)]
    second = [layout(T0 + 100.0, 0.125, 0.625, 30, 3)]
    path = write(tmp_path, "g.json", report(first, second, errored=2))
    run = read_measured(path)
    assert run.format == "guidellm" and len(run) == 3 and run.num_failed == 4
    np.testing.assert_allclose(run.arrival_s, [0.0, 1.0, 100.0])
    np.testing.assert_allclose(run.ttft_s, [0.5, 0.25, 0.125])
    np.testing.assert_allclose(run.tpot_s, [math.nan, 0.25, 0.25])
    assert run.prompt_tokens.tolist() == [20, 10, 30] and run.origin_unix_s == T0
    assert run.meta["benchmarks"] == [
        {"index": 0, "strategy": "constant", "rate": 1.0, "requests": 2, "rows": [0, 2]},
        {"index": 1, "strategy": "constant", "rate": 2.0, "requests": 1, "rows": [2, 3]},
    ]
    one = read_measured(path, benchmark=1)
    assert len(one) == 1 and one.arrival_s.tolist() == [0.0] and one.num_failed == 2


def test_guidellm_bad_requests_name_their_place(tmp_path: Path) -> None:
    bad = request_v04(T0, 0.5, 1.0, 10, 5)
    bad["request_start_time"] = bad["info"]["timings"]["request_start"] = T0 * 1000  # ms
    path = write(tmp_path, "g.json", report([request_v04(T0, 0.5, 1.0, 10, 5), bad]))
    with pytest.raises(ScenarioError, match=r"benchmarks\[0\].requests.successful\[1\]: "):
        read_measured(path, "guidellm")
    with pytest.raises(ScenarioError, match="benchmark 3 asked for; the report holds 1"):
        read_measured(write(tmp_path, "h.json", report([bad])), benchmark=3)
    late = request_v04(T0, 5.0, 1.0, 10, 5)
    with pytest.raises(ScenarioError, match="exceeds the end-to-end"):
        read_measured(write(tmp_path, "l.json", report([late])))


# ---- AIPerf ---------------------------------------------------------------------------------


def aiperf_record(start_s: float, **metrics: Any) -> dict[str, Any]:
    base = {
        "input_sequence_length": {"value": 550, "unit": "tokens"},
        "time_to_first_token": {"value": 250.0, "unit": "ms"},
        "request_latency": {"value": 1.25, "unit": "sec"},
        "output_sequence_length": {"value": 3, "unit": "tokens"},
        "inter_chunk_latency": {"value": [250_000.0, 750_000.0], "unit": "us"},
        "inter_token_latency": {"value": 500.0, "unit": "ms"},
    }
    base.update(metrics)
    meta = {"session_num": 0, "x_request_id": f"x{start_s}", "turn_index": 0,
            "request_start_ns": int(start_s * 1e9), "request_end_ns": int((start_s + 1) * 1e9),
            "benchmark_phase": "profiling", "was_cancelled": False}  # fmt: skip
    return {"metadata": meta, "metrics": base, "error": None}


def test_aiperf_units_failures_and_chunk_gaps(tmp_path: Path) -> None:
    failed = aiperf_record(T0 + 0.5)
    failed["metrics"] = {"error_isl": {"value": 550, "unit": "tokens"}}
    failed["error"] = {"code": 499, "type": "RequestCancellationError", "message": "x"}
    warmup = aiperf_record(T0 - 10)
    warmup["metadata"]["benchmark_phase"] = "warmup"
    lines = [aiperf_record(T0 + 2), failed, warmup,
             aiperf_record(T0, output_sequence_length={"value": 1, "unit": "tokens"},
                           inter_chunk_latency={"value": [], "unit": "ms"})]  # fmt: skip
    path = write(tmp_path, "profile_export.jsonl", "\n".join(json.dumps(r) for r in lines))
    run = read_measured(path)
    assert run.format == "aiperf" and len(run) == 2 and run.num_failed == 1
    assert run.meta["records_not_profiling"] == 1
    np.testing.assert_allclose(run.arrival_s, [0.0, 2.0])
    np.testing.assert_allclose(run.ttft_s, [0.25, 0.25])
    np.testing.assert_allclose(run.e2e_s, [1.25, 1.25])
    # one output token: no derivation, the file's own inter_token_latency
    np.testing.assert_allclose(run.tpot_s, [0.5, 0.5])
    assert run.itl_s is not None and [g.tolist() for g in run.itl_s] == [[], [0.25, 0.75]]


@pytest.mark.parametrize(
    ("metrics", "expect"),
    [
        ({"request_latency": {"value": 5, "unit": "parsecs"}}, "not a time unit"),
        ({"request_latency": {"value": -5, "unit": "ms"}}, "request_latency is negative"),
        ({"input_sequence_length": {"value": 1e9, "unit": "tokens"}}, "above 10,000,000"),
        ({"time_to_first_token": {"value": 1e10, "unit": "ms"}}, "above"),
    ],
)
def test_aiperf_bad_metrics(tmp_path: Path, metrics: dict[str, Any], expect: str) -> None:
    lines = [aiperf_record(T0), aiperf_record(T0 + 1, **metrics)]
    path = write(tmp_path, "p.jsonl", "\n".join(json.dumps(r) for r in lines))
    with pytest.raises(ScenarioError, match=f"line 2: .*{expect}"):
        read_measured(path, "aiperf")


# ---- batchsim -------------------------------------------------------------------------------


def requests_table(**changes: Any) -> pd.DataFrame:
    table = pd.DataFrame({
        "id": [0, 1, 2, 0, 1], "arrival_s": [0.5, 0.25, 1.0, 0.0, 2.0],
        "num_prompt_tokens": [10, 20, 30, 40, 50], "num_output_tokens": [3, 1, 2, 2, 2],
        "ttft_s": [0.1, 0.2, np.nan, 0.1, 0.1], "e2e_s": [0.5, 0.2, np.nan, 0.3, 0.3],
        "tpot_s": [0.2, np.nan, np.nan, 0.2, 0.2], "queue_s": [0.0, 0.0, 0.0, 0.0, 0.0],
        "rejected": [False, False, True, False, False],
        "variant": ["static", "static", "static", "continuous", "continuous"],
    })  # fmt: skip
    return table.assign(**changes)


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_batchsim_folder_variants(tmp_path: Path, suffix: str) -> None:
    folder = tmp_path / "results"
    folder.mkdir()
    table = requests_table()
    if suffix == "csv":
        table.to_csv(folder / "requests.csv", index=False)
    else:
        table.to_parquet(folder / "requests.parquet", index=False)
    run = read_measured(folder)
    assert run.format == "batchsim" and run.meta["variants"] == ["static", "continuous"]
    assert len(run) == 2 and run.num_failed == 1 and list(run.request_id) == ["1", "0"]
    np.testing.assert_allclose(run.arrival_s, [0.0, 0.25])
    np.testing.assert_allclose(run.tpot_s, [math.nan, 0.2])
    other = read_measured(folder, variant="continuous")
    assert other.prompt_tokens.tolist() == [40, 50] and other.num_failed == 0
    assert read_measured(folder, benchmark=1).meta["variant"] == "continuous"
    with pytest.raises(ScenarioError, match="no variant 'x'"):
        read_measured(folder, variant="x")


def test_batchsim_bad_rows_are_named(tmp_path: Path) -> None:
    path = tmp_path / "requests.csv"
    requests_table(num_prompt_tokens=[10, 20, 30, 0, 50]).to_csv(path, index=False)
    assert detect_format(path) == "batchsim"
    with pytest.raises(ScenarioError, match="row 4: num_prompt_tokens 0 is outside"):
        read_measured(path, variant="continuous")
    requests_table(ttft_s=[0.1, 0.9, 0.1, 0.1, 0.1]).to_csv(path, index=False)
    with pytest.raises(ScenarioError, match="row 2: ttft_s exceeds e2e_s"):
        read_measured(path)
