"""Workloads generated as they are consumed (`sim.workload.stream`).

* Chunks of any size concatenate to the whole workload, bit for bit, for every arrival process
  and stop condition, mixes of one to three classes over every length distribution, predicted
  outputs and shared prefixes (hypothesis), with consecutive ids.
* The chunk window hands out each request's columns as the whole arrays have them, releases a
  chunk once all its requests are taken, and holds no more than the requests in flight need.
* A streamed run that regenerates its workload gives the same summary, key for key and bit for
  bit, as a streamed run fed the whole arrays: one instance, a routed fleet, a mix with tiers
  and predictions, shared prefixes under prefix caching; and it releases every chunk.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scenario_factory import fixed, lognormal, poisson, scenario, uniform

from sim import load_scenario_dict
from sim.core.arrivals import ChunkWindow
from sim.simulate import run_variant, workload_of
from sim.workload import generate_requests
from sim.workload import stream as stream_module
from sim.workload.spec import WorkloadSpec
from sim.workload.stream import Workload, iter_requests

COLUMNS = (
    "arrival_s", "prompt_tokens", "output_tokens", "class_index", "tier_index",
    "predicted_output_tokens",
)  # fmt: skip


def lengths() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.integers(1, 300).map(fixed),
        st.tuples(st.integers(1, 50), st.integers(50, 400)).map(lambda lh: uniform(*lh)),
        st.tuples(st.integers(5, 300), st.floats(0.1, 1.5)).map(
            lambda ms: lognormal(ms[0], ms[1], max=4000)
        ),
    )


ARRIVALS = st.sampled_from([
    {"process": "poisson", "rate": 40.0},
    {"process": "gamma", "rate": 25.0, "cv": 2.5},
    {"process": "constant", "rate": 9.0},
    {"process": "profile", "rate": {"shape": "diurnal", "mean_rate": 30.0, "peak_to_trough": 3,
                                    "period_s": 40.0}},
    {"process": "profile", "rate": {"shape": "ramp", "from_rate": 5.0, "to_rate": 60.0,
                                    "over_s": 30.0}},
])  # fmt: skip


@st.composite
def workloads(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"arrival": draw(ARRIVALS)}
    stop = draw(st.sampled_from(["count", "duration", "both"]))
    if stop != "duration":
        spec["num_requests"] = draw(st.integers(1, 3000))
    if stop != "count":
        spec["duration_s"] = draw(st.floats(1.0, 120.0))
    classes = draw(st.integers(0, 3))
    if classes:
        spec["mix"] = [
            {"name": f"c{k}", "weight": draw(st.floats(0.1, 5.0)), "tier": f"t{k % 2}",
             "prompt_tokens": draw(lengths()), "output_tokens": draw(lengths())}
            for k in range(classes)
        ]  # fmt: skip
    else:
        spec["prompt_tokens"] = draw(lengths())
        spec["output_tokens"] = draw(lengths())
    if draw(st.booleans()):
        spec["output_prediction_sigma"] = draw(st.floats(0.05, 1.0))
    if draw(st.booleans()):
        spec["shared_prefix"] = {
            "num_prefixes": draw(st.integers(1, 6)), "zipf": draw(st.floats(0.0, 2.0)),
            "length": draw(lengths()), "fraction": draw(st.floats(0.0, 1.0)),
        }  # fmt: skip
    return spec


def assert_same(a: Any, b: Any) -> None:
    for name in COLUMNS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert a.class_names == b.class_names and a.tier_names == b.tier_names
    assert (a.content is None) == (b.content is None)
    if a.content is not None:
        for name in ("ids", "offsets", "tokens"):
            assert np.array_equal(getattr(a.content, name), getattr(b.content, name)), name


@settings(max_examples=60, deadline=None)
@given(raw=workloads(), chunk=st.sampled_from([1, 7, 256, 1000, 1 << 16]), seed=st.integers(0, 99))
def test_chunks_of_any_size_are_the_whole_workload(
    raw: dict[str, Any], chunk: int, seed: int
) -> None:
    spec = WorkloadSpec.model_validate(raw)
    whole = generate_requests(spec, np.random.default_rng(seed), Path("."))
    parts = list(iter_requests(spec, np.random.default_rng(seed), Path("."), chunk=chunk))
    starts = [first for first, _ in parts]
    sizes = [len(arrays) for _, arrays in parts]
    assert starts == [sum(sizes[:k]) for k in range(len(parts))]  # consecutive ids
    assert all(size == chunk for size in sizes[:-1]) and len(parts) > 0
    assert sum(sizes) == len(whole)
    joined = stream_module.concat(parts)
    assert_same(joined, whole)
    if whole.content is not None:  # each chunk's own view of a request is the whole one's
        for first, arrays in parts:
            assert arrays.content is not None
            for k in range(0, len(arrays), max(1, len(arrays) // 5)):
                assert np.array_equal(arrays.content.of(k), whole.content.of(first + k))


def test_a_streamed_workloads_shape_is_the_whole_ones() -> None:
    raw = poisson(5000, rate=50.0, prompt=lognormal(100, 0.5, max=900))
    spec = WorkloadSpec.model_validate(raw)
    whole = Workload.whole(generate_requests(spec, np.random.default_rng(3), Path(".")))
    streamed = Workload.streamed(spec, 3, Path("."))
    assert streamed.shape == whole.shape
    assert streamed.tier_names == whole.tier_names == ("default",)
    assert streamed.arrays is None and streamed.sessions is None and streamed.notes == {}
    assert_same(stream_module.concat(streamed.chunks()), whole.arrays)


def window_over(n: int, chunk: int, release: bool) -> tuple[ChunkWindow, Any]:
    spec = WorkloadSpec.model_validate(poisson(n, prompt=uniform(1, 500), output=uniform(1, 50)))
    whole = generate_requests(spec, np.random.default_rng(5), Path("."))
    chunks = iter_requests(spec, np.random.default_rng(5), Path("."), chunk=chunk)
    return ChunkWindow(chunks, release), whole


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 400),
    chunk=st.integers(1, 64),
    lag=st.integers(0, 80),
    block=st.integers(1, 50),
    seed=st.integers(0, 999),
)
def test_the_window_hands_out_the_whole_columns_and_keeps_only_what_is_in_flight(
    n: int, chunk: int, lag: int, block: int, seed: int
) -> None:
    """Requests are built in order and taken (finished) in shuffled blocks, at most `lag`
    behind: every column is the whole arrays', and the chunks held never exceed those of the
    requests built and not yet taken."""
    window, whole = window_over(n, chunk, release=True)
    rng = np.random.default_rng(seed)
    in_flight: list[int] = []
    taken = 0
    for i in range(n):
        start, arrays = window.at(i)
        assert arrays.prompt_tokens[i - start] == whole.prompt_tokens[i]
        in_flight.append(i)
        while len(in_flight) > lag or (i == n - 1 and in_flight):
            rng.shuffle(in_flight)
            ids = np.array(sorted(in_flight[:block]), dtype=np.int64)
            del in_flight[:block]
            out = window.take(ids)
            taken += len(ids)
            assert np.array_equal(out["num_prompt_tokens"], whole.prompt_tokens[ids])
            assert np.array_equal(out["max_output_tokens"], whole.output_tokens[ids])
            assert np.array_equal(out["predicted_output_tokens"], whole.output_tokens[ids])
            assert list(out["tier"]) == ["default"] * len(ids)
        wanted = {j // chunk for j in in_flight} | {i // chunk}
        assert len(window.held) <= len(wanted) + 1  # the one under construction may be done
    assert taken == n and not window.held  # every chunk released


def test_a_window_without_release_keeps_every_chunk_and_refuses_ids_past_the_end() -> None:
    window, whole = window_over(50, 8, release=False)
    assert np.array_equal(window.take(np.arange(50))["num_prompt_tokens"], whole.prompt_tokens)
    assert len(window.held) == math.ceil(50 / 8)
    assert window.at(3)[1].prompt_tokens[3] == whole.prompt_tokens[3]
    with pytest.raises(IndexError, match="past the workload's 50 requests"):
        window.at(50)
    released, _ = window_over(16, 8, release=True)
    released.at(9)
    released.take(np.arange(8))
    with pytest.raises(IndexError, match="released"):
        released.at(2)


def run_both(raw: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """A streamed run regenerating its workload, and one fed the whole arrays."""
    (resolved,) = load_scenario_dict(raw).variants
    streamed = workload_of(resolved, tables=False)
    assert streamed.arrays is None  # regenerated from the seed
    whole = workload_of(resolved, tables=True)
    assert whole.arrays is not None
    a = run_variant(resolved, streamed, tables=False).summary()
    b = run_variant(resolved, whole, tables=False).summary()
    return a, b


FLEET = {"router": "least_outstanding_tokens", "instances": [{"count": 3}]}
PREFIX = {"num_prefixes": 4, "zipf": 1.0, "length": fixed(160), "fraction": 0.7}
MIX = [
    {"name": "chat", "weight": 3, "tier": "gold", "prompt_tokens": lognormal(200, 0.7, max=1500),
     "output_tokens": lognormal(40, 0.6, max=300)},
    {"name": "batch", "weight": 1, "prompt_tokens": uniform(500, 1200),
     "output_tokens": uniform(10, 100)},
]  # fmt: skip


@pytest.mark.parametrize(
    "raw",
    [
        scenario(workload=poisson(3000, rate=40.0, prompt=lognormal(300, 0.6, max=2000))),
        scenario(workload=poisson(3000, rate=90.0, output=uniform(5, 60)), cluster=FLEET),
        scenario(
            workload={"num_requests": 2500, "arrival": {"process": "poisson", "rate": 30.0},
                      "mix": MIX, "output_prediction_sigma": 0.4},
            policy={"name": "chunked", "max_num_batched_tokens": 512},
            slo={"ttft_s": 1.0, "tiers": {"gold": {"ttft_s": 0.5}, "default": {"ttft_s": 2.0}}},
        ),
        scenario(
            workload=poisson(2000, rate=40.0, shared_prefix=PREFIX),
            policy={"name": "chunked", "prefix_caching": True},
            cluster={"router": "prefix_affinity", "instances": [{"count": 2}]},
        ),
    ],
    ids=["one-instance", "fleet", "mix-tiers-predicted", "prefix-caching"],
)
def test_a_regenerated_workload_runs_as_the_whole_one(raw: dict[str, Any], monkeypatch) -> None:
    monkeypatch.setattr(stream_module, "CHUNK_REQUESTS", 300)  # many chunks, some in flight
    a, b = run_both(raw)
    assert list(a) == list(b)
    for key, value in b.items():
        assert a[key] == value or (value != value and a[key] != a[key]), key
