"""Trace export: valid trace-event JSON, one slice per step, request phases at the right times."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers_results import TINY, tiny_results

from sim.cli.main import main
from sim.io.trace_export import trace_document, write_trace
from sim.metrics.steps import expand_steps

NUMBER = (int, float)
META_NAMES = {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}


def check_trace(doc: Any) -> None:
    """Trace Event Format, JSON-object form: required keys and types per phase."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    assert doc.get("displayTimeUnit") in ("ms", "ns")
    for event in doc["traceEvents"]:
        assert isinstance(event, dict), event
        assert isinstance(event["name"], str) and event["name"], event
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int), event
        phase = event["ph"]
        if phase == "X":
            assert isinstance(event["ts"], NUMBER) and isinstance(event["dur"], NUMBER), event
            assert event["ts"] >= 0 and event["dur"] >= 0, event
            assert isinstance(event.get("args", {}), dict), event
        elif phase == "i":
            assert isinstance(event["ts"], NUMBER) and event.get("s", "t") in "gpt", event
        elif phase == "M":
            assert event["name"] in META_NAMES, event
            key = "name" if event["name"].endswith("_name") else "sort_index"
            assert isinstance(event["args"][key], str if key == "name" else int), event
        else:
            pytest.fail(f"unexpected phase {phase!r}")


def slices(doc: dict[str, Any], cat: str) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and e.get("cat") == cat]


def names(doc: dict[str, Any], kind: str) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
            if e["ph"] == "M" and e["name"] == kind}  # fmt: skip


def test_trace_is_valid_json_with_one_slice_per_step(tmp_path: Path) -> None:
    results = tiny_results()
    path = write_trace(results, tmp_path / "trace.json")
    # strict JSON: a NaN or Infinity token would fail here
    doc = json.loads(path.read_text(), parse_constant=lambda token: pytest.fail(token))
    check_trace(doc)
    steps = slices(doc, "step")
    expected = sum(int(v.steps["num_steps"].sum()) for v in results.variants.values())
    assert len(steps) == expected
    processes = names(doc, "process_name")
    assert sorted(processes.values()) == [
        "continuous / instance 0 (serve)", "continuous / requests (40 of 40)",
        "static / instance 0 (serve)", "static / requests (40 of 40)",
    ]  # fmt: skip
    static_pid = next(pid for (pid, _), n in processes.items() if n.startswith("static / inst"))
    mine = [e for e in steps if e["pid"] == static_pid]
    table = expand_steps(results["static"].steps)
    assert [e["ts"] for e in mine] == pytest.approx((table["start_s"] * 1e6).tolist())
    assert [e["dur"] for e in mine] == pytest.approx((table["duration_s"] * 1e6).tolist())
    assert [e["args"]["batch_size"] for e in mine] == table["num_seqs"].tolist()
    assert [e["args"]["prefill_tokens"] for e in mine] == table["num_prefill_tokens"].tolist()
    assert {e["name"] for e in mine} == {"prefill", "decode"}  # static never mixes


def test_request_tracks_follow_the_request_table() -> None:
    results = tiny_results()
    doc = trace_document(results, variants=["continuous"])
    check_trace(doc)
    requests = results["continuous"].requests.set_index("id")
    phases: dict[int, dict[str, tuple[float, float]]] = {}
    for e in slices(doc, "request"):
        phases.setdefault(e["tid"] - 1, {})[e["name"]] = (e["ts"], e["ts"] + e["dur"])
    assert len(phases) == 40
    for rid, seen in phases.items():
        row = requests.loc[rid]
        assert seen["prefill"] == pytest.approx((row.first_scheduled_s * 1e6,
                                                 row.first_token_s * 1e6))  # fmt: skip
        if row.num_output_tokens >= 2:
            assert seen["decode"] == pytest.approx((row.first_token_s * 1e6, row.finish_s * 1e6))
        if row.queue_s > 0:
            assert seen["queued"][0] == pytest.approx(row.arrival_s * 1e6)
    threads = names(doc, "thread_name")
    assert sum(n.startswith("request ") for n in threads.values()) == 40


def test_disaggregated_requests_show_the_kv_transfer() -> None:
    results = tiny_results(disaggregated=True)
    doc = trace_document(results)
    check_trace(doc)
    processes = set(names(doc, "process_name").values())
    assert {"pd / instance 0 (prefill)", "pd / instance 1 (decode)"} <= processes
    transfers = [e for e in slices(doc, "request") if e["name"] == "kv transfer"]
    assert len(transfers) == 40
    requests = results["pd"].requests.set_index("id")
    for e in transfers:
        row = requests.loc[e["tid"] - 1]
        assert e["dur"] == pytest.approx((row.transfer_end_s - row.transfer_start_s) * 1e6)


def test_request_tracks_are_capped_and_steps_cut_with_them() -> None:
    results = tiny_results()
    doc = trace_document(results, max_requests=5, variants=["continuous"])
    check_trace(doc)
    assert {e["tid"] for e in slices(doc, "request")} == {1, 2, 3, 4, 5}
    requests = results["continuous"].requests
    end_us = requests.sort_values("id").head(5)["finish_s"].max() * 1e6
    steps = slices(doc, "step")
    assert steps and max(e["ts"] for e in steps) < end_us
    assert len(steps) < int(results["continuous"].steps["num_steps"].sum())
    processes = set(names(doc, "process_name").values())
    assert "continuous / requests (5 of 40)" in processes
    assert any("steps until" in n for n in processes)


def test_cli_trace_flag_writes_the_trace(tmp_path: Path) -> None:
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(TINY))
    out = tmp_path / "results"
    args = ["run", str(scenario), "--out", str(out), "--no-plots", "-q"]
    assert main([*args, "--trace", "--trace-requests", "3"]) == 0
    doc = json.loads((out / "tiny" / "trace.json").read_text())
    check_trace(doc)
    assert "static / requests (3 of 40)" in set(names(doc, "process_name").values())
    assert main(args) == 0
    assert not (out / "tiny" / "trace.json").exists()  # only on request
    assert main([*args, "--trace", "--trace-requests", "-1"]) == 2
