"""The batch limits and KV memory a scenario leaves unset are its engine's under the default
step model: `vllm serve`'s limits on the scenario's GPU (8192 tokens and 1024 sequences on a GPU
of 70 GiB or more that is not an A100, else 2048 and 256), SGLang's chunk, request limit and
static memory fraction, `trtllm-serve`'s batch (2048 requests, 8192 tokens) and its KV share of
the free memory; the schema's under `roofline` and for ATOM, whose defaults are not modelled.
What the scenario gives is kept."""

from __future__ import annotations

from typing import Any

import pytest
from scenario_factory import chunked, continuous, poisson, scenario, static

from sim.costs.catalog import HardwareSpec, ModelSpec, stored_weight_bytes
from sim.errors import ScenarioError
from sim.scenario.engine_limits import (
    sglang_memory_fraction,
    sglang_sizes,
    trtllm_memory_fraction,
)
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
    assert limits(profile="roofline", engine={"name": "sglang"}) == (2048, 256)
    assert limits(engine={"name": "atom"}) == (2048, 256)
    assert limits(profile="roofline", engine={"name": "trt-llm"}) == (2048, 256)
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


def gpu(name: str, **fields: Any) -> HardwareSpec:
    return HardwareSpec.model_validate({"name": name, **fields})


def test_sglang_sizes_by_gpu_memory_as_its_server_args_do() -> None:
    # (chunked_prefill_size, cuda_graph_max_bs): RTX 4090 24 GiB, L40S 45 GiB, H100 80, H200 141,
    # B200 179; the graph size at TP 4 or more is the larger one
    assert sglang_sizes(gpu("rtx-4090")) == (2048, 24)
    assert sglang_sizes(gpu("l40s")) == (4096, 32)
    assert sglang_sizes(gpu("h100-sxm")) == (8192, 256)
    assert sglang_sizes(gpu("h100-sxm", tensor_parallel=4)) == (8192, 512)
    assert sglang_sizes(gpu("h200")) == (8192, 256)
    assert sglang_sizes(gpu("b200")) == (16384, 512)


def test_sglang_static_memory_fraction_by_hand() -> None:
    # H100 (81,559 MiB), TP 1: 512 + 1.5 x 8192 + 2 x 256 + 1024 / 8 = 13,440 MiB reserved
    assert sglang_memory_fraction(gpu("h100-sxm")) == round((81559 - 13440) / 81559, 3)
    # TP 8: graphs up to 512 and 1 GiB for the group: 512 + 12288 + 1024 + 1024 = 14,848
    assert sglang_memory_fraction(gpu("h100-sxm", tensor_parallel=8)) == round(
        (81559 - 14848) / 81559, 3
    )
    # L40S (46,068 MiB, under 60 GiB: no 10 GiB floor): 512 + 6144 + 64 + 128 = 6,848
    assert sglang_memory_fraction(gpu("l40s")) == round((46068 - 6848) / 46068, 3)


def test_sglang_takes_its_memory_chunk_and_request_limit() -> None:
    raw = scenario(workload=poisson(20, 2.0, 200, 20), model="llama-3-8b", hardware="h100-sxm",
                   policy=continuous(), profile=None, engine={"name": "sglang"})  # fmt: skip
    (variant,) = load_scenario_dict(raw).variants
    (group,) = variant.groups
    assert variant.spec.hardware.gpu_memory_utilization == 0.835
    assert variant.spec.hardware.activation_reserve_bytes == 0  # inside SGLang's fraction
    # its request pool: min(max(KV tokens / 8192 x 512, 2048), 4096) -> 4096
    assert (group.policy.max_num_batched_tokens, group.policy.max_num_seqs) == (16384, 4096)
    vllm = load_scenario_dict({**raw, "engine": {"name": "vllm"}}).variants[0].groups[0]
    assert group.figures.kv_blocks < vllm.figures.kv_blocks  # 0.835 of the GPU against 0.9
    given = {**raw, "hardware": {"name": "h100-sxm", "gpu_memory_utilization": 0.7}}
    assert load_scenario_dict(given).variants[0].spec.hardware.gpu_memory_utilization == 0.7


