"""The CI regression scenarios pin what they claim to pin, and a `.stream.yaml` one is streamed.

A baseline of a scenario that stopped reaching its feature (no cache hits, no swaps, no
speculation, queue orders that all schedule alike) would still "hold" in `batchsim regress`
while guarding nothing: these tests read the committed baselines and check that each feature
shows in its numbers, then that streaming really changes how a scenario is run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import sim.whatif.regress as regress_module
from sim.simulate import simulate
from sim.whatif.regress import baseline_path, compare, run_ci_scenario, streamed

ROOT = Path(__file__).resolve().parents[2]
CI = ROOT / "scenarios" / "ci"
BASELINES = ROOT / "results" / "baselines"


def _variants(stem: str) -> dict[str, dict[str, Any]]:
    document: dict[str, Any] = json.loads((BASELINES / f"{stem}.json").read_text())
    return document["variants"]


def test_prefix_caching_baseline_hits_and_evicts() -> None:
    v = _variants("prefix_caching")
    assert v["no-cache"].get("prefix_cache_hit_rate") is None
    for name in ("cache", "affinity-2"):
        assert 0.0 < v[name]["prefix_cache_hit_rate"] < 1.0
        assert v[name]["prefix_cache_evictions"] > 0  # the pool is small enough for LRU to act
    assert v["affinity-2"]["num_gpus"] == 2
    assert v["cache"]["ttft_p50_s"] < v["no-cache"]["ttft_p50_s"]


def test_speculative_baseline_speculates_with_every_proposer() -> None:
    v = _variants("speculative")
    assert v["k0"].get("num_spec_proposed") is None
    for name in ("draft-k3", "heads-k4-dynamic", "ngram-k3-window"):
        assert 0 < v[name]["num_spec_accepted"] < v[name]["num_spec_proposed"]
    # the dynamic rules bite: fewer than every step speculates
    assert v["heads-k4-dynamic"]["spec_step_share"] < 1.0
    assert v["ngram-k3-window"]["spec_step_share"] < 1.0


def test_swap_baseline_swaps_and_falls_back_under_every_victim_rule() -> None:
    v = _variants("swap")
    assert set(v) == {"last-admitted", "lowest-priority", "most-kv"}
    for name, m in v.items():
        # swaps happen, and some preemptions found the host space full (recompute fallback)
        assert 0 < m["num_swaps"] < m["num_preemptions"], name
        assert m["swapped_bytes"] > 0
    # the victim rules choose differently on these tiered requests
    assert len({m["num_preemptions"] for m in v.values()}) == 3


def test_queue_orders_baseline_orders_differently() -> None:
    v = _variants("queue_orders")
    assert set(v) == {"fcfs", "sjf-predicted", "priority-strict", "priority-weighted", "edf"}
    paid = {name: m["tier_paid_ttft_p50_s"] for name, m in v.items()}
    assert len(set(paid.values())) == len(paid)  # every order schedules its own way
    # the paid tier is served first by strict priority, and ahead of FCFS by the others
    assert paid["priority-strict"] == min(paid.values())
    assert all(paid[name] < paid["fcfs"] for name in paid if name != "fcfs")


def test_ci_scenarios_include_a_streamed_one_with_its_own_baseline() -> None:
    files = [p for p in CI.glob("*.yaml") if streamed(p)]
    assert [p.name for p in files] == ["streaming.stream.yaml"]
    assert baseline_path(files[0], BASELINES).name == "streaming.stream.json"
    assert not streamed(CI / "continuous.yaml")


@pytest.fixture(scope="module")
def streamed_document() -> dict[str, Any]:
    return run_ci_scenario(CI / "streaming.stream.yaml")


@pytest.mark.parametrize(
    ("name", "tables"), [("streaming.stream.yaml", False), ("swap.yaml", True)]
)
def test_regress_streams_exactly_the_stream_scenarios(
    name: str, tables: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[bool] = []

    def fake(path: Path, *, tables: bool = True) -> Any:
        calls.append(tables)
        raise RuntimeError("stop here")

    monkeypatch.setattr(regress_module, "simulate", fake)
    with pytest.raises(RuntimeError, match="stop here"):
        run_ci_scenario(CI / name)
    assert calls == [tables]


def test_a_streamed_summary_keeps_the_exact_counts(streamed_document: dict[str, Any]) -> None:
    results = simulate(CI / "streaming.stream.yaml", tables=True)
    for name, metrics in streamed_document["variants"].items():
        exact = results.variants[name].summary()
        for metric in ("num_finished", "num_steps", "num_preemptions", "ttft_p99_s"):
            assert metrics[metric] == pytest.approx(exact[metric], rel=1e-12), (name, metric)


def test_the_stream_baseline_covers_each_streamed_family(
    streamed_document: dict[str, Any],
) -> None:
    baseline = json.loads((BASELINES / "streaming.stream.json").read_text())
    # the committed baseline is the streamed run (an exact run moves its percentiles)
    assert not [m for m in compare("streaming", baseline, streamed_document) if m.regression]
    v = _variants("streaming.stream")
    assert v["chunked-cached"]["prefix_cache_hit_rate"] > 0
    assert v["chunked-ngram"]["num_spec_proposed"] > 0
    assert v["two-instances"]["num_gpus"] == 2
    assert all(m["tier_free_num_requests"] > 0 for m in v.values())
