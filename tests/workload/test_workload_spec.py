"""Pydantic validation of the `workload:` section: what parses, and what is rejected where."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from sim.workload import GammaArrival, LognormalLength, MixClass, WorkloadSpec

FIXED = {"dist": "fixed", "value": 128}
POISSON = {"process": "poisson", "rate": 4.0}


def synthetic(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "num_requests": 10,
        "arrival": POISSON,
        "prompt_tokens": FIXED,
        "output_tokens": FIXED,
    }
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


def rejected(data: dict[str, Any]) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        WorkloadSpec.model_validate(data)
    return info.value


def test_full_examples_parse() -> None:
    spec = WorkloadSpec.model_validate(
        {
            "num_requests": 2000,
            "duration_s": 600.0,
            "arrival": {"process": "gamma", "rate": 4.0, "cv": 3.0},
            "mix": [
                {
                    "name": "short",
                    "weight": 0.8,
                    "prompt_tokens": {"dist": "uniform", "low": 16, "high": 512},
                    "output_tokens": FIXED,
                },
                {
                    "name": "long",
                    "weight": 0.2,
                    "prompt_tokens": {
                        "dist": "lognormal",
                        "median": 1000,
                        "sigma": 1.0,
                        "min": 1,
                        "max": 8192,
                    },
                    "output_tokens": FIXED,
                },
            ],
        }
    )
    assert isinstance(spec.arrival, GammaArrival)
    assert spec.mix is not None and isinstance(spec.mix[0], MixClass)
    assert isinstance(spec.mix[1].prompt_tokens, LognormalLength)
    trace = WorkloadSpec.model_validate({"trace": {"path": "x.csv", "format": "azure"}})
    assert trace.trace is not None and trace.trace.rate_scale == 1.0
    assert trace.trace.end_s is None and trace.trace.max_rows is None


def test_unknown_keys_rejected_with_location() -> None:
    err = rejected(synthetic(burst=3))
    assert err.errors()[0]["loc"] == ("burst",)
    assert err.errors()[0]["type"] == "extra_forbidden"
    err = rejected(synthetic(arrival={**POISSON, "cv": 2.0}))
    assert err.errors()[0]["loc"] == ("arrival", "poisson", "cv")
    err = rejected({"trace": {"path": "x.csv", "speed": 2}})
    assert err.errors()[0]["loc"] == ("trace", "speed")


@pytest.mark.parametrize("rate", [-1.0, 0.0])
def test_non_positive_rate_rejected(rate: float) -> None:
    err = rejected(synthetic(arrival={"process": "poisson", "rate": rate}))
    assert err.errors()[0]["loc"] == ("arrival", "poisson", "rate")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"mix": [{"name": "a", "weight": 1, "prompt_tokens": FIXED, "output_tokens": FIXED}]},
            "'mix' cannot be combined",
        ),
        ({"num_requests": None}, "num_requests' and/or 'duration_s'"),
        ({"arrival": None}, "needs 'arrival'"),
        ({"output_tokens": None}, "give both 'prompt_tokens' and 'output_tokens'"),
        ({"trace": {"path": "x.csv"}}, "'trace' cannot be combined with arrival"),
        ({"prompt_tokens": {"dist": "uniform", "low": 9, "high": 3}}, "low (9) must be <= high"),
        (
            {"prompt_tokens": {"dist": "lognormal", "median": 5, "sigma": 1, "min": 9, "max": 3}},
            "min (9) must be <= max (3)",
        ),
    ],
)
def test_cross_field_rules(fields: dict[str, Any], message: str) -> None:
    err = rejected(synthetic(**fields))
    assert message in str(err)


def test_mix_rules() -> None:
    cls = {"name": "a", "weight": 1, "prompt_tokens": FIXED, "output_tokens": FIXED}
    base = synthetic(prompt_tokens=None, output_tokens=None)
    WorkloadSpec.model_validate({**base, "mix": [cls]})
    assert "unique: a" in str(rejected({**base, "mix": [cls, cls]}))
    assert rejected({**base, "mix": []}).errors()[0]["loc"] == ("mix",)
    err = rejected({**base, "mix": [{**cls, "weight": 0}]})
    assert err.errors()[0]["loc"] == ("mix", 0, "weight")


def test_trace_rules() -> None:
    err = rejected({"trace": {"path": "x.csv", "start_s": 10, "end_s": 10}})
    assert "end_s (10.0) must be > start_s (10.0)" in str(err)
    for bad in ({"rate_scale": 0}, {"start_s": -1}, {"max_rows": 0}, {"format": "parquet"}):
        err = rejected({"trace": {"path": "x.csv", **bad}})
        assert err.errors()[0]["loc"][:2] == ("trace", next(iter(bad)))
    WorkloadSpec.model_validate({"trace": {"path": "x.csv"}, "num_requests": 5, "duration_s": 9})


@pytest.mark.parametrize(
    ("dist", "loc"),
    [
        ({"dist": "fixed", "value": 0}, ("prompt_tokens", "fixed", "value")),
        ({"dist": "uniform", "low": 0, "high": 4}, ("prompt_tokens", "uniform", "low")),
        ({"dist": "lognormal", "median": 0, "sigma": 1}, ("prompt_tokens", "lognormal", "median")),
        (
            {"dist": "empirical", "path": "t.csv", "column": "both"},
            ("prompt_tokens", "empirical", "column"),
        ),
        ({"dist": "zipf", "value": 3}, ("prompt_tokens",)),
        ({"value": 3}, ("prompt_tokens",)),
    ],
)
def test_bad_length_dists(dist: dict[str, Any], loc: tuple[str, ...]) -> None:
    assert rejected(synthetic(prompt_tokens=dist)).errors()[0]["loc"] == loc


def test_gamma_needs_cv_and_unknown_process_rejected() -> None:
    err = rejected(synthetic(arrival={"process": "gamma", "rate": 1.0}))
    assert err.errors()[0]["loc"] == ("arrival", "gamma", "cv")
    err = rejected(synthetic(arrival={"process": "weibull", "rate": 1.0}))
    assert err.errors()[0]["type"] == "union_tag_invalid"
