"""docs/moe.md's comparison with published measurements is what the benchmark computes now:
every point of both tables and both summaries (benchmarks/bench_published.py)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "moe.md"


def _bench():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "bench_published", ROOT / "benchmarks" / "bench_published.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _block(text: str, name: str) -> str:
    found = re.search(rf"<!-- published:{name} -->\n(.*?)<!-- /published:{name} -->", text, re.S)
    assert found, name
    return found.group(1)


@pytest.mark.parametrize("calibrated", [False, True], ids=["roofline", "calibrated"])
def test_the_published_comparison_in_the_docs_is_current(calibrated: bool) -> None:
    bench = _bench()
    bench.PROFILE = "roofline"  # the tables docs/moe.md shows are the datasheet roofline's
    table = bench.run(bench.read_rows(ROOT / "calibration" / "published"), False, None, calibrated)
    text = DOC.read_text()
    name = "calibrated" if calibrated else "roofline"
    assert _block(text, name) == bench.markdown(table), (
        f"regenerate with: python benchmarks/bench_published.py {'--calibrated ' * calibrated}"
        "--markdown FILE, and paste it between the markers"
    )
    for row in bench.class_rows(table):  # the summary table above them
        assert row in text, row
    # docs/models.md quotes the mixtures of experts' TPOT median of both
    moe = table[table["model"].map(lambda m: bench.MODELS[m].is_moe)]
    median = moe["tpot_err_%"].abs().median()
    models = " ".join((ROOT / "docs" / "models.md").read_text().split())
    quoted = f"TPOT median error {median:.1f} %"
    assert quoted in models, quoted
