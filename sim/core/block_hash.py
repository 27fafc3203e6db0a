"""Chained block hashes for prefix caching, computed in one vectorized pass per request.

A request's tokens are described by content ids, one per `unit` tokens (equal ids: equal tokens).
Full KV block b (tokens [0, (b + 1) * block_size)) is named by its whole prefix: the ids of the
units up to the one holding the block's last token, and the block's end. Two requests' blocks b
get the same name exactly when those ids agree, which is what vLLM's chained hash (each block's
hash over its parent's and its own tokens) expresses.

The name is a polynomial hash modulo 2**64 of the ids so far, h_k = sum_j (id_j + 1) * P**(k-j),
mixed with the end token count. It is computed for all units at once as
P**k * cumsum((id_j + 1) * P**-j), numpy's uint64 arithmetic wrapping modulo 2**64 (P is odd, so
it has an inverse), which costs a few microseconds per request where a Python loop of tuple
hashes cost one per block.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

_P = 0x9E3779B97F4A7C15  # odd: invertible modulo 2**64
_P_INV = pow(_P, -1, 1 << 64)
_MIX = 0xBF58476D1CE4E5B9  # spreads the end token count over the word

_powers: npt.NDArray[np.uint64] = np.ones(1, dtype=np.uint64)  # P**k
_inverses: npt.NDArray[np.uint64] = np.ones(1, dtype=np.uint64)  # P**-k


def _grow(n: int) -> None:
    """Make the power tables hold at least `n` entries (doubling, so growth is amortized)."""
    global _powers, _inverses
    size = max(n, 2 * len(_powers))
    with np.errstate(over="ignore"):
        _powers = np.cumprod(np.full(size, _P, dtype=np.uint64)) * np.uint64(_P_INV)
        _inverses = np.cumprod(np.full(size, _P_INV, dtype=np.uint64)) * np.uint64(_P)
    _powers[0] = _inverses[0] = 1


_geometry: dict[tuple[int, int, int], tuple[npt.NDArray[np.uint64], npt.NDArray[np.intp], int]] = {}
MAX_GEOMETRIES = 1 << 14  # (blocks, block size, unit) shapes kept


def _shape(
    num_blocks: int, block_size: int, unit: int
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.intp], int]:
    """Each block's end token count, the unit holding its last token, and the units needed:
    they depend on the shape alone, so they are kept per shape."""
    key = (num_blocks, block_size, unit)
    shape = _geometry.get(key)
    if shape is None:
        ends = np.arange(1, num_blocks + 1, dtype=np.uint64) * np.uint64(block_size)
        last = ((ends - np.uint64(1)) // np.uint64(unit)).astype(np.intp)
        shape = (ends, last, int(last[-1]) + 1)
        if len(_geometry) < MAX_GEOMETRIES:
            _geometry[key] = shape
    return shape


def block_hashes(
    content: Sequence[int] | np.ndarray, unit: int, covered_tokens: int, block_size: int
) -> tuple[int, ...]:
    """Names of the full blocks of `block_size` tokens among the first `covered_tokens` tokens,
    whose content is `content` (one id per `unit` tokens)."""
    num_blocks = covered_tokens // block_size
    if num_blocks <= 0:
        return ()
    ends, last, num_units = _shape(num_blocks, block_size, unit)
    if len(_powers) < num_units:
        _grow(num_units)
    ids = np.asarray(content[:num_units], dtype=np.int64).astype(np.uint64) + np.uint64(1)
    with np.errstate(over="ignore"):
        prefix = _powers[:num_units] * np.cumsum(ids * _inverses[:num_units], dtype=np.uint64)
        names = prefix[last] * np.uint64(_MIX) + ends
    out: list[int] = names.tolist()
    return tuple(out)
