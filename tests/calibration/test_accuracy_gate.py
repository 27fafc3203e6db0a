"""The accuracy gate: a fixed sample of training configurations simulated with the shipped unit
costs must give the errors recorded when they were fitted (calibration/training/
accuracy_gate.json, written by `python -m calibration.fit_unit_costs`): no point may move by
more than one point of error, nor the sample's median by more than half a point. A change to
pricing, scheduling or the unit costs that moves them reruns the fit (and docs/accuracy.md)."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pandas as pd
import pytest
import yaml

from calibration.published_events import simulated_errors

ROOT = Path(__file__).resolve().parents[2]
GATE = ROOT / "calibration/training/accuracy_gate.json"
TRAINING = ROOT / "calibration/training/inferencex_train.csv"
POINT_TOLERANCE = 1.0  # points of error (percent)
MEDIAN_TOLERANCE = 0.5


@pytest.fixture(scope="module")
def simulated() -> list[tuple[dict, dict]]:
    gate = json.loads(GATE.read_text())
    rows = pd.read_csv(TRAINING)
    out = []
    for record in gate["points"]:
        row = rows.loc[record["row_index"]]
        assert int(row["conc"]) == record["conc"]
        out.append((record, simulated_errors(row)))
    return out


def test_the_gate_samples_every_engine_and_gpu_generation_it_can() -> None:
    gate = json.loads(GATE.read_text())
    configs = {p["config"] for p in gate["points"]}
    assert len(configs) >= 8
    engines = {c.split()[3] for c in configs}
    assert {"vllm", "sglang", "trt", "atom"} <= engines


def test_no_gated_point_moves_by_more_than_a_point(simulated: list[tuple[dict, dict]]) -> None:
    for record, errs in simulated:
        for metric in ("tput_err", "tpot_err"):
            moved = abs(errs[metric] - record[metric])
            assert moved <= POINT_TOLERANCE, (record["config"], record["conc"], metric, moved)


def test_the_gated_median_moves_by_at_most_half_a_point(
    simulated: list[tuple[dict, dict]],
) -> None:
    gate = json.loads(GATE.read_text())
    for metric in ("tput_err", "tpot_err"):
        median = statistics.median(abs(errs[metric]) for _, errs in simulated)
        assert abs(median - gate[f"median_abs_{metric}"]) <= MEDIAN_TOLERANCE, metric


def test_the_accuracy_document_quotes_the_shipped_unit_costs() -> None:
    """docs/accuracy.md and sim/costs/unit_costs.yaml come from one run of the fit."""
    doc = (ROOT / "docs/accuracy.md").read_text()
    shipped = yaml.safe_load((ROOT / "sim/costs/unit_costs.yaml").read_text())["unit_costs"]
    quoted = dict(re.findall(r"^\| `([^`]+)` \| ([0-9.e+-]+) \|", doc, flags=re.M))
    assert set(quoted) == set(shipped)
    for key, entry in shipped.items():
        assert float(quoted[key]) == pytest.approx(float(entry["value"]), rel=1e-3), key
