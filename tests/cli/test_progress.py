"""Progress costs nothing in the simulation: it adds no SimPy event, silent or not, so a run
whose simulated time spans millions of seconds (a very slow KV link) is no slower with it; and
`batchsim run -q` does not even start the watcher."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import simpy
import yaml
from fuzz_corpus import BASE

import sim
from sim.cli.main import main

MAX_EVENTS = 200_000  # the watcher used to add one event per simulated second
SLOW_LINK = {
    **{k: v for k, v in BASE.items() if k != "variants"},
    "workload": {**BASE["workload"], "num_requests": 6},
    "disaggregation": {
        "prefill": {"count": 1},
        "decode": {"count": 1},
        "link": {"bandwidth_gb_per_s": 1e-9},  # one byte a second: transfers take months
    },
}


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts every SimPy event processed; fails fast past MAX_EVENTS."""
    counter = [0]
    real_step = simpy.Environment.step

    def step(self: simpy.Environment) -> None:
        counter[0] += 1
        if counter[0] > MAX_EVENTS:
            raise AssertionError(f"more than {MAX_EVENTS} events")
        real_step(self)

    monkeypatch.setattr(simpy.Environment, "step", step)
    yield counter


def test_progress_adds_no_simulation_events(events: list[int]) -> None:
    silent = sim.simulate(BASE)
    without = events[0]
    events[0] = 0
    messages: list[str] = []
    loud = sim.simulate(BASE, progress=messages.append)
    assert events[0] == without
    assert any(m.startswith("a: 20 requests") for m in messages)
    for name in silent.variants:
        assert silent[name].requests.equals(loud[name].requests)


def test_a_slow_kv_link_spanning_months_costs_no_extra_work(
    events: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importlib.import_module("sim.simulate.run"), "PROGRESS_WALL_S", 0.001)
    messages: list[str] = []
    results = sim.simulate(SLOW_LINK, progress=messages.append)
    requests = results["default"].requests
    assert requests["finish_s"].max() > 1e7  # simulated seconds
    assert events[0] < 1000


def test_quiet_runs_start_no_watcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = importlib.import_module("sim.simulate")
    seen: list[Any] = []
    real = module.simulate

    def spy(scenario: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("progress"))
        return real(scenario, **kwargs)

    monkeypatch.setattr(module, "simulate", spy)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(BASE))
    out = str(tmp_path / "out")
    assert main(["run", str(path), "--out", out, "-q", "--no-plots"]) == 0
    assert main(["run", str(path), "--out", out, "--no-plots"]) == 0
    assert seen[0] is None and callable(seen[1])
    capsys.readouterr()
