"""Counted events of a closed-loop point (calibration/published_events.py): one simulation gives
the duration, mean TPOT and mean TTFT as linear functions of the unit costs, and evaluating
them at other unit costs gives exactly what simulating at those unit costs gives."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from calibration.published_events import (
    cold_started,
    expressible,
    inline_profile,
    kv_dtype,
    model_fields,
    overlapped,
    point_rows,
    scenario,
    seconds,
    specs,
)
from sim.costs.step_events import PRIORS, events_profile
from sim.simulate import simulate


def _row(**fields: Any) -> SimpleNamespace:
    """A small training-file row: 4 clients, short prompts and outputs."""
    base = dict(
        model_key="llama70b",
        precision="fp8",
        gpu="h200",
        framework="vllm",
        tp=2,
        ep=1,
        dp_attention=False,
        isl=300,
        osl=24,
        conc=4,
        random_range_ratio=0.8,
        disagg=False,
        spec_decoding="none",
        tput_per_gpu=1.0,
        tpot_mean_s=0.01,
        ttft_mean_s=0.1,
        ttft_median_s=0.08,
        ttft_p99_s=0.3,
    )
    return SimpleNamespace(**(base | fields))


ROWS = {
    "dense, chunked (vLLM)": _row(),
    "MoE, expert parallel under TP attention, prefill batches (SGLang)": _row(
        model_key="dsr1", precision="fp4", gpu="b200", framework="sglang", tp=4, ep=4, conc=6
    ),
    "MoE, data-parallel attention with expert parallelism (TensorRT-LLM)": _row(
        model_key="gptoss",
        precision="fp4",
        gpu="b200",
        framework="trt",
        tp=2,
        ep=2,
        dp_attention=True,
        conc=5,
    ),
    # a point that ran cold (p99 TTFT 60 s, median 0.1 s): the stall is linear too
    "dense, cold start (vLLM)": _row(ttft_median_s=0.1, ttft_p99_s=60.0),
}
OTHER_COSTS = {
    "kernel_s@hopper": 7e-6,
    "kernel_s@blackwell": 3e-6,
    "allreduce_s@nvidia": 25e-6,
    "allreduce_peer_s@nvidia": 3e-6,
    "dispatch_s@nvidia": 40e-6,
    "host_s@vllm": 2e-3,
    "host_s@sglang": 1e-3,
    "host_s@trt-llm": 5e-4,
    "stream_eff@hopper/fp8": 0.5,
    "stream_eff@blackwell/nvfp4": 0.4,
    "stream_eff@blackwell/mxfp4": 0.6,
    "gemm_eff@hopper/fp8": 0.35,
    "gemm_eff@blackwell/fp4": 0.3,
    "gemm_eff@blackwell/bf16": 0.4,
    "mem_eff@hopper": 0.55,
    "mem_eff@blackwell": 0.65,
    "attn_eff@hopper": 0.3,
    "attn_eff@blackwell": 0.25,
    "cold_start_s@vllm": 7.5,
}


def _simulated_at(row: SimpleNamespace, costs: dict[str, float]) -> dict[str, float]:
    model, hw, engine = specs(row)
    profile = events_profile(model, hw, engine, costs=costs, overlapped=overlapped(row))
    inline = inline_profile(row, costs)
    assert inline["coefficients"] == profile.coefficients.model_dump(exclude_none=True)
    cold = costs.get("cold_start_s@vllm", PRIORS["cold_start_s"][0])
    raw = scenario(row, profile=inline, cold_start_s=cold)
    summary = next(iter(simulate(raw).variants.values())).summary()
    return {k: float(summary[k]) for k in ("duration_s", "tpot_mean_s", "ttft_mean_s")}


@pytest.mark.parametrize("case", list(ROWS))
def test_linear_rows_reproduce_a_simulation_at_other_unit_costs(case: str) -> None:
    row = ROWS[case]
    rows = point_rows(row)
    again = _simulated_at(row, OTHER_COSTS)
    predicted = {
        "duration_s": seconds(rows.duration, OTHER_COSTS),
        "tpot_mean_s": seconds(rows.tpot_mean, OTHER_COSTS),
        "ttft_mean_s": seconds(rows.ttft_mean, OTHER_COSTS),
    }
    at_priors = _simulated_at(row, {})
    for key, value in predicted.items():
        assert value == pytest.approx(again[key], rel=1e-9), key
        # and the other unit costs did move it: the check is not vacuous
        assert abs(again[key] / at_priors[key] - 1) > 0.005, key


def test_rows_batchsim_cannot_express_are_named() -> None:
    assert expressible(_row()) is None
    assert "disaggregated" in str(expressible(_row(disagg=True)))
    assert "MTP" in str(expressible(_row(spec_decoding="mtp")))
    assert "published_pd" in str(expressible(_row(spec_decoding="mtp")))  # judged there
    assert "engine" in str(expressible(_row(framework="dynamo-trt")))


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, "fp8"),  # Llama: --kv-cache-dtype fp8
        ({"model_key": "gptoss", "framework": "trt", "gpu": "b200"}, "fp8"),
        ({"model_key": "gptoss", "framework": "trt", "gpu": "h200"}, "bf16"),  # dtype: auto
        ({"model_key": "gptoss", "framework": "vllm", "gpu": "b200"}, "bf16"),
        ({"model_key": "gptoss", "framework": "atom", "gpu": "mi355x"}, "fp8"),
        ({"model_key": "dsr1", "framework": "sglang", "gpu": "b200"}, "fp8"),
        ({"model_key": "dsr1", "framework": "sglang", "gpu": "h200"}, "bf16"),
        ({"model_key": "dsr1", "framework": "sglang", "gpu": "mi355x", "precision": "fp4"}, "fp8"),
        ({"model_key": "dsr1", "framework": "sglang", "gpu": "mi355x"}, "bf16"),
        ({"model_key": "dsr1", "framework": "sglang-disagg", "gpu": "mi355x",
          "disagg": True}, "fp8"),
    ],
)
def test_each_row_runs_the_kv_dtype_its_launch_script_set(
    fields: dict[str, Any], expected: str
) -> None:
    row = _row(**fields)
    assert kv_dtype(row) == expected
    assert model_fields(row)["kv_dtype"] == expected


def test_cold_started_points_are_the_ones_whose_first_wave_stalled() -> None:
    assert not cold_started(_row())
    assert cold_started(_row(ttft_median_s=0.2, ttft_p99_s=70.0))
    assert not cold_started(_row(ttft_median_s=5.0, ttft_p99_s=30.0))  # queueing, not a stall
    assert cold_started(_row(ttft_median_s=float("nan"), ttft_p99_s=25.0))
    # a row without an image tag runs the newest release's loop (vLLM: asynchronous)
    loop = {"name": "vllm", "async_scheduling": True}
    assert scenario(_row(), cold_start_s=60.0)["engine"] == loop
    cold = scenario(_row(ttft_p99_s=70.0), cold_start_s=60.0)["engine"]
    assert cold == {**loop, "cold_start_s": 60.0}


def test_each_row_states_its_engines_loop_at_its_release() -> None:
    old = scenario(_row(framework_version="vllm/vllm-openai:v0.13.0"))["engine"]
    assert old == {"name": "vllm", "async_scheduling": False, "version": "0.13.0"}
    new = scenario(_row(framework_version="vllm/vllm-openai:v0.14.0"))["engine"]
    assert new["async_scheduling"] is True
    sglang = scenario(_row(framework="sglang", framework_version="lmsysorg/sglang:v0.5.6-cu129"))
    assert sglang["engine"] == {"name": "sglang", "async_scheduling": True, "version": "0.5.6"}
