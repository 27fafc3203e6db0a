"""Workload spec validation and synthetic generation: exact small cases, stops, determinism."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sim.errors import ScenarioError
from sim.workload import RequestArrays, WorkloadSpec, arrivals, generate_requests

FIXED_10 = {"dist": "fixed", "value": 10}
FIXED_3 = {"dist": "fixed", "value": 3}


def make_spec(**fields: Any) -> WorkloadSpec:
    base: dict[str, Any] = {
        "num_requests": 5,
        "arrival": {"process": "constant", "rate": 4.0},
        "prompt_tokens": FIXED_10,
        "output_tokens": FIXED_3,
    }
    base.update(fields)
    return WorkloadSpec.model_validate({k: v for k, v in base.items() if v is not None})


def generate(spec: WorkloadSpec, seed: int = 0, base_dir: Path = Path(".")) -> RequestArrays:
    return generate_requests(spec, np.random.default_rng(seed), base_dir)


# --- exact small cases ------------------------------------------------------------------------


def test_constant_arrivals_and_fixed_lengths_exact() -> None:
    arrays = generate(make_spec())
    np.testing.assert_array_equal(arrays.arrival_s, [0.0, 0.25, 0.5, 0.75, 1.0])
    np.testing.assert_array_equal(arrays.prompt_tokens, [10] * 5)
    np.testing.assert_array_equal(arrays.output_tokens, [3] * 5)
    np.testing.assert_array_equal(arrays.class_index, [0] * 5)
    assert arrays.class_names == ("default",)
    assert len(arrays) == 5
    assert arrays.arrival_s.dtype == np.float64
    assert arrays.prompt_tokens.dtype == arrays.output_tokens.dtype == np.int64
    assert arrays.class_index.dtype == np.int64


def test_duration_stop_excludes_the_end() -> None:
    arrays = generate(make_spec(num_requests=None, duration_s=1.0))
    np.testing.assert_array_equal(arrays.arrival_s, [0.0, 0.25, 0.5, 0.75])
    thirds = generate(
        make_spec(num_requests=None, duration_s=1.0, arrival={"process": "constant", "rate": 3.0})
    )
    np.testing.assert_allclose(thirds.arrival_s, [0.0, 1 / 3, 2 / 3])


def test_both_stops_whichever_comes_first() -> None:
    assert len(generate(make_spec(num_requests=10, duration_s=1.0))) == 4
    assert len(generate(make_spec(num_requests=2, duration_s=1.0))) == 2
    poisson = {"process": "poisson", "rate": 50.0}
    capped = generate(make_spec(num_requests=20, duration_s=100.0, arrival=poisson))
    assert len(capped) == 20
    short = generate(make_spec(num_requests=10_000, duration_s=2.0, arrival=poisson))
    assert 40 < len(short) < 200 and short.arrival_s[-1] < 2.0


def test_poisson_num_requests_only() -> None:
    arrays = generate(make_spec(num_requests=1000, arrival={"process": "poisson", "rate": 2.0}))
    assert len(arrays) == 1000
    assert arrays.arrival_s[0] > 0.0
    assert np.all(np.diff(arrays.arrival_s) >= 0)


@pytest.mark.parametrize(
    "arrival", [{"process": "poisson", "rate": 100.0}, {"process": "gamma", "rate": 100.0, "cv": 4}]
)
def test_duration_only_random_arrivals(arrival: dict[str, Any]) -> None:
    arrays = generate(make_spec(num_requests=None, duration_s=1000.0, arrival=arrival))
    assert arrays.arrival_s[-1] < 1000.0
    assert arrays.arrival_s[-1] > 990.0  # generation did not stop early (one chunk or several)
    assert np.all(np.diff(arrays.arrival_s) >= 0)
    # 100k expected; 6 standard deviations of the count even for cv = 4
    assert abs(len(arrays) - 100_000) < 6 * 4 * np.sqrt(100_000)


def test_arrays_are_read_only() -> None:
    arrays = generate(make_spec())
    with pytest.raises(ValueError):
        arrays.prompt_tokens[0] = 1


def test_mix_assigns_each_class_its_own_lengths() -> None:
    mix = [
        {"name": "short", "weight": 3, "prompt_tokens": FIXED_10, "output_tokens": FIXED_3},
        {
            "name": "long",
            "weight": 1,
            "prompt_tokens": {"dist": "fixed", "value": 500},
            "output_tokens": {"dist": "fixed", "value": 7},
        },
    ]
    arrays = generate(make_spec(num_requests=200, prompt_tokens=None, output_tokens=None, mix=mix))
    assert arrays.class_names == ("short", "long")
    long = arrays.class_index == 1
    assert 0 < long.sum() < 200
    np.testing.assert_array_equal(arrays.prompt_tokens, np.where(long, 500, 10))
    np.testing.assert_array_equal(arrays.output_tokens, np.where(long, 7, 3))


# --- determinism and stream independence ------------------------------------------------------

RANDOM = {
    "num_requests": 500,
    "arrival": {"process": "gamma", "rate": 3.0, "cv": 2.0},
    "prompt_tokens": {"dist": "lognormal", "median": 300, "sigma": 1.0},
    "output_tokens": {"dist": "uniform", "low": 1, "high": 200},
}


def columns(arrays: RequestArrays) -> list[np.ndarray]:
    return [arrays.arrival_s, arrays.prompt_tokens, arrays.output_tokens, arrays.class_index]


def test_same_seed_same_arrays_different_seed_different() -> None:
    first, again, other = (generate(make_spec(**RANDOM), seed) for seed in (7, 7, 8))
    for a, b in zip(columns(first), columns(again), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first.arrival_s, other.arrival_s)
    assert not np.array_equal(first.prompt_tokens, other.prompt_tokens)
    assert not np.array_equal(first.output_tokens, other.output_tokens)


def test_changing_one_distribution_leaves_other_columns_unchanged() -> None:
    base = generate(make_spec(**RANDOM), seed=3)
    new_output = generate(make_spec(**{**RANDOM, "output_tokens": FIXED_3}), seed=3)
    np.testing.assert_array_equal(base.arrival_s, new_output.arrival_s)
    np.testing.assert_array_equal(base.prompt_tokens, new_output.prompt_tokens)
    new_prompt = generate(make_spec(**{**RANDOM, "prompt_tokens": FIXED_10}), seed=3)
    np.testing.assert_array_equal(base.arrival_s, new_prompt.arrival_s)
    np.testing.assert_array_equal(base.output_tokens, new_prompt.output_tokens)
    new_arrival = generate(make_spec(**{**RANDOM, "arrival": {"process": "poisson", "rate": 9}}), 3)
    np.testing.assert_array_equal(base.prompt_tokens, new_arrival.prompt_tokens)


def test_mix_class_choice_independent_of_class_lengths() -> None:
    def mix(value: int) -> list[dict[str, Any]]:
        other = {"dist": "fixed", "value": value}
        return [
            {"name": "a", "weight": 1, "prompt_tokens": FIXED_10, "output_tokens": FIXED_3},
            {"name": "b", "weight": 1, "prompt_tokens": other, "output_tokens": other},
        ]

    one, two = (
        generate(
            make_spec(
                **{**RANDOM, "prompt_tokens": None, "output_tokens": None, "mix": mix(value)}
            ),
            seed=5,
        )
        for value in (20, 40)
    )
    np.testing.assert_array_equal(one.class_index, two.class_index)
    np.testing.assert_array_equal(one.arrival_s, two.arrival_s)


# --- empirical lengths --------------------------------------------------------------------------


def test_empirical_resamples_a_trace_column_relative_to_base_dir(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,5,0\n1,9,4\n")
    spec = make_spec(
        num_requests=400,
        prompt_tokens={"dist": "empirical", "path": "t.csv", "column": "prompt"},
        output_tokens={"dist": "empirical", "path": "t.csv", "format": "csv", "column": "output"},
    )
    arrays = generate(spec, base_dir=tmp_path)
    assert set(arrays.prompt_tokens.tolist()) == {5, 9}
    assert set(arrays.output_tokens.tolist()) == {1, 4}  # the zero output becomes 1


def test_empirical_bad_file_raises_with_line(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,5,1\n1,-9,4\n")
    spec = make_spec(prompt_tokens={"dist": "empirical", "path": "t.csv", "column": "prompt"})
    with pytest.raises(ScenarioError) as info:
        generate(spec, base_dir=tmp_path)
    assert info.value.file == str(tmp_path / "t.csv")
    assert info.value.path == "line 3"
    with pytest.raises(ScenarioError, match="not found"):
        generate(spec, base_dir=tmp_path / "elsewhere")


@pytest.mark.parametrize(
    "arrival", [{"process": "poisson", "rate": 10.0}, {"process": "gamma", "rate": 10.0, "cv": 2.0}]
)
def test_duration_spanning_many_chunks(
    monkeypatch: pytest.MonkeyPatch, arrival: dict[str, Any]
) -> None:
    # Force tiny chunks so the loop that continues past the first chunk is exercised; numpy
    # draws sequentially, so the result must match drawing the same gaps in one go.
    unchunked = generate(make_spec(num_requests=2000, arrival=arrival), seed=4)
    monkeypatch.setattr(arrivals, "_MIN_CHUNK", 1)
    monkeypatch.setattr(arrivals, "_MAX_CHUNK", 7)
    chunked = generate(make_spec(num_requests=None, duration_s=50.0, arrival=arrival), seed=4)
    n = len(chunked)
    assert 300 < n < 700
    assert chunked.arrival_s[-1] < 50.0 <= unchunked.arrival_s[n]
    np.testing.assert_allclose(chunked.arrival_s, unchunked.arrival_s[:n], rtol=1e-12)
