"""Run report (content, rebuild, headless-browser rendering), progress lines and Ctrl-C safety."""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers_results import (
    TINY,
    results_folder,
    )
from PIL import Image

import sim.io.report
from sim.cli.main import main
from sim.io.report import render_report
from sim.scenario.load import load_scenario_dict
from sim.simulate import simulate


def test_report_is_self_contained_with_every_section(tmp_path: Path) -> None:
    folder = results_folder(tmp_path)
    text = (folder / "report.html").read_text()
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,', text)
    assert images == ["Latency distributions", "Batch slots over time",
                      "Batch size, queue length and KV use over time",
                      "Load, fleet, latency and rent per window"]  # fmt: skip
    for section in ("summary", "plots", "profile", "scenario"):
        assert f'<section id="{section}">' in text
    # nothing fetched from elsewhere: no URLs in src/href attributes, no external stylesheets
    assert not re.search(r'(src|href)="(https?:|//)', text)
    assert "<link" not in text and "<script" not in text
    summary = text[text.index('<table class="summary">') : text.index("</table>")]
    assert "<th>static</th><th>continuous</th>" in summary
    assert "<td>requests finished</td><td>40</td><td>40</td>" in summary
    assert "source: roofline" in text  # the profile's provenance: the default step model's
    assert "step_model:" in text and "unit_costs_file: sim/costs/unit_costs.yaml" in text
    assert "max_batch_size: 8" in text  # the resolved scenario


def test_report_without_plots_says_so(tmp_path: Path) -> None:
    folder = results_folder(tmp_path, plots=False)
    text = (folder / "report.html").read_text()
    assert "<img" not in text and "No plots in this folder" in text


def test_report_command_rebuilds_the_same_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = results_folder(tmp_path)
    original = (folder / "report.html").read_text()
    (folder / "report.html").unlink()
    assert main(["report", str(folder)]) == 0
    assert capsys.readouterr().out.strip() == str(folder / "report.html")
    assert (folder / "report.html").read_text() == original
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == [".batchsim"]
    # a trace in the folder gets a relative link on rebuild
    (folder / "trace.json").write_text("{}")
    assert 'href="trace.json"' in render_report(folder)
    assert main(["report", str(tmp_path / "nowhere")]) == 2
    assert "nowhere: no such folder" in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == 2
    assert "not a results folder (no summary.json)" in capsys.readouterr().err


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if path := shutil.which(name):
            return path
    return None


def test_report_renders_in_a_headless_browser(tmp_path: Path) -> None:
    browser = find_chromium()
    if browser is None:
        pytest.skip("no chromium binary on PATH (CI installs it: apt-get install -y chromium)")
    folder = results_folder(tmp_path)
    shot = tmp_path / "shot.png"
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
               f"--screenshot={shot}", "--window-size=1280,2000",
               (folder / "report.html").resolve().as_uri()]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=120)
    image = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    assert image.shape == (2000, 1280, 3)
    assert len(np.unique(image.reshape(-1, 3), axis=0)) > 200  # not blank
    # the plots are visible: matplotlib's first two line colours (C0 blue, C1 orange) and the
    # page's own colours contain neither
    for rgb in ((31, 119, 180), (255, 127, 14)):
        close = (np.abs(image - np.array(rgb)).sum(axis=2) < 30).sum()
        assert close > 500, f"too few pixels of colour {rgb}: {close}"


def test_progress_reports_time_and_requests_without_changing_results(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `sim.simulate` is the function (re-exported by `sim`); patch the module's constant
    monkeypatch.setattr(importlib.import_module("sim.simulate.run"), "PROGRESS_WALL_S", 0.001)
    raw = {**TINY, "workload": {**TINY["workload"], "num_requests": 300}}
    messages: list[str] = []
    with_progress = simulate(load_scenario_dict(raw), progress=messages.append)
    plain = simulate(load_scenario_dict(raw))
    ticks = [m for m in messages if "simulated" in m]
    assert ticks and all(re.fullmatch(r"\w+: [\d.]+ s simulated, \d+/300 requests done", m)
                         for m in ticks)  # fmt: skip
    done = [int(m.split(", ")[1].split("/")[0]) for m in ticks if m.startswith("continuous")]
    assert done == sorted(done) and done[-1] > 0
    for name in plain.variants:
        assert with_progress[name].requests.equals(plain[name].requests)
        assert with_progress[name].steps.equals(plain[name].steps)


def test_ctrl_c_while_writing_keeps_previous_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(TINY))
    out = tmp_path / "results"
    assert main(["run", str(scenario), "--out", str(out), "-q"]) == 0
    before = {p.name: p.read_bytes() for p in (out / "tiny").iterdir()}

    def interrupted(folder: Path) -> Path:
        raise KeyboardInterrupt

    monkeypatch.setattr(sim.io.report, "write_report", interrupted)
    assert main(["run", str(scenario), "--out", str(out), "-q"]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["tiny"]  # no temporary folders left
    assert {p.name: p.read_bytes() for p in (out / "tiny").iterdir()} == before
