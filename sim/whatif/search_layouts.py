"""The layouts of a deployment search space, and the parallelism a P/D layout gives each pool.

A layout is `colocated`, `xPyD` (x prefill per y decode instances, each pool at the
configuration's degree), or a mapping that gives one pool or both their own parallelism on the
configuration's GPU, as wide expert parallelism serves decode:

    {prefill: 1, decode: 1, prefill_hardware: {tensor_parallel: 8},
     decode_hardware: {data_parallel: 32, expert_parallel: true}}

A pool's mapping is its whole parallelism: `tensor_parallel` (default 1), `data_parallel`
(default 1), `expert_parallel` (false by default; true, or the GPU count of a stage, puts whole
experts on every GPU of a stage: tensor_parallel x data_parallel of them) and
`pipeline_parallel` (stages of tensor_parallel x data_parallel GPUs each; default 1). A pool
without a mapping takes the configuration's degree (the space's tensor_parallel, data_parallel,
expert_parallel and pipeline_parallel axes). The layout is named by its counts and the pools'
own parallelism: `1p1d[P tp8 / D dp32 ep32]`, `1p1d[P tp4 pp2]`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field, Strict, model_validator

from sim.inputs.strict_model import StrictModel

LAYOUT = re.compile(r"(\d+)p(\d+)d")
ROLES = ("prefill", "decode")


class _KeyedError(ValueError):
    """A cross-field check that names the key at fault (`sim.inputs.messages.problems`)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def parallel_name(tp: int, dp: int, ep: int | None, pp: int = 1) -> str:
    """`tp8`, `dp32 ep32`, `tp2 dp4`, `tp4 pp2`: the degrees of one pool (tensor parallelism is
    named when it is above one or alone, pipeline stages when above one); `ep` None: experts
    split by tensor."""
    parts = [f"tp{tp}"] if tp > 1 or dp == 1 else []
    if dp > 1:
        parts.append(f"dp{dp}")
    if ep is not None:
        parts.append(f"ep{ep}")
    if pp > 1:
        parts.append(f"pp{pp}")
    return " ".join(parts)


def parallel_hardware(tp: int, dp: int, ep: bool, pp: int = 1) -> dict[str, Any]:
    """The hardware keys of a degree: `tensor_parallel`, and `data_parallel` and
    `pipeline_parallel` above one and `expert_parallel` (every GPU of a stage) only when asked,
    so that a space without those axes gives the very mappings (and configuration ids) it gave
    before them."""
    out: dict[str, Any] = {"tensor_parallel": tp}
    if dp > 1:
        out["data_parallel"] = dp
    if ep:
        out["expert_parallel"] = tp * dp
    if pp > 1:
        out["pipeline_parallel"] = pp
    return out


class RoleParallel(StrictModel):
    """A pool's own parallelism in a P/D layout, on the configuration's GPU."""

    tensor_parallel: int = Field(default=1, ge=1, le=64)
    data_parallel: int = Field(default=1, ge=1, le=1024)
    expert_parallel: Annotated[bool, Strict()] | Annotated[int, Field(ge=1, le=65_536)] = False
    pipeline_parallel: int = Field(default=1, ge=1, le=64)

    @model_validator(mode="after")
    def _check_experts(self) -> RoleParallel:
        ep, gpus = self.expert_parallel, self.tensor_parallel * self.data_parallel
        if not isinstance(ep, bool) and ep not in (1, gpus):
            raise _KeyedError(
                "expert_parallel",
                f"{ep} is neither 1 nor every GPU of a stage of the pool (tensor_parallel x "
                f"data_parallel = {gpus}): write true (whole experts on every GPU) or false",
            )
        return self

    @property
    def experts_whole(self) -> bool:
        ep = self.expert_parallel
        gpus = self.tensor_parallel * self.data_parallel
        return ep if isinstance(ep, bool) else (ep == gpus and gpus > 1)

    def hardware(self) -> dict[str, Any]:
        return parallel_hardware(
            self.tensor_parallel, self.data_parallel, self.experts_whole, self.pipeline_parallel
        )

    @property
    def name(self) -> str:
        tp, dp = self.tensor_parallel, self.data_parallel
        return parallel_name(tp, dp, tp * dp if self.experts_whole else None,
                             self.pipeline_parallel)  # fmt: skip


class SplitLayout(StrictModel):
    """A P/D layout as a mapping: x prefill per y decode instances, each pool's parallelism."""

    prefill: int = Field(ge=1, le=16)
    decode: int = Field(ge=1, le=16)
    prefill_hardware: RoleParallel | None = None
    decode_hardware: RoleParallel | None = None


@dataclass(frozen=True)
class Layout:
    name: str  # colocated, 1p2d, 1p1d[P tp8 / D dp32 ep32], 1p1d[P tp4 pp2]
    prefill: int  # per unit (0: colocated)
    decode: int
    # the pools given their own parallelism: role -> hardware keys (tensor_parallel, ...)
    roles: dict[str, dict[str, Any]] = field(default_factory=dict)


def check_layout(value: Any) -> Any:
    """A layout entry's own shape (a mapping is checked key by key by `read_layouts`)."""
    if isinstance(value, dict):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        raise ValueError(
            "not a layout: write colocated or xPyD such as 1p2d (YAML reads an unquoted 1:2 as "
            "a number in base 60)"
        )
    if not isinstance(value, str):
        raise ValueError(
            f"{value!r} is not a layout: write colocated, xPyD such as 1p2d, or a mapping "
            "{prefill, decode, prefill_hardware, decode_hardware}"
        )
    found = LAYOUT.fullmatch(value)
    counts = (int(found[1]), int(found[2])) if found else (0, 0)
    if value != "colocated" and not all(1 <= n <= 16 for n in counts):
        raise ValueError(
            f"{value!r} is not a layout: write colocated or xPyD such as 1p2d (x prefill per y "
            "decode instances, each from 1 to 16)"
        )
    return value