def test_trtllm_serve_takes_its_batch_and_a_share_of_the_free_memory() -> None:
    raw = scenario(workload=poisson(20, 2.0, 200, 20), model="llama-3-8b", hardware="h100-sxm",
                   policy=chunked(), profile=None, engine={"name": "trt-llm"})  # fmt: skip
    (variant,) = load_scenario_dict(raw).variants
    (group,) = variant.groups
    # tensorrt_llm/commands/serve.py: BuildConfig's max_batch_size 2048, max_num_tokens 8192
    assert (group.policy.max_num_batched_tokens, group.policy.max_num_seqs) == (8192, 2048)
    assert limits(policy=continuous(), engine={"name": "trt-llm"}) == (8192, 2048)
    # KV: 0.9 of (memory - weights - activations), by hand for Llama-3-8B in bf16 on an H100
    hw = variant.spec.hardware
    assert hw.activation_reserve_bytes == 0  # inside TensorRT-LLM's share
    plain = gpu("h100-sxm")
    weights = stored_weight_bytes(ModelSpec.model_validate({"name": "llama-3-8b"}), plain)
    kv = 0.9 * (plain.memory_bytes - weights - plain.activation_reserve_bytes)
    assert hw.gpu_memory_utilization == round((kv + weights) / plain.memory_bytes, 4)
    # more of the GPU than vLLM's 0.9 of it less the weights when the weights are small
    vllm = load_scenario_dict({**raw, "engine": {"name": "vllm"}}).variants[0].groups[0]
    assert group.figures.kv_blocks > vllm.figures.kv_blocks
    # a model too large for the GPU gets no free memory to share: the fit check says so
    big = ModelSpec.model_validate({"name": "llama-3.3-70b"})
    assert trtllm_memory_fraction(plain, big) == 1.0
    given = {**raw, "hardware": {"name": "h100-sxm", "gpu_memory_utilization": 0.7}}
    kept = load_scenario_dict(given).variants[0].spec.hardware
    assert (kept.gpu_memory_utilization, kept.activation_reserve_bytes) == (0.7, 2**30)


@pytest.mark.parametrize(
    ("engine", "budget", "seqs", "threshold"),
    [
        # an engine core per rank (vLLM), attention DP (TensorRT-LLM): every rank its limits
        ("vllm", 8 * 8192, 8 * 1024, 8192),
        ("trt-llm", 8 * 8192, 8 * 2048, 8192),
        # SGLang: server_args.py _handle_data_parallelism divides the chunk over the ranks
        ("sglang", 8192, None, 1024),  # its chunk on a 141 GB GPU
    ],
)
def test_data_parallel_ranks_each_chunk_their_own_prompts(
    engine: str, budget: int, seqs: int | None, threshold: int
) -> None:
    hardware = {"name": "h200", "data_parallel": 8, "expert_parallel": 8}
    raw = scenario(workload=poisson(20, 2.0, 200, 20), model="qwen3-30b-a3b",
                   hardware=hardware, policy=chunked(), profile=None,
                   engine={"name": engine})  # fmt: skip
    (variant,) = load_scenario_dict(raw).variants
    policy = variant.groups[0].policy
    assert policy.max_num_batched_tokens == budget
    assert policy.long_prefill_token_threshold == threshold
    if seqs is not None:
        assert policy.max_num_seqs == seqs
    # one rank: no threshold; a given one is kept
    single = load_scenario_dict({**raw, "hardware": {"name": "h200"}}).variants[0]
    assert single.groups[0].policy.long_prefill_token_threshold is None
    given = {**raw, "policy": {**chunked(), "long_prefill_token_threshold": 512}}
    kept = load_scenario_dict(given).variants[0].groups[0].policy
    assert kept.long_prefill_token_threshold == 512
