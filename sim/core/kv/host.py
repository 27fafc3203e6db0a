"""Host memory for KV: the one account of what swapped-out requests hold on the host.

vLLM sizes host KV memory with separate flags (`--swap-space` for preemption by swap, the
offloading connector's size for cached blocks), and so does a scenario: the swap space is
`policy.preemption.host_memory_gb`, the DRAM tier's capacity is `kv_tiers.dram.capacity_gb`
(`sim.core.kv.tiers`). The instance's `HostMemory` owns the first; the DRAM tier owns its
blocks. A swapped
request's bytes include every model's KV for its tokens (a draft model's too), because
`KVSpec.bytes_per_token` does. Planning asks `free_bytes` and `bytes_for`; only the engine moves
bytes, each copy taking `seconds` at the swap bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KVSpec:
    """An instance's KV geometry beyond the pool: bytes per token on this instance (with tensor
    parallelism, as stored), and the host memory and bandwidth that swapping uses."""

    bytes_per_token: float
    swap_bandwidth_bytes_per_s: float = 25e9
    host_memory_bytes: float = 64e9


class HostMemory:
    def __init__(
        self, swap_bytes: float, bytes_per_token: float = 0.0, bandwidth_bytes_per_s: float = 25e9
    ) -> None:
        if not swap_bytes >= 0:
            raise ValueError(f"bad host swap space: {swap_bytes} bytes")
        self.swap_bytes = swap_bytes
        self._swapped = 0
        self._bytes_per_token = bytes_per_token  # on this instance (with tensor parallelism)
        self._bandwidth = bandwidth_bytes_per_s

    def bytes_for(self, num_tokens: int) -> int:
        """Bytes a swap of `num_tokens` tokens' KV copies."""
        return int(num_tokens * self._bytes_per_token)

    def seconds(self, nbytes: int) -> float:
        """Seconds a copy of `nbytes` to or from host memory takes."""
        return nbytes / self._bandwidth

    @property
    def free_bytes(self) -> float:
        """Swap space left."""
        return self.swap_bytes - self._swapped

    @property
    def swapped_bytes(self) -> int:
        return self._swapped

    def swap_out(self, nbytes: int) -> None:
        if nbytes > self.free_bytes:
            raise AssertionError(f"host memory: {nbytes} B swapped out, {self.free_bytes} free")
        self._swapped += nbytes

    def swap_in(self, nbytes: int) -> None:
        if nbytes > self._swapped:
            raise AssertionError(f"host memory: {nbytes} B swapped in, {self._swapped} out")
        self._swapped -= nbytes
