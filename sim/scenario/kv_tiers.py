"""The scenario's `kv_tiers`: KV memory below the GPU (host DRAM, local NVMe, a shared store).

    kv_tiers:
      write: through        # through (default): computed blocks are written down at once;
                            # eviction: a block goes down when the tier above evicts it
      load: sync            # sync (default): a step waits for its admissions' loads;
                            # overlap: loads run under the step's compute (layer by layer)
      dram:   {capacity_gb: 256}               # per instance
      nvme:   {capacity_gb: 2000}              # per instance
      remote: {capacity_gb: unbounded}         # one store that every instance shares

Each tier takes `capacity_gb` (GB = 2**30 bytes, as clouds bill memory; `unbounded` for a what-if
with no limit), and may override the catalog's `read_gb_per_s`, `write_gb_per_s` (1e9 bytes/s),
`latency_s` and `price_per_gb_hour` (`sim.costs.memory_tiers`, with sources). Bandwidths are one
GPU's path; an instance of several GPUs moves DRAM and remote KV over each GPU's link in parallel
(scaled by tensor parallelism), a local drive's is the drive's. Tiers need prefix caching: a
lower tier holds blocks by content hash (`sim.core.kv.tiers`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, field_validator

from sim.costs.memory_tiers import GB_BYTES, tier_cost_per_hour, tier_defaults
from sim.inputs.strict_model import StrictModel

UNBOUNDED_BLOCKS = 1 << 62


class _Strict(StrictModel):
    model_config = ConfigDict(frozen=True)


class TierSpec(_Strict):
    capacity_gb: float | Literal["unbounded"] = Field(union_mode="left_to_right")
    read_gb_per_s: float | None = Field(default=None, gt=0, le=10_000)
    write_gb_per_s: float | None = Field(default=None, gt=0, le=10_000)
    latency_s: float | None = Field(default=None, ge=0, le=10)
    price_per_gb_hour: float | None = Field(default=None, ge=0, le=100)

    @field_validator("capacity_gb")
    @classmethod
    def _in_range(cls, cap: float | str) -> float | str:
        if isinstance(cap, float) and not 0 <= cap <= 1e7:
            raise ValueError(f"{cap} is out of range (0 to 1e7 GB, or unbounded)")
        return cap


class KVTiersSpec(_Strict):
    write: Literal["through", "eviction"] = "through"
    load: Literal["sync", "overlap"] = "sync"
    dram: TierSpec | None = None
    nvme: TierSpec | None = None
    remote: TierSpec | None = None

    def given(self) -> list[tuple[str, TierSpec]]:
        """(kind, spec) of each tier given, fastest first."""
        out = [("dram", self.dram), ("nvme", self.nvme), ("remote", self.remote)]
        return [(kind, spec) for kind, spec in out if spec is not None]


class TierGeometry:
    """One tier's figures on one instance: capacity in blocks, bytes per second, latency."""

    def __init__(self, kind: str, spec: TierSpec, block_bytes: float, tensor_parallel: int):
        d = tier_defaults(kind)
        lanes = tensor_parallel if kind != "nvme" else 1
        read = spec.read_gb_per_s * 1e9 if spec.read_gb_per_s is not None else d.read_bytes_per_s
        write = (
            spec.write_gb_per_s * 1e9 if spec.write_gb_per_s is not None else d.write_bytes_per_s
        )
        self.kind = kind
        self.read_bytes_per_s = read * lanes
        self.write_bytes_per_s = write * lanes
        self.latency_s = spec.latency_s if spec.latency_s is not None else d.latency_s
        cap = spec.capacity_gb
        self.capacity_blocks = (
            UNBOUNDED_BLOCKS if cap == "unbounded" else int(float(cap) * GB_BYTES // block_bytes)
        )
        self.block_bytes = block_bytes


def tiers_cost_per_hour(spec: KVTiersSpec | None, num_instances: int) -> float:
    """Dollars per hour of the tiers: DRAM and NVMe on every instance, the remote store once.
    An unbounded tier is priced at nothing (a what-if, not a purchase)."""
    if spec is None:
        return 0.0
    total = 0.0
    for kind, tier in spec.given():
        if tier.capacity_gb == "unbounded":
            continue
        each = tier_cost_per_hour(kind, float(tier.capacity_gb), tier.price_per_gb_hour)
        total += each if kind == "remote" else each * num_instances
    return total
