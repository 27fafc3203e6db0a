"""KV tiers below the GPU: host DRAM, local NVMe, and a remote store that instances share.

A tier holds whole blocks by content hash (the chained hashes of `Request.block_hashes`), up to
its capacity, and evicts the least recently used. Moving blocks costs time: a write of n blocks
occupies the tier's write channel for `latency + n * block_bytes / write_bandwidth` after the
channel is free, and the blocks are readable once it is done; a read (a load into the GPU) takes
`latency + n * block_bytes / read_bandwidth`. Each instance has its own DRAM and NVMe tiers; the
remote tier is one object in every instance's stack, so an instance hits what another computed.
Bandwidths are per instance (a host's PCIe link, a drive, a NIC): reads of different instances
from the shared store do not queue behind each other.

When blocks go down (`TierStack`, the scenario's `kv_tiers.write`):
* `through` (the default; LMCache, Mooncake's store and vLLM's offloading connector store a
  block once it is computed): every full block the GPU caches is written to every tier;
* `eviction` (SGLang HiCache's write-back): a block goes to the first tier only when the GPU
  evicts it, and a tier's evictions go to the next tier.

The stack answers the pool (`sim.core.kv.pool.KVPool`), which alone decides when to ask.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

FOREVER_S = float("inf")
TIER_KINDS = ("dram", "nvme", "remote")  # fastest first; the step log has a column for each


class Tier:
    """One tier's blocks, least recently used first, each with the time it became readable."""

    def __init__(
        self,
        kind: str,
        capacity_blocks: int,
        block_bytes: float,
        read_bytes_per_s: float,
        write_bytes_per_s: float,
        latency_s: float,
    ) -> None:
        if kind not in TIER_KINDS:
            raise ValueError(f"unknown KV tier {kind!r} (one of {', '.join(TIER_KINDS)})")
        if capacity_blocks < 0 or block_bytes <= 0:
            raise ValueError(f"bad KV tier {kind}: {capacity_blocks} blocks of {block_bytes} B")
        if read_bytes_per_s <= 0 or write_bytes_per_s <= 0 or latency_s < 0:
            raise ValueError(f"bad KV tier {kind}: bandwidths must be > 0, latency >= 0")
        self.kind = kind
        self.capacity_blocks = capacity_blocks
        self.block_bytes = block_bytes
        self.read_bytes_per_s = read_bytes_per_s
        self.write_bytes_per_s = write_bytes_per_s
        self.latency_s = latency_s
        self._blocks: OrderedDict[int, float] = OrderedDict()  # hash -> readable from
        self._write_free_s = 0.0  # the write channel is busy until then
        self.num_written = 0  # blocks
        self.num_read = 0
        self.num_evicted = 0

    @property
    def num_blocks(self) -> int:
        return len(self._blocks)

    def holds(self, block_hash: int, now: float) -> bool:
        """Whether the block is here and readable at `now`."""
        ready = self._blocks.get(block_hash)
        return ready is not None and ready <= now

    def write(self, hashes: Sequence[int], now: float) -> list[int]:
        """Store the blocks it lacks (those it has become most recently used); returns the
        blocks evicted to make room, least recently used first."""
        blocks = self._blocks
        if blocks.keys().isdisjoint(hashes):  # the common case: every block is new
            new = list(hashes)
        else:
            new = []
            for block_hash in hashes:
                if block_hash in blocks:
                    blocks.move_to_end(block_hash)
                else:
                    new.append(block_hash)
        if not new or not self.capacity_blocks:
            return []
        start = now if now > self._write_free_s else self._write_free_s
        done = start + self.latency_s + len(new) * self.block_bytes / self.write_bytes_per_s
        self._write_free_s = done
        blocks.update(dict.fromkeys(new, done))  # appended in order, most recently used last
        self.num_written += len(new)
        over = len(blocks) - self.capacity_blocks
        if over <= 0:
            return []
        pop = blocks.popitem
        evicted = [pop(False)[0] for _ in range(over)]  # least recently used first
        self.num_evicted += over
        return evicted

    def read(self, hashes: Sequence[int]) -> float:
        """Load the blocks (all here and readable) into the GPU; the seconds it takes."""
        blocks = self._blocks
        for block_hash in hashes:
            blocks.move_to_end(block_hash)  # a KeyError here: the plan's hit was not stored
        self.num_read += len(hashes)
        return self.latency_s + len(hashes) * self.block_bytes / self.read_bytes_per_s

    def stats(self) -> dict[str, float]:
        """Its traffic so far: blocks and bytes written, read and evicted, blocks held."""
        bb = self.block_bytes
        return {
            "written_blocks": self.num_written,
            "written_bytes": self.num_written * bb,
            "read_blocks": self.num_read,
            "read_bytes": self.num_read * bb,
            "evicted_blocks": self.num_evicted,
            "blocks": len(self._blocks),
        }

    def hashes(self) -> list[int]:
        """The blocks it holds, least recently used first (for checks)."""
        return list(self._blocks)


