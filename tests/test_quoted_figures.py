"""The figures the README and the shipped scenarios quote are the figures the code produces.

`tests/quoted_figures.py` lists every quoted simulation figure with the run that produces it;
here each is checked against fresh runs (within half a unit of its last digit or 1 %). When an
intended change moves them: `python tests/quoted_figures.py --write` rewrites the text.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from quoted_figures import NUM, QUOTES, Quote, check, rewrite


def test_every_quoted_figure_matches_a_fresh_run() -> None:
    drifts = check()
    assert not drifts, "\n".join(map(str, drifts)) + (
        "\nif the change is intended: python tests/quoted_figures.py --write"
    )


def test_figures_of_public_traces_are_checked_where_the_trace_is() -> None:
    # prefix_caching.yaml and profile_comparison.yaml replay public traces that are not part of
    # the repository: their figures are checked (above) only on a machine that has them
    away = [q for q in QUOTES if not q.available]
    if away:
        missing = sorted({str(q.needs) for q in away})
        pytest.skip(f"{len(away)} quoted rows need {', '.join(missing)}, absent here")
    assert sum(q.needs is not None for q in QUOTES) >= 5


def test_the_shipped_documents_are_covered() -> None:
    docs = {q.doc for q in QUOTES}
    scenarios = (
        "chunked_prefill",
        "disaggregation_goodput",
        "kv_paging",
        "prefix_caching",
        "profile_comparison",
        "speculative_decoding",
    )
    assert docs == {"README.md", *(f"scenarios/{name}.yaml" for name in scenarios)}
    assert sum(len(q.values) for q in QUOTES) >= 90


def test_a_drifted_figure_is_found_and_rewritten(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("goodput 8.37 req/s, stall\n# 0.581 s; ratio 20x\n")
    quotes = [
        Quote("doc.md", rf"goodput {NUM} req/s, stall {NUM} s", (lambda: 8.47, lambda: 0.5812)),
        Quote("doc.md", rf"ratio {NUM}x", (lambda: 20.4,)),
    ]
    drifts = check(quotes, tmp_path)
    assert [(d.quoted, d.fixed()) for d in drifts] == [("8.37", "8.47")]
    rewrite(drifts, tmp_path)
    assert doc.read_text() == "goodput 8.47 req/s, stall\n# 0.581 s; ratio 20x\n"
    assert check(quotes, tmp_path) == []
