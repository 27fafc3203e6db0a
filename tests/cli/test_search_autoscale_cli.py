"""`batchsim search --autoscale`: what it prints and writes, on a small busy-spell workload."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers_autoscale import DAY, SPACE

from sim.cli.main import main


def test_search_autoscale_prints_and_writes_the_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "day.yaml").write_text(yaml.safe_dump(DAY))
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({**SPACE, "signals": {"running": [6]}}))
    out = tmp_path / "out"
    code = main(["search", str(tmp_path / "day.yaml"), "--autoscale", str(tmp_path / "space.yaml"),
                 "--slo", "ttft_p90=0.5", "--slo", "tpot_p99=0.05", "--repeats", "0",
                 "--verify", "1", "--workers", "1", "--out", str(out)])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "Answer: h100-sxm_running-6_min1_in30s_out10s" in printed
    assert "against the cheapest fixed fleet" in printed
    assert "On unseen seeds [4]" in printed
    answer = json.loads((out / "autoscale_search.json").read_text())
    assert answer["chosen"]["autoscale"]["target"] == 6
    assert answer["baseline"]["instances"] >= 2
    assert 0 < answer["saving"] < 1
    # one seed: no spread; the margins on it, as printed
    assert answer["saving_over_seeds"] == [pytest.approx(answer["saving"])] * 2
    margins = answer["chosen"]["slo_margins"]
    assert set(margins) == {"ttft_p90_s", "tpot_p99_s"} and min(margins.values()) >= 0
    assert f"tpot_p99_s {100 * margins['tpot_p99_s']:.0f} %" in printed
    assert answer["verified"][0]["seed"] == 4
    table = pd.read_csv(out / "autoscale_search.csv")
    assert set(table["kind"]) == {"autoscaled", "fixed"}
    assert table.iloc[0]["candidate"] == answer["chosen"]["candidate"]
    # the chosen policy's own run: its timeline, its events and the plot
    for name in ("timeline.csv", "fleet_events.csv", "over_time.png", "summary.json",
                 "report.html", ".batchsim"):  # fmt: skip
        assert (out / name).exists(), name
    summary = json.loads((out / "summary.json").read_text())
    day = next(iter(summary["variants"].values()))
    assert day["fleet_usd_per_day"] == pytest.approx(answer["chosen"]["usd_per_day"])
