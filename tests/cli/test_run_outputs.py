"""What `batchsim run` leaves and says: the tables asked for in the format asked for, progress
while writing, requests counted once, and rejections explained."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml
from fuzz_corpus import BASE

import sim.io.output
from sim.cli.main import main


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(BASE))
    return path


@pytest.mark.parametrize(
    ("tables", "fmt", "expected"),
    [
        ("summary", "parquet", set()),
        ("requests", "parquet", {"requests.parquet"}),
        ("all", "parquet", {"requests.parquet", "steps.parquet", "itl.parquet"}),
        ("all", "csv", {"requests.csv", "steps.csv", "itl.csv"}),
    ],
)
def test_tables_and_their_format_are_chosen(
    scenario: Path, tmp_path: Path, tables: str, fmt: str, expected: set[str]
) -> None:
    out = tmp_path / "out"
    argv = ["run", str(scenario), "--out", str(out), "-q", "--no-plots", "--tables", tables]
    assert main([*argv, "--format", fmt]) == 0
    names = {p.name for p in (out / "fuzz").iterdir()}
    assert {"summary.json", "summary.csv", "scenario.yaml", "report.html"} <= names
    assert {n for n in names if n.split(".")[0] in ("requests", "steps", "itl")} == expected
    if "requests.parquet" in expected:
        requests = pd.read_parquet(out / "fuzz" / "requests.parquet")
        assert len(requests) == 40 and set(requests["variant"]) == {"a", "b"}
        assert requests["ttft_s"].dtype == float  # typed, unlike CSV


def test_a_run_counts_requests_once_and_shows_progress_while_writing(
    scenario: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sim.io.output, "PROGRESS_DELAY_S", 0.0)  # the bar even for a small run
    assert main(["run", str(scenario), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    captured = capsys.readouterr()
    last = captured.out.strip().splitlines()[-1]
    assert last.startswith("20 requests x 2 variants simulated in ")
    assert "simulating a: 20 requests" in captured.err
    assert "writing" in captured.err and "summary.json" in captured.err  # the progress bar


def test_quiet_prints_nothing(
    scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", str(scenario), "--out", str(tmp_path / "out"), "-q", "--no-plots"]) == 0
    assert capsys.readouterr() == ("", "")


def test_partial_rejections_are_noted_under_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = {
        **BASE,
        "workload": {
            **BASE["workload"],
            "prompt_tokens": {"dist": "uniform", "low": 10, "high": 900},
        },
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    notes = [ln for ln in capsys.readouterr().out.splitlines() if "rejected (" in ln]
    assert len(notes) == 1 and notes[0].startswith("a: ")
    assert "prompt over max_num_batched_tokens (512), not chunked" in notes[0]
