"""What the KV memory tiers below the GPU move and cost: host DRAM and a local NVMe drive per
instance, and a remote KV store the instances share (Mooncake store, LMCache's remote backend).

Each tier kind has defaults for the transfers an engine makes to it and for its rent:

- `read_bytes_per_s`: bandwidth of a load, tier to GPU; `write_bytes_per_s`: of a store, GPU to
  tier. Per instance: the figures are one GPU's path (its PCIe link, one drive, one NIC); an
  instance of several GPUs that moves KV over each of them in parallel may scale them.
- `latency_s`: fixed cost of one transfer, paid before its bytes flow.
- `usd_per_gb_hour`: rent of one GB for an hour, so a tier of `c` GB adds `c * usd_per_gb_hour`
  to the fleet's dollars per hour (`tier_cost_per_hour`). GB here is the unit clouds bill memory
  and disks in, 2**30 bytes (`GB_BYTES`). The remote store is one pool: its capacity is the pool's,
  priced once for the fleet, not once per instance.

Each value's source is beside it. Bandwidths and latencies are measured or datasheet figures of
H100-class servers; prices are on-demand cloud list prices, derived as the comments show. They are
defaults, not quotes: `tier_cost_per_hour` takes a price per GB-hour that wins over the default.

DRAM is priced at the memory premium of a cloud instance family (a memory-optimized instance minus
the general-purpose one with the same CPUs), i.e. as if bought apart from the server. GPU clouds
include the host's DRAM in the GPU-hour (sim/costs/prices.py), so this is the marginal price of
memory set aside for KV, not a bill a GPU renter sees. The remote store is priced as dedicated
memory-optimized nodes, CPUs included; pooling the spare DRAM of the GPU hosts themselves, as
Mooncake does, costs the DRAM price instead (pass it as the override).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

TierKind = Literal["dram", "nvme", "remote"]
TIER_KINDS: tuple[str, ...] = ("dram", "nvme", "remote")

# the unit of capacities and prices here (GiB), as clouds bill memory and disks
GB_BYTES = 1024**3
# hours in the billing month of cloud list prices per GB-month (730 = 8,760 / 12)
HOURS_PER_MONTH = 730.0


@dataclass(frozen=True)
class TierDefaults:
    """Bandwidths (bytes/s) and latency (s) of one instance's transfers; price per GB-hour."""

    read_bytes_per_s: float
    write_bytes_per_s: float
    latency_s: float
    usd_per_gb_hour: float


TIER_DEFAULTS: dict[str, TierDefaults] = {
    # Host DRAM over the GPU's PCIe Gen5 x16 link (pinned memory, copy engines)
    "dram": TierDefaults(
        # nvbandwidth v0.10 host_to_device_memcpy_ce on an 8x H100 80GB HBM3 server: 55.4 GB/s
        read_bytes_per_s=55.4e9,
        # nvbandwidth v0.10 device_to_host_memcpy_ce, same server: 55.2 GB/s per GPU
        write_bytes_per_s=55.2e9,
        # p2pBandwidthLatencyTest, same server: 14-19 us per copy staged through host memory, which
        # is two host copies: about 10 us each
        latency_s=10e-6,
        # AWS us-east-1: r7i.xlarge $0.2646/h (32 GiB) - m7i.xlarge $0.2016/h (16 GiB), 4 vCPU each
        usd_per_gb_hour=(0.2646 - 0.2016) / 16,
    ),
    # A datacenter NVMe drive (PCIe Gen5 x4) in the GPU server
    "nvme": TierDefaults(
        # Samsung PM1743 specification (announced Dec 2021): 13,000 MB/s sequential read
        read_bytes_per_s=13.0e9,
        # Samsung PM1743 specification: 6,600 MB/s sequential write
        write_bytes_per_s=6.6e9,
        # Micron 9200 NVMe datasheet: typical QD1 latency 92-150 us read, 21 us write; 100 us
        latency_s=100e-6,
        # Google Cloud Local SSD list price $0.080 per GB-month over a 730-hour month
        usd_per_gb_hour=0.080 / HOURS_PER_MONTH,
    ),
    # A remote KV store over RDMA, one 400 Gb/s NIC per instance
    "remote": TierDefaults(
        # Mooncake Transfer Engine README: 190 GB/s over 8 x 400 Gb/s RoCE, 23.75 GB/s per NIC
        read_bytes_per_s=190e9 / 8,
        # the same per-NIC figure: an RDMA write crosses the same link (one figure is published)
        write_bytes_per_s=190e9 / 8,
        # a lookup RPC to the store's master, then the RDMA read (~3 us): Mooncake master RPCs were
        # logged at 1.2-2.5 ms on one host with per-request logging on (LMCache PR #498); 1 ms
        latency_s=1e-3,
        # dedicated store nodes priced as AWS us-east-1 r7i.xlarge: $0.2646/h for 32 GiB
        usd_per_gb_hour=0.2646 / 32,
    ),
}


def tier_defaults(kind: str) -> TierDefaults:
    """The defaults of tier `kind`; ValueError naming the kinds for any other."""
    try:
        return TIER_DEFAULTS[kind]
    except KeyError:
        raise ValueError(
            f"unknown KV tier kind {kind!r} (known: {', '.join(TIER_KINDS)})"
        ) from None


def tier_cost_per_hour(
    kind: str, capacity_gb: float, price_per_gb_hour: float | None = None
) -> float:
    """US dollars per hour for `capacity_gb` GB of tier `kind`: `price_per_gb_hour` when given,
    else the tier's default price. Rent is per GB provisioned, used or not."""
    default = tier_defaults(kind).usd_per_gb_hour
    if not (math.isfinite(capacity_gb) and capacity_gb >= 0):
        raise ValueError(f"{kind} capacity_gb must be a finite number >= 0, got {capacity_gb}")
    price = default if price_per_gb_hour is None else price_per_gb_hour
    if not (math.isfinite(price) and price >= 0):
        raise ValueError(f"{kind} price_per_gb_hour must be a finite number >= 0, got {price}")
    return capacity_gb * price


# the capacity of an unbounded tier, in blocks: more than any run can write
UNBOUNDED_BLOCKS = 1 << 62


@dataclass(frozen=True)
class TierGeometry:
    """One tier on one instance, in the units the KV pool works in: capacity in blocks, bytes
    per second each way, seconds per transfer."""

    kind: str
    capacity_blocks: int
    block_bytes: float
    read_bytes_per_s: float
    write_bytes_per_s: float
    latency_s: float


def tier_geometry(
    kind: str,
    capacity_gb: float | None,
    block_bytes: float,
    lanes: int,
    *,
    read_gb_per_s: float | None = None,
    write_gb_per_s: float | None = None,
    latency_s: float | None = None,
) -> TierGeometry:
    """Tier `kind` of `capacity_gb` GB (None: unbounded) holding blocks of `block_bytes`, on an
    instance moving KV over `lanes` GPU paths at once: DRAM and the remote store scale by them,
    a local drive does not (one per instance). Bandwidths in GB/s (1e9 bytes) and the latency
    override the defaults."""
    d = tier_defaults(kind)
    lanes = lanes if kind != "nvme" else 1
    read = read_gb_per_s * 1e9 if read_gb_per_s is not None else d.read_bytes_per_s
    write = write_gb_per_s * 1e9 if write_gb_per_s is not None else d.write_bytes_per_s
    return TierGeometry(
        kind,
        UNBOUNDED_BLOCKS if capacity_gb is None else int(capacity_gb * GB_BYTES // block_bytes),
        block_bytes,
        read * lanes,
        write * lanes,
        latency_s if latency_s is not None else d.latency_s,
    )
