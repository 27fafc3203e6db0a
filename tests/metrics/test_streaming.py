"""Streamed runs (no tables): the same summary as the tables give, sketches within their bound.

* `Sketch` (hypothesis, and heavy-tailed samples of several sizes): every percentile is the
  tables' (numpy's linear interpolation) while the sample is kept whole, and within the documented
  bound of it once sketched (docs/scenarios.md: 0.5 % relative error; stated here, not read
  from the module under test, so a coarser sketch fails); the bounds it gives hold the exact value.
* A streamed run has exactly the tables' summary keys; every count, sum, mean, rate and
  utilization is the same number, and so is every percentile (the samples are small enough to
  keep); the records are handed over in chunks and never held whole.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from scenario_factory import scenario, tiny_hardware, tiny_model

from sim import load_scenario_dict, simulate
from sim.cli.main import main
from sim.compiled import build
from sim.core.recorder import ItlLog, RequestLog, StepLog
from sim.metrics.percentiles import QUANTILES
from sim.metrics.streaming import EXACT_ROWS, Sketch

# the bound docs/scenarios.md promises streamed percentiles, stated here: a test that read it from
# `sim.metrics.streaming` would pass a sketch made coarser there
DOCUMENTED_RELATIVE_ERROR = 0.005
ALPHA = DOCUMENTED_RELATIVE_ERROR * (1 + 1e-9)
DOC = Path(__file__).resolve().parents[2] / "docs" / "scenarios.md"


def test_the_docs_state_the_bound_the_tests_hold_streams_to() -> None:
    text = " ".join(DOC.read_text().split())
    stated = re.findall(r"DDSketch sketches, within ([0-9.]+) % relative error", text)
    assert stated == ["0.5"]
    assert float(stated[0]) / 100 == DOCUMENTED_RELATIVE_ERROR


def exact(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The tables' percentile: numpy's linear interpolation on the expanded sample."""
    return float(np.percentile(np.repeat(values, weights), q))


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(
        st.floats(0.0, 1e4, allow_nan=False).filter(lambda v: v == 0 or v > 1e-6),
        min_size=1,
        max_size=300,
    ),
    weighted=st.booleans(),
    chunks=st.integers(1, 4),
    keep=st.sampled_from([0, 7, EXACT_ROWS]),
    data=st.data(),
)
def test_sketch_percentiles_are_within_the_stated_bound(
    values, weighted, chunks, keep, data
) -> None:
    v = np.asarray(values)
    w = (
        np.asarray(data.draw(st.lists(st.integers(1, 9), min_size=len(v), max_size=len(v))))
        if weighted
        else np.ones(len(v), dtype=int)
    )
    sketch = Sketch(exact_rows=keep)
    for part in np.array_split(np.arange(len(v)), chunks):  # chunk by chunk, as streamed
        sketch.add(v[part], w[part] if weighted else None)
    assert sketch.count == w.sum() and sketch.max == v.max()
    assert math.isclose(sketch.total, float((v * w).sum()), rel_tol=1e-12)
    assert sketch.exact == (len(v) <= keep)
    for q in (*QUANTILES, 0, 100):
        x = exact(v, w, q)
        low, high = sketch.bounds(q)
        tol = 1e-12 * (1 + abs(x))  # a rounding of the interpolation, relative to the value
        assert low <= x + tol and x <= high + tol, (q, x, low, high)
        if sketch.exact:
            assert sketch.quantile(q) == pytest.approx(x, rel=1e-12, abs=1e-15)
        else:
            assert abs(sketch.quantile(q) - x) <= ALPHA * x + 1e-12, (q, x, sketch.quantile(q))


