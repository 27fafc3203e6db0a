"""Sweeps: grid parsing and expansion, validation of every point, the table, resume, the CLI."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from scenario_factory import continuous, poisson, scenario, static, uniform

import sim
from sim.cli.main import main
from sim.errors import ScenarioError
from sim.simulate import simulate
from sim.whatif.sweep import expand, parse_grid, point_id, sweep

SCENARIO: dict[str, Any] = scenario(
    name="sweeptest",
    seed=5,
    workload=poisson(200, 4.0, uniform(32, 256), uniform(1, 64)),
    policy=continuous(max_num_seqs=16),
    profile=None,
    slo={"ttft_s": 0.5, "tpot_s": 0.05},
    variants={"static": {"policy": static(max_batch_size=8)}, "cont": {}},
)
# `sim.sweep` is the function (the package exports it); the module is reached by its full name
sweep_mod = importlib.import_module("sim.whatif.sweep")
GRID = ["policy.max_num_seqs=4,32", "workload.arrival.rate=2,8"]


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "sweeptest.yaml"
    path.write_text(yaml.safe_dump(SCENARIO, sort_keys=False))
    return path


def test_grid_values_are_yaml_scalars() -> None:
    assert parse_grid("policy.max_num_seqs=8,16,32") == ("policy.max_num_seqs", [8, 16, 32])
    assert parse_grid("a.b=0.5,2.5e-3,true,x") == ("a.b", [0.5, 0.0025, True, "x"])
    for bad in ("policy.max_num_seqs", "a.b=", "a.b=1,,2", "a..b=1"):
        with pytest.raises(ScenarioError):
            parse_grid(bad)


def test_expansion_is_a_product_and_ids_ignore_grid_order() -> None:
    points = expand({"a": [1, 2], "b": ["x", "y", "z"]})
    assert len(points) == 6
    assert points[:2] == [{"a": 1, "b": "x"}, {"a": 1, "b": "y"}]  # last grid varies fastest
    assert point_id({"a": 1, "b": "x"}) == point_id({"b": "x", "a": 1})
    assert len({point_id(p) for p in points}) == 6
    assert point_id({"a": 1}) != point_id({"a": "1"})


@pytest.mark.parametrize(
    ("grid", "expected"),
    [
        (["policy.max_num_seqz=4,8"], "--grid policy.max_num_seqz=4: .*unknown key"),
        (["policy.max_num_seqs=4,-1"], "--grid policy.max_num_seqs=-1: .*must be > 0"),
        (["policy.max_num_seqs=4,8,4"], "--grid policy.max_num_seqs: value 4 is listed twice"),
        (["workload.arrival.rate=1,1.0"], "value 1.0 is listed twice"),
        (["seed.x=1"], "--grid seed.x=1: cannot set seed.x: seed is not a mapping"),
        (["variant=1,2"], "reserved"),
    ],
)
def test_bad_grid_is_a_clear_error_before_anything_runs(
    scenario_file: Path, tmp_path: Path, grid: list[str], expected: str
) -> None:
    with pytest.raises(ScenarioError, match=expected):
        sweep(scenario_file, grid, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_bad_combination_names_the_point(scenario_file: Path) -> None:
    # each value is valid alone; together the uniform bounds are out of order
    grid = {"workload.prompt_tokens.low": [32, 200], "workload.prompt_tokens.high": [100, 400]}
    with pytest.raises(ScenarioError, match=r"--grid point .*low=200, .*high=100: .*low \(200\)"):
        sweep(scenario_file, grid)


def test_table_has_one_row_per_point_and_variant_matching_a_plain_run(scenario_file: Path) -> None:
    table = sim.sweep(scenario_file, GRID, overrides=["workload.num_requests=150"], workers=1)
    assert list(table.columns[:4]) == [
        "point_id",
        "policy.max_num_seqs",
        "workload.arrival.rate",
        "variant",
    ]
    assert len(table) == 4 * 2
    assert list(table["variant"][:2]) == ["static", "cont"]
    row = table[(table["policy.max_num_seqs"] == 32) & (table["workload.arrival.rate"] == 8)]
    direct = simulate(
        scenario_file,
        overrides=[
            "workload.num_requests=150",
            "policy.max_num_seqs=32",
            "workload.arrival.rate=8",
        ],
    ).summary()
    assert set(direct.columns) <= set(table.columns)
    for variant in ("static", "cont"):
        got = row[row["variant"] == variant].iloc[0]
        for metric in ("num_finished", "ttft_p90_s", "tpot_p99_s", "mean_batch_size"):
            assert got[metric] == pytest.approx(direct.at[variant, metric], rel=1e-12)
    # the static variant ignores max_num_seqs; the continuous one does not
    by_seqs = table[table["workload.arrival.rate"] == 8].set_index(
        ["variant", "policy.max_num_seqs"]
    )
    assert by_seqs.at[("static", 4), "e2e_p99_s"] == by_seqs.at[("static", 32), "e2e_p99_s"]
    assert by_seqs.at[("cont", 4), "e2e_p99_s"] != by_seqs.at[("cont", 32), "e2e_p99_s"]


def test_two_workers_give_the_same_table_as_one(scenario_file: Path, tmp_path: Path) -> None:
    one = sweep(scenario_file, GRID, workers=1)
    two = sweep(scenario_file, GRID, workers=2, out=tmp_path / "out", progress=True)
    pd.testing.assert_frame_equal(one, two)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "out" / "sweep.parquet"), one)
    from_csv = pd.read_csv(tmp_path / "out" / "sweep.csv")
    assert list(from_csv.columns) == list(one.columns) and len(from_csv) == len(one)
    assert len(list((tmp_path / "out" / "points").glob("*.json"))) == 4


def test_an_interrupted_sweep_resumes_with_the_missing_points_only(
    scenario_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    real = sweep_mod.run_point
    calls: list[dict[str, Any]] = []

    def interrupted(task: sweep_mod.PointTask) -> Any:
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(task.point)
        return real(task)

    monkeypatch.setattr(sweep_mod, "run_point", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sweep(scenario_file, GRID, workers=1, out=out)
    assert len(list((out / "points").glob("*.json"))) == 2
    assert not (out / "sweep.csv").exists()

    resumed: list[dict[str, Any]] = []
    monkeypatch.setattr(sweep_mod, "run_point", lambda t: resumed.append(t.point) or real(t))
    table = sweep(scenario_file, GRID, workers=1, out=out)
    assert len(resumed) == 2 and not [p for p in resumed if p in calls]
    monkeypatch.setattr(sweep_mod, "run_point", real)
    pd.testing.assert_frame_equal(table, sweep(scenario_file, GRID, workers=1))

    # a changed base scenario must not reuse the saved points
    resumed.clear()
    monkeypatch.setattr(sweep_mod, "run_point", lambda t: resumed.append(t.point) or real(t))
    sweep(scenario_file, GRID, workers=1, out=out, overrides=["seed=6"])
    assert len(resumed) == 4
    record = json.loads(next((out / "points").glob("*.json")).read_text())
    assert set(record) == {"id", "point", "base", "variants"}


def test_cli_sweep_writes_tables_and_reports_bad_grids(
    scenario_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "cli"
    code = main(
        [
            "sweep",
            str(scenario_file),
            "--grid",
            "workload.arrival.rate=2,4",
            "--set",
            "workload.num_requests=100",
            "--workers",
            "1",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "workload.arrival.rate" in printed and "ttft_p90_s" in printed
    assert len(pd.read_parquet(out / "sweep.parquet")) == 4
    bad = main(["sweep", str(scenario_file), "--grid", "policy.nope=1", "--out", str(out)])
    assert bad == 2
    assert "--grid policy.nope=1" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)  # the default folder is results/<scenario name>-sweep
    assert main(["sweep", str(scenario_file), "--grid", "seed=1", "-q", "--workers", "1"]) == 0
    assert (tmp_path / "results" / "sweeptest-sweep" / "sweep.csv").exists()


def test_a_large_sweep_states_its_size_and_time_before_it_starts(
    scenario_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sweep_mod, "LARGE_SWEEP", 2)
    started: list[str] = []

    def runner(task: Any) -> Any:
        started.append(capsys.readouterr().err)  # what was printed before the first point
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_mod, "run_point", runner)
    with pytest.raises(KeyboardInterrupt):
        sweep(scenario_file, ["seed=1,2,3"], workers=1, progress=True)
    assert "sweep: 3 points x 2 variants (about 400 requests per point); estimated " in started[0]


def test_a_plain_script_may_sweep_on_several_workers(scenario_file: Path, tmp_path: Path) -> None:
    # no `if __name__ == "__main__":` guard: spawned workers must not run the script again
    script = tmp_path / "plain.py"
    script.write_text(
        "import sim\n"
        f"table = sim.sweep({str(scenario_file)!r}, {{'policy.max_num_seqs': [4, 32]}}, "
        "workers=2)\n"
        "print(len(table))\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "4"


def worker_pid(_: object) -> int:
    """A runner for run_local: the process that ran the point."""
    import os

    return os.getpid()


def test_one_pool_serves_every_batch_of_a_search() -> None:
    """A search runs several batches inside `local_pool`: the same two worker processes run them
    all (a pool per batch would start, and import the simulator in, new ones each time), and
    the pool is gone after the block."""
    from sim.whatif.sweep_backends import local_pool, run_local

    def batch() -> set[int]:
        pids: set[int] = set()
        run_local(list(range(6)), worker_pid, 2, lambda _, pid: pids.add(pid))
        return pids

    with local_pool(2):
        held = [batch() for _ in range(3)]
    assert 1 <= len(set().union(*held)) <= 2
    assert not batch() & set().union(*held)  # the block's pool is gone with it
