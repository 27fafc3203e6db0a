"""Model/hardware catalog: KV arithmetic by hand, name/override/explicit resolution, fit checks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sim.costs.catalog import (
    HARDWARE,
    MODELS,
    GiB,
    HardwareSpec,
    ModelSpec,
    kv_capacity_blocks,
    kv_capacity_tokens,
)
from sim.costs.fits import check_fits

MiB = 1024**2


def test_llama2_7b_on_a100_80g_by_hand() -> None:
    model, hw = MODELS["llama-2-7b"], HARDWARE["a100-80g"]
    assert model.kv_bytes_per_token == 2 * 32 * 32 * 128 * 2 == 524_288
    assert model.weight_bytes == 6_738_415_616 * 2
    assert model.flops_per_token == 2 * 6_738_415_616
    # 80 GiB * 0.9 - 13,476,831,232 B weights - 1 GiB reserve = 62,760,690,893 B of KV
    free = 81_920 * MiB * 0.9 - 13_476_831_232 - GiB
    assert kv_capacity_tokens(model, hw) == int(free // 524_288) == 119_702
    assert kv_capacity_blocks(model, hw, 16) == 119_702 // 16 == 7481


def test_llama3_8b_gqa_on_h100_by_hand() -> None:
    model, hw = MODELS["llama-3-8b"], HARDWARE["h100-sxm"]
    assert model.num_kv_heads == 8
    assert model.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131_072
    free = 81_559 * MiB * 0.9 - 8_030_261_248 * 2 - GiB
    assert kv_capacity_tokens(model, hw) == int(free // 131_072) == 456_500
    assert kv_capacity_blocks(model, hw, 32) == 456_500 // 32


def test_catalog_entries_match_datasheets() -> None:
    assert HARDWARE["a100-40g"].hbm_bandwidth_bytes_per_s == 1.555e12
    assert HARDWARE["a100-80g"].hbm_bandwidth_bytes_per_s == 2.039e12
    assert HARDWARE["h100-sxm"].peak_flops == 989e12
    assert HARDWARE["h200"].hbm_bandwidth_bytes_per_s == 4.8e12
    assert HARDWARE["h100-pcie"].peak_flops == 756e12
    assert HARDWARE["h100-pcie"].fp8_peak_flops == 1513e12
    assert HARDWARE["l40s"].memory_bytes == 46_068 * MiB
    assert HARDWARE["l40s"].hbm_bandwidth_bytes_per_s == 864e9
    assert HARDWARE["b200"].peak_flops == 2.25e15 and HARDWARE["b200"].fp8_peak_flops == 4.5e15
    assert HARDWARE["a100-80g"].fp8_peak_flops is None  # Ampere has no fp8 tensor cores
    assert HARDWARE["a40"].hbm_bandwidth_bytes_per_s == 696e9
    assert HARDWARE["a40"].peak_flops == 149.7e12 and HARDWARE["a40"].fp8_peak_flops is None
    assert set(HARDWARE) == {
        "a100-40g", "a100-80g", "a40", "h100-sxm", "h100-pcie", "h200", "l40s", "b200", "gb200",
        "b300", "gb300", "mi300x", "mi325x", "mi355x", "rtx-4090",
    }  # fmt: skip
    # Blackwell Ultra: NVFP4 dense 14 (HGX B300) and 15 PFLOPS (GB300), 800 Gb/s NICs
    b300, gb300 = HARDWARE["b300"], HARDWARE["gb300"]
    assert (b300.fp4_peak_flops, gb300.fp4_peak_flops) == (14e15, 15e15)
    assert (b300.memory_bytes, gb300.memory_bytes) == (275_040 * MiB, 284_208 * MiB)
    assert b300.scaleout_bandwidth_bytes_per_s == gb300.scaleout_bandwidth_bytes_per_s == 100e9
    assert (b300.scaleup_domain_gpus, gb300.scaleup_domain_gpus) == (8, 72)
    for hw in HARDWARE.values():
        assert hw.tensor_parallel == 1 and hw.interconnect_bandwidth_bytes_per_s is not None
        # where a GPU has fp8 tensor cores, their dense rate is twice bf16's
        fp8 = hw.fp8_peak_flops
        assert fp8 is None or fp8 == pytest.approx(2 * hw.peak_flops, rel=0.02)
    assert MODELS["llama-3-70b"].num_parameters == 70_553_706_496
    assert MODELS["llama-3-8b"].num_parameters == 8_030_261_248
    # hidden = heads x head_dim, except where the config sets head_dim apart (Qwen3, gpt-oss)
    # or latent attention's query/key head is wider (DeepSeek-V3: 128 + 64)
    apart = {"deepseek-v3", "qwen3-235b-a22b", "qwen3-30b-a3b", "qwen3-32b", "gpt-oss-120b",
             "gpt-oss-20b", "kimi-k2", "glm-4.5", "glm-4.5-air"}  # fmt: skip
    for model in MODELS.values():
        same = model.hidden_size == model.num_attention_heads * model.head_dim
        assert same == (model.name not in apart), model.name


def test_name_string_and_override_dict() -> None:
    assert ModelSpec.model_validate("llama-3-8b") == MODELS["llama-3-8b"]
    hw = HardwareSpec.model_validate({"name": "a100-80g", "gpu_memory_utilization": 0.8})
    assert hw.gpu_memory_utilization == 0.8
    assert hw.memory_bytes == HARDWARE["a100-80g"].memory_bytes
    # less memory for KV: exactly 0.1 * 80 GiB fewer bytes
    lost = HARDWARE["a100-80g"].usable_bytes - hw.usable_bytes
    assert lost == pytest.approx(0.1 * 81_920 * MiB)


def test_fully_explicit_spec() -> None:
    tiny = ModelSpec.model_validate(
        {
            "name": "tiny",
            "num_parameters": 1000,
            "num_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_kv_heads": 2,
            "head_dim": 16,
            "max_model_len": 128,
            "dtype_bytes": 1,
        }
    )
    assert tiny.kv_bytes_per_token == 2 * 2 * 2 * 16 * 1
    gpu = HardwareSpec(
        name="toy",
        memory_bytes=10_000,
        hbm_bandwidth_bytes_per_s=1e9,
        peak_flops=1e12,
        gpu_memory_utilization=1.0,
        activation_reserve_bytes=0,
    )
    assert kv_capacity_tokens(tiny, gpu) == (10_000 - 1000) // 128


def test_unknown_names_list_the_catalog() -> None:
    with pytest.raises(ValueError, match=r"unknown model 'llama-9'.*llama-3-8b"):
        ModelSpec.model_validate("llama-9")
    with pytest.raises(ValueError, match=r"unknown hardware 'a100'.*a100-80g.*memory_bytes"):
        HardwareSpec.model_validate({"name": "a100", "gpu_memory_utilization": 0.5})


def test_invalid_fields_rejected() -> None:
    with pytest.raises(ValidationError, match="extra"):
        HardwareSpec.model_validate({"name": "h200", "memory_gb": 141})
    with pytest.raises(ValidationError, match="gpu_memory_utilization"):
        HardwareSpec.model_validate({"name": "h200", "gpu_memory_utilization": 1.5})
    with pytest.raises(ValidationError, match="multiple of num_kv_heads"):
        ModelSpec.model_validate({"name": "llama-3-8b", "num_kv_heads": 5})
    with pytest.raises(ValueError, match="block_size"):
        kv_capacity_blocks(MODELS["llama-2-7b"], HARDWARE["h200"], 0)


def test_check_fits() -> None:
    check_fits(MODELS["llama-2-13b"], HARDWARE["a100-40g"])
    with pytest.raises(ValueError, match=r"llama-3-70b does not fit.*weights 131\.4 GiB"):
        check_fits(MODELS["llama-3-70b"], HARDWARE["a100-80g"])
    assert kv_capacity_tokens(MODELS["llama-3-70b"], HARDWARE["a100-80g"]) < 0
    # the same model on the biggest Hopper GPU still misses by a little on one GPU ...
    with pytest.raises(ValueError, match=r"usable memory 126\.4 GiB.*tensor_parallel 2 would fit"):
        check_fits(MODELS["llama-3-70b"], HARDWARE["h200"])
    # ... and fits on two of them (tests/costs/test_catalog_parallel.py does the arithmetic)
    check_fits(MODELS["llama-3-70b"], HARDWARE["h200"].with_tensor_parallel(2))
