"""The fuzz corpus: mixture-of-experts models, their parallelism (pipeline stages too) and
multi-token prediction.

- every new model field (experts, top-k, shared experts, expert width, MoE layers, expert
  dtype, routing skew, latent attention, sliding windows, MTP modules) given each value of the
  wrong type or out of range;
- every new hardware field (fp4 FLOP/s, data and expert parallelism, scale-up domain,
  scale-out bandwidth and latency, expert imbalance, redundant experts) the same;
- combinations that cannot work: half a mixture of experts, top-k above the experts, a skew
  past its bounds, expert parallelism that is neither 1 nor every GPU or does not divide the
  experts (with their replicas), replicas without expert parallelism, data parallelism on a
  dense model, an instance wider than its scale-up domain with
  no scale-out network, MTP on a model without a prediction module, sliding windows that
  leave no KV block;
- the same through a variant and through `--set`.
"""

from __future__ import annotations

import copy
from typing import Any

from fuzz_corpus import BAD, BASE, RUN, Case, dump, edited, scenario_case

# a small mixture of experts on one GPU, explicit so the corpus does not follow the catalog
MOE: dict[str, Any] = {
    "name": "fuzz-moe", "num_parameters": 4_000_000_000, "num_layers": 16, "hidden_size": 2048,
    "num_attention_heads": 16, "num_kv_heads": 4, "head_dim": 128, "max_model_len": 8192,
    "num_experts": 32, "experts_per_token": 4, "moe_intermediate_size": 1024,
}  # fmt: skip
MOE_BASE = {k: v for k, v in BASE.items() if k != "variants"}
MOE_BASE["model"] = copy.deepcopy(MOE)
MOE_BASE["hardware"] = {"name": "h100-sxm"}
MOE_BASE["variants"] = {"a": {}, "b": {"hardware": {"name": "h100-sxm", "tensor_parallel": 2}}}

ANY = tuple(BAD)
NUMBERS = ("neg", "str", "bool", "list", "map", "inf", "nan")
# key -> the BAD values it refuses (every model key below is a number or a name)
MODEL_KEYS: dict[str, tuple[str, ...]] = {
    "num_experts": NUMBERS, "experts_per_token": NUMBERS, "num_shared_experts": NUMBERS,
    "moe_intermediate_size": NUMBERS, "num_moe_layers": NUMBERS,
    "expert_weight_dtype": ANY, "expert_hottest_share": NUMBERS, "kv_lora_rank": NUMBERS,
    "qk_rope_head_dim": NUMBERS, "v_head_dim": NUMBERS, "sliding_window": NUMBERS,
    "num_sliding_layers": NUMBERS, "num_mtp_layers": NUMBERS,
}  # fmt: skip
HARDWARE_KEYS: dict[str, tuple[str, ...]] = {
    "fp4_peak_flops": NUMBERS, "data_parallel": NUMBERS, "expert_parallel": NUMBERS,
    "scaleup_domain_gpus": NUMBERS, "scaleout_bandwidth_bytes_per_s": NUMBERS,
    "scaleout_latency_s": NUMBERS, "expert_imbalance": NUMBERS, "pipeline_parallel": NUMBERS,
    "redundant_experts": NUMBERS,
}  # fmt: skip
# in range for the type, past the documented bounds: (key, value, gist)
MODEL_PAST = (
    ("num_experts", 1, ">= 2"),
    ("num_experts", 70_000, "<= 65536"),
    ("experts_per_token", 0, ">= 1"),
    ("expert_hottest_share", 1.0, "< 1"),
    ("num_mtp_layers", 65, "<= 64"),
    ("sliding_window", 0, "> 0"),
)
HARDWARE_PAST = (
    ("data_parallel", 0, ">= 1"),
    ("data_parallel", 1025, "<= 1024"),
    ("expert_parallel", 0, ">= 1"),
    ("expert_imbalance", 0.5, ">= 1"),
    ("scaleout_latency_s", 2, "<= 1"),
    ("pipeline_parallel", 0, ">= 1"),
    ("pipeline_parallel", 65, "<= 64"),
    ("redundant_experts", 4097, "<= 4096"),
)


def _value_cases() -> list[Case]:
    cases = [
        scenario_case(f"moe-model-{key}-{label}",
                      dump(edited(f"model.{key}", BAD[label], MOE_BASE)), f"model.{key}")
        for key, labels in MODEL_KEYS.items()
        for label in labels
    ]  # fmt: skip
    cases += [
        scenario_case(f"moe-hardware-{key}-{label}",
                      dump(edited(f"hardware.{key}", BAD[label], MOE_BASE)), f"hardware.{key}")
        for key, labels in HARDWARE_KEYS.items()
        for label in labels
    ]  # fmt: skip
    cases += [
        scenario_case(f"moe-model-{key}-{value}", dump(edited(f"model.{key}", value, MOE_BASE)),
                      f"model.{key}", gist)
        for key, value, gist in MODEL_PAST
    ]  # fmt: skip
    cases += [
        scenario_case(f"moe-hardware-{key}-{value}",
                      dump(edited(f"hardware.{key}", value, MOE_BASE)), f"hardware.{key}", gist)
        for key, value, gist in HARDWARE_PAST
    ]  # fmt: skip
    return cases


def _without(*keys: str) -> dict[str, Any]:
    out = copy.deepcopy(MOE_BASE)
    for key in keys:
        del out["model"][key]
    return out


