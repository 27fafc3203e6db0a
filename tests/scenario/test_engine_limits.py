"""The batch limits a scenario leaves unset are its engine's: `vllm serve`'s defaults on the
scenario's GPU under the default step model (8192 tokens and 1024 sequences on a GPU of 70 GiB
or more that is not an A100, else 2048 and 256), the schema's under `roofline` and for the
engines whose defaults are not modelled; limits the scenario gives are kept."""

from __future__ import annotations

from typing import Any

import pytest
from scenario_factory import chunked, continuous, poisson, scenario, static

from sim.errors import ScenarioError
from sim.scenario.load import load_scenario_dict
from sim.simulate import simulate


def limits(hardware: str = "h100-sxm", policy: Any = None, **over: Any) -> tuple[int, int]:
    raw = scenario(workload=poisson(20, 2.0, 200, 20), model="llama-3-8b", hardware=hardware,
                   policy=policy or chunked(), **{"profile": None, **over})  # fmt: skip
    (variant,) = load_scenario_dict(raw).variants
    (group,) = variant.groups
    assert variant.spec.policy == group.policy  # the resolved document says what ran
    return group.policy.max_num_batched_tokens, group.policy.max_num_seqs


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [("h100-sxm", (8192, 1024)), ("h200", (8192, 1024)), ("mi300x", (8192, 1024)),
     ("a100-80g", (2048, 256)), ("l40s", (2048, 256))],
)
def test_vllm_serve_defaults_by_gpu(gpu: str, expected: tuple[int, int]) -> None:
    assert limits(gpu) == expected


def test_given_limits_are_kept_and_seats_never_exceed_the_budget() -> None:
    assert limits(policy=chunked(max_num_seqs=64)) == (8192, 64)
    assert limits(policy=chunked(max_num_batched_tokens=4096)) == (4096, 1024)
    assert limits(policy=chunked(max_num_batched_tokens=512)) == (512, 512)  # min(1024, 512)
    assert limits(policy=continuous(max_num_batched_tokens=None))[1] == 1024
    assert limits(policy=continuous())[0] == 8192  # the schema's budget: seats alone move


def test_roofline_and_other_engines_keep_the_schema_defaults() -> None:
    assert limits(profile="roofline") == (2048, 256)
    assert limits(engine={"name": "sglang"}) == (2048, 256)
    assert limits(profile="events") == (8192, 1024)  # the counted model, named
    assert limits(engine={"name": "vllm"}) == (8192, 1024)
    raw = scenario(workload=poisson(20, 2.0, 200, 20), model="llama-3-8b", hardware="h100-sxm",
                   policy=static(max_batch_size=8), profile=None)  # fmt: skip
    (variant,) = load_scenario_dict(raw).variants
    assert variant.groups[0].policy.max_batch_size == 8


def test_each_group_takes_its_own_gpus_defaults() -> None:
    two = {"instances": [{"count": 1}, {"count": 1, "hardware": "a100-80g"}]}
    raw = scenario(workload=poisson(20, 2.0, 200, 20), model="llama-3-8b", hardware="h100-sxm",
                   policy=chunked(), profile=None, cluster=two)  # fmt: skip
    (variant,) = load_scenario_dict(raw).variants
    seats = [g.policy.max_num_seqs for g in variant.groups]
    assert seats == [1024, 256]


def test_a_saturated_h100_runs_more_than_256_requests_at_once() -> None:
    """700 short requests at once: vLLM's 1024 seats on an H100 run them together (KV allows
    it), where the schema's 256 would queue most of them."""
    work = {"num_requests": 700, "arrival": {"process": "poisson", "rate": 1e6},
            "prompt_tokens": {"dist": "fixed", "value": 8},
            "output_tokens": {"dist": "fixed", "value": 30}}  # fmt: skip
    raw = scenario(workload=work, model="llama-3-8b", hardware="h100-sxm", policy=chunked(),
                   profile=None)  # fmt: skip
    summary = next(iter(simulate(raw).variants.values())).summary()
    assert summary["mean_batch_size"] > 256


def test_a_seat_limit_above_the_default_budget_names_the_field() -> None:
    raw = scenario(workload=poisson(20, 2.0, 200, 20), model="llama-3-8b", hardware="h100-sxm",
                   policy=chunked(max_num_seqs=16384), profile=None)  # fmt: skip
    with pytest.raises(ScenarioError, match="max_num_seqs"):
        load_scenario_dict(raw)
