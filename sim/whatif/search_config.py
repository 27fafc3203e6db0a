"""One configuration of a deployment search space (`sim.whatif.search_space`): a GPU at a degree
(tensor, data, expert and pipeline parallel), a layout, a policy and a tier option; its label,
the pools, GPUs and engines of one unit, and what it deploys (`deployment`: two configurations
with the same key deploy the very same fleets).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from sim.costs.catalog import HardwareSpec
from sim.whatif.search_layouts import ROLES


@dataclass(frozen=True)
class Config:
    """One point of the space: a GPU at a degree, a layout, a policy and a tier option."""

    id: str
    gpu: str  # the GPU's label
    hardware: dict[str, Any]  # the hardware mapping at the degree (tensor_parallel included)
    tensor_parallel: int
    layout: str  # colocated | xPyD | xPyD[P ... / D ...]
    prefill: int  # per unit (0: colocated)
    decode: int
    policy: dict[str, Any]
    policy_label: str
    # the space's tier option: its mapping (None: no tiers) and its name; tiers_label None: the
    # space lists no kv_tiers, so the scenario's own apply
    kv_tiers: dict[str, Any] | None = None
    tiers_label: str | None = None
    data_parallel: int = 1
    expert_parallel: bool = False  # whole experts on every GPU of the instance
    # a P/D layout's pools with their own parallelism: the hardware mapping of each (None: the
    # pool takes `hardware`)
    prefill_hardware: dict[str, Any] | None = None
    decode_hardware: dict[str, Any] | None = None
    pipeline_parallel: int = 1  # stages per instance

    @property
    def degree(self) -> str:
        """`tp2`, `tp1 dp8`, `tp1 dp8 ep8`, `tp4 pp2`: data parallelism and stages above one,
        experts when whole."""
        text = f"tp{self.tensor_parallel}"
        if self.data_parallel > 1:
            text += f" dp{self.data_parallel}"
        if self.expert_parallel:
            text += f" ep{self.expert_parallel_degree}"
        return f"{text} pp{self.pipeline_parallel}" if self.pipeline_parallel > 1 else text

    @property
    def expert_parallel_degree(self) -> int:
        """The instance's expert_parallel: every GPU of a stage when whole, else 1 (split by
        tensor)."""
        return self.tensor_parallel * self.data_parallel if self.expert_parallel else 1

    @property
    def label(self) -> str:
        label = f"{self.gpu} {self.degree} | {self.layout} | {self.policy_label}"
        return label if self.tiers_label is None else f"{label} | {self.tiers_label}"

    def pool_hardware(self, role: str) -> dict[str, Any]:
        """The hardware of a pool (`prefill`, `decode`; `serve` colocated): its own, or the
        configuration's."""
        own = {"prefill": self.prefill_hardware, "decode": self.decode_hardware}.get(role)
        return own if own is not None else self.hardware

    @property
    def base_hardware(self) -> dict[str, Any]:
        """The scenario's top-level hardware: the configuration's, unless both pools have their
        own (then the decode pool's: the configuration's degree is used by no instance)."""
        if self.prefill_hardware is not None and self.decode_hardware is not None:
            return self.decode_hardware
        return self.hardware

    @property
    def unit_size(self) -> int:
        """Instances in one unit: one, or a P/D group of x prefill and y decode instances."""
        return self.prefill + self.decode if self.prefill else 1

    def unit_pools(self) -> list[tuple[int, dict[str, Any]]]:
        """(instances per unit, hardware) of each pool a unit deploys."""
        if not self.prefill:
            return [(1, self.hardware)]
        return [(self.prefill, self.pool_hardware("prefill")),
                (self.decode, self.pool_hardware("decode"))]  # fmt: skip

    @property
    def instance_gpus(self) -> int:
        """GPUs of one instance at the configuration's degree: tensor x data x pipeline
        parallel."""
        return self.tensor_parallel * self.data_parallel * self.pipeline_parallel

    @cached_property
    def unit_gpus(self) -> int:
        """GPUs of one unit: tensor x data x pipeline parallel per instance
        (`HardwareSpec.num_gpus`), each pool at its own (a configuration that can run)."""
        return sum(count * gpus_of(hardware) for count, hardware in self.unit_pools())

    @property
    def unit_engines(self) -> int:
        """Engines of one unit: each instance runs as one per pipeline stage."""
        return sum(count * int(hw.get("pipeline_parallel", 1)) for count, hw in self.unit_pools())


def gpus_of(hardware: dict[str, Any]) -> int:
    """GPUs of one instance of a hardware mapping that validates (`HardwareSpec.num_gpus`)."""
    return HardwareSpec.model_validate(hardware).num_gpus


def digest(obj: Any) -> str:
    """A short hash of `obj` as sorted JSON: a configuration's id, a deployment's key."""
    text = json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _normal(hardware: dict[str, Any]) -> dict[str, Any]:
    """A hardware mapping as the instance it deploys: degrees of one left out."""
    degrees = ("data_parallel", "expert_parallel", "pipeline_parallel")
    out = {k: v for k, v in hardware.items() if k not in degrees}
    return out | {k: v for k in degrees if (v := hardware.get(k, 1)) != 1}


def deployment(config: Config) -> str:
    """What `config` deploys (the hardware of each pool, their counts, the policy and tiers),
    hashed: two configurations with the same deploy the very same fleets."""
    pools = [_normal(config.pool_hardware(r)) for r in (ROLES if config.prefill else ("serve",))]
    return digest([config.gpu, pools, config.prefill, config.decode, config.policy,
                    config.kv_tiers, config.tiers_label])  # fmt: skip
