"""The README and the pages of docs/ stay true: the README is a front page of at most 300 lines,
the Python snippet of docs/python_api.md runs as a plain script, the first Quickstart command
works from a fresh folder, the commands name files that exist, docs/README.md indexes every page,
and every link between the pages resolves (to a file, and to a heading where it names one)."""

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
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]


def test_the_readme_is_a_front_page() -> None:
    assert len(README.splitlines()) <= 300
    quickstart = README[README.index("## Quickstart") :]
    quickstart = quickstart[: quickstart.index("\n## ")]
    assert "| SLO attainment (TTFT 2 s, TPOT 100 ms) |" in quickstart
    assert "(docs/README.md)" in README


def test_the_python_snippet_runs_as_a_plain_script(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "python_api.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", page, re.S)
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


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_paths_the_pages_name_exist(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for path in re.findall(
        r"`((?:scenarios|notebooks|calibration|benchmarks|tests|docs)/[\w./-]+)`", text
    ):
        if "*" not in path and not path.endswith("/x"):
            assert (ROOT / path).exists(), path


def test_the_index_lists_every_page() -> None:
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([\w.-]+\.md)\)", index))
    pages = {p.name for p in DOCS} - {"README.md"}
    assert pages - linked == set(), "pages docs/README.md does not index"
    assert linked - pages == set(), "docs/README.md indexes pages that do not exist"


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as '-'."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.*)$", text, re.M)
    }


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_between_the_pages_resolves(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):  # a web address
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.exists(), f"{page.name}: {target}"
        if anchor and resolved.suffix == ".md":
            assert anchor in _anchors(resolved), f"{page.name}: {target}"
