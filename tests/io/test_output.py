"""Results folders: complete content, atomic replacement, no temporary folders left behind."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest
from helpers_results import make_results
from helpers_tables import make_context, make_itl, make_requests, make_steps

import sim.io.output
from sim.io.destination import TMP_TAG
from sim.io.output import format_summary, write_results
from sim.metrics.results import VariantResult

EXPECTED = {".batchsim", "scenario.yaml", "summary.json", "summary.csv", "bench_summary.json",
            "requests.parquet",
            "steps.parquet", "itl.parquet", "latency_cdf.png", "timeline.png", "slots.png",
            "latency_cdf.svg", "timeline.svg", "slots.svg", "report.html",
            "timeline.csv", "over_time.png", "over_time.svg"}  # fmt: skip


def siblings(out_dir: Path) -> list[str]:
    return sorted(p.name for p in out_dir.parent.iterdir())


def test_writes_every_file(tmp_path: Path) -> None:
    out = write_results(make_results(), tmp_path / "tiny", "name: tiny\n", tables="all")
    assert out == tmp_path / "tiny"
    assert {p.name for p in out.iterdir()} == EXPECTED
    assert (out / "scenario.yaml").read_text() == "name: tiny\n"
    requests = pd.read_parquet(out / "requests.parquet")
    assert len(requests) == 10 and set(requests["variant"]) == {"continuous", "static"}
    assert set(pd.read_parquet(out / "steps.parquet")["variant"]) == {"continuous", "static"}
    assert len(pd.read_parquet(out / "itl.parquet")) == 8
    summary = pd.read_csv(out / "summary.csv", index_col="variant")
    assert list(summary.index) == ["continuous", "static"]
    assert summary.at["continuous", "num_finished"] == 4
    assert siblings(out) == ["tiny"]


def test_summary_json_parses_with_nan_as_null(tmp_path: Path) -> None:
    results = make_results()
    results.variants["empty"] = VariantResult(
        "empty", make_requests([]), make_steps().iloc[:0], make_itl().iloc[:0], make_context()
    )
    out = write_results(results, tmp_path / "tiny", "name: tiny\n", plots=False)
    # json.loads would accept a bare NaN; parse_constant makes any non-standard token fail
    text = (out / "summary.json").read_text()
    document = json.loads(text, parse_constant=lambda token: pytest.fail(token))
    assert document["scenario"] == "tiny"
    assert list(document["variants"]) == ["continuous", "static", "empty"]
    assert document["variants"]["empty"]["ttft_p50_s"] is None
    assert document["variants"]["empty"]["num_requests"] == 0
    assert document["variants"]["continuous"]["ttft_p50_s"] == pytest.approx(0.35)
    assert not (out / "latency_cdf.png").exists()


def test_rewrite_replaces_old_folder(tmp_path: Path) -> None:
    out = tmp_path / "tiny"
    write_results(make_results(), out, "version: 1\n", plots=False)
    (out / "stale.txt").write_text("from an older run")
    write_results(make_results(), out, "version: 2\n", plots=False)
    assert (out / "scenario.yaml").read_text() == "version: 2\n"
    assert not (out / "stale.txt").exists()
    assert siblings(out) == ["tiny"]


def test_failure_while_writing_keeps_previous_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "tiny"
    write_results(make_results(), out, "version: 1\n", plots=False)
    real_write_table = sim.io.output._write_table

    def failing_write_table(frame: pd.DataFrame, path: Path) -> None:
        if path.name == "requests.parquet":
            raise OSError("disk full")
        real_write_table(frame, path)

    monkeypatch.setattr(sim.io.output, "_write_table", failing_write_table)
    with pytest.raises(OSError, match="disk full"):
        write_results(make_results(), out, "version: 2\n", plots=False)
    assert (out / "scenario.yaml").read_text() == "version: 1\n"
    assert (out / "requests.parquet").is_file()
    assert siblings(out) == ["tiny"]


def test_failed_swap_restores_previous_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "tiny"
    write_results(make_results(), out, "version: 1\n", plots=False)
    real_rename = Path.rename

    def rename(self: Path, target: Path) -> Path:
        if TMP_TAG in self.name:
            raise OSError("rename failed")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", rename)
    with pytest.raises(OSError, match="rename failed"):
        write_results(make_results(), out, "version: 2\n", plots=False)
    assert (out / "scenario.yaml").read_text() == "version: 1\n"
    assert siblings(out) == ["tiny"]


def test_format_summary_table() -> None:
    summary = make_results().summary()
    summary.loc["static", "goodput_rps"] = math.nan
    table = format_summary(summary)
    lines = table.splitlines()
    assert lines[0].split() == ["metric", "continuous", "static"]
    assert len({len(line) for line in lines}) == 1  # every column aligned to one width
    # labels contain single spaces; columns are separated by at least two
    rows = {cells[0]: cells[1:] for cells in (re.split(r"\s{2,}", line) for line in lines[2:])}
    assert rows["TTFT p50 ms"] == ["350.0", "1050.0"]
    assert rows["requests finished"] == ["4", "4"]
    assert rows["SLO attainment %"] == ["80.0", "80.0"]
    assert rows["slot util %"] == ["77.8", "77.8"]
    assert rows["goodput req/s"][1] == "-"
    assert 15 <= len(rows) <= 20
