"""The parts a request (`sim.core.request.Request`) keeps apart from its own fields: what its
tokens are and what of them the prefix cache holds (`Prefix`), and those made on the first need,
which most requests never have: its preemption and swap tallies (`Evictions`), its speculative
verify steps (`SpecTally`) and its P/D hand-off and transfer (`Transfer`). Also what a request
reads of the decode batch it is a member of (`BatchView`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from sim.core.block_hash import block_hashes

NAN = math.nan


class BatchView(Protocol):
    """What a member reads of its decode batch (`sim.core.decode_batch.DecodeBatch`)."""

    clock: int
    paged: bool
    block_size: int
    last_emit_s: float

    def max_gap_since(self, record: int) -> float: ...


class Prefix:
    """What a request's tokens are and what of them the prefix cache holds: a content id per
    `unit` tokens (equal ids meaning equal tokens) for its first `tokens` tokens, the chained
    hashes of its full blocks (for one block size at a time), the hashes of the cached blocks it
    holds, the leading full blocks the cache has looked at, and the prompt tokens it found
    cached."""

    __slots__ = ("cached_blocks", "cached_tokens", "content", "hash_bs", "hashes", "scanned",
                 "tokens", "unit")  # fmt: skip

    def __init__(self, content: Sequence[int] | np.ndarray, unit: int, tokens: int) -> None:
        self.content: Sequence[int] | np.ndarray = content
        self.unit = unit
        self.tokens = tokens
        self.hashes: tuple[int, ...] = ()
        self.hash_bs = 0
        self.cached_blocks: list[int] = []
        self.scanned = 0
        self.cached_tokens = 0

    def block_hashes(self, block_size: int) -> tuple[int, ...]:
        if self.hash_bs == block_size:
            return self.hashes
        unit = self.unit
        covered = min(len(self.content) * unit, self.tokens) if unit else 0
        self.hashes = block_hashes(self.content, unit, covered, block_size)
        self.hash_bs = block_size
        return self.hashes


class Evictions:
    """A preempted request's tallies: preemptions, recomputed tokens, swaps, the bytes they
    copied out and those on the host now."""

    __slots__ = ("host_bytes", "preemptions", "recomputed_tokens", "swapped_bytes", "swaps")

    def __init__(self) -> None:
        self.preemptions = 0
        self.recomputed_tokens = 0
        self.swaps = 0
        self.swapped_bytes = 0
        self.host_bytes = 0


class SpecTally:
    """A request's speculative verify steps, the tokens proposed and accepted in them, and the
    (proposed, accepted) of its last verify steps when the engine measures a window."""

    __slots__ = ("accepted", "proposed", "recent", "steps")

    def __init__(self) -> None:
        self.steps = 0
        self.proposed = 0
        self.accepted = 0
        self.recent: deque[tuple[int, int]] | None = None


class Transfer:
    """P/D: when a request was handed off, its KV transfer's start and end, and where to."""

    __slots__ = ("decode_instance", "end_s", "handoff_s", "start_s")

    def __init__(self, handoff_s: float) -> None:
        self.handoff_s = handoff_s
        self.start_s = NAN
        self.end_s = NAN
        self.decode_instance = -1
