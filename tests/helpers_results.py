"""Results of small simulations and of hand-made tables, and a written results folder, for
the output, plot and report tests."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from helpers_tables import make_context, make_itl, make_requests, make_steps
from scenario_factory import LINEAR, chunked, continuous, poisson, scenario, static, uniform

from sim.io.output import write_results
from sim.metrics.results import Results, VariantResult
from sim.scenario.load import load_scenario_dict
from sim.simulate import simulate


def make_results() -> Results:
    slow_requests = make_requests().assign(ttft_s=lambda d: d["ttft_s"] * 3)
    variants = {
        "continuous": VariantResult(
            "continuous", make_requests(), make_steps(), make_itl(), make_context()
        ),
        "static": VariantResult(
            "static", slow_requests, make_steps(0.5), make_itl(), make_context(kv_blocks_total=20)
        ),
    }
    return Results("tiny", variants)


TINY: dict[str, Any] = scenario(
    name="tiny",
    seed=5,
    workload=poisson(40, 20.0, uniform(16, 256), uniform(2, 40)),
    policy=continuous(max_num_seqs=8),
    profile=None,
    slo={"ttft_s": 0.5, "tpot_s": 0.05},
    variants={"static": {"policy": static(max_batch_size=8)}, "continuous": {}},
)


DISAGGREGATED: dict[str, Any] = {
    **TINY,
    "name": "tiny-pd",
    "disaggregation": {"prefill": {"count": 1}, "decode": {"count": 1},
                       "link": {"bandwidth_gb_per_s": 25, "latency_s": 0.001}},
    "variants": {"pd": {}},
}  # fmt: skip


@functools.cache
def tiny_results(disaggregated: bool = False) -> Results:
    """A small real run (static and continuous, or one disaggregated pair), cached."""
    return simulate(load_scenario_dict(DISAGGREGATED if disaggregated else TINY))


# Prompts open with one of a few shared system prompts; the GPU holds 120 blocks, so cached
# prefixes are evicted and found again in DRAM or the remote store
TIERED: dict[str, Any] = scenario(
    name="tiered",
    workload=poisson(
        80,
        8.0,
        uniform(50, 400),
        uniform(5, 40),
        shared_prefix={"num_prefixes": 6, "zipf": 1.0, "fraction": 0.9,
                       "length": uniform(64, 512)},
    ),
    profile=LINEAR,
    policy=chunked(max_num_seqs=16, max_num_batched_tokens=256, prefix_caching=True,
                   num_gpu_blocks=120),
    kv_tiers={"dram": {"capacity_gb": 2}, "remote": {"capacity_gb": 8}},
    variants={"tiered": {}, "gpu-only": {"kv_tiers": None}},
)  # fmt: skip


@functools.cache
def tiered_results() -> Results:
    """A small run with DRAM and a remote store, and the same run without tiers; cached."""
    return simulate(load_scenario_dict(TIERED))


def results_folder(tmp_path: Path, *, plots: bool = True) -> Path:
    scenario_yaml = load_scenario_dict(TINY).dump()
    return write_results(tiny_results(), tmp_path / "tiny", scenario_yaml, plots=plots)
