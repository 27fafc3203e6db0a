"""Models read from a Hugging Face config.json (`sim/costs/hf_config.py`): the catalog's models
read from their configs give the catalog's hand-checked specs field for field (parameter
counts, KV bytes per token, active parameters); the layouts, quantizations and wrappers the
reader maps; what it says it could not map; and a scenario that names a config.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hf_configs import CATALOG_CONFIGS, DEEPSEEK_V3, GPT_OSS_120B, LLAMA_3_8B, QWEN2_5_7B
from scenario_factory import scenario

from sim.costs.catalog import MODELS, ModelSpec
from sim.costs.hf_config import ConfigProblem, model_fields
from sim.scenario.load import load_scenario_dict


def spec_of(config: dict[str, Any], name: str = "m") -> tuple[ModelSpec, str | None]:
    fields, unmapped = model_fields(config, name)
    return ModelSpec.model_validate(fields), unmapped


@pytest.mark.parametrize("name", sorted(CATALOG_CONFIGS))
def test_a_catalog_model_read_from_its_config_is_the_catalog_entry(name: str) -> None:
    read, _ = spec_of(CATALOG_CONFIGS[name], name)
    catalog = MODELS[name]
    fields = [f for f in ModelSpec.model_fields if f not in ("unmapped", "config")]
    differ = {f: (getattr(read, f), getattr(catalog, f)) for f in fields
              if getattr(read, f) != getattr(catalog, f)}  # fmt: skip
    assert not differ
    assert read.kv_bytes_per_token == catalog.kv_bytes_per_token
    assert read.active_parameters == catalog.active_parameters
    assert read.weight_bytes == catalog.weight_bytes


def test_what_a_config_states_beyond_the_spec_is_one_line() -> None:
    _, unmapped = spec_of(DEEPSEEK_V3)
    assert unmapped == "rope_scaling yarn x40 (max_model_len is the stated 163,840 positions)"
    _, unmapped = spec_of(GPT_OSS_120B)
    assert unmapped is not None and unmapped.startswith("attention sinks")
    assert spec_of(LLAMA_3_8B)[1] is None
    _, unmapped = spec_of({**LLAMA_3_8B, "model_type": "phi3"})
    assert unmapped == "model_type 'phi3' read as a Llama-like decoder"


def test_a_multimodal_checkpoint_is_read_by_its_text_decoder() -> None:
    wrapped = {"model_type": "llava", "vision_config": {"hidden_size": 1024},
               "text_config": LLAMA_3_8B}  # fmt: skip
    spec, unmapped = spec_of(wrapped)
    assert spec.num_parameters == MODELS["llama-3-8b"].num_parameters
    assert unmapped == "vision_config (the text decoder only is priced)"


def test_sliding_windows_from_layer_kinds_from_qwen2_s_switch_or_on_every_layer() -> None:
    qwen = {**QWEN2_5_7B, "use_sliding_window": True, "max_window_layers": 20,
            "sliding_window": 4096}  # fmt: skip
    spec, _ = spec_of(qwen)
    assert (spec.sliding_window, spec.num_sliding_layers) == (4096, 8)
    kinds = {**LLAMA_3_8B, "sliding_window": 1024,
             "layer_types": ["sliding_attention"] * 24 + ["full_attention"] * 8}  # fmt: skip
    assert spec_of(kinds)[0].num_sliding_layers == 24
    # a window on every layer leaves no growing KV: kept in full, and said so (Mistral-7B)
    mistral, unmapped = spec_of({**LLAMA_3_8B, "model_type": "mistral", "sliding_window": 4096})
    assert mistral.sliding_window is None
    assert unmapped == "sliding_window 4096 on every layer (KV kept in full)"


@pytest.mark.parametrize(
    ("quantization", "expected", "note"),
    [
        ({"quant_method": "fp8"}, {"weight_dtype": "fp8"}, None),
        ({"quant_method": "awq", "bits": 4}, {"weight_dtype": "int4"}, None),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, {"weight_dtype": "nvfp4"}, None),
        ({"quant_method": "mxfp4"}, {"expert_weight_dtype": "mxfp4"}, None),
        ({"quant_method": "compressed-tensors", "ignore": ["lm_head", "re:.*self_attn.*"],
          "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int"}}}},
         {"expert_weight_dtype": "int4"}, "int4 on every layer but attention"),
        ({"quant_method": "compressed-tensors",
          "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}}},
         {"weight_dtype": "fp8"}, None),
        ({"quant_method": "bitsandbytes"}, {}, "quantization bitsandbytes"),
    ],
)  # fmt: skip
def test_quantization_configs(quantization: dict[str, Any], expected: dict[str, str],
                              note: str | None) -> None:  # fmt: skip
    config = {**CATALOG_CONFIGS["qwen3-30b-a3b"], "quantization_config": quantization}
    fields, unmapped = model_fields(config, "q")
    assert {k: fields[k] for k in ("weight_dtype", "expert_weight_dtype") if k in fields} == (
        expected
    )
    assert (unmapped is None) == (note is None)
    assert note is None or (unmapped is not None and unmapped.startswith(note))


def test_moe_layer_patterns() -> None:
    qwen = CATALOG_CONFIGS["qwen3-30b-a3b"]
    every_other, _ = spec_of({**qwen, "decoder_sparse_step": 2})
    assert every_other.moe_layers == 24
    dense_first, _ = spec_of({**qwen, "mlp_only_layers": [0, 1, 2]})
    assert dense_first.moe_layers == 45
    listed, _ = spec_of({**qwen, "moe_layer_freq": [0, 1] * 24})
    assert listed.moe_layers == 24
    # a dense layer is a gated MLP of intermediate_size: the count moves by that much
    per_moe = 128 * 3 * 2048 * 768 + 128 * 2048
    assert dense_first.num_parameters == MODELS["qwen3-30b-a3b"].num_parameters + 3 * (
        3 * 2048 * 6144 - per_moe
    )


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"layer_types": ["linear_attention", "full_attention"] * 16}, "layer_types"),
        ({"hybrid_override_pattern": "M-M-M*-"}, "hybrid_override_pattern"),
        ({"model_type": "qwen3_next"}, "model_type"),
        ({"num_key_value_heads": 5}, "num_key_value_heads"),
        ({"hidden_size": True}, "hidden_size"),
    ],
)
def test_what_the_reader_refuses_names_the_key(change: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigProblem) as info:
        model_fields({**LLAMA_3_8B, **change}, "m")
    assert info.value.key == key


def test_a_scenario_names_a_checkpoint_folder_and_its_own_keys_win(tmp_path: Path) -> None:
    folder = tmp_path / "DeepSeek-V3"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(DEEPSEEK_V3))
    raw = scenario(model={"config": "DeepSeek-V3", "kv_dtype": "fp8"},
                   hardware={"name": "h200", "tensor_parallel": 8}, profile=None)  # fmt: skip
    spec = load_scenario_dict(raw, base_dir=tmp_path).variants[0].spec.model
    assert spec.name == "DeepSeek-V3" and spec.config == "DeepSeek-V3"
    assert spec.num_parameters == MODELS["deepseek-v3"].num_parameters
    assert spec.kv_dtype == "fp8" and spec.kv_bytes_per_token == 61 * 576
    assert spec.unmapped is not None and "rope_scaling" in spec.unmapped


def test_batchsim_run_says_what_a_model_leaves_out(tmp_path: Path) -> None:
    from sim.cli.run_report import model_notes

    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(GPT_OSS_120B))
    kimi = {"model": "kimi-k2", "hardware": {"name": "b300", "tensor_parallel": 8}}
    raw = scenario(model={"config": "ckpt"}, hardware="h200", profile=None,
                   variants={"a": {}, "b": kimi, "c": {}})  # fmt: skip
    notes = model_notes(load_scenario_dict(raw, base_dir=tmp_path))
    assert notes == [
        "model ckpt (from ckpt): not priced: attention sinks (a number per head: counted, not "
        "priced); rope_scaling yarn x32 (max_model_len is the stated 131,072 positions)",
        "model kimi-k2: not priced: rope_scaling yarn x32 (max_model_len is the stated 131,072 "
        "positions)",
    ]
    assert model_notes(load_scenario_dict(scenario(), base_dir=tmp_path)) == []
