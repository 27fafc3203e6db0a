"""A run never touches anything outside its own results folder.

Scenario names are plain folder names; the output folder is checked before the simulation;
the atomic swap only replaces a folder batchsim wrote; a run with `--set` writes a folder of its
own; temporary folders of killed runs are cleaned up (or restored) by the next run, and folders
that merely look like them are left alone.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fuzz_cases import snapshot
from fuzz_corpus import BASE

from sim.cli.main import main
from sim.io.destination import MARKER, OLD_TAG, TMP_TAG, results_folder_name

SMALL = {**BASE, "name": "small"}


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder with a scenario and a results/ holding what must survive."""
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SMALL))
    baselines = tmp_path / "results" / "baselines"
    baselines.mkdir(parents=True)
    (baselines / "ci.json").write_text("{}\n")
    other = tmp_path / "results" / "other"
    other.mkdir()
    (other / MARKER).write_text("{}\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(*args: str) -> int:
    return main(["run", "s.yaml", "-q", "--no-plots", *args])


@pytest.mark.parametrize("name", [".", "..", "a/b", "/tmp", "", ".hidden", "x" * 101])
def test_a_scenario_name_that_is_not_a_plain_folder_name_is_refused(
    workdir: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(workdir)
    assert run("--set", f"name={name}") == 2
    assert "s.yaml: name: " in capsys.readouterr().err
    assert snapshot(workdir) == before  # results/baselines and results/other intact


@pytest.mark.parametrize(
    ("out", "reason"),
    [
        ("f.txt", "is a file, not a folder"),
        ("f.txt/below", "is a file, so no folder can be made inside it"),
        ("/dev/null", "is a device or special file"),
        ("/proc/self/batchsim", "pseudo-filesystem"),
    ],
)
def test_an_unusable_out_folder_is_refused_before_simulating(
    workdir: Path,
    out: str,
    reason: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (workdir / "f.txt").write_text("mine\n")

    def no_simulation(*args: object, **kwargs: object) -> None:
        raise AssertionError("simulated before checking --out")

    monkeypatch.setattr(importlib.import_module("sim.simulate"), "simulate", no_simulation)
    before = snapshot(workdir)
    assert run("--out", out) == 2
    assert reason in capsys.readouterr().err
    assert snapshot(workdir) == before


def test_a_folder_batchsim_did_not_write_is_never_replaced(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = workdir / "results" / "small"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work\n")
    assert run() == 2
    assert "not written by batchsim" in capsys.readouterr().err
    assert (mine / "thesis.tex").read_text() == "years of work\n"


def test_results_of_batchsim_are_replaced_and_marked(workdir: Path) -> None:
    legacy = workdir / "results" / "small"
    legacy.mkdir()  # written before the marker existed: only files a run writes
    (legacy / "summary.json").write_text("{}\n")
    (legacy / "requests.csv").write_text("id\n")
    assert run() == 0
    assert (legacy / MARKER).is_file() and (legacy / "requests.parquet").is_file()
    assert not (legacy / "requests.csv").exists()
    assert run() == 0  # and a marked folder is replaced again
    assert sorted(p.name for p in (workdir / "results").iterdir()) == [
        "baselines",
        "other",
        "small",
    ]


def test_a_run_with_overrides_gets_its_own_folder(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run() == 0
    plain = snapshot(workdir / "results" / "small")
    assert main(["run", "s.yaml", "--no-plots", "--set", "workload.arrival.rate=7"]) == 0
    out = capsys.readouterr().out
    assert "results/small--rate=7/" in out and "--set overrides" in out
    summary = json.loads((workdir / "results/small--rate=7/summary.json").read_text())
    assert summary["scenario"] == "small"
    assert snapshot(workdir / "results" / "small") == plain
    assert run("--set", "name=chosen", "--set", "seed=3") == 0  # the user picks the folder
    assert (workdir / "results" / "chosen" / "summary.json").is_file()


def test_results_folder_names_follow_the_overrides() -> None:
    assert results_folder_name("q", []) == "q"
    assert results_folder_name("q", ["workload.arrival.rate=4", "policy.max_num_seqs=8"]) == (
        "q--rate=4,max_num_seqs=8"
    )
    assert results_folder_name("q", ["a.rate=1", "b.rate=2"]) == "q--a.rate=1,b.rate=2"
    assert results_folder_name("q", ["workload.arrival={process: gamma}"]) == (
        "q--arrival=process_gamma"
    )
    long = results_folder_name("q", [f"description={'x' * 200}"])
    assert long.startswith("q--set-") and len(long) < 30
    assert results_folder_name("chosen", ["name=chosen", "seed=1"]) == "chosen"


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


def test_leftovers_of_killed_runs_are_cleaned_up_and_lookalikes_kept(workdir: Path) -> None:
    results = workdir / "results"
    dead, alive = _dead_pid(), os.getppid()
    killed = results / f".small.{TMP_TAG}-{dead}"
    running = results / f".small.{TMP_TAG}-{alive}"
    lookalike = results / f".small.{TMP_TAG}-{dead + 1}x"
    unmarked = results / f".other.{TMP_TAG}-{dead}"
    for folder in (killed, running, lookalike, unmarked):
        folder.mkdir()
        (folder / "file").write_text("x")
    for folder in (killed, running):
        (folder / MARKER).write_text("{}\n")
    assert run() == 0
    assert not killed.exists()
    assert running.exists() and lookalike.exists() and unmarked.exists()


def test_previous_results_cut_off_mid_swap_are_restored(workdir: Path) -> None:
    # a run killed between its two renames leaves the old results aside and no destination
    other_old = workdir / "results" / f".other2.{OLD_TAG}-{_dead_pid()}"
    other_old.mkdir()
    (other_old / MARKER).write_text("{}\n")
    (other_old / "summary.json").write_text('{"kept": true}\n')
    assert run() == 0
    assert json.loads((workdir / "results/other2/summary.json").read_text()) == {"kept": True}
    assert not other_old.exists()
