"""The tables of `batchsim catalog` (models, GPUs, KV capacity of pairs) and the command itself.

Kept apart from the parser (`sim.cli.catalog`) so that building the `batchsim` parser imports
neither pandas nor the catalog.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ValidationError

from sim.costs.catalog import (
    HARDWARE,
    MODELS,
    TP_CANDIDATES,
    GiB,
    HardwareSpec,
    ModelSpec,
    kv_bytes_per_token_on,
    kv_capacity_blocks,
    kv_capacity_tokens,
    stored_weight_bytes,
)
from sim.costs.fits import check_fits, min_tensor_parallel
from sim.costs.hf_config import load_model_config
from sim.costs.prices import PRICES_AS_OF
from sim.errors import ScenarioError
from sim.inputs.messages import problems


def _flag_error(exc: ValidationError) -> ScenarioError:
    """A model's or GPU's failed check as one line naming the flag that set the field."""
    model = exc.title == ModelSpec.__name__
    path, reason = problems(exc, ModelSpec if model else HardwareSpec)[0]
    field = path.split(".")[0]
    flag = f"--{field.replace('_', '-')}" if field else ("--model" if model else "--hardware")
    return ScenarioError(reason, path=flag)


def _pick(name: str | None, table: dict[str, Any], kind: str, flag: str) -> list[str]:
    if name is None:
        return list(table)
    if name not in table:
        known = ", ".join(table)
        raise ScenarioError(f"unknown {kind} {name!r} (known: {known})", path=flag)
    return [name]


def _models(args: argparse.Namespace) -> list[ModelSpec]:
    dtypes = {k: v for k, v in (("weight_dtype", args.weight_dtype),
                                ("kv_dtype", args.kv_dtype)) if v}  # fmt: skip
    given = args.model
    if given is not None and given not in MODELS and (
        given.endswith(".json") or Path(given).is_dir()
    ):  # a Hugging Face config.json, or a checkpoint folder holding one
        fields = load_model_config(given, Path.cwd(), None)
        if fields.get("unmapped"):
            print(f"{fields['name']}: not priced: {fields['unmapped']}")
        return [ModelSpec.model_validate({**fields, **dtypes})]
    return [
        ModelSpec.model_validate({"name": name, **dtypes})
        for name in _pick(args.model, MODELS, "model", "--model")
    ]


def _hardware(args: argparse.Namespace) -> list[HardwareSpec]:
    if args.tensor_parallel < 1:
        raise ScenarioError(
            f"must be at least 1 (got {args.tensor_parallel})", path="--tensor-parallel"
        )
    if args.block_size < 1:
        raise ScenarioError(f"must be at least 1 (got {args.block_size})", path="--block-size")
    update: dict[str, Any] = {
        "tensor_parallel": args.tensor_parallel,
        "data_parallel": args.data_parallel,
        "pipeline_parallel": args.pipeline_parallel,
    }
    if args.expert_parallel:
        update["expert_parallel"] = args.tensor_parallel * args.data_parallel
    if args.gpu_memory_utilization is not None:
        if not 0 < args.gpu_memory_utilization <= 1:
            raise ScenarioError(
                f"must be in (0, 1] (got {args.gpu_memory_utilization})",
                path="--gpu-memory-utilization",
            )
        update["gpu_memory_utilization"] = args.gpu_memory_utilization
    return [
        HardwareSpec.model_validate(HARDWARE[name].model_dump() | update)
        for name in _pick(args.hardware, HARDWARE, "hardware", "--hardware")
    ]


def model_table(models: list[ModelSpec]) -> pd.DataFrame:
    rows = [
        {
            "model": m.name,
            "params_B": m.num_parameters / 1e9,
            "active_B": m.active_parameters / 1e9,
            "layers": m.num_layers,
            "heads": m.num_attention_heads,
            "kv_heads": m.num_kv_heads,
            "head_dim": m.head_dim,
            "weights": m.weight_dtype_name
            + (f"+{m.expert_weight_dtype}" if m.expert_weight_dtype else ""),
            "experts": _experts(m),
            "kv": m.kv_dtype_name,
            "weights_GiB": m.weight_bytes / GiB,
            "kv_bytes/token": int(m.kv_bytes_per_token),
            "max_len": m.max_model_len,
        }
        for m in models
    ]
    return pd.DataFrame(rows)


def _experts(m: ModelSpec) -> str:
    """`256/8+1`: routed experts / per token + shared ones; `-` for a dense model."""
    if m.num_experts is None:
        return "-"
    shared = f"+{m.num_shared_experts}" if m.num_shared_experts else ""
    return f"{m.num_experts}/{m.experts_per_token}{shared}"


def _cents(x: float) -> str:
    return "-" if x != x else f"{x:.2f}"  # NaN: a GPU outside the price table


def hardware_table(gpus: list[HardwareSpec]) -> pd.DataFrame:
    def tera(x: float | None) -> float:
        return float("nan") if x is None else x / 1e12

    rows = [
        {
            "gpu": h.name,
            "memory_GiB": h.memory_bytes / GiB,
            "hbm_TB/s": h.hbm_bandwidth_bytes_per_s / 1e12,
            "bf16_TFLOP/s": tera(h.peak_flops),
            "fp8_TFLOP/s": tera(h.fp8_peak_flops),
            "fp4_TFLOP/s": tera(h.fp4_peak_flops),
            "link_GB/s": (h.interconnect_bandwidth_bytes_per_s or 0) / 1e9,
            "domain": h.scaleup_domain_gpus,
            "usd/GPU-h": _cents(h.economics.usd_per_gpu_hour),
            "tdp_W": h.economics.tdp_w,
            "idle_W": h.economics.idle_w,
        }
        for h in gpus
    ]
    return pd.DataFrame(rows)


def _least_degree(m: ModelSpec, h: HardwareSpec) -> int | None:
    """The smallest tensor degree at which `m` fits on `h`'s layout: with whole experts on every
    GPU of a stage (`--expert-parallel`), at every degree."""
    if h.expert_parallel == 1:
        return min_tensor_parallel(m, h)
    for tp in TP_CANDIDATES:
        update = {"tensor_parallel": tp, "expert_parallel": tp * h.data_parallel}
        try:
            check_fits(m, HardwareSpec.model_validate(h.model_dump() | update))
        except ValueError:  # a pydantic check of the degrees included
            continue
        return tp
    return None


def capacity_table(
    models: list[ModelSpec], gpus: list[HardwareSpec], block_size: int
) -> pd.DataFrame:
    rows = []
    for m in models:
        for h in gpus:
            row: dict[str, Any] = {
                "model": m.name,
                "gpu": h.name,
                "tp": h.tensor_parallel,
                "gpus": h.num_gpus,
                "usable_GiB": h.usable_bytes / GiB,
                "weights_GiB": stored_weight_bytes(m, h) / GiB,  # each rank's dense copy
            }
            try:
                check_fits(m, h)
            except ValueError as exc:
                if "needs a mixture-of-experts model" in str(exc):
                    row["note"] = "dense: no data or expert parallelism"
                    rows.append(row)
                    continue
                need = _least_degree(m, h)
                reason = "cannot shard" if "_parallel (" in str(exc) else "too big"
                row["note"] = f"{reason}; fits at tp {need}" if need else f"{reason}; no tp fits"
                rows.append(row)
                continue
            tokens = kv_capacity_tokens(m, h)
            row |= {
                "kv_bytes/token": int(kv_bytes_per_token_on(m, h)),
                "kv_tokens": tokens,
                f"blocks_of_{block_size}": kv_capacity_blocks(m, h, block_size),
                "max_len_seqs": tokens // m.max_model_len,
                "note": "",
            }
            rows.append(row)
    table = pd.DataFrame(rows)
    for column in table.columns[table.columns.str.startswith(("kv_", "blocks_", "max_len"))]:
        # whole numbers, "-" where the model does not fit
        table[column] = ["-" if pd.isna(v) else int(v) for v in table[column]]
    return table


def _fmt(df: pd.DataFrame) -> str:
    return df.to_string(index=False, float_format=lambda x: f"{x:,.1f}", na_rep="-")


def catalog_command(args: argparse.Namespace) -> int:
    try:
        models, gpus = _models(args), _hardware(args)
    except ValidationError as exc:  # a pydantic check (a dtype combination, a degree's bound)
        raise _flag_error(exc) from None
    if args.model is not None and args.hardware is not None:
        try:
            check_fits(models[0], gpus[0])
        except ValueError as exc:
            reason = str(exc)
            if reason.startswith("hardware.tensor_parallel ("):  # cannot shard the model
                reason = reason.replace("hardware.tensor_parallel", "the degree", 1)
                raise ScenarioError(reason, path="--tensor-parallel") from None
            for field in ("tensor_parallel", "data_parallel", "expert_parallel",
                          "pipeline_parallel"):  # fmt: skip
                flag = "--" + field.replace("_", "-")
                reason = reason.replace(f"hardware.{field}", flag)
            raise ScenarioError(reason, path="--model") from None
    print("Models (params in billions; KV bytes/token for the whole model, tp 1)")
    print(_fmt(model_table(models)))
    print(
        "\nGPUs (per GPU; dense tensor-core FLOP/s; link: NVLink or PCIe, both directions; "
        f"on-demand price and board power: defaults as of {PRICES_AS_OF}, sim/costs/prices.py)"
    )
    print(_fmt(hardware_table(gpus)))
    if args.model is not None or args.hardware is not None:
        print(
            f"\nKV capacity (tensor_parallel {args.tensor_parallel}, data_parallel "
            f"{args.data_parallel}, pipeline_parallel {args.pipeline_parallel}, block size "
            f"{args.block_size}; usable = gpus x memory x gpu_memory_utilization)"
        )
        print(_fmt(capacity_table(models, gpus, args.block_size)))
    return 0
