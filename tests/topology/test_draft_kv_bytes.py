"""A draft model's KV travels with the target's: swap bytes and tier blocks count both models."""

from __future__ import annotations

import importlib
from typing import Any

from scenario_factory import run, scenario

from sim.costs.catalog import HARDWARE, MODELS, kv_bytes_per_token_on

TARGET, DRAFT = "llama-2-13b", "llama-2-7b"


def _instance_kv(raw: dict[str, Any]) -> Any:
    made: list[Any] = []
    module = importlib.import_module("sim.simulate.run")
    build = module.build_cluster

    def capture(*args: Any, **kwargs: Any) -> Any:
        made.append(build(*args, **kwargs))
        return made[-1]

    module.build_cluster = capture
    try:
        run(raw)
    finally:
        module.build_cluster = build
    return made[0].instances[0]


def test_swap_and_tier_bytes_include_the_draft_models_kv() -> None:
    policy = {"name": "continuous", "prefix_caching": True, "preemption": {"mode": "swap"},
              "speculative": {"method": "draft", "draft_model": DRAFT, "num_speculative_tokens": 2,
                              "acceptance": {"rate": 0.7}}}  # fmt: skip
    raw = scenario(policy=policy, model=TARGET, hardware="h100-sxm",
                   kv_tiers={"dram": {"capacity_gb": 1}})  # fmt: skip
    raw["workload"]["num_requests"] = 5
    instance = _instance_kv(raw)
    hw = HARDWARE["h100-sxm"]
    target = kv_bytes_per_token_on(MODELS[TARGET], hw)
    draft = kv_bytes_per_token_on(MODELS[DRAFT], hw)
    assert instance.kv_spec.bytes_per_token == target + draft
    (dram,) = instance.pool.lower_tiers()
    assert dram.block_bytes == 16 * (target + draft)
