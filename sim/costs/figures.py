"""What a run reads of a model on an instance's GPUs, worked out once when a scenario resolves.

The catalog (`sim.costs.catalog`) derives every figure from a model and a GPU, and the fit
checks (`sim.costs.fits`, `sim.costs.windows`) say whether a layout can serve. A scenario
resolves its model once (`resolve_model`: it fits the scenario's hardware; its weight bytes and
FLOPs per token) and each instance group once (`resolve_instance`: the group's layout fits,
with its sliding windows and draft model; its figures), and the stages after it (building the
instances, the summary's context, the fleet's bill) read these plain numbers instead of asking
the catalog again. A layout that cannot serve is a `LayoutProblem` naming what to blame.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sim.costs.catalog import HardwareSpec, ModelSpec, Placement, place
from sim.costs.fits import check_draft_fits, check_fits
from sim.costs.windows import check_sliding_fits

Blame = Literal["hardware", "seats", "draft"]


class LayoutProblem(ValueError):
    """Why a model cannot run on a layout, and what to blame: `hardware` (the model does not
    fit or shard), `seats` (the running sequences' sliding windows leave no KV block), `draft`
    (the draft model does not fit next to the target)."""

    def __init__(self, blame: Blame, reason: str) -> None:
        super().__init__(reason)
        self.blame: Blame = blame


@dataclass(frozen=True)
class ModelFigures:
    """The model's own figures the summary reads."""

    weight_bytes: float
    flops_per_token: float  # one multiply-add per active parameter
    placed: Placement  # the model on the scenario's hardware: what its profile reads


def resolve_model(model: ModelSpec, hw: HardwareSpec) -> ModelFigures:
    """The model's figures, once it fits `hw` (else a `LayoutProblem` blaming the hardware)."""
    placed = place(model, hw)
    try:
        check_fits(model, hw, placed)
    except ValueError as exc:
        raise LayoutProblem("hardware", str(exc)) from None
    return ModelFigures(placed.weight_bytes, placed.flops_per_token, placed)


def resolve_instance(
    model: ModelSpec,
    hw: HardwareSpec,
    *,
    block_size: int,
    seats: int,
    stated_blocks: int | None = None,
    draft: ModelSpec | None = None,
    fits: bool = False,
) -> InstanceFigures:
    """`instance_figures` once the layout can serve: `model` fits `hw` (unless `fits` says it
    was checked already), `seats` running sequences leave a KV block next to their sliding
    windows (when the blocks are not stated), and a speculative `draft` model fits next to the
    target. A layout that cannot is a `LayoutProblem`."""
    placed = place(model, hw, draft=draft, seats=seats, block_size=block_size)
    blame: Blame = "hardware"
    try:
        if not fits:
            check_fits(model, hw, placed)
        blame = "seats"
        if stated_blocks is None:
            check_sliding_fits(model, hw, seats, block_size, placed)
        blame = "draft"
        if draft is not None:
            check_draft_fits(model, draft, hw, placed)
    except ValueError as exc:
        raise LayoutProblem(blame, str(exc)) from None
    return instance_figures(
        model, hw, block_size=block_size, seats=seats, stated_blocks=stated_blocks, draft=draft,
        placed=placed,
    )  # fmt: skip


@dataclass(frozen=True)
class InstanceFigures:
    """One instance group's model on its GPUs.

    `kv_bytes_per_token` is the target model's KV per token; `moved_bytes_per_token` adds a
    speculative draft model's own KV of every token (what swapping and the tiers below move).
    `kv_blocks` is the instance's KV pool in blocks of the policy's size: stated, or what fits
    next to the weights. Per engine (a pipelined instance runs `engines` virtual engines, each
    one stage's GPUs): `engine_gpus`, `peak_flops`, `hbm_bandwidth_bytes_per_s`. Price and
    power per GPU: the hardware's fields, else the catalog's defaults."""

    label: str  # `h100-sxm`, `h100-sxmx8`, or `h100-sxmx16 pp4` for one engine of 4 stages
    kv_bytes_per_token: float
    moved_bytes_per_token: float
    kv_blocks: int
    num_gpus: int
    engines: int
    engine_gpus: int
    peak_flops: float
    hbm_bandwidth_bytes_per_s: float
    usd_per_gpu_hour: float
    tdp_w: float
    idle_w: float
    # the model (with a draft's) on the group's hardware: what its profiles read
    placed: Placement | None = None


def instance_figures(
    model: ModelSpec,
    hw: HardwareSpec,
    *,
    block_size: int,
    seats: int,
    stated_blocks: int | None = None,
    draft: ModelSpec | None = None,
    placed: Placement | None = None,
) -> InstanceFigures:
    """The figures of `model` on `hw` with KV blocks of `block_size` tokens: `stated_blocks`
    when the policy states them, else what fits next to the weights (a `draft` model's weights
    and KV included; sliding-window layers' windows set aside for `seats` running sequences).
    Static batching's one-token blocks are its contiguous reservation (`kv_capacity_blocks` at
    block size 1 is the token capacity). (`placed`: `model` on `hw` with these, as resolved;
    else placed here.)"""
    if placed is None:
        placed = place(model, hw, draft=draft, seats=seats, block_size=block_size)
    own = placed.kv_bytes_per_token
    moved = own if placed.draft is None else own + placed.draft.kv_bytes_per_token
    blocks = stated_blocks or placed.kv_blocks
    gpus, engines = placed.num_gpus, hw.pipeline_parallel
    name = hw.name if gpus == 1 else f"{hw.name}x{gpus}"
    figures = placed.economics
    return InstanceFigures(
        label=name if engines == 1 else f"{name} pp{engines}",
        kv_bytes_per_token=own,
        moved_bytes_per_token=moved,
        kv_blocks=blocks,
        num_gpus=gpus,
        engines=engines,
        engine_gpus=gpus // engines,
        peak_flops=placed.instance_peak_flops / engines,
        hbm_bandwidth_bytes_per_s=placed.instance_hbm_bandwidth_bytes_per_s / engines,
        usd_per_gpu_hour=figures.usd_per_gpu_hour,
        tdp_w=figures.tdp_w,
        idle_w=figures.idle_w,
        placed=placed,
    )
