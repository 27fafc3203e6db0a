"""The figures the README, docs/ and the shipped scenarios quote are the figures the code
produces.

`tests/quoted_figures.py` lists every quoted simulation figure with the run that produces it;
here each is checked against fresh runs (within half a unit of its last digit or 1 %). When an
intended change moves them: `python tests/quoted_figures.py --write` rewrites the text.

The figures fall in two explicit subsets: those computed from the repository alone (its
scenarios, catalog and profiles), checked everywhere, and those whose run replays a public trace
kept outside the repository, checked where the trace is and otherwise reported as skipped with
their count (a pytest skip naming the file), never dropped silently. The counts are pinned
below, so a quote moving from one subset to the other, or disappearing, fails here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
from quoted_figures import (
    AZURE,
    MOONCAKE,
    NUM,
    QUOTES,
    STORE,
    Quote,
    check,
    coverage,
    fresh_summary,
    rewrite,
)
from quoted_runs import Store, code_key

# quoted values per subset (update with the quotes: each count is a statement of coverage)
IN_REPO_VALUES = 263
TRACE_VALUES = {MOONCAKE: 147, AZURE: 24}

IN_REPO = [q for q in QUOTES if q.needs is None]


def _failure(drifts: list[object]) -> str:
    return "\n".join(map(str, drifts)) + (
        "\nif the change is intended: python tests/quoted_figures.py --write"
    )


def test_the_subsets_are_the_pinned_ones() -> None:
    assert sum(len(q.values) for q in IN_REPO) == IN_REPO_VALUES
    for trace, count in TRACE_VALUES.items():
        assert sum(len(q.values) for q in QUOTES if q.needs == trace) == count, trace
    assert {q.needs for q in QUOTES} == {None, *TRACE_VALUES}
    everything = coverage()
    assert everything.total == IN_REPO_VALUES + sum(TRACE_VALUES.values()) == 434
    # what this machine checks and skips, in the test log (pytest -rA / -s)
    print(everything)
    assert everything.checked >= IN_REPO_VALUES


def test_figures_from_the_repository_match_the_runs_of_this_code() -> None:
    drifts = check(IN_REPO)
    assert not drifts, _failure(drifts)
    assert coverage(IN_REPO).checked == IN_REPO_VALUES  # none of them can be skipped


def _run_group(quote: Quote) -> str:
    """The shipped scenario whose runs a quote reads: its document, or for a Markdown page's
    trace-based quotes (the shipped-scenario table of docs/scenarios.md has the one) the KV-tier
    scenario they quote (so each group's runs happen once)."""
    return "scenarios/kv_tiers.yaml" if quote.doc.endswith(".md") else quote.doc


TRACE_GROUPS = sorted({(str(q.needs), _run_group(q)) for q in QUOTES if q.needs is not None})
# one test per group, so that each variant a group quotes runs once (`variant_summary` caches
# per process): dealing a group's quotes out to several workers ran most of the KV-tier
# scenario's variants twice (19 runs of its 12 variants), and the suite is bound by its cores


def _group(trace: str, group: str) -> list[Quote]:
    return [q for q in QUOTES if str(q.needs) == trace and _run_group(q) == group]


@pytest.mark.parametrize(
    ("trace", "group"),
    TRACE_GROUPS,
    ids=[f"{Path(t).name}-{Path(g).stem}" for t, g in TRACE_GROUPS],
)
def test_figures_of_a_public_trace_match_where_the_trace_is(trace: str, group: str) -> None:
    quotes = _group(trace, group)
    drifts = check(quotes)  # the text of every quote is matched even without the trace
    count = sum(len(q.values) for q in quotes)
    if not Path(trace).is_file():
        assert coverage(quotes).skipped == {trace: count}
        pytest.skip(f"{count} quoted values unchecked: they need {trace}")
    assert not drifts, _failure(drifts)
    assert coverage(quotes).checked == count


def test_every_trace_quote_is_in_one_group() -> None:
    grouped = sum(sum(len(q.values) for q in _group(t, g)) for t, g in TRACE_GROUPS)
    assert grouped == sum(TRACE_VALUES.values())
    assert all(_group(t, g) for t, g in TRACE_GROUPS)  # no group is empty


def test_the_shipped_documents_are_covered() -> None:
    docs = {q.doc for q in QUOTES}
    scenarios = (
        "chunked_prefill",
        "coding_agents",
        "disaggregation_goodput",
        "kv_paging",
        "kv_tiers",
        "moe_single_node",
        "moe_wide_ep",
        "prefix_caching",
        "profile_comparison",
        "speculative_decoding",
    )
    pages = {"README.md", "docs/scenarios.md", "docs/models.md"}
    assert docs == {*pages, *(f"scenarios/{name}.yaml" for name in scenarios)}


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


def test_a_quote_whose_input_is_absent_is_counted_and_its_text_still_checked(
    tmp_path: Path,
) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("hit rate 55 %, p50 0.12 s; goodput 3.1\n")
    absent = tmp_path / "absent.jsonl"

    def never() -> float:
        raise AssertionError("a value whose input is absent is not computed")

    away = Quote("doc.md", rf"hit rate {NUM} %, p50 {NUM} s", (never, never), absent)
    here = Quote("doc.md", rf"goodput {NUM}", (lambda: 3.1,))
    assert check([away, here], tmp_path) == []
    counted = coverage([away, here])
    assert (counted.checked, counted.skipped, counted.total) == (1, {str(absent): 2}, 3)
    assert str(counted) == (
        f"1 of 3 quoted values checked; 2 skipped: they need {absent}, absent here"
    )
    # the text of a skipped quote must still be there, with one number per value
    gone = Quote("doc.md", rf"hit rate {NUM} % of {NUM}", (never, never), absent)
    with pytest.raises(AssertionError, match="matches 0 times"):
        check([gone], tmp_path)
    short = Quote("doc.md", rf"hit rate {NUM} %", (never, never), absent)
    with pytest.raises(AssertionError, match="has 1 numbers for 2 values"):
        check([short], tmp_path)


# --- the stored runs (tests/quoted_runs.py) -----------------------------------------------


def test_a_stored_run_is_read_only_while_what_it_used_is_unchanged(tmp_path: Path) -> None:
    code, trace = tmp_path / "repo" / "sim" / "step.py", tmp_path / "trace.jsonl"
    code.parent.mkdir(parents=True)
    code.write_text("COST = 1\n")
    trace.write_text("{}\n")
    root, path = tmp_path / "repo", tmp_path / "repo" / "tests" / "runs.json"
    path.parent.mkdir()
    runs: list[str] = []

    def run(value: float) -> Callable[[], tuple[dict[str, float], set[str]]]:
        def compute() -> tuple[dict[str, float], set[str]]:
            runs.append("ran")
            return {"ttft_p50_s": value}, {"../trace.jsonl"}

        return compute

    store = Store(path, root)
    store.files = ("sim/step.py",)  # what a tracked process would have recorded
    assert store.get("a:b", run(1.5)) == {"ttft_p50_s": 1.5} and len(runs) == 1
    store.save()
    assert str(store) == (
        "quoted runs: 0 read from runs.json, 1 run here "
        "(stored again by: python tests/quoted_figures.py)"
    )

    again = Store(path, root)
    assert again.get("a:b", run(9.0)) == {"ttft_p50_s": 1.5} and len(runs) == 1  # read back
    assert (again.hits, again.misses) == (1, 0)
    code_key.cache_clear()
    code.write_text("COST = 2\n")  # the code changed: the run is repeated
    assert Store(path, root).get("a:b", run(2.5)) == {"ttft_p50_s": 2.5} and len(runs) == 2
    code_key.cache_clear()
    code.write_text("COST = 1\n")
    trace.write_text('{"t": 1}\n')  # the trace changed
    assert Store(path, root).get("a:b", run(3.5)) == {"ttft_p50_s": 3.5} and len(runs) == 3
    trace.unlink()  # or is gone
    assert not Store(path, root).current("a:b")


def _cheapest_stored(count: int) -> list[str]:
    """The `count` stored in-repository runs that took least time to compute."""
    runs = STORE.runs
    local = [name for name in runs if not runs[name]["reads"]]
    return sorted(local, key=lambda n: (runs[n].get("seconds", float("inf")), n))[:count]


def test_stored_runs_are_what_this_core_computes_now() -> None:
    """A few stored runs, repeated here (on the compiled core in CI): the same summary, number
    for number. Where the store is not that of this code the runs are repeated by the checks
    above anyway, and this says so."""
    names = _cheapest_stored(4)
    stale = [n for n in names if not STORE.current(n)]
    if not names or stale:
        pytest.skip(f"stored runs not of this code ({', '.join(stale) or 'none stored'}): "
                    "python tests/quoted_figures.py stores them again")  # fmt: skip
    for name in names:
        scenario_variant, *overrides = name.split(" ")
        scenario, variant = scenario_variant.split(":")
        fresh, _ = fresh_summary(scenario, variant, *overrides)
        stored = STORE.runs[name]["summary"]
        assert fresh.keys() == stored.keys(), name
        differ = {k: (fresh[k], stored[k]) for k in fresh if not _same(fresh[k], stored[k])}
        assert not differ, (name, differ)


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def test_ci_installs_the_libraries_the_stored_runs_were_keyed_with() -> None:
    # a release upstream changes a library's version, and so every stored run's key: CI pins
    # each library the key names (tests/quoted_runs.py LIBRARIES) to the stored version
    from quoted_runs import LIBRARIES

    text = (Path(__file__).parent.parent / ".ci" / "constraints.txt").read_text()
    pins = dict(line.split("==") for line in text.splitlines() if "==" in line)
    assert set(pins) == set(LIBRARIES)
    assert ".ci/constraints.txt" in (Path(__file__).parent.parent / ".ci" / "run").read_text()
