"""The fuzz corpus: models read from a Hugging Face config.json (`model: {config: ...}`).

- a config.json that is not JSON, not an object, too deep, empty, or a folder without one;
- each dimension the reader needs missing, of the wrong type, or out of range;
- layouts the reader cannot use: KV heads that do not divide the heads, a layer list of the
  wrong length, a MoE pattern of the wrong length, hybrid linear-attention and state-space
  layers (by layer kind, by key and by model type);
- the scenario's side: a config that is not a path, a catalog name beside a config, a
  config.json whose dimensions pass the reader but not the model's checks;
- every bad config.json again through `batchsim catalog --model m/config.json`.
"""

from __future__ import annotations

import json
from typing import Any

from fuzz_corpus import BASE, RUN, Case, dump, edited, scenario_case

CONFIG: dict[str, Any] = {
    "model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816,
    "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 2,
    "vocab_size": 32000, "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
}  # fmt: skip
SCENARIO = dump(edited("model", {"config": "m/config.json"}, BASE))
FILE = "m/config.json"


def _with(**changes: Any) -> bytes:
    out = {**CONFIG, **changes}
    return json.dumps({k: v for k, v in out.items() if v is not _DROP}).encode()


_DROP = object()
# keys the reader needs: a value of each wrong kind (key, value, gist)
BAD_VALUES = [
    (key, value, gist)
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
                "max_position_embeddings")
    for value, gist in ((-1, "must be in"), (0, "must be in"), ("abc", "whole number"),
                        (True, "whole number"), (1.5, "whole number"), ([1], "whole number"),
                        (10**12, "must be in"))
]  # fmt: skip


def _case(case_id: str, config: bytes, *expect: str) -> Case:
    """The scenario naming a config.json that holds `config`: the error names that file."""
    return Case(f"hf-config-{case_id}", RUN, expect, {"s.yaml": SCENARIO, "m": None,
                                                      FILE: config})  # fmt: skip


def hf_config_cases() -> list[Case]:
    cases = [
        _case("not-json", b'{"hidden_size": 1024,', FILE, "line 1", "not valid JSON"),
        _case("a-list", b"[1, 2]", FILE, "must be a JSON object"),
        _case("empty", b"", FILE, "not valid JSON"),
        _case("deep", b"[" * 100_000 + b"]" * 100_000, FILE, "nested too deeply"),
        _case("not-utf8", b'{"model_type": "\xff"}', FILE, "UTF-8"),
        Case("hf-config-folder-without-one", RUN, (FILE, "not found"),
             {"s.yaml": dump(edited("model", {"config": "m"}, BASE)), "m": None}),
        Case("hf-config-missing", RUN, (FILE, "not found"), {"s.yaml": SCENARIO}),
        scenario_case("hf-config-not-a-path", dump(edited("model", {"config": 5}, BASE)),
                      "s.yaml", "model.config", "path of a config.json"),
        scenario_case("hf-config-and-catalog-name",
                      dump(edited("model", {"config": FILE, "name": "llama-3-8b"}, BASE)),
                      "s.yaml", "model.name", "not both", m=None, **{FILE: _with()}),
        scenario_case("hf-config-override-out-of-range",
                      dump(edited("model", {"config": FILE, "max_model_len": -5}, BASE)),
                      "s.yaml", "model.max_model_len", m=None, **{FILE: _with()}),
    ]  # fmt: skip
    cases += [_case(f"missing-{key}", _with(**{key: _DROP}), FILE, key, "missing")
              for key in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                          "vocab_size", "max_position_embeddings")]  # fmt: skip
    cases += [_case(f"{key}-{json.dumps(value)[:12]}", _with(**{key: value}), FILE, key, gist)
              for key, value, gist in BAD_VALUES]  # fmt: skip
    cases += [
        _case("kv-heads-not-dividing", _with(num_key_value_heads=3), FILE,
              "num_key_value_heads", "does not divide"),
        _case("kv-heads-above-heads", _with(num_key_value_heads=16), FILE,
              "num_key_value_heads", "must be in"),
        _case("layer-types-short", _with(layer_types=["full_attention"], sliding_window=64),
              FILE, "layer_types", "a kind for each"),
        _case("layer-types-no-window", _with(layer_types=["sliding_attention"] * 8), FILE,
              "sliding_window", "missing"),
        _case("hybrid-linear", _with(layer_types=["linear_attention", "full_attention"] * 4),
              FILE, "layer_types", "not priced"),
        _case("hybrid-mamba-key", _with(hybrid_override_pattern="M-M*"), FILE,
              "hybrid_override_pattern", "not priced"),
        _case("hybrid-model-type", _with(model_type="jamba"), FILE, "model_type", "not priced"),
        _case("text-config-a-list", _with(text_config=[1]), FILE, "text_config", "mapping"),
        _case("experts-no-top-k", _with(num_experts=8), FILE, "num_experts_per_tok", "missing"),
        _case("experts-top-k-above", _with(num_experts=8, num_experts_per_tok=9), FILE,
              "num_experts_per_tok", "must be in"),
        _case("moe-pattern-short", _with(num_experts=8, num_experts_per_tok=2,
                                         moe_layer_freq=[1, 0]), FILE, "moe_layer_freq", "8"),
        _case("moe-dense-layers-bad", _with(num_experts=8, num_experts_per_tok=2,
                                            mlp_only_layers="x"), FILE, "mlp_only_layers"),
        _case("quantization-a-list", _with(quantization_config=[1]), FILE,
              "quantization_config", "mapping"),
        _case("tie-not-bool", _with(tie_word_embeddings="yes"), FILE, "tie_word_embeddings",
              "true or false"),
        _case("latent-no-rope", _with(kv_lora_rank=512, qk_nope_head_dim=128), FILE,
              "qk_rope_head_dim", "missing"),
        _case("mtp-too-many", _with(num_nextn_predict_layers=65), FILE,
              "num_nextn_predict_layers", "must be in"),
    ]  # fmt: skip
    catalog = ("catalog", "--model", FILE)
    cases += [
        Case(case.id.replace("hf-config-", "hf-config-catalog-", 1), catalog, case.expect,
             {k: v for k, v in case.files.items() if k != "s.yaml"})
        for case in cases
        if case.argv == RUN and FILE in case.files and case.expect[0] == FILE
    ]  # fmt: skip
    return cases