def _combination_cases() -> list[Case]:
    dense = edited("model", "llama-2-7b", MOE_BASE)
    wide = edited("hardware", {"name": "h100-sxm", "data_parallel": 16, "expert_parallel": 16},
                  MOE_BASE)  # fmt: skip
    mtp = {"name": "continuous", "speculative": {"method": "mtp", "num_speculative_tokens": 1,
                                                 "acceptance": {"rate": 0.8}}}  # fmt: skip
    return [
        scenario_case("moe-half-a-mixture", dump(_without("moe_intermediate_size")),
                      "model", "needs moe_intermediate_size too"),
        scenario_case("moe-shared-without-experts",
                      dump(edited("model.num_shared_experts", 1,
                                  _without("num_experts", "experts_per_token",
                                           "moe_intermediate_size"))),
                      "model", "needs a mixture of experts"),
        scenario_case("moe-top-k-above-experts", dump(edited("model.experts_per_token", 64,
                                                             MOE_BASE)),
                      "model", "cannot exceed num_experts"),
        scenario_case("moe-skew-below-uniform", dump(edited("model.expert_hottest_share", 0.001,
                                                            MOE_BASE)),
                      "model", "must lie between"),
        scenario_case("moe-experts-too-large", dump(edited("model.moe_intermediate_size",
                                                           100_000, MOE_BASE)),
                      "model", "the routed experts alone hold"),
        scenario_case("moe-latent-half", dump(edited("model.kv_lora_rank", 512, MOE_BASE)),
                      "model", "kv_lora_rank and qk_rope_head_dim"),
        scenario_case("moe-window-without-layers", dump(edited("model.sliding_window", 128,
                                                               MOE_BASE)),
                      "model", "sliding_window and num_sliding_layers"),
        scenario_case("moe-all-layers-sliding",
                      dump(edited("model.num_sliding_layers", 16,
                                  edited("model.sliding_window", 128, MOE_BASE))),
                      "model", "at least one of the 16 layers"),
        scenario_case("moe-ep-neither", dump(edited("hardware", {"name": "h100-sxm",
                                                                 "data_parallel": 4,
                                                                 "expert_parallel": 2},
                                                    MOE_BASE)),
                      "hardware", "must be 1 (experts split by tensor) or every GPU"),
        scenario_case("moe-ep-not-dividing",
                      dump(edited("model.num_experts", 24,
                                  edited("hardware", {"name": "h100-sxm", "data_parallel": 16,
                                                      "expert_parallel": 16,
                                                      "scaleout_bandwidth_bytes_per_s": 5e10},
                                         MOE_BASE))),
                      "hardware", "must divide"),
        scenario_case("moe-replicas-not-dividing",
                      dump(edited("hardware", {"name": "h100-sxm", "data_parallel": 8,
                                               "expert_parallel": 8, "redundant_experts": 4},
                                  MOE_BASE)),
                      "hardware", "num_experts + redundant_experts (32 + 4)"),
        scenario_case("moe-replicas-without-ep",
                      dump(edited("hardware", {"name": "h100-sxm", "tensor_parallel": 2,
                                               "redundant_experts": 2}, MOE_BASE)),
                      "hardware", "needs expert_parallel > 1"),
        scenario_case("moe-wide-without-scaleout",
                      dump(edited("hardware.name", "h100-pcie", wide)),
                      "hardware", "scaleout_bandwidth_bytes_per_s is required"),
        scenario_case("moe-dense-data-parallel",
                      dump(edited("hardware", {"name": "h100-sxm", "data_parallel": 2}, dense)),
                      "hardware", "needs a mixture-of-experts model"),
        scenario_case("moe-imbalance-above-ep",
                      dump(edited("hardware", {"name": "h100-sxm", "data_parallel": 2,
                                               "expert_parallel": 2, "expert_imbalance": 3},
                                  MOE_BASE)),
                      "hardware", "cannot exceed expert_parallel"),
        scenario_case("moe-mtp-without-module", dump(edited("policy", mtp, MOE_BASE)),
                      "policy.speculative.method", "has none"),
        scenario_case("moe-window-too-many-seqs",
                      dump(edited("policy", {"name": "continuous", "max_num_seqs": 4096},
                                  edited("model", "llama-4-scout",
                                         edited("hardware", "mi355x", MOE_BASE)))),
                      "policy.max_num_seqs", "sliding-window layers keep"),
        scenario_case("moe-variant-dense-ep",
                      dump(edited("variants.b", {"model": "llama-2-7b",
                                                 "hardware": {"name": "h100-sxm",
                                                              "data_parallel": 2}},
                                  MOE_BASE)),
                      "variants.b", "needs a mixture-of-experts model"),
        scenario_case("pipeline-more-stages-than-layers",
                      dump(edited("hardware.pipeline_parallel", 17, MOE_BASE)),
                      "hardware", "exceeds fuzz-moe's 16 layers"),
        scenario_case("pipeline-with-tiers",
                      dump(edited("kv_tiers", {"dram": {"capacity_gb": 8}},
                                  edited("policy.prefix_caching", True,
                                         edited("hardware.pipeline_parallel", 2, MOE_BASE)))),
                      "hardware.pipeline_parallel", "not modelled"),
        Case("pipeline-set-bad", (*RUN, "--set", "hardware.pipeline_parallel=-2"),
             ("hardware.pipeline_parallel",), {"s.yaml": dump(MOE_BASE)}),
        Case("moe-set-bad-dp", (*RUN, "--set", "hardware.data_parallel=0"),
             ("hardware.data_parallel",), {"s.yaml": dump(MOE_BASE)}),
        Case("moe-set-bad-share", (*RUN, "--set", "model.expert_hottest_share=0.9"),
             ("model", "must lie between"), {"s.yaml": dump(MOE_BASE)}),
    ]  # fmt: skip


def moe_cases() -> list[Case]:
    return [*_value_cases(), *_combination_cases()]
