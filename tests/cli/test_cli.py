"""The `batchsim` command: results on disk, printed table, and user errors as exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from scenario_factory import poisson, scenario, static, uniform

from sim.cli.main import main

SCENARIO = scenario(
    name="clitest",
    workload=poisson(60, 3.0, 64, uniform(1, 40)),
    model="llama-3-8b",
    hardware="h100-sxm",
    profile=None,
    slo={"ttft_s": 0.5, "tpot_s": 0.05},
    variants={"static": {"policy": static(max_batch_size=8)}, "cont": {}},
)


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "clitest.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    return path


def test_run_writes_results_and_prints_a_side_by_side_table(
    scenario_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results"
    assert main(["run", str(scenario_file), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "static" in printed and "cont" in printed and "TTFT p50 ms" in printed
    folder = out / "clitest"
    names = {p.name for p in folder.iterdir()}
    assert {"summary.json", "requests.parquet", "scenario.yaml", ".batchsim"} <= names
    assert not names & {"steps.parquet", "itl.parquet"}  # --tables all adds them
    assert {"latency_cdf.png", "timeline.png"} <= names
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["variants"]["cont"]["num_finished"] == 60
    resolved = yaml.safe_load((folder / "scenario.yaml").read_text())
    assert resolved["variants"]["static"]["policy"]["max_batch_size"] == 8
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temp folders left


def test_set_override_reaches_the_run(scenario_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    code = main(
        [
            "run",
            str(scenario_file),
            "--out",
            str(out),
            "--no-plots",
            "-q",
            "--set",
            "workload.num_requests=10",
        ]
    )
    assert code == 0
    # a run with --set gets a folder of its own, named after the overrides
    assert [p.name for p in out.iterdir()] == ["clitest--num_requests=10"]
    summary = json.loads((out / "clitest--num_requests=10" / "summary.json").read_text())
    assert summary["variants"]["static"]["num_requests"] == 10
    assert not (out / "clitest--num_requests=10" / "timeline.png").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "policy.max_num_seqs=0"], "policy.max_num_seqs: must be > 0 (got 0)"),
        (["--set", "workload.arrival.process=burst"], "workload.arrival"),
        (["--set", "nonsense"], "expected KEY.PATH=VALUE"),
    ],
)
def test_user_errors_exit_2_with_one_line(
    scenario_file: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(scenario_file), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml: scenario file not found" in capsys.readouterr().err


def test_python_dash_m_sim_is_the_same_command(scenario_file: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sim", "validate", str(scenario_file)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout)["scenario"] == "clitest"
    bad = subprocess.run(
        [sys.executable, "-m", "sim", "validate", str(scenario_file), "--set", "seed=-1"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