class TierStack:
    """One instance's tiers below the GPU, fastest first (the remote one shared)."""

    def __init__(self, tiers: Sequence[Tier], *, write: str = "through", load: str = "sync"):
        if write not in ("through", "eviction") or load not in ("sync", "overlap"):
            raise ValueError(f"bad KV tier modes: write {write!r}, load {load!r}")
        kinds = [t.kind for t in tiers]
        if kinds != sorted(kinds, key=TIER_KINDS.index) or len(set(kinds)) != len(kinds):
            raise ValueError(f"KV tiers must be distinct and fastest first, not {kinds}")
        self.tiers = tuple(tiers)
        self.write_through = write == "through"
        self.overlap = load == "overlap"
        self.loaded = dict.fromkeys(kinds, 0)  # blocks this instance loaded from each tier
        self.shared = "remote" in kinds  # the remote store is every instance's

    def found(self, block_hash: int, now: float) -> Tier | None:
        """The fastest tier holding the block readable at `now`."""
        for tier in self.tiers:
            if tier.holds(block_hash, now):
                return tier
        return None

    def may_hold(self, block_hash: int) -> bool:
        """Whether some tier holds the block, readable now or once its write is done."""
        return any(tier.holds(block_hash, FOREVER_S) for tier in self.tiers)

    def run_length(self, hashes: Sequence[int], now: float) -> int:
        """How many of `hashes`, from the first, some tier holds readable at `now`."""
        n = 0
        stores = [tier._blocks for tier in self.tiers]  # hash -> readable from, per tier
        if len(stores) == 1:
            get = stores[0].get
            for block_hash in hashes:
                ready = get(block_hash)
                if ready is None or ready > now:
                    return n
                n += 1
            return n
        for block_hash in hashes:
            for blocks in stores:
                ready = blocks.get(block_hash)
                if ready is not None and ready <= now:
                    break
            else:
                return n
            n += 1
        return n

    def computed(self, hashes: Sequence[int], now: float) -> None:
        """Full blocks the GPU has just cached: written down at once when writing through."""
        if self.write_through:
            for tier in self.tiers:
                tier.write(hashes, now)

    def evicted(self, hashes: Sequence[int], now: float) -> None:
        """Cached blocks the GPU has just evicted: written to the first tier when writing on
        eviction, and a tier's evictions to the next."""
        if self.write_through:
            return
        down: Sequence[int] = hashes
        for tier in self.tiers:
            down = tier.write(down, now)
            if not down:
                return

    def load(self, hashes: Sequence[int], now: float) -> float:
        """Read the blocks into the GPU, each from the fastest tier holding it; the seconds."""
        by_tier: dict[Tier, list[int]] = {}
        for block_hash in hashes:
            tier = self.found(block_hash, now)
            if tier is None:
                raise AssertionError(f"KV tiers: block {block_hash} planned as a hit is gone")
            by_tier.setdefault(tier, []).append(block_hash)
        loaded = self.loaded
        seconds = 0.0
        for tier, group in by_tier.items():
            loaded[tier.kind] += len(group)
            seconds += tier.read(group)
        return seconds

    def occupancy(self) -> tuple[int, int, int]:
        """Blocks held by the DRAM, NVMe and remote tiers (0 where there is none)."""
        held = dict.fromkeys(TIER_KINDS, 0)
        for tier in self.tiers:
            held[tier.kind] = tier.num_blocks
        return held["dram"], held["nvme"], held["remote"]
