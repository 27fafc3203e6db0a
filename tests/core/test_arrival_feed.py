"""A lone instance pulls its arrivals (`sim.core.arrivals.ArrivalFeed`) instead of waiting on one
SimPy event per arrival: every request's timestamps and every step are the same as when the
source pushes them, for every policy, with rejections, prefix content and speculation."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scenario_factory import run, scenario, tiny_hardware, tiny_model

from sim.metrics.steps import expand_steps

SIMULATE = importlib.import_module("sim.simulate.run")  # the run's module

WORKLOAD: dict[str, Any] = {
    "num_requests": 300,
    "arrival": {"process": "poisson", "rate": 12.0},
    "prompt_tokens": {"dist": "uniform", "low": 10, "high": 260},
    "output_tokens": {"dist": "uniform", "low": 1, "high": 60},
}
POLICIES: dict[str, dict[str, Any]] = {
    "continuous": {"name": "continuous", "max_num_seqs": 16},
    "mixed": {"name": "continuous", "mode": "mixed", "max_num_batched_tokens": 300},
    "chunked": {"name": "chunked", "max_num_batched_tokens": 64, "max_num_seqs": 16},
    "static": {"name": "static", "max_batch_size": 8, "max_wait_s": 0.05},
    "preempting": {"name": "continuous", "preemption": {"mode": "swap"}},
    "cached": {"name": "continuous", "prefix_caching": True},
    "speculative": {
        "name": "continuous",
        "speculative": {
            "method": "ngram",
            "num_speculative_tokens": 3,
            "acceptance": {"rate": 0.7},
        },
    },
}


def _raw(policy: str, rejecting: bool) -> dict[str, Any]:
    workload = dict(WORKLOAD)
    # prompts up to 260 tokens (and outputs up to 60) overflow a 300-token model: rejections
    workload["prompt_tokens"] = {"dist": "uniform", "low": 10, "high": 260 if rejecting else 180}
    if policy == "cached":  # prompts behind shared system prompts: requests carry content
        workload["shared_prefix"] = {
            "num_prefixes": 3,
            "zipf": 1.0,
            "length": {"dist": "fixed", "value": 48},
        }
    # a small pool and model: requests are preempted
    return scenario(
        policy=POLICIES[policy],
        workload=workload,
        model=tiny_model(300),
        hardware=tiny_hardware(1200),
    )


def _gaps(itl: pd.DataFrame) -> np.ndarray:
    """Every token's gap, sorted (a split run's gaps are computed from its own first step, so
    they may differ in the last bit)."""
    return np.sort(np.repeat(itl["gap_s"].to_numpy(), itl["count"].to_numpy()))


@pytest.mark.parametrize("rejecting", [False, True])
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_pulled_arrivals_give_the_pushed_schedule(
    policy: str, rejecting: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = _raw(policy, rejecting)
    pulled = run(raw)
    monkeypatch.setattr(SIMULATE, "pulls_arrivals", lambda cluster, requests: False)
    pushed = run(raw)
    assert len(pulled.requests) == WORKLOAD["num_requests"]
    pd.testing.assert_frame_equal(pulled.requests, pushed.requests)
    rejected = int(pulled.requests["rejected"].sum())
    assert bool(rejected) == rejecting
    if not rejected:  # a rejected arrival cuts a pulled run, never a pushed one
        pd.testing.assert_frame_equal(pulled.steps, pushed.steps)
        pd.testing.assert_frame_equal(pulled.itl, pushed.itl)
    # the same gaps, however the runs were split
    np.testing.assert_allclose(_gaps(pulled.itl), _gaps(pushed.itl), rtol=1e-12)
    a, b = expand_steps(pulled.steps), expand_steps(pushed.steps)
    # (queue lengths are recorded at a group's end: a group cut short records them earlier)
    for column in ("num_seqs", "num_tokens", *(() if rejected else ("num_waiting",))):
        np.testing.assert_array_equal(a[column].to_numpy(), b[column].to_numpy(), column)
    for column in ("start_s", "end_s"):  # from each group's own start: the last bit may differ
        np.testing.assert_allclose(a[column].to_numpy(), b[column].to_numpy(), rtol=1e-12)
    ours, theirs = pulled.summary(), pushed.summary()
    assert ours.keys() == theirs.keys()
    for key, value in ours.items():
        assert value == pytest.approx(theirs[key], rel=1e-9, nan_ok=True), key
