"""The notebooks execute headless, end with their computed answer, and are stored without output."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="notebook tests need nbformat (dev extra)")
nbclient = pytest.importorskip("nbclient", reason="notebook tests need nbclient (dev extra)")

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


def test_the_three_notebooks_exist() -> None:
    assert [p.name for p in NOTEBOOKS] == [
        "01_batching_tradeoff.ipynb", "02_policy_comparison.ipynb", "03_capacity_planning.ipynb"
    ]  # fmt: skip


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_without_outputs(path: Path) -> None:
    cells = json.loads(path.read_text())["cells"]
    assert cells[0]["cell_type"] == "markdown" and "**Question.**" in "".join(cells[0]["source"])
    for cell in cells:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes_and_prints_its_answer(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BATCHSIM_AZURE_TRACE", raising=False)  # synthetic workload: no ../shared
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's own (inline) backend
    book = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        book,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    last = book.cells[-1]
    printed = "".join(o.get("text", "") for o in last.outputs if o.get("output_type") == "stream")
    answer = [line for line in printed.splitlines() if line.startswith("Answer: ")]
    assert answer, f"the last cell of {path.name} printed no answer: {printed!r}"
    assert any(ch.isdigit() for ch in answer[0])  # computed numbers, not a typed sentence
    outputs = [o for c in book.cells for o in c.get("outputs", [])]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert images, "no figure was displayed"
    assert os.environ.get("BATCHSIM_AZURE_TRACE") is None
