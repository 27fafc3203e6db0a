"""CI regression: the committed baselines hold, and what a change in behaviour does to them."""

from __future__ import annotations

import json
import shutil
import typing
from pathlib import Path

import pytest
import yaml

from sim.cli.main import main
from sim.policies import ContinuousPolicy
from sim.scenario.load import Scenario
from sim.whatif.regress import compare, default_tolerance, regress

ROOT = Path(__file__).resolve().parents[2]
CI = ROOT / "scenarios" / "ci"
BASELINES = ROOT / "results" / "baselines"


def _args(baselines: Path) -> list[str]:
    return ["regress", "--scenarios", str(CI), "--baselines", str(baselines)]


@pytest.fixture
def baselines(tmp_path: Path) -> Path:
    """A scratch copy of the committed baselines, free to perturb."""
    return Path(shutil.copytree(BASELINES, tmp_path / "baselines"))


def test_ci_scenarios_cover_every_policy_and_mode() -> None:
    policies: set[str] = set()
    modes: set[str] = set()
    topologies: set[str] = set()
    for path in CI.glob("*.yaml"):
        raw = yaml.safe_load(path.read_text())
        topologies |= {key for key in ("cluster", "disaggregation") if key in raw}
        for override in [{}, *(raw.get("variants") or {}).values()]:
            policy = {**raw["policy"], **(override or {}).get("policy", {})}
            policies.add(policy["name"])
            modes.add(f"{policy['name']}:{policy.get('mode', '')}")
    # every policy the scenario schema accepts, read from the schema so new ones must be added
    union = typing.get_args(Scenario.model_fields["policy"].annotation)
    known = {typing.get_args(spec.model_fields["name"].annotation)[0] for spec in union}
    assert {"static", "continuous"} <= known <= policies
    assert "disaggregation" not in Scenario.model_fields or "disaggregation" in topologies
    assert {"continuous:prefill_first", "continuous:mixed"} <= modes
    assert {p.stem for p in BASELINES.glob("*.json")} == {p.stem for p in CI.glob("*.yaml")}


def test_regress_passes_on_unchanged_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_args(BASELINES)) == 0
    assert "every metric within tolerance" in capsys.readouterr().out
    document = json.loads((BASELINES / "continuous_preemption.json").read_text())
    assert all(v["num_preemptions"] > 0 for v in document["variants"].values())


def test_regress_fails_on_a_perturbed_baseline(
    baselines: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = baselines / "static.json"
    document = json.loads(path.read_text())
    document["variants"]["max_wait"]["ttft_p90_s"] *= 1.001
    document["variants"]["padded"]["num_finished"] -= 1
    path.write_text(json.dumps(document))
    assert main(_args(baselines)) == 1
    out = capsys.readouterr().out
    assert "baseline" in out and "now" in out and "change" in out
    lines = [line.split() for line in out.splitlines()]
    moved = {(cells[1], cells[2]) for cells in lines if cells and cells[0] == "static"}
    assert moved == {("max_wait", "ttft_p90_s"), ("padded", "num_finished")}
    assert any(cells[-2] == "-0.0999%" for cells in lines if "ttft_p90_s" in cells)


def test_a_deliberate_scheduler_change_fails_regress(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Let continuous batching run at most half its batch (a scheduler change, not noise)."""
    schedule = ContinuousPolicy.schedule

    def half(self: ContinuousPolicy, view: object) -> object:
        full = self.max_num_seqs
        self.max_num_seqs = max(1, full // 2)
        try:
            return schedule(self, view)  # type: ignore[arg-type]
        finally:
            self.max_num_seqs = full

    monkeypatch.setattr(ContinuousPolicy, "schedule", half)
    assert main(_args(BASELINES)) == 1
    out = capsys.readouterr().out
    assert "continuous" in out and "ttft" in out and "static " not in out


def test_tolerances_and_update(baselines: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert default_tolerance("num_finished") == 0.0 and default_tolerance("ttft_p90_s") == 1e-6
    path = baselines / "continuous.json"
    document = json.loads(path.read_text())
    document["variants"]["mixed"]["e2e_p99_s"] *= 1 + 1e-8  # floating-point noise: accepted
    document["variants"]["mixed"]["tpot_mean_s"] *= 1.01
    document["tolerances"]["tpot_mean_s"] = 0.02  # a per-metric override in the baseline file
    path.write_text(json.dumps(document))
    moves = regress(CI, baselines)
    assert not [m for m in moves if m.regression]
    assert {"e2e_p99_s", "tpot_mean_s"} <= {m.metric for m in moves if m.variant == "mixed"}
    assert main([*_args(baselines), "--update"]) == 0
    rewritten = json.loads(path.read_text())
    assert rewritten["tolerances"]["tpot_mean_s"] == 0.02  # --update keeps overrides
    assert rewritten["tolerances"]["num_finished"] == 0.0
    # the rewritten values are the current ones again: nothing moves against them
    assert not compare("continuous", rewritten, {"variants": rewritten["variants"]})
    assert not [m for m in regress(CI, baselines) if m.scenario == "continuous"]


def test_missing_baseline_names_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_args(tmp_path / "none")) == 2
    assert "batchsim regress --update" in capsys.readouterr().err
