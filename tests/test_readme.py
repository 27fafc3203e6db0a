"""The README stays true: its Python snippet runs as a plain script, its first Quickstart command
works from a fresh folder, and its commands name files that exist."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sim.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_python_snippet_runs_as_a_plain_script(tmp_path: Path) -> None:
    section = README[README.index("## Python API") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    script = tmp_path / "snippet.py"
    script.write_text(code.group(1))  # no __main__ guard, yet it sweeps on every CPU
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Results('quickstart': 2 variants [static, continuous], 3000 requests each)" in (
        done.stdout
    )
    assert "Results('mine': 2 variants" in done.stdout


def test_the_quickstart_command_works_in_a_fresh_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    command = ".venv/bin/batchsim run scenarios/quickstart.yaml"
    assert f"&& {command}\n" in README
    (tmp_path / "scenarios").mkdir()
    shutil.copy(ROOT / "scenarios" / "quickstart.yaml", tmp_path / "scenarios")
    monkeypatch.chdir(tmp_path)
    assert main(command.split()[1:]) == 0
    assert "results/quickstart/" in capsys.readouterr().out
    assert (tmp_path / "results" / "quickstart" / "report.html").is_file()


def test_paths_the_readme_names_exist() -> None:
    for path in re.findall(
        r"`((?:scenarios|notebooks|calibration|benchmarks|tests)/[\w./-]+)`", README
    ):
        if "*" not in path and not path.endswith("/x"):
            assert (ROOT / path).exists(), path
