"""`batchsim measured`: the one-screen description of a measured run and of a vLLM log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers_measured import T0, export, span, start

from sim.cli import measured as measured_cli
from sim.cli.main import main
from sim.measured import FORMATS


def test_the_format_choices_are_the_readers_formats() -> None:
    assert measured_cli._FORMATS == FORMATS


def test_a_run_is_described_with_its_percentiles_and_meta(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # TTFT 100, 200, 300 ms; E2E 1.1, 1.2, 1.3 s; 11 output tokens: TPOT 100 ms each
    spans = [
        span(
            T0 + i * 2_000_000_000, ttft=0.1 * (i + 1), e2e=1.1 + 0.1 * i, output="11", rid=f"r{i}"
        )
        for i in range(3)
    ]
    path = tmp_path / "t.json"
    path.write_text(export(*spans) + "\n" + json.dumps({"resourceSpans": []}) + "\n")
    assert main(["measured", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"measured run: {path} (format vllm_otlp)"
    assert lines[1] == "requests: 3 completed, 0 failed (left out)"
    assert lines[2] == "arrivals: over 4.0 s, 0.5 requests/s, first at 2026-01-21 18:50:50 UTC"
    assert lines[4].split() == ["TTFT", "200.0", "280.0", "298.0", "200.0", "3"]
    assert lines[5].split() == ["TPOT", "100.0", "100.0", "100.0", "100.0", "3"]
    assert lines[6].split() == ["E2E", "1200.0", "1280.0", "1298.0", "1200.0", "3"]
    assert lines[7] == "prompt tokens: mean 1527, p50 1527, min 1527, max 1527"
    assert '  service_name: ["vllm-exp1"]' in lines


def test_a_vllm_log_is_printed_field_by_field_with_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "vllm.log"
    path.write_text("\n".join(start()) + "\n")
    assert main(["measured", "--vllm-log", str(path)]) == 0
    out = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()[1:]}
    assert out["num_gpu_blocks"] == ["7438", "line", "8"]
    assert out["block_size"] == ["16", "line", "8"]
    assert out["max_num_seqs"] == ["256", "line", "2"]
    assert out["gpu_memory_utilization"] == ["0.85", "line", "2"]


def test_a_span_exported_twice_is_refused_or_with_the_flag_counted_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spans = [span(T0 + i * 1_000_000_000, ttft=0.1, e2e=1.0, output="11", rid=f"r{i}")
             for i in range(3)]  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(export(*spans) + "\n" + export(spans[1]) + "\n")  # r1 twice
    assert main(["measured", str(path)]) == 2
    err = capsys.readouterr().err
    assert "'r1' appears more than once (1 repeated rows" in err
    assert main(["measured", str(path), "--drop-duplicates"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "requests: 3 completed, 0 failed (left out), 1 repeated ids dropped"
