"""How `batchsim replay` sends a measured run's requests: a closed-loop benchmark (GuideLLM
concurrent, `vllm bench serve --max-concurrency`, AIPerf `--concurrency`) by as many clients as
it had, an open-loop one at its measured arrivals, and a line saying which when it cannot tell;
and the line (stderr and report) when the metrics window leaves none of the run measured."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers_measured import T0, export, span
from scenario_factory import continuous, fixed, scenario

from sim import load_scenario_dict, simulate
from sim.cli.main import main

T0_S = T0 / 1e9
N = 12


def base(tmp_path: Path, **extra: Any) -> Path:
    raw = scenario(name="rl", policy=continuous(max_num_seqs=8), **extra)
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def guidellm_request(i: int, start: float) -> dict[str, Any]:
    return {"request_id": f"g{start}", "request_start_time": start,
            "info": {"timings": {"request_start": start, "first_token_iteration": start + 0.05,
                                 "request_end": start + 0.5}},
            "request_end_time": start + 0.5, "prompt_tokens": 100 + i,
            "output_tokens": 10}  # fmt: skip


def guidellm(*strategies: dict[str, Any]) -> dict[str, Any]:
    benches = []
    for b, strategy in enumerate(strategies):
        first = T0_S + 100.0 * b
        requests = [guidellm_request(i, first + 0.25 * i) for i in range(N)]
        benches.append({"config": {"strategy": strategy},
                        "requests": {"successful": requests, "errored": [],
                                     "incomplete": []}})  # fmt: skip
    return {"benchmarks": benches}


def vllm_bench(**settings: Any) -> dict[str, Any]:
    return {"request_rate": "inf", "max_concurrency": None, "input_lens": [100] * N,
            "output_lens": [10] * N, "ttfts": [0.05] * N, "itls": [[0.05] * 9] * N,
            "errors": [""] * N, **settings}  # fmt: skip


def aiperf_lines() -> str:
    lines = []
    for i in range(N):
        meta = {"x_request_id": f"a{i}", "request_start_ns": T0 + i * 250_000_000,
                "benchmark_phase": "profiling", "was_cancelled": False}  # fmt: skip
        metrics = {"input_sequence_length": {"value": 100, "unit": "tokens"},
                   "output_sequence_length": {"value": 10, "unit": "tokens"},
                   "time_to_first_token": {"value": 50.0, "unit": "ms"},
                   "request_latency": {"value": 500.0, "unit": "ms"}}  # fmt: skip
        lines.append(json.dumps({"metadata": meta, "metrics": metrics, "error": None}))
    return "\n".join(lines) + "\n"


def replay(tmp_path: Path, run: Path, *extra: str) -> tuple[int, dict[str, Any], pd.DataFrame]:
    code = main(["replay", str(run), "--scenario", str(base(tmp_path)), "--out",
                 str(tmp_path / "out"), "--name", "r", "--no-plots", *extra])  # fmt: skip
    folder = tmp_path / "out" / "r"
    if code != 0:
        return code, {}, pd.DataFrame()
    doc = json.loads((folder / "comparison.json").read_text())
    return code, doc, pd.read_parquet(folder / "requests.parquet").sort_values("id")


def assert_closed_loop(requests: pd.DataFrame, clients: int) -> None:
    """Request k (k >= clients) arrives as request k - clients, of the same client, ends."""
    arrival = requests["arrival_s"].to_numpy()
    finish = requests["finish_s"].to_numpy()
    np.testing.assert_allclose(arrival[clients:], finish[:-clients], rtol=0, atol=1e-12)


def test_trace_clients_send_as_the_workloads_clients_do(tmp_path: Path) -> None:
    """A trace sent by 3 clients runs exactly as 3 `workload.clients` of the same lengths."""
    rows = "\n".join(f"0.0,100,{10 + i % 4}" for i in range(N))
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n" + rows + "\n")
    lengths = [10 + i % 4 for i in range(N)]
    traced = scenario(workload={"trace": {"path": str(tmp_path / "t.csv"), "num_clients": 3}})
    (one,) = simulate(load_scenario_dict(traced, base_dir=tmp_path)).variants.values()
    requests = one.requests.sort_values("id")
    assert_closed_loop(requests, 3)
    assert requests["num_output_tokens"].tolist() == lengths  # row i is request i
    # the same clients drawn by `workload.clients`, every request of one length
    fixed_rows = "\n".join("0.0,100,10" for _ in range(N))
    (tmp_path / "f.csv").write_text("arrival_s,prompt_tokens,output_tokens\n" + fixed_rows + "\n")
    traced = scenario(workload={"trace": {"path": str(tmp_path / "f.csv"), "num_clients": 3}})
    drawn = scenario(
        workload={
            "num_requests": N,
            "clients": {"num_clients": 3, "prompt_tokens": fixed(100), "output_tokens": fixed(10)},
        }
    )
    ends = [
        sorted(
            next(
                iter(simulate(load_scenario_dict(raw, base_dir=tmp_path)).variants.values())
            ).requests["finish_s"]
        )
        for raw in (traced, drawn)
    ]
    np.testing.assert_allclose(ends[0], ends[1], rtol=1e-12)


def test_a_guidellm_concurrent_benchmark_replays_by_its_streams(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "g.json"
    path.write_text(json.dumps(guidellm({"type_": "concurrent", "streams": 2})))
    code, doc, requests = replay(tmp_path, path)
    out = capsys.readouterr().out
    assert code == 0
    assert "GuideLLM benchmark 0 (concurrent, streams 2): a closed loop, replayed as 2 " in out
    assert doc["replayed_by_clients"] == 2
    assert_closed_loop(requests, 2)
    html = (tmp_path / "out" / "r" / "report.html").read_text()
    assert "sent by 2 closed-loop client(s)" in html
    assert "<h1>batchsim report: replay of g.json against rl</h1>" in html


def test_a_guidellm_sweep_is_replayed_open_and_says_which_were_closed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "g.json"
    path.write_text(json.dumps(guidellm({"type_": "synchronous"},
                                        {"type_": "constant", "rate": 4.0})))  # fmt: skip
    code, doc, requests = replay(tmp_path, path)
    err = capsys.readouterr().err
    assert code == 0 and doc["replayed_by_clients"] is None
    assert "benchmarks 0 (synchronous) of this sweep were closed loops" in err
    measured = np.concatenate([0.25 * np.arange(N), 100.0 + 0.25 * np.arange(N)])
    np.testing.assert_allclose(requests["arrival_s"], measured, atol=1e-6)  # open loop
    # one benchmark of it: the synchronous one is one client
    code, doc, requests = replay(tmp_path, path, "--benchmark", "0")
    assert code == 0 and doc["replayed_by_clients"] == 1
    assert_closed_loop(requests, 1)


def test_vllm_bench_max_concurrency_at_an_infinite_rate_is_a_closed_loop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "v.json"
    path.write_text(json.dumps(vllm_bench(max_concurrency=4)))
    code, doc, requests = replay(tmp_path, path)
    assert code == 0 and doc["replayed_by_clients"] == 4
    assert "vllm bench serve --max-concurrency 4: a closed loop" in capsys.readouterr().out
    assert_closed_loop(requests, 4)
    # a finite rate that the concurrency only gated: the measured arrivals, and a line
    path.write_text(json.dumps(vllm_bench(max_concurrency=4, request_rate=2.0)))
    code, doc, _ = replay(tmp_path, path)
    assert code == 0 and doc["replayed_by_clients"] is None
    assert "max_concurrency 4 gated a request_rate of 2.0/s" in capsys.readouterr().err


def test_aiperf_concurrency_comes_from_its_summary_beside_the_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "profile_export.jsonl"
    path.write_text(aiperf_lines())
    code, doc, _ = replay(tmp_path, path)
    assert code == 0 and doc["replayed_by_clients"] is None
    err = capsys.readouterr().err
    assert (
        "batchsim: note: AIPerf's records do not say how the requests were sent (no "
        "profile_export_aiperf.json beside it): the concurrency of a --concurrency run "
        "cannot be known" in err
    )
    assert len([line for line in err.splitlines() if "AIPerf" in line]) == 1
    summary = {"input_config": {"loadgen": {"concurrency": 3}}}
    (tmp_path / "profile_export_aiperf.json").write_text(json.dumps(summary))
    code, doc, requests = replay(tmp_path, path)
    assert code == 0 and doc["replayed_by_clients"] == 3
    assert "AIPerf --concurrency 3: a closed loop" in capsys.readouterr().out
    assert_closed_loop(requests, 3)
    (tmp_path / "profile_export_aiperf.json").write_text("{not json")
    code, doc, _ = replay(tmp_path, path)
    assert code == 0 and doc["replayed_by_clients"] is None
    assert "profile_export_aiperf.json is not readable JSON" in capsys.readouterr().err


def test_spans_replay_at_their_arrivals_without_a_word(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.json"
    path.write_text(export(*(span(T0 + i * 250_000_000, ttft=0.05, e2e=0.5, output="10",
                                  rid=f"s{i}") for i in range(N))))  # fmt: skip
    code, doc, requests = replay(tmp_path, path)
    captured = capsys.readouterr()
    assert code == 0 and doc["replayed_by_clients"] is None and doc["load_note"] == ""
    assert "closed loop" not in captured.out + captured.err
    np.testing.assert_allclose(requests["arrival_s"], 0.25 * np.arange(N), atol=1e-6)


def test_a_metrics_window_covering_the_run_is_said_on_stderr_and_in_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.json"  # arrivals over 2.75 s; the window leaves out 2 + 1 s
    path.write_text(export(*(span(T0 + i * 250_000_000, ttft=0.05, e2e=0.5, output="10",
                                  rid=f"s{i}") for i in range(N))))  # fmt: skip
    code, doc, _ = replay(tmp_path, path, "--set", "metrics.warmup_s=2",
                          "--set", "metrics.cooldown_s=1")  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0
    line = ("batchsim: note: metrics.warmup_s (2 s) and metrics.cooldown_s (1 s) cover the "
            "run's whole 2.75 s of arrivals: the summary measures none of its requests (the "
            "comparison takes them all); --set metrics.warmup_s=0 --set metrics.cooldown_s=0 "
            "measures every one")  # fmt: skip
    assert line in err.splitlines()
    assert doc["window_note"] == line.removeprefix("batchsim: note: ")
    html = (tmp_path / "out" / "r" / "report.html").read_text()
    assert 'class="warn">metrics.warmup_s (2 s) and metrics.cooldown_s (1 s) cover' in html
    # a window that leaves requests measured says nothing
    code, doc, _ = replay(tmp_path, path, "--set", "metrics.warmup_s=1")
    assert code == 0 and doc["window_note"] == ""
    assert "metrics.warmup_s" not in capsys.readouterr().err
