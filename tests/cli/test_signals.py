"""Interrupts in a real process: SIGTERM is handled like Ctrl-C, and a Ctrl-C in the first
moments (while the modules load) is as clean as a late one. No traceback, no temporary folder
left behind, earlier results untouched."""

from __future__ import annotations

import importlib
import signal
import subprocess
import sys
import time
import weakref
from pathlib import Path

import pytest
import yaml
from fuzz_cases import snapshot
from fuzz_corpus import BASE

from sim.cli import signals

# long enough to be interrupted while simulating (tens of seconds uninterrupted)
SLOW = {**BASE, "name": "slow", "workload": {**BASE["workload"], "num_requests": 200_000}}
SLOW["workload"]["arrival"] = {"process": "poisson", "rate": 50.0}


def start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "sim", "run", "s.yaml", "--no-plots", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def prepare(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SLOW))
    previous = tmp_path / "results" / "slow"
    previous.mkdir(parents=True)
    (previous / ".batchsim").write_text("{}\n")
    (previous / "summary.json").write_text('{"variants": {}}\n')
    return snapshot(tmp_path)


def test_sigterm_while_simulating_is_handled_like_ctrl_c(tmp_path: Path) -> None:
    before = prepare(tmp_path)
    proc = start(tmp_path)
    assert proc.stderr is not None
    line = proc.stderr.readline()  # the first progress line: the simulation is running
    assert line.startswith("simulating "), line
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "batchsim: terminated; no results were written"
    assert snapshot(tmp_path) == before  # previous results as they were, nothing added


@pytest.mark.parametrize("delay_s", [0.05, 0.1, 0.25, 0.5])
def test_ctrl_c_in_the_first_half_second_is_clean(tmp_path: Path, delay_s: float) -> None:
    # Timed from the moment batchsim's own code starts (`-X importtime` reports each module as
    # it loads), not from the start of the process: a loaded machine can spend longer than that
    # in the interpreter's own start-up, before any code of this project runs.
    before = prepare(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "sim", "run", "s.yaml", "--no-plots", "-q"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.rstrip().endswith("| sim.cli.signals"):
            break
    time.sleep(delay_s)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    said = [ln for ln in err.splitlines() if not ln.startswith("import time:")]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert proc.returncode == 130, err
    assert said == ["batchsim: interrupted; no results were written"]
    assert snapshot(tmp_path) == before


def test_an_error_that_follows_a_signal_is_reported_as_the_interrupt(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = importlib.import_module("sim.cli.main")

    def cut_short(args: object) -> int:
        signals._received.append(signal.SIGTERM)  # what the handler records ...
        # ... when the signal lands inside a C extension's import, which turns it into this
        raise ImportError("PyCapsule_Import could not import module 'datetime'")

    monkeypatch.setattr(cli, "_validate", cut_short)
    assert cli.main(["validate", "s.yaml"]) == 143
    assert capsys.readouterr().err == "batchsim: terminated; no results were written\n"


def test_without_a_signal_an_unexpected_error_is_not_hidden(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cli = importlib.import_module("sim.cli.main")

    def broken(args: object) -> int:
        raise ImportError("a real bug")

    monkeypatch.setattr(cli, "_validate", broken)
    with pytest.raises(ImportError, match="a real bug"):
        cli.main(["validate", "s.yaml"])


def test_an_interrupt_inside_a_weakref_callback_is_raised_once_it_returns() -> None:
    # The import system cleans its module locks up in weakref callbacks, where Python prints
    # an exception and drops it: an interrupt landing there must not be lost.
    namespace: dict[str, object] = {"signal": signal}
    source = "def cb(ref):\n    signal.raise_signal(signal.SIGINT)\n"
    exec(compile(source, "<frozen importlib._bootstrap>", "exec"), namespace)

    class Thing:
        pass

    with signals.interrupts():
        thing = Thing()
        ref = weakref.ref(thing, namespace["cb"])  # type: ignore[arg-type]
        started = time.perf_counter()
        with pytest.raises(KeyboardInterrupt):
            del thing  # the callback runs here, and the signal is handled inside it
            time.sleep(30.0)  # ... so the interrupt arrives here, moments later
        # an interrupt held back until the sleep ended would take all 30 s: any shorter time
        # shows it cut the sleep short (30 s against moments: no busy machine comes close)
        assert time.perf_counter() - started < 30.0
        assert signals.interrupted() and ref() is None


def test_an_interrupt_handled_after_it_left_exec_source_exits_130_under_python_m(
    tmp_path: Path,
) -> None:
    # CPython notes a KeyboardInterrupt that escapes source run by `exec` (dataclasses build
    # their methods that way, so a Ctrl-C while modules load often lands there) and kills a
    # `python -m` process with SIGINT at exit, though batchsim caught and reported it.
    (tmp_path / "cut_in_exec.py").write_text(
        "import sys\n"
        "import sim.cli.main\n"
        "from sim.cli import entry\n"
        "sim.cli.main.main = lambda argv=None: exec('raise KeyboardInterrupt')\n"
        "sys.exit(entry([]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "cut_in_exec"], cwd=tmp_path, capture_output=True, text=True
    )
    assert (done.returncode, done.stderr) == (
        130,
        "batchsim: interrupted; no results were written\n",
    )


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupt_a_library_swallowed_still_stops_the_run_before_it_commits(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    signum: int,
    code: int,
) -> None:
    simulation = importlib.import_module("sim.simulate")
    real = simulation.simulate

    def swallowed(*args: object, **kwargs: object) -> object:
        results = real(*args, **kwargs)
        signals._received.append(signum)  # the handler ran, but its exception went nowhere
        return results

    small = {**SLOW, "workload": {**SLOW["workload"], "num_requests": 50}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(small))
    monkeypatch.setattr(simulation, "simulate", swallowed)
    monkeypatch.chdir(tmp_path)
    cli = importlib.import_module("sim.cli.main")
    assert cli.main(["run", "s.yaml", "--no-plots", "-q"]) == code
    what = "interrupted" if code == 130 else "terminated"
    assert capsys.readouterr().err == f"batchsim: {what}; no results were written\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results", "s.yaml"]
    assert list((tmp_path / "results").iterdir()) == []


@pytest.mark.parametrize(
    "exc, code, what",
    [(KeyboardInterrupt(), 130, "interrupted"), (signals.Terminated(), 143, "terminated")],
)
def test_an_interrupted_sweep_says_what_it_saved_and_how_to_resume(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    exc: KeyboardInterrupt,
    code: int,
    what: str,
) -> None:
    sweeping = importlib.import_module("sim.whatif.sweep")
    out = tmp_path / "sweep"

    def cut_short(*args: object, **kwargs: object) -> object:
        (out / "points").mkdir(parents=True)
        for i in range(2):  # two points had finished
            (out / "points" / f"{i}.json").write_text("{}")
        raise exc

    monkeypatch.setattr(sweeping, "sweep", cut_short)
    cli = importlib.import_module("sim.cli.main")
    args = ["sweep", "s.yaml", "--grid", "seed=1,2,3", "--out", str(out), "-q"]
    assert cli.main(args) == code
    assert capsys.readouterr().err == (
        f"batchsim: {what}; 2 points saved in {out}/points/; rerun the same command to resume\n"
    )