@pytest.mark.parametrize("size", [2, 10, 400, 5_000, EXACT_ROWS, EXACT_ROWS + 1, 200_000])
def test_streamed_and_exact_percentiles_agree_at_every_size(size: int) -> None:
    """Heavy-tailed latencies whose top order statistics are far apart (where a sketch that
    answers with one order statistic misses the tables' interpolated p99 by several percent),
    streamed in chunks: exact while kept whole, within the documented bound after."""
    rng = np.random.default_rng(size)
    values = rng.pareto(1.5, size) * 0.05 + 0.001
    sketch = Sketch()
    for part in np.array_split(values, max(1, size // 4096)):
        sketch.add(part)
    expected = np.percentile(values, QUANTILES)
    got = sketch.quantiles(QUANTILES)
    assert sketch.exact == (size <= EXACT_ROWS)
    for q, x, p in zip(QUANTILES, expected, got, strict=True):
        if sketch.exact:
            assert p == x, q  # the tables' number to the bit
        else:
            assert abs(p - x) <= ALPHA * x, (q, p, x)
            low, high = sketch.bounds(q)
            assert low <= x <= high
    gaps = np.round(values, 4)  # a weighted sample, as the pooled gaps are
    unique, counts = np.unique(gaps, return_counts=True)
    weighted = Sketch(exact_rows=min(EXACT_ROWS, unique.size // 2))
    weighted.add(unique, counts)
    for q, p in zip(QUANTILES, weighted.quantiles(QUANTILES), strict=True):
        x = float(np.percentile(gaps, q))
        assert abs(p - x) <= ALPHA * x, (q, p, x)


PERCENTILE_SOURCES = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s", "queue": "queue_s"}


def _raw(name: str) -> dict:
    policy = {"name": name, "max_num_seqs": 8, "max_num_batched_tokens": 128, "block_size": 4}
    if name == "static":
        policy = {"name": "static", "max_batch_size": 6, "max_wait_s": 0.01}
    if name == "speculative":
        policy["name"] = "chunked"
        policy["speculative"] = {
            "method": "ngram",
            "num_speculative_tokens": 3,
            "acceptance": {"rate": 0.7},
            "disable_by_batch_size": 6,
        }
    return scenario(
        policy=policy,
        workload={
            "num_requests": 400,
            "arrival": {"process": "poisson", "rate": 20.0},
            "prompt_tokens": {"dist": "uniform", "low": 5, "high": 60},
            "output_tokens": {"dist": "lognormal", "median": 20, "sigma": 0.8, "max": 120},
        },
        model=tiny_model(),
        hardware=tiny_hardware(1500),
        slo={"ttft_s": 0.2, "tpot_s": 0.05},
        metrics={"warmup_s": 1.0, "cooldown_s": 1.0},
        cluster={"router": "least_kv", "instances": [{"count": 2}]},
    )


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Hand records over every 64 rows, and note how many rows were ever held at once."""
    held: list[int] = []
    for cls in (StepLog, ItlLog, RequestLog):
        init = cls.__init__

        def small(self, *args, _init=init, **kwargs) -> None:  # type: ignore[no-untyped-def]
            _init(self, *args, **{**kwargs, "capacity": 64})

        monkeypatch.setattr(cls, "__init__", small)
    hand_over = StepLog.hand_over

    def watched(self: StepLog, *, force: bool = False) -> None:
        held.append(len(self))
        hand_over(self, force=force)

    monkeypatch.setattr(StepLog, "hand_over", watched)
    return held


@pytest.mark.parametrize("policy", ["continuous", "chunked", "static", "speculative"])
def test_a_streamed_run_summarizes_like_the_tables(request, policy) -> None:
    # the summary is compared on both builds; the chunk sizes are watched by wrapping the
    # recorder, which only the Python build lets a test do
    small_chunks = request.getfixturevalue("small_chunks") if build() == "python" else None
    loaded = load_scenario_dict(_raw(policy))
    table = simulate(loaded)["default"]
    streamed = simulate(loaded, tables=False)["default"]
    assert streamed.requests.empty and streamed.steps.empty and streamed.itl.empty
    if small_chunks is not None:
        assert max(small_chunks) <= 64  # the step records were never held whole
    a, b = table.summary(), streamed.summary()
    assert set(a) == set(b)
    req = table.requests
    arrival = req["arrival_s"].to_numpy()
    lo, hi = arrival.min() + 1.0, arrival.max() - 1.0
    measured = req[(arrival >= lo) & (arrival <= hi) & ~req["rejected"]]
    served = measured[measured["num_output_tokens"] >= 2]  # stalls: the measured set too
    samples = {
        metric: (measured[column].dropna().to_numpy(), None)
        for metric, column in PERCENTILE_SOURCES.items()
    }
    samples["stall"] = (served["max_itl_s"].dropna().to_numpy(), None)
    samples["itl"] = (table.itl["gap_s"].to_numpy(), table.itl["count"].to_numpy())
    tokens = table.itl["tokens"].to_numpy()  # whole gaps between emissions, per emission
    samples["spec_emission_gap"] = (samples["itl"][0] * tokens, samples["itl"][1] / tokens)
    if policy == "speculative":
        assert (tokens > 1).any() and "spec_emission_gap_p99_s" in a
    for key, exact in a.items():
        metric, _, rest = key.partition("_p")
        if metric in samples and rest.endswith("_s") and rest[:-2].isdigit():
            # the samples are small enough to keep whole: the tables' very percentiles
            assert b[key] == pytest.approx(exact, rel=1e-12, abs=1e-15), key
        elif isinstance(exact, float) and math.isnan(exact):
            assert math.isnan(b[key]), key
        else:
            assert b[key] == pytest.approx(exact, rel=1e-9, abs=1e-12), key
    inst_a, inst_b = table.instance_summary(), streamed.instance_summary()
    assert inst_a["requests"].tolist() == inst_b["requests"].tolist()
    np.testing.assert_allclose(inst_a["mfu"], inst_b["mfu"], rtol=1e-9)


def test_batchsim_run_stream_writes_the_summary_and_timeline_only(tmp_path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_raw("chunked")))
    assert main(["run", str(path), "--stream", "--out", str(tmp_path / "out"), "-q"]) == 0
    written = sorted(
        p.name for p in (tmp_path / "out" / "t").iterdir() if not p.name.startswith(".")
    )
    # the over-time plot is drawn from the timeline, which a streamed run keeps
    assert written == ["bench_summary.json", "over_time.png", "over_time.svg", "report.html",
                       "scenario.yaml", "summary.csv", "summary.json", "timeline.csv"]
    assert main(["run", str(path), "--stream", "--no-plots", "--out", str(tmp_path / "np"),
                 "-q"]) == 0  # fmt: skip
    assert not list((tmp_path / "np" / "t").glob("over_time.*"))
    assert main(["run", str(path), "--stream", "--tables", "all", "--out", str(tmp_path)]) == 2


def test_a_workload_too_big_for_tables_still_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    # 4,000 requests on a machine of 2 MB: streamed they fit, with tables (1.2 kB each) not
    from sim.errors import ScenarioError
    from sim.workload import budget

    monkeypatch.setattr(budget, "physical_memory_bytes", lambda: 2_000_000)
    raw = _raw("continuous")
    raw["workload"]["num_requests"] = 4_000
    loaded = load_scenario_dict(raw)
    with pytest.raises(ScenarioError, match=r"workload.num_requests.*--stream"):
        simulate(loaded)
    streamed = simulate(loaded, tables=False)["default"].summary()
    assert streamed["num_requests"] == 4_000
    # streamed, a synthetic workload is generated as the run goes: a byte per request
    raw["workload"]["num_requests"] = 40_000
    assert load_scenario_dict(raw).variants[0].regenerates_workload
    raw["workload"]["num_requests"] = 4_000_000  # 4 MB even streamed: refused when loaded
    with pytest.raises(ScenarioError, match=r"0\.001 kB per request and variant, streamed"):
        load_scenario_dict(raw)
