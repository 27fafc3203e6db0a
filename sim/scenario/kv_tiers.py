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
lower tier holds blocks by content hash (`sim.core.kv.tiers`). What a tier is on an instance in
blocks and bytes per second is the tier's own arithmetic (`sim.costs.memory_tiers.tier_geometry`),
worked out once per instance group when the scenario resolves.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, field_validator

from sim.costs.memory_tiers import TierGeometry, tier_cost_per_hour, tier_geometry
from sim.inputs.strict_model import StrictModel


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

    def geometry(self, kind: str, block_bytes: float, lanes: int) -> TierGeometry:
        """This tier on one instance of `lanes` GPUs, holding blocks of `block_bytes`
        (`sim.costs.memory_tiers.tier_geometry`)."""
        cap = self.capacity_gb
        return tier_geometry(
            kind,
            None if cap == "unbounded" else float(cap),
            block_bytes,
            lanes,
            read_gb_per_s=self.read_gb_per_s,
            write_gb_per_s=self.write_gb_per_s,
            latency_s=self.latency_s,
        )


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

    def geometry(self, block_bytes: float, lanes: int) -> tuple[TierGeometry, ...]:
        """Every tier given, fastest first, on one instance (`TierSpec.geometry`)."""
        return tuple(tier.geometry(kind, block_bytes, lanes) for kind, tier in self.given())


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
