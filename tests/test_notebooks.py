"""The notebooks execute headless, end with their computed answer, and are stored without output."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

nbformat = pytest.importorskip("nbformat", reason="notebook tests need nbformat (dev extra)")
nbclient = pytest.importorskip("nbclient", reason="notebook tests need nbclient (dev extra)")

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


def test_the_notebooks_exist() -> None:
    assert [p.name for p in NOTEBOOKS] == [
        "01_batching_tradeoff.ipynb", "02_policy_comparison.ipynb", "03_capacity_planning.ipynb",
        "04_prefix_caching.ipynb", "05_speculative_decoding.ipynb", "06_deployment_search.ipynb",
        "07_kv_tiers.ipynb", "08_moe_deployment.ipynb", "09_coding_agents.ipynb",
    ]  # fmt: skip


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_without_outputs(path: Path) -> None:
    cells = json.loads(path.read_text())["cells"]
    assert cells[0]["cell_type"] == "markdown" and "**Question.**" in "".join(cells[0]["source"])
    for cell in cells:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None


def execute(path: Path) -> Any:
    """Run a notebook headless; the executed notebook."""
    book = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        book,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    return book


def answer_of(book: Any) -> str:
    last = book.cells[-1]
    printed = "".join(o.get("text", "") for o in last.outputs if o.get("output_type") == "stream")
    answer = [line for line in printed.splitlines() if line.startswith("Answer: ")]
    assert answer, f"the last cell printed no answer: {printed!r}"
    assert any(ch.isdigit() for ch in answer[0])  # computed numbers, not a typed sentence
    return answer[0]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes_and_prints_its_answer(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # synthetic workloads: no trace from outside the repository, small versions
    monkeypatch.delenv("BATCHSIM_AZURE_TRACE", raising=False)
    monkeypatch.delenv("BATCHSIM_MOONCAKE_TRACE", raising=False)
    monkeypatch.delenv("BATCHSIM_SEARCH_FULL", raising=False)
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's own (inline) backend
    book = execute(path)
    answer_of(book)
    outputs = [o for c in book.cells for o in c.get("outputs", [])]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert images, "no figure was displayed"
    assert os.environ.get("BATCHSIM_AZURE_TRACE") is None


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebooks_need_no_temporary_scenario_files(path: Path) -> None:
    # simulate, sweep and capacity_search take the scenario mapping itself
    text = path.read_text()
    assert "safe_dump" not in text and "tempfile" not in text


def azure_trace(path: Path, rows: int = 400, rate: float = 6.0) -> Path:
    """An Azure-format trace (TIMESTAMP,ContextTokens,GeneratedTokens) with 7-digit fractions."""
    rng = np.random.default_rng(5)
    start = np.datetime64("2023-11-16T18:15:46", "ns")
    gaps = np.cumsum(rng.exponential(1e9 / rate, rows)).astype("timedelta64[ns]")
    prompt = np.clip(rng.lognormal(np.log(1020), 0.5, rows), 1, 3072).astype(int)
    output = np.clip(rng.lognormal(np.log(129), 1.0, rows), 0, 1024).astype(int)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for stamp, p, o in zip(start + gaps, prompt, output, strict=True):
        text = str(stamp).replace("T", " ")[:27]  # 2023-11-16 18:15:46.1234567
        lines.append(f"{text},{p},{o}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_policy_comparison_replays_an_azure_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = azure_trace(tmp_path / "azure_conv.csv")
    monkeypatch.setenv("BATCHSIM_AZURE_TRACE", str(trace))
    monkeypatch.delenv("MPLBACKEND", raising=False)
    book = execute(NOTEBOOKS[1])
    printed = "".join(o.get("text", "") for c in book.cells for o in c.get("outputs", []))
    assert f"Azure trace {trace}" in printed
    assert "batching sustains the most goodput" in answer_of(book)


def mooncake_trace(path: Path, conversations: int = 60, turns: int = 4) -> Path:
    """A Mooncake-format trace: every prompt opens with one shared 512-token block (a system
    prompt) and each turn resends its conversation's earlier blocks plus new ones."""
    rng = np.random.default_rng(6)
    rows = []
    next_id = 1
    for _ in range(conversations):
        start = float(rng.uniform(0, 1000))
        blocks = [0]
        for t in range(turns):
            blocks = blocks + list(range(next_id, next_id + 2))
            next_id += 2
            ms = int((start + 40.0 * t) * 1000)
            tokens = 512 * len(blocks) - int(rng.integers(0, 256))
            rows.append((ms, tokens, int(rng.integers(20, 200)), list(blocks)))
    rows.sort()
    lines = [
        json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": h})
        for t, i, o, h in rows
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_prefix_caching_replays_a_mooncake_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = mooncake_trace(tmp_path / "conversation.jsonl")
    monkeypatch.setenv("BATCHSIM_MOONCAKE_TRACE", str(trace))
    monkeypatch.delenv("MPLBACKEND", raising=False)
    book = execute(next(p for p in NOTEBOOKS if p.stem == "04_prefix_caching"))
    printed = "".join(o.get("text", "") for c in book.cells for o in c.get("outputs", []))
    assert f"Mooncake trace {trace}" in printed
    assert "caching serves" in answer_of(book)


def test_kv_tiers_runs_its_scenario_on_a_mooncake_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = mooncake_trace(tmp_path / "conversation.jsonl")
    monkeypatch.setenv("BATCHSIM_MOONCAKE_TRACE", str(trace))
    monkeypatch.delenv("MPLBACKEND", raising=False)
    book = execute(next(p for p in NOTEBOOKS if p.stem == "07_kv_tiers"))
    printed = "".join(o.get("text", "") for c in book.cells for o in c.get("outputs", []))
    assert f"Mooncake trace {trace}: the scenario as shipped" in printed
    assert "GiB shared store reaches" in answer_of(book)


def test_deployment_search_replays_an_azure_trace_at_the_asked_rate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = azure_trace(tmp_path / "azure_conv.csv")
    monkeypatch.setenv("BATCHSIM_AZURE_TRACE", str(trace))
    monkeypatch.delenv("BATCHSIM_SEARCH_FULL", raising=False)
    monkeypatch.delenv("MPLBACKEND", raising=False)
    book = execute(next(p for p in NOTEBOOKS if p.stem == "06_deployment_search"))
    printed = "".join(o.get("text", "") for c in book.cells for o in c.get("outputs", []))
    assert f"Azure trace {trace} at 20 requests/s" in printed
    answer = answer_of(book)
    assert "serves 20 requests/s within TTFT p99 2 s" in answer
    assert "configurations searched" in answer
