"""Whether a model fits a layout: sharding, data, expert and pipeline parallelism, memory.

Each check raises ValueError with the reason and the arithmetic (a scenario names the field);
`min_tensor_parallel` finds the smallest tensor-parallel degree that fits.
"""

from __future__ import annotations

from sim.costs.catalog import (
    TP_CANDIDATES,
    GiB,
    HardwareSpec,
    ModelSpec,
    Placement,
    kv_capacity_tokens,
    place,
    stored_weight_bytes,
)


def layout_stem(model: ModelSpec, hw: HardwareSpec, placed: Placement | None = None) -> str:
    """`<model>-<hardware>`, plus `-tp<N>`, `-dp<N>`, `-ep<N>`, `-pp<N>`, `-w<dtype>`,
    `-kv<dtype>` where not the defaults: a profile's name. (`placed`: `model` on `hw`, as
    resolved; else placed here.)"""
    if placed is None:
        placed = place(model, hw)
    stem = f"{model.name}-{hw.name}"
    if hw.tensor_parallel > 1:
        stem += f"-tp{hw.tensor_parallel}"
    for label, degree in (("dp", hw.data_parallel), ("ep", hw.expert_parallel),
                          ("pp", hw.pipeline_parallel)):  # fmt: skip
        if degree > 1:
            stem += f"-{label}{degree}"
    if placed.weight_dtype_name != "bf16":
        stem += f"-w{placed.weight_dtype_name}"
    if placed.kv_dtype_name != "bf16":
        stem += f"-kv{placed.kv_dtype_name}"
    return stem


def check_parallelism(model: ModelSpec, hw: HardwareSpec, placed: Placement | None = None) -> None:
    """Raise ValueError when `hw.tensor_parallel` cannot shard `model` or lacks a link figure,
    or when its data and expert parallelism do not fit the model (`expert_layout_problem`)."""
    problem = expert_layout_problem(model, hw, placed)
    if problem:
        raise ValueError(problem)
    tp = hw.tensor_parallel
    if tp == 1:
        return
    if model.num_attention_heads % tp:
        raise ValueError(
            f"hardware.tensor_parallel ({tp}) must divide {model.name}'s num_attention_heads "
            f"({model.num_attention_heads})"
        )
    if model.num_kv_heads % tp and tp % model.num_kv_heads:
        raise ValueError(
            f"hardware.tensor_parallel ({tp}) must divide or be a multiple of {model.name}'s "
            f"num_kv_heads ({model.num_kv_heads})"
        )
    if hw.interconnect_bandwidth_bytes_per_s is None:
        raise ValueError(
            f"hardware.interconnect_bandwidth_bytes_per_s is required when tensor_parallel > 1 "
            f"({hw.name} has none)"
        )


def expert_layout_problem(
    model: ModelSpec, hw: HardwareSpec, placed: Placement | None = None
) -> str | None:
    """Why `hw`'s data and expert parallelism cannot serve `model`, or None."""
    if placed is None:
        placed = place(model, hw)
    problem = pipeline_problem(model, hw, placed)
    if problem:
        return problem
    dp, ep, extra = hw.data_parallel, hw.expert_parallel, hw.redundant_experts
    if not placed.is_moe:
        if dp > 1 or ep > 1 or extra:
            field = "data_parallel" if dp > 1 else "expert_parallel" if ep > 1 else (
                "redundant_experts")
            return (
                f"hardware.{field} needs a mixture-of-experts model ({model.name} is dense; "
                "replicas of a dense model are separate instances: `instances: N`)"
            )
        return None
    assert model.num_experts is not None
    if extra and ep == 1:
        return (
            f"hardware.redundant_experts ({extra}) needs expert_parallel > 1 (replicas are "
            "placed on expert-parallel ranks)"
        )
    if ep > 1 and (model.num_experts + extra) % ep:
        held = f"num_experts ({model.num_experts})"
        if extra:
            held = f"num_experts + redundant_experts ({model.num_experts} + {extra})"
        return f"hardware.expert_parallel ({ep}) must divide {model.name}'s {held}"
    if placed.stage_gpus > 1 and hw.interconnect_bandwidth_bytes_per_s is None:
        return f"hardware.interconnect_bandwidth_bytes_per_s is required ({hw.name} has none)"
    if placed.stage_gpus > hw.scaleup_domain_gpus and hw.scaleout_bandwidth_bytes_per_s is None:
        return (
            f"hardware.scaleout_bandwidth_bytes_per_s is required: the instance's "
            f"{placed.num_gpus} GPUs span more than one scale-up domain of {hw.scaleup_domain_gpus}"
        )
    return None


