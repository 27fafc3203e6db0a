"""Statistical checks of the samplers on ~100k-200k draws, with tolerances of several sigmas.

Seeds are pinned, so these are deterministic; the tolerances are wide enough that any seed
would pass and narrow enough that a wrong parameterization (rate vs scale, cv vs shape,
exclusive upper bound, swapped weights) fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sim.workload import RequestArrays, WorkloadSpec, generate_requests

FIXED = {"dist": "fixed", "value": 1}


def draw(n: int, seed: int = 11, **fields: Any) -> RequestArrays:
    data: dict[str, Any] = {
        "num_requests": n,
        "arrival": {"process": "poisson", "rate": 1.0},
        "prompt_tokens": FIXED,
        "output_tokens": FIXED,
    }
    data.update(fields)
    spec = WorkloadSpec.model_validate({k: v for k, v in data.items() if v is not None})
    return generate_requests(spec, np.random.default_rng(seed), Path("."))


def gaps(arrays: RequestArrays) -> np.ndarray:
    return np.diff(arrays.arrival_s, prepend=0.0)


def test_poisson_mean_gap_and_cv() -> None:
    g = gaps(draw(100_000, arrival={"process": "poisson", "rate": 4.0}))
    assert g.mean() == pytest.approx(0.25, rel=0.02)
    assert g.std() / g.mean() == pytest.approx(1.0, abs=0.02)


@pytest.mark.parametrize("cv", [0.5, 3.0])
def test_gamma_mean_gap_and_cv(cv: float) -> None:
    g = gaps(draw(200_000, arrival={"process": "gamma", "rate": 4.0, "cv": cv}))
    assert g.mean() == pytest.approx(0.25, rel=0.03)
    assert g.std() / g.mean() == pytest.approx(cv, rel=0.05)


def test_lognormal_median_and_clipping() -> None:
    free = draw(100_000, prompt_tokens={"dist": "lognormal", "median": 1000, "sigma": 1.0})
    assert np.median(free.prompt_tokens) == pytest.approx(1000, rel=0.02)
    # sigma is the std of log(length), not of the length
    assert np.log(free.prompt_tokens).std() == pytest.approx(1.0, abs=0.02)
    clipped = draw(
        100_000,
        prompt_tokens={"dist": "lognormal", "median": 1000, "sigma": 1.0, "min": 200, "max": 2000},
    )
    assert clipped.prompt_tokens.min() == 200 and clipped.prompt_tokens.max() == 2000
    # P(X > 2000) = P(Z > ln 2) ~ 0.244: those all land exactly on max
    assert np.mean(clipped.prompt_tokens == 2000) == pytest.approx(0.244, abs=0.01)


def test_uniform_bounds_inclusive_and_flat() -> None:
    out = draw(100_000, output_tokens={"dist": "uniform", "low": 3, "high": 6}).output_tokens
    values, counts = np.unique(out, return_counts=True)
    np.testing.assert_array_equal(values, [3, 4, 5, 6])
    np.testing.assert_allclose(counts / len(out), 0.25, atol=0.01)


def test_mix_proportions_follow_weights() -> None:
    mix = [
        {"name": "short", "weight": 0.8, "prompt_tokens": FIXED, "output_tokens": FIXED},
        {"name": "long", "weight": 0.2, "prompt_tokens": FIXED, "output_tokens": FIXED},
    ]
    arrays = draw(100_000, prompt_tokens=None, output_tokens=None, mix=mix)
    counts = np.bincount(arrays.class_index, minlength=2) / len(arrays)
    np.testing.assert_allclose(counts, [0.8, 0.2], atol=0.01)


def test_duration_count_matches_rate() -> None:
    arrays = draw(
        0, num_requests=None, duration_s=2_000.0, arrival={"process": "poisson", "rate": 50.0}
    )
    assert abs(len(arrays) - 100_000) < 5 * np.sqrt(100_000)


def test_a_million_requests_are_drawn_whole() -> None:
    """A million requests in one draw, their lengths in bounds (how long it takes is
    benchmarks/bench_sim.py's table "the workload alone", not a timed assertion here)."""
    arrays = draw(
        1_000_000,
        arrival={"process": "gamma", "rate": 4.0, "cv": 3.0},
        prompt_tokens={"dist": "lognormal", "median": 1000, "sigma": 1.0, "max": 8192},
        output_tokens={"dist": "uniform", "low": 1, "high": 1000},
    )
    assert len(arrays) == 1_000_000
    assert arrays.prompt_tokens.min() >= 1 and arrays.prompt_tokens.max() <= 8192
    assert arrays.output_tokens.min() >= 1 and arrays.output_tokens.max() <= 1000
    assert np.all(np.diff(arrays.arrival_s) >= 0)
