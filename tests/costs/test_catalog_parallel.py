"""Data types, mixture of experts and tensor parallelism: capacity and roofline by hand."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from scenario_factory import continuous, poisson, scenario, uniform

from sim import ScenarioError, load_scenario_dict, simulate
from sim.costs.catalog import (
    HARDWARE,
    MODELS,
    GiB,
    HardwareSpec,
    ModelSpec,
    kv_bytes_per_token_on,
    kv_capacity_blocks,
    kv_capacity_tokens,
)
from sim.costs.cost_model import CostModel
from sim.costs.fits import check_fits, min_tensor_parallel
from sim.costs.profile import (
    HOST_STEP_S,
    ROOFLINE_FLOP_EFFICIENCY,
    ROOFLINE_LINK_EFFICIENCY,
    ROOFLINE_MEM_EFFICIENCY,
    allreduce_latency_for,
    roofline_profile,
)

MiB = 1024**2
H100_TP4 = HARDWARE["h100-sxm"].with_tensor_parallel(4)


def model(name: str, **fields: Any) -> ModelSpec:
    return ModelSpec.model_validate({"name": name, **fields})


def test_qwen25_7b_on_l40s_by_hand() -> None:
    m, hw = MODELS["qwen2.5-7b"], HARDWARE["l40s"]
    # 28 layers x 4 KV heads x 128 x K and V x 2 bytes
    assert m.kv_bytes_per_token == 2 * 28 * 4 * 128 * 2 == 57_344
    # 46,068 MiB x 0.9 = 43,474,865,357 B; minus 15,231,233,024 B of weights and 1 GiB
    free = 46_068 * MiB * 0.9 - 7_615_616_512 * 2 - GiB
    assert kv_capacity_tokens(m, hw) == int(free // 57_344) == 473_811
    assert kv_capacity_blocks(m, hw, 16) == 473_811 // 16 == 29_613


def test_llama3_70b_on_four_h100_by_hand() -> None:
    m = MODELS["llama-3-70b"]
    # 4 GPUs: 4 x 81,559 MiB x 0.9 usable, one 1 GiB reserve per GPU, weights once (sharded)
    free = 4 * 81_559 * MiB * 0.9 - 70_553_706_496 * 2 - 4 * GiB
    assert H100_TP4.usable_bytes == pytest.approx(4 * 81_559 * MiB * 0.9)
    # 8 KV heads, 2 per GPU: the instance holds the same 327,680 B per token as one GPU would
    assert kv_bytes_per_token_on(m, H100_TP4) == 2 * 80 * 8 * 128 * 2 == 327_680
    assert kv_capacity_tokens(m, H100_TP4) == int(free // 327_680) == 495_826
    assert kv_capacity_blocks(m, H100_TP4, 16) == 30_989
    check_fits(m, H100_TP4)
    with pytest.raises(ValueError, match=r"weights 131\.4 GiB.*usable memory 71\.7 GiB"):
        check_fits(m, HARDWARE["h100-sxm"])
    assert min_tensor_parallel(m, HARDWARE["h100-sxm"]) == 2
    assert min_tensor_parallel(m, HARDWARE["l40s"]) == 4  # 2 x 40.5 GiB < 131.4 GiB


def test_kv_heads_are_replicated_beyond_tp_equal_to_kv_heads() -> None:
    m = model("gqa", num_parameters=1000, num_layers=2, hidden_size=64, num_attention_heads=8,
              num_kv_heads=2, head_dim=8, max_model_len=64)  # fmt: skip
    gpu = HardwareSpec(name="g", memory_bytes=1_000_000, hbm_bandwidth_bytes_per_s=1e9,
                       peak_flops=1e12, interconnect_bandwidth_bytes_per_s=1e9,
                       gpu_memory_utilization=1.0, activation_reserve_bytes=0)  # fmt: skip
    assert m.kv_bytes_per_token == 2 * 2 * 2 * 8 * 2 == 128
    assert kv_bytes_per_token_on(m, gpu.with_tensor_parallel(2)) == 128  # one head per GPU
    # 4 GPUs, 2 KV heads: each GPU still keeps one head, so 4 heads' worth per token
    assert kv_bytes_per_token_on(m, gpu.with_tensor_parallel(4)) == 2 * 2 * 4 * 8 * 2 == 256
    assert kv_capacity_tokens(m, gpu.with_tensor_parallel(4)) == (4_000_000 - 2000) // 256
    with pytest.raises(ValueError, match=r"tensor_parallel \(3\) must divide"):
        check_fits(m, gpu.with_tensor_parallel(3))
    with pytest.raises(ValueError, match="interconnect_bandwidth_bytes_per_s is required"):
        check_fits(m, gpu.model_copy(update={"interconnect_bandwidth_bytes_per_s": None,
                                             "tensor_parallel": 2}))  # fmt: skip


def test_fp8_kv_doubles_capacity_and_halves_kv_reads() -> None:
    bf16, fp8 = MODELS["llama-3-8b"], model("llama-3-8b", kv_dtype="fp8")
    hw = HARDWARE["h100-sxm"]
    assert fp8.kv_bytes_per_token == 2 * 32 * 8 * 128 * 1 == 65_536
    assert fp8.weight_bytes == bf16.weight_bytes  # weights untouched
    # same free bytes (81,559 MiB x 0.9 - 16.06 GB - 1 GiB) over half the bytes per token
    free = 81_559 * MiB * 0.9 - 8_030_261_248 * 2 - GiB
    assert kv_capacity_tokens(bf16, hw) == int(free // 131_072) == 456_500
    assert kv_capacity_tokens(fp8, hw) == int(free // 65_536) == 913_001  # 2 x 456,500 + 1
    a, b = roofline_profile(bf16, hw).coefficients, roofline_profile(fp8, hw).coefficients
    assert b.t_kv_s_per_token == pytest.approx(a.t_kv_s_per_token / 2)
    assert (b.t_mem_s, b.t_flop_s_per_token) == (a.t_mem_s, a.t_flop_s_per_token)


def test_weight_dtypes_change_memory_and_the_roofline() -> None:
    base = MODELS["llama-3-70b"]
    fp8, int4 = model("llama-3-70b", weight_dtype="fp8"), model("llama-3-70b", weight_dtype="int4")
    assert fp8.weight_bytes == 70_553_706_496 * 1
    assert int4.weight_bytes == 70_553_706_496 * 0.5 == 35_276_853_248
    assert int4.kv_bytes_per_token == base.kv_bytes_per_token  # KV stays bf16
    # int4 Llama-3-70B fits on one H200: (143,771 MiB x 0.9 - 35.28 GB - 1 GiB) / 327,680 B
    free = 143_771 * MiB * 0.9 - 35_276_853_248 - GiB
    assert kv_capacity_tokens(int4, HARDWARE["h200"]) == int(free // 327_680) == 303_127
    h200 = HARDWARE["h200"]
    bw = 4.8e12 * ROOFLINE_MEM_EFFICIENCY
    c8, c4 = roofline_profile(fp8, h200).coefficients, roofline_profile(int4, h200).coefficients
    assert c8.t_mem_s == pytest.approx(70_553_706_496 / bw + HOST_STEP_S, rel=1e-12)
    assert c4.t_mem_s == pytest.approx(35_276_853_248 / bw + HOST_STEP_S, rel=1e-12)
    # fp8 GEMMs at the fp8 peak (1,979 TFLOP/s); int4 is weight-only, so bf16 (989)
    assert c8.t_flop_s_per_token == pytest.approx(
        2 * 70_553_706_496 / (1979e12 * ROOFLINE_FLOP_EFFICIENCY), rel=1e-12
    )
    assert c4.t_flop_s_per_token == pytest.approx(
        2 * 70_553_706_496 / (989e12 * ROOFLINE_FLOP_EFFICIENCY), rel=1e-12
    )
    # an A100 has no fp8 tensor cores: fp8 weights halve the reads but compute at bf16
    a100 = HARDWARE["a100-80g"].with_tensor_parallel(2)
    c = roofline_profile(model("llama-3-8b", weight_dtype="fp8"), a100).coefficients
    ref = roofline_profile(MODELS["llama-3-8b"], a100).coefficients
    assert c.t_flop_s_per_token == pytest.approx(ref.t_flop_s_per_token, rel=1e-12)
    fixed = 2 * 32 * allreduce_latency_for(a100)[0] + HOST_STEP_S  # the same for both dtypes
    assert c.t_mem_s - fixed == pytest.approx((ref.t_mem_s - fixed) / 2, rel=1e-12)


def test_dtype_fields_validate() -> None:
    legacy = model("llama-3-8b", dtype_bytes=1)  # the older override still means "all fp8"
    assert legacy.weight_bytes == 8_030_261_248 and legacy.kv_bytes_per_token == 65_536
    assert (legacy.weight_dtype_name, legacy.kv_dtype_name, legacy.dtype_label) == ("fp8",) * 3
    # ... but keeps its old roofline: the fp8 GEMM rate needs an explicit weight_dtype: fp8
    hw = HARDWARE["h100-sxm"]
    assert roofline_profile(legacy, hw).coefficients.t_flop_s_per_token == pytest.approx(
        2 * 8_030_261_248 / (989e12 * ROOFLINE_FLOP_EFFICIENCY), rel=1e-12
    )
    # a resolved spec, dumped (scenario.yaml, sweeps) and read back, validates unchanged
    mixed = model("llama-3-8b", weight_dtype="int4", kv_dtype="fp8")
    assert mixed.dtype_label == "w-int4/kv-fp8"
    for spec in (legacy, mixed, MODELS["mixtral-8x7b"]):
        assert ModelSpec.model_validate(spec.model_dump(mode="json")) == spec
    assert roofline_profile(mixed, hw).name == "roofline-llama-3-8b-h100-sxm-wint4-kvfp8"
    with pytest.raises(ValidationError, match="give dtype_bytes or kv_dtype, not both"):
        model("llama-3-8b", dtype_bytes=1, kv_dtype="fp8")
    with pytest.raises(ValidationError, match="kv_dtype"):
        model("llama-3-8b", kv_dtype="int4")  # no int4 KV cache
    with pytest.raises(ValidationError, match="cannot exceed num_parameters"):
        model("mixtral-8x7b", num_active_parameters=50_000_000_000)


def test_moe_flops_use_active_and_memory_uses_total() -> None:
    moe, dense = MODELS["mixtral-8x7b"], MODELS["llama-2-13b"]
    assert moe.flops_per_token == 2 * 12_879_925_248
    assert moe.weight_bytes == 46_702_792_704 * 2
    hw = HARDWARE["h200"]
    profile = roofline_profile(moe, hw)
    c, experts = profile.coefficients, profile.experts
    assert experts is not None and (experts.num_experts, experts.experts_per_token) == (8, 2)
    flops, bw = 989e12 * ROOFLINE_FLOP_EFFICIENCY, 4.8e12 * ROOFLINE_MEM_EFFICIENCY
    # the dense part plus 2 experts of each of the 32 layers: the 12.9B active parameters
    per_token = c.t_flop_s_per_token + 2 * experts.t_expert_pair_s
    assert per_token == pytest.approx(2 * 12_879_925_248 / flops, rel=1e-12)
    # a step touching all 8 experts streams every weight: the 46.7B parameters
    per_step = c.t_mem_s + 8 * experts.t_expert_read_s
    assert per_step == pytest.approx(46_702_792_704 * 2 / bw + HOST_STEP_S, rel=1e-12)
    # per token it computes like a 13B dense model, but streams 3.6x the weights each step
    d = roofline_profile(dense, hw).coefficients
    assert per_token / d.t_flop_s_per_token == pytest.approx(0.99, abs=0.01)
    assert (per_step - HOST_STEP_S) / (d.t_mem_s - HOST_STEP_S) == pytest.approx(3.59, abs=0.01)
    # memory: 87 GiB of weights do not fit one 80 GB H100 but do fit one H200
    assert kv_capacity_tokens(moe, HARDWARE["h100-sxm"]) < 0
    free = 143_771 * MiB * 0.9 - 46_702_792_704 * 2 - GiB
    assert kv_capacity_tokens(moe, hw) == int(free // 131_072) == 314_331


def test_tensor_parallel_roofline_by_hand() -> None:
    c = roofline_profile(MODELS["llama-3-70b"], H100_TP4).coefficients
    bw = 4 * 3.35e12 * ROOFLINE_MEM_EFFICIENCY  # four GPUs stream their shards at once
    flops = 4 * 989e12 * ROOFLINE_FLOP_EFFICIENCY
    link = 900e9 / 2 * ROOFLINE_LINK_EFFICIENCY  # one way: half the 900 GB/s NVLink figure
    # 2 all-reduces per layer, ring: 2 (tp-1)/tp x 8192 hidden x 2 bytes per token each
    allreduce_per_token = 2 * 80 * (2 * 3 / 4) * 8192 * 2 / link
    assert allreduce_per_token == pytest.approx(10.92e-6, rel=1e-3)
    # each all-reduce at Vidur's measured H100 DGX tp-4 latency (38 us), plus the host step
    fixed = 2 * 80 * 38.0e-6 + HOST_STEP_S
    assert c.t_mem_s == pytest.approx(70_553_706_496 * 2 / bw + fixed, rel=1e-12)
    assert c.t_flop_s_per_token == pytest.approx(
        2 * 70_553_706_496 / flops + allreduce_per_token, rel=1e-12
    )
    assert c.t_kv_s_per_token == pytest.approx(327_680 / bw, rel=1e-12)
    assert c.t_attn_s_per_token2 == pytest.approx(4 * 80 * 64 * 128 / flops, rel=1e-12)
    # a decode step at batch 1 with 1,000 tokens of context: ~20 ms, 13.2 of them weights
    # (13.163 ms weights + 6.08 ms all-reduce latency + 0.6 ms host + 51.0 us GEMMs + 10.9 us
    # all-reduce bytes + 1,000 x 30.6 ns KV reads)
    step = CostModel(roofline_profile(MODELS["llama-3-70b"], H100_TP4)).step_time(1, 1000, 0)
    expected = 0.013163 + 0.00608 + 0.0006 + 51.0e-6 + 10.9e-6 + 1000 * 30.6e-9
    assert step == pytest.approx(expected, rel=1e-4)
    # tp 1 of a model that fits keeps exactly the single-GPU numbers (no all-reduce terms)
    one = roofline_profile(MODELS["llama-3-8b"], HARDWARE["h100-sxm"]).coefficients
    assert one.t_mem_s == 8_030_261_248 * 2 / (3.35e12 * ROOFLINE_MEM_EFFICIENCY) + HOST_STEP_S


SCENARIO: dict[str, Any] = scenario(
    name="tp",
    seed=5,
    workload=poisson(50, 4.0, uniform(100, 1000), uniform(10, 100)),
    model="llama-3-70b",
    hardware={"name": "h100-sxm", "tensor_parallel": 4},
    policy=continuous(max_num_seqs=32),
    profile="roofline",  # the hand figures below are the roofline's
)


def test_llama3_70b_on_four_h100_simulates() -> None:
    scenario = load_scenario_dict(SCENARIO)
    (variant,) = scenario.variants
    assert variant.spec.hardware.tensor_parallel == 4
    assert variant.profile.name == "roofline-llama-3-70b-h100-sxm-tp4"
    results = simulate(scenario)
    result = results.variants["default"]
    assert result.instances["kv_blocks_total"].tolist() == [30_989]  # the hand figure above
    assert result.summary()["num_finished"] == 50
    # decode steps cost at least the sharded weight read, ~13.2 ms plus 0.8 ms of all-reduces
    assert result.steps["duration_s"].min() >= 0.0139


def test_llama3_70b_on_one_h100_is_rejected_naming_the_fix() -> None:
    raw = {**SCENARIO, "hardware": "h100-sxm"}
    with pytest.raises(ScenarioError) as info:
        load_scenario_dict(raw)
    assert info.value.path == "model"
    reason = info.value.reason
    assert "weights 131.4 GiB" in reason and "usable memory 71.7 GiB" in reason
    assert "tensor_parallel 2 would fit" in reason
    # the same through --set, and a degree that cannot shard 64 heads
    assert load_scenario_dict(raw, overrides=["hardware.tensor_parallel=2"]).variants
    with pytest.raises(ScenarioError, match=r"tensor_parallel \(3\) must divide"):
        load_scenario_dict(raw, overrides=["hardware.tensor_parallel=3"])
    with pytest.raises(ScenarioError) as info:
        load_scenario_dict(raw, overrides=["hardware.tensor_parallel=0"])
    assert info.value.path == "hardware.tensor_parallel"
    with pytest.raises(ScenarioError) as info:
        load_scenario_dict({**SCENARIO, "model": {"name": "llama-3-70b", "kv_dtype": "fp4"}})
    assert info.value.path == "model.kv_dtype"
