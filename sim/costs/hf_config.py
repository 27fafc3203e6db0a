"""A model from its Hugging Face `config.json`: the fields of a `ModelSpec` (sim/costs/
model_spec.py) read from the file a checkpoint ships, with no hub access.

`model: {config: path/to/config.json}` in a scenario (or the checkpoint's folder, which holds
one) reads the decoder's dimensions; the scenario's own model keys win over what the file says
(`model: {config: ..., kv_dtype: fp8}`). What is read:

* the decoder: layers, hidden size, heads and KV heads (`head_dim`, else hidden / heads),
  positions (`max_position_embeddings`); a multimodal checkpoint's `text_config` (its vision or
  audio tower is not priced, and says so);
* mixtures of experts: routed experts (`num_experts`, `n_routed_experts`, `num_local_experts`),
  top-k, the expert width (`moe_intermediate_size`, else `intermediate_size`), shared experts
  (`n_shared_experts` of the expert width, or Qwen's `shared_expert_intermediate_size`, counted
  as that many expert widths), and which layers are MoE (`first_k_dense_replace`,
  `moe_layer_freq`, `decoder_sparse_step`, `mlp_only_layers`); multi-token prediction modules
  (`num_nextn_predict_layers`, left out of the parameter count as model cards leave them);
* multi-head latent attention (`kv_lora_rank`, `q_lora_rank`, `qk_nope_head_dim`,
  `qk_rope_head_dim`, `v_head_dim`): the KV cache holds the latent and the rope key;
* sliding windows: `layer_types` (`sliding_attention` / `full_attention`), Qwen2's
  `use_sliding_window` from `max_window_layers` on, or a window on every layer (Mistral);
* weights: `torch_dtype`, and `quantization_config` (`fp8`; `mxfp4` experts; compressed-tensors,
  AWQ and GPTQ at 4 bits as int4, on the experts only where attention is left out; ModelOpt
  NVFP4 and FP8).

The parameter count is summed from the weight shapes the family's modelling code creates
(embedding and an untied LM head, attention with its biases and query/key norms, gated MLPs,
routers with their correction biases, experts, norms), so that it matches the catalog's
hand-checked counts (tests/costs/test_hf_config.py reads the catalog's models from their
configs). A family the reader does not know is read as a Llama-like decoder and says so.

Everything the file states that the spec does not carry (rope scaling beyond the stated
positions, attention sinks, a vision tower, an indexer's sparse attention) is returned as one
line, `unmapped`. Layouts the step model does not price yet are refused with the layer kinds
named: linear-attention and state-space layers (hybrid models).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sim.errors import ScenarioError
from sim.inputs.text import check_regular_file, read_text

MAX_CONFIG_BYTES = 4 * 1024 * 1024  # a config.json is a few kilobytes
MAX_DIM = 10_000_000  # any width, rank or count read (allocation-safe, far above any model)
MAX_POSITIONS = 100_000_000

# families whose modelling code the parameter sum follows; any other is read as Llama-like
LLAMA_LIKE = ("llama", "mistral", "mixtral", "granite", "olmo2", "ernie4_5")
QKV_BIAS = ("qwen2", "qwen2_moe")  # q, k and v biases whatever attention_bias says
QK_NORM = ("qwen3", "qwen3_moe")  # a per-head RMSNorm on queries and keys
MLA = ("deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32")
CORRECTION_BIAS = ("deepseek_v3", "kimi_k2", "deepseek_v32", "glm4_moe")  # router score bias
KNOWN = (*LLAMA_LIKE, *QKV_BIAS, *QK_NORM, *MLA, "glm4_moe", "gpt_oss")
# keys and layer kinds of layouts not priced yet (their layers keep a fixed state, not KV)
HYBRID_KEYS = (
    "hybrid_override_pattern", "attn_layer_period", "layers_block_type",
    "linear_num_value_heads", "mamba_d_state", "ssm_state_size", "linear_conv_kernel_dim",
)  # fmt: skip
ATTENTION_KINDS = ("full_attention", "sliding_attention", "attention")


class ConfigProblem(ValueError):
    """A config.json value the reader cannot use: the key and the reason."""

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"{key}: {reason}")


def config_path(given: str, base_dir: Path) -> Path:
    """The file `given` (a config.json or a checkpoint folder holding one) means, relative to
    `base_dir` (the scenario's folder) unless absolute."""
    path = Path(given).expanduser()
    path = path if path.is_absolute() else base_dir / path
    return path / "config.json" if path.is_dir() else path


def read_config(path: Path) -> dict[str, Any]:
    """The JSON object of a config.json, or a ScenarioError naming the file, the line and why."""
    check_regular_file(path, "model config.json")
    text = read_text(path, "model config.json", max_bytes=MAX_CONFIG_BYTES)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError(
            f"line {exc.lineno} column {exc.colno}: not valid JSON ({exc.msg})", file=str(path)
        ) from None
    except RecursionError:
        raise ScenarioError("nested too deeply to be a model config", file=str(path)) from None
    if not isinstance(doc, dict):
        raise ScenarioError("must be a JSON object (a model's config.json)", file=str(path))
    return doc


def _int(cfg: dict[str, Any], key: str, default: int | None = None, low: int = 1,
         high: int = MAX_DIM) -> int:  # fmt: skip
    value = cfg.get(key, default)
    if value is None:
        if default is None:
            raise ConfigProblem(key, "missing (the reader needs it)")
        value = default
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ConfigProblem(key, f"must be a whole number, not {value!r:.60}")
    if not low <= value <= high:
        raise ConfigProblem(key, f"must be in [{low}, {high:,}], not {value:,}")
    return value


def _opt(cfg: dict[str, Any], key: str, low: int = 1) -> int | None:
    return None if cfg.get(key) is None else _int(cfg, key, low=low)


def _flag(cfg: dict[str, Any], key: str, default: bool) -> bool:
    value = cfg.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigProblem(key, f"must be true or false, not {value!r:.60}")
    return value


def _text_config(config: dict[str, Any], unmapped: list[str]) -> dict[str, Any]:
    text = config.get("text_config")
    if text is None:
        return config
    if not isinstance(text, dict):
        raise ConfigProblem("text_config", "must be a mapping (the language model's config)")
    towers = [k for k in ("vision_config", "audio_config") if config.get(k) is not None]
    if towers:
        unmapped.append(f"{' and '.join(towers)} (the text decoder only is priced)")
    return text


def _refuse_hybrid(cfg: dict[str, Any], model_type: str) -> None:
    kinds = cfg.get("layer_types")
    if isinstance(kinds, list):
        other = sorted({str(k) for k in kinds if k not in ATTENTION_KINDS})
        if other:
            raise ConfigProblem(
                "layer_types", f"holds {', '.join(o[:40] for o in other[:4])} layers: hybrid "
                "linear-attention and state-space layers are not priced by batchsim yet",
            )  # fmt: skip
    for key in HYBRID_KEYS:
        if key in cfg:
            raise ConfigProblem(
                key, f"a hybrid layout ({model_type or 'no model_type'}): linear-attention and "
                "state-space layers are not priced by batchsim yet",
            )  # fmt: skip
    if any(word in model_type for word in ("mamba", "jamba", "rwkv", "next", "hybrid")):
        raise ConfigProblem(
            "model_type", f"{model_type!r}: linear-attention and state-space layers are not "
            "priced by batchsim yet",
        )  # fmt: skip


def _moe_layers(cfg: dict[str, Any], layers: int) -> list[bool]:
    """Which layers hold experts (the rest a dense MLP)."""
    first = _int(cfg, "first_k_dense_replace", 0, low=0, high=layers)
    step = _int(cfg, "decoder_sparse_step", 1, high=layers)
    dense = cfg.get("mlp_only_layers") or []
    if not isinstance(dense, list) or not all(isinstance(i, int) for i in dense):
        raise ConfigProblem("mlp_only_layers", "must be a list of layer numbers")
    pattern = cfg.get("moe_layer_freq")
    if isinstance(pattern, list):  # one 0/1 per layer
        if len(pattern) != layers or not all(x in (0, 1) for x in pattern):
            raise ConfigProblem("moe_layer_freq", f"a list must hold {layers} zeros and ones")
        return [bool(x) and i >= first for i, x in enumerate(pattern)]
    freq = _int(cfg, "moe_layer_freq", 1, high=layers)
    # DeepSeek's rule (from first_k_dense_replace on, every moe_layer_freq-th), Qwen's (every
    # decoder_sparse_step-th but mlp_only_layers)
    return [
        i >= first and i % freq == 0 and (i + 1) % step == 0 and i not in dense
        for i in range(layers)
    ]


def _sliding_layers(cfg: dict[str, Any], model_type: str, layers: int) -> tuple[int | None, int]:
    window = _opt(cfg, "sliding_window")
    kinds = cfg.get("layer_types")
    if isinstance(kinds, list):
        if len(kinds) != layers:
            raise ConfigProblem("layer_types", f"must name a kind for each of the {layers} layers")
        sliding = sum(1 for k in kinds if k == "sliding_attention")
        if sliding and window is None:
            raise ConfigProblem("sliding_window", "missing where layer_types has sliding layers")
        return (window, sliding) if sliding else (None, 0)
    if window is None:
        return None, 0
    if "use_sliding_window" in cfg:  # Qwen2's: windows from max_window_layers on, when used
        if not _flag(cfg, "use_sliding_window", False):
            return None, 0
        start = _int(cfg, "max_window_layers", layers, low=0, high=layers)
        return (window, layers - start) if layers > start else (None, 0)
    if model_type in ("mistral", "mixtral") or model_type not in KNOWN:
        return window, layers
    return None, 0


def _quantization(cfg: dict[str, Any], unmapped: list[str]) -> dict[str, str]:
    quant = cfg.get("quantization_config")
    dtype = cfg.get("torch_dtype", cfg.get("dtype"))
    out: dict[str, str] = {}
    if dtype == "float16":
        out["weight_dtype"] = "fp16"
    elif dtype not in (None, "bfloat16", "auto"):
        unmapped.append(f"torch_dtype {str(dtype)[:20]} (weights priced as bf16)")
    if quant is None:
        return out
    if not isinstance(quant, dict):
        raise ConfigProblem("quantization_config", "must be a mapping")
    method = str(quant.get("quant_method", ""))[:40]
    bits = quant.get("bits", quant.get("w_bit"))
    if method == "fp8":
        return {"weight_dtype": "fp8"}
    if method == "mxfp4":
        return {**out, "expert_weight_dtype": "mxfp4"}
    if method == "modelopt":
        algo = str(quant.get("quant_algo", ""))[:40].upper()
        if algo in ("NVFP4", "FP8"):
            return {"weight_dtype": algo.lower()}
        unmapped.append(f"quantization modelopt {algo} (weights priced as bf16)")
        return out
    if method in ("awq", "gptq") and bits == 4:
        return {"weight_dtype": "int4"}
    if method == "compressed-tensors":
        groups = quant.get("config_groups")
        weights = [g.get("weights") for g in groups.values() if isinstance(g, dict)] if isinstance(
            groups, dict) else []  # fmt: skip
        found = {(w.get("num_bits"), w.get("type")) for w in weights if isinstance(w, dict)}
        if found in ({(4, "int")}, {(8, "float")}):
            name = "int4" if found == {(4, "int")} else "fp8"
            ignore = " ".join(str(x) for x in quant.get("ignore") or [])
            if "attn" in ignore:  # attention left at 16 bits: the experts carry the format
                unmapped.append(f"{name} on every layer but attention: priced on the experts")
                return {**out, "expert_weight_dtype": name}
            return {"weight_dtype": name}
    unmapped.append(f"quantization {method or 'of no quant_method'} (weights priced as "
                    f"{out.get('weight_dtype', 'bf16')})")  # fmt: skip
    return out


def model_fields(config: dict[str, Any], name: str) -> tuple[dict[str, Any], str | None]:
    """The `ModelSpec` fields `config` (a parsed config.json) gives, named `name`, and one line
    of what it states that they do not carry (None: nothing). A `ConfigProblem` where a value
    cannot be used or the layout is not priced yet."""
    unmapped: list[str] = []
    cfg = _text_config(config, unmapped)
    model_type = str(cfg.get("model_type", config.get("model_type", "")))[:60]
    _refuse_hybrid(cfg, model_type)
    if model_type not in KNOWN:
        unmapped.append(f"model_type {model_type or '(none)'!r} read as a Llama-like decoder")
    h = _int(cfg, "hidden_size")
    layers = _int(cfg, "num_hidden_layers", high=100_000)
    heads = _int(cfg, "num_attention_heads", high=100_000)
    kv_heads = _int(cfg, "num_key_value_heads", heads, high=heads)
    vocab = _int(cfg, "vocab_size")
    positions = _int(cfg, "max_position_embeddings", high=MAX_POSITIONS)
    fields: dict[str, Any] = {"name": name, "num_layers": layers, "hidden_size": h,
                              "num_attention_heads": heads, "max_model_len": positions}  # fmt: skip
    mla = cfg.get("kv_lora_rank") is not None
    if mla:
        kv_lora = _int(cfg, "kv_lora_rank")
        rope = _int(cfg, "qk_rope_head_dim")
        nope = _int(cfg, "qk_nope_head_dim")
        v_head = _int(cfg, "v_head_dim", nope + rope)
        q_lora = _opt(cfg, "q_lora_rank")
        q = heads * (nope + rope)
        attention = (h * q_lora + q_lora + q_lora * q) if q_lora else h * q
        attention += h * (kv_lora + rope) + kv_lora + kv_lora * heads * (nope + v_head)
        attention += heads * v_head * h
        fields.update(num_kv_heads=heads, head_dim=nope + rope, kv_lora_rank=kv_lora,
                      qk_rope_head_dim=rope, v_head_dim=v_head)  # fmt: skip
    else:
        if heads % kv_heads:
            raise ConfigProblem("num_key_value_heads", f"{kv_heads} does not divide {heads} heads")
        head_dim = _int(cfg, "head_dim", h // heads)
        q, kv = heads * head_dim, kv_heads * head_dim
        attention = h * q + 2 * h * kv + q * h
        if model_type in QKV_BIAS:
            attention += q + 2 * kv
        elif model_type == "gpt_oss":  # q, k, v and o biases, and a sink per head
            attention += q + 2 * kv + h + heads
            unmapped.append("attention sinks (a number per head: counted, not priced)")
        elif _flag(cfg, "attention_bias", False):
            attention += q + 2 * kv + (0 if model_type == "glm4_moe" else h)
        if model_type in QK_NORM or _flag(cfg, "use_qk_norm", False):
            attention += 2 * head_dim
        fields.update(num_kv_heads=kv_heads, head_dim=head_dim)
    inter = _opt(cfg, "intermediate_size")
    experts = next((_int(cfg, k, high=65_536) for k in ("num_experts", "n_routed_experts",
                    "num_local_experts") if cfg.get(k) is not None), 0)  # fmt: skip
    moe = [False] * layers
    per_moe_layer = 0
    if experts:
        top_k = _int(cfg, "num_experts_per_tok", high=experts)
        width = _opt(cfg, "moe_intermediate_size") or inter
        if width is None:
            raise ConfigProblem("moe_intermediate_size", "missing (and no intermediate_size)")
        moe = _moe_layers(cfg, layers)
        shared = _int(cfg, "n_shared_experts", 0, low=0, high=1024)
        per_moe_layer = experts * 3 * h * width + experts * h  # experts and the router
        if model_type in CORRECTION_BIAS:
            per_moe_layer += experts
        if model_type == "gpt_oss":  # expert biases (gate and up, down) and the router's
            per_moe_layer += experts * (2 * width + h) + experts
        shared_width = _opt(cfg, "shared_expert_intermediate_size")
        if shared_width:  # Qwen2-MoE: one shared MLP of its own width, gated
            per_moe_layer += 3 * h * shared_width + h
            shared = -(-shared_width // width)
        else:
            per_moe_layer += shared * 3 * h * width
        fields.update(num_experts=experts, experts_per_token=top_k, num_shared_experts=shared,
                      moe_intermediate_size=width)  # fmt: skip
        if not all(moe):
            fields["num_moe_layers"] = sum(moe)
    if not all(moe) and inter is None:
        raise ConfigProblem("intermediate_size", "missing (the dense MLP layers need it)")
    dense_mlp = 3 * h * (inter or 0)
    per_layer = attention + 2 * h  # two RMSNorms a layer
    total = sum(per_layer + (per_moe_layer if m else dense_mlp) for m in moe)
    tied = _flag(cfg, "tie_word_embeddings", False)
    total += vocab * h * (1 if tied else 2) + h
    fields["num_parameters"] = total
    window, sliding = _sliding_layers(cfg, model_type, layers)
    if sliding >= layers:  # no layer keeps a growing KV: the pool's blocks would be idle
        unmapped.append(f"sliding_window {window} on every layer (KV kept in full)")
    elif sliding:
        fields.update(sliding_window=window, num_sliding_layers=sliding)
    mtp = _int(cfg, "num_nextn_predict_layers", 0, low=0, high=64)
    if mtp:
        fields["num_mtp_layers"] = mtp
    fields.update(_quantization(cfg, unmapped))
    _notes(cfg, positions, unmapped)
    return fields, "; ".join(unmapped) if unmapped else None


def _notes(cfg: dict[str, Any], positions: int, unmapped: list[str]) -> None:
    scaling = cfg.get("rope_scaling")
    if isinstance(scaling, dict) and isinstance(scaling.get("factor"), (int, float)):
        kind = str(scaling.get("rope_type", scaling.get("type", "")))[:20]
        unmapped.append(f"rope_scaling {kind} x{float(scaling['factor']):g} (max_model_len is the "
                        f"stated {positions:,} positions)")  # fmt: skip
    if cfg.get("index_topk") is not None:
        unmapped.append("the sparse-attention indexer (index_topk): attention priced over the "
                        "whole context")  # fmt: skip


def load_model_config(given: str, base_dir: Path, name: str | None) -> dict[str, Any]:
    """The spec fields of the config.json `given` names (see `config_path`), with `config` (as
    given) and `unmapped` set; a ScenarioError naming the file, the key and the reason."""
    path = config_path(given, base_dir)
    config = read_config(path)
    default = path.parent.name if path.name == "config.json" else path.stem
    try:
        fields, unmapped = model_fields(config, name or default or "model")
    except ConfigProblem as exc:
        raise ScenarioError(exc.reason, file=str(path), path=exc.key) from None
    fields["config"] = given
    if unmapped:
        fields["unmapped"] = unmapped[:600]
    return fields


def expand_model(raw: dict[str, Any], base_dir: Path, catalog: dict[str, Any]) -> dict[str, Any]:
    """A scenario mapping with `model: {config: ...}` read into the spec's fields, the
    scenario's own model keys over the file's (a scenario without one: unchanged)."""
    model = raw.get("model")
    if not isinstance(model, dict) or model.get("config") is None:  # a dump's None: none
        return raw
    given = model["config"]
    if not isinstance(given, str) or not given or len(given) > 4096:
        raise ScenarioError("must be the path of a config.json or of the folder holding one",
                            path="model.config")  # fmt: skip
    name = model.get("name")
    if isinstance(name, str) and name in catalog:
        raise ScenarioError(f"{name!r} is a catalog model: give a catalog name or a config, "
                            "not both", path="model.name")  # fmt: skip
    fields = load_model_config(given, base_dir, name if isinstance(name, str) else None)
    # `unmapped` is the file's, always (a dumped scenario's own is the same line)
    return {**raw, "model": {**fields, **model, "unmapped": fields.get("unmapped")}}
