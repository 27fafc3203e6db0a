"""`batchsim search --robust X`: both choices and the cost of robustness printed, the flips in
the printed table, the table file and the report page; bad values refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers_search import HAND_SLO, hand_scenario, hand_space

from sim.cli.main import main

SLOW, FAST = "slow tp1 | colocated | static batch=1", "fast tp1 | colocated | static batch=1"


def _files(tmp_path: Path) -> list[str]:
    (tmp_path / "hand.yaml").write_text(yaml.safe_dump(hand_scenario()))
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(hand_space()))
    return ["search", str(tmp_path / "hand.yaml"), "--space", str(tmp_path / "space.yaml"),
            "--slo", HAND_SLO, "--workers", "1", "--rate", "9.5"]  # fmt: skip


def test_robust_prints_both_choices_and_the_cost_of_robustness(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [*_files(tmp_path), "--out", str(tmp_path / "out")]
    assert main([*argv, "--robust", "10"]) == 0
    printed = capsys.readouterr().out
    assert f"Answer: {FAST}, 1 instances (1 GPUs), $1.40/h" in printed
    assert "(meets the SLOs over the ±10 % band)" in printed
    assert f"Nominal answer: {SLOW}, 1 instances (1 GPUs), $1.00/h" in printed
    assert "Cost of robustness over the ±10 % band: +40.0 % ($1.40/h against $1.00/h)" in printed
    assert f"1 configuration(s) whose nominal fleet fails the SLOs at an end of the band " \
           f"(flips): {SLOW}" in printed  # fmt: skip
    # the printed table: the slow GPU's row, two instances over the band, one at nominal, flips
    header = next(line for line in printed.splitlines() if line.startswith("#"))
    assert header.split()[-4:] == ["nominal", "nominal", "$/h", "flips"]
    slow_row = next(line for line in printed.splitlines() if SLOW in line)
    assert slow_row.split()[-3:] == ["1", "1.00", "yes"]
    fast_row = next(line for line in printed.splitlines() if FAST in line)
    assert fast_row.split()[-1] == "no"
    out = tmp_path / "out"
    table = pd.read_csv(out / "search.csv").set_index("configuration")
    assert table.loc[SLOW, "flips"] and not table.loc[FAST, "flips"]
    assert (table.loc[SLOW, "instances"], table.loc[SLOW, "nominal_instances"]) == (2, 1)
    parquet = pd.read_parquet(out / "search.parquet").set_index("configuration")
    assert bool(parquet.loc[SLOW, "flips"]) and parquet.loc[SLOW, "nominal_rank"] == 1
    document = json.loads((out / "search.json").read_text())
    assert document["robustness"]["nominal_choice"]["configuration"] == SLOW
    assert document["robustness"]["robust_choice"]["configuration"] == FAST
    page = (out / "report.html").read_text()
    assert "flips in the band" in page and "robustness costs +40.0 %" in page
    assert f"<b>Nominal answer:</b> {SLOW}, 1 instances, $1.00/h" in page


def test_without_robust_nothing_of_the_band_is_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*_files(tmp_path), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert f"Answer: {SLOW}, 1 instances (1 GPUs), $1.00/h" in printed
    assert "Nominal answer" not in printed and "flips" not in printed and "band" not in printed
    assert "flips" not in pd.read_csv(tmp_path / "out" / "search.csv").columns


@pytest.mark.parametrize("value", ["0", "100", "-1", "nan", "abc"])
def test_a_bad_robust_value_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    assert main([*_files(tmp_path), "--out", str(tmp_path / "out"), "--robust", value]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("batchsim: error: ")
    assert "--robust" in err and value in err
    assert not (tmp_path / "out").exists()