def pipeline_problem(
    model: ModelSpec, hw: HardwareSpec, placed: Placement | None = None
) -> str | None:
    """Why `hw`'s pipeline stages cannot split `model`, or None."""
    pp = hw.pipeline_parallel
    if pp == 1:
        return None
    if pp > model.num_layers:
        return f"hardware.pipeline_parallel ({pp}) exceeds {model.name}'s {model.num_layers} layers"
    if hw.interconnect_bandwidth_bytes_per_s is None:
        return f"hardware.interconnect_bandwidth_bytes_per_s is required ({hw.name} has none)"
    gpus = placed.num_gpus if placed is not None else hw.num_gpus
    if gpus > hw.scaleup_domain_gpus and hw.scaleout_bandwidth_bytes_per_s is None:
        return (
            f"hardware.scaleout_bandwidth_bytes_per_s is required: the instance's {gpus} "
            f"GPUs span more than one scale-up domain of {hw.scaleup_domain_gpus}"
        )
    return None


def min_tensor_parallel(model: ModelSpec, hw: HardwareSpec) -> int | None:
    """The smallest degree in TP_CANDIDATES that shards `model` and leaves room for KV."""
    for tp in TP_CANDIDATES:
        candidate = hw.with_tensor_parallel(tp)
        try:
            check_parallelism(model, candidate)
        except ValueError:
            continue
        if kv_capacity_tokens(model, candidate) > 0:
            return tp
    return None


def check_draft_fits(
    model: ModelSpec, draft: ModelSpec, hw: HardwareSpec, placed: Placement | None = None
) -> None:
    """Raise ValueError when a speculative draft model cannot run next to `model` on `hw`
    (`placed`: `model` on `hw` with `draft`, as resolved; else placed here)."""
    if placed is None or placed.draft is None:
        placed = place(model, hw, draft=draft)
    assert placed.draft is not None
    check_parallelism(draft, hw, placed.draft)
    if placed.draft_capacity_tokens > 0:
        return
    raise ValueError(
        f"{draft.name} ({placed.draft.weight_bytes / GiB:.1f} GiB of weights) leaves no room "
        f"for KV next to {model.name} ({placed.weight_bytes / GiB:.1f} GiB) on {hw.name}"
    )


def check_fits(model: ModelSpec, hw: HardwareSpec, placed: Placement | None = None) -> None:
    """Raise ValueError when the weights and the activation reserve leave no room for KV.

    Also rejects a layout that cannot shard the model (`check_parallelism`). (`placed`: `model`
    on `hw`, as resolved; else placed here.)"""
    if placed is None:
        placed = place(model, hw)
    check_parallelism(model, hw, placed)
    if placed.kv_capacity_tokens > 0:
        return
    tp, gpus = hw.tensor_parallel, hw.num_gpus
    if gpus == 1:
        where = f"one {hw.name}"
    elif hw.data_parallel == 1:
        where = f"{tp} x {hw.name} (tensor_parallel {tp})"
    else:
        where = f"{gpus} x {hw.name} (tensor_parallel {tp} x data_parallel {hw.data_parallel})"
    reserve = gpus * hw.activation_reserve_bytes
    hint = ""
    if hw.interconnect_bandwidth_bytes_per_s is not None and hw.data_parallel == 1:
        need = min_tensor_parallel(model, hw)
        if need is None:
            hint = f"; not even hardware.tensor_parallel {TP_CANDIDATES[-1]} fits"
        elif need > tp:
            hint = f"; hardware.tensor_parallel {need} would fit"
    dtype = (
        f"dtype_bytes {model.dtype_bytes:g}"
        if model.dtype_bytes is not None
        else (f"weight_dtype {model.weight_dtype_name}")
    )
    if model.expert_weight_dtype is not None:
        dtype += f", expert_weight_dtype {model.expert_weight_dtype}"
    stored = stored_weight_bytes(model, hw)
    copies = ""
    if hw.data_parallel > 1:
        copies = (
            f", the dense {model.dense_weight_bytes / GiB:.1f} GiB held by each of "
            f"{hw.data_parallel} data-parallel ranks"
        )
    raise ValueError(
        f"{model.name} does not fit on {where}: weights {stored / GiB:.1f} GiB "
        f"({model.num_parameters / 1e9:.1f}B parameters x {model.weight_bytes_per_parameter:g} "
        f"bytes, {dtype}{copies}) "
        f"+ activation reserve {reserve / GiB:.1f} GiB vs usable memory "
        f"{hw.usable_bytes / GiB:.1f} GiB ({gpus} x {hw.memory_bytes / GiB:.1f} GiB x "
        f"gpu_memory_utilization {hw.gpu_memory_utilization}){hint}"
    )
