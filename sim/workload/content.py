"""Content ids for synthetic workloads: shared system prompts, and ids unique to a request.

Prefix caching needs to know which tokens of different requests are equal. A synthetic workload
describes its tokens in units of `UNIT_TOKENS`: a unit of a shared system prompt has an id every
request using that prompt shares; any other unit has an id of its own. A unit that would hold
both a system prompt's tail and a request's own tokens is the request's own (its tokens differ).

Shared prefixes: a pool of `num_prefixes` system prompts with lengths from a distribution and
Zipf popularity (rank k drawn with weight 1 / k**zipf) is put in front of a `fraction` of the
prompts, which grow by the prefix's length. Everything is drawn from the generator given, so the
rest of the workload does not move when prefixes are added.
"""

from __future__ import annotations

import numpy as np

from sim.workload.arrays import Content
from sim.workload.lengths import TraceCache, sample_lengths
from sim.workload.spec import SharedPrefixSpec

UNIT_TOKENS = 16
_PREFIX_BASE = 1 << 40  # prefix k's unit j: _PREFIX_BASE + k * 2**24 + j
_OWN_BASE = 1 << 50  # owner o's unit j: _OWN_BASE + o * 2**24 + j


def prefix_unit(prefix: int, unit: int) -> int:
    return _PREFIX_BASE + (prefix << 24) + unit


def own_unit(owner: int, unit: int) -> int:
    return _OWN_BASE + (owner << 24) + unit


def draw_prefixes(
    spec: SharedPrefixSpec, n: int, rng: np.random.Generator, traces: TraceCache
) -> tuple[np.ndarray, np.ndarray]:
    """Per request: the system prompt it starts with (-1: none) and that prompt's length."""
    lengths = sample_lengths(spec.length, spec.num_prefixes, rng, traces)
    weights = 1.0 / np.arange(1, spec.num_prefixes + 1, dtype=np.float64) ** spec.zipf
    chosen = rng.choice(spec.num_prefixes, size=n, p=weights / weights.sum())
    uses = rng.random(n) < spec.fraction
    prefix = np.where(uses, chosen, -1).astype(np.int64)
    return prefix, np.where(uses, lengths[chosen], 0).astype(np.int64)


def units(prefix: int, prefix_tokens: int, owner: int, total_tokens: int) -> list[int]:
    """Content ids of a token sequence: the prefix's whole units, then units of its own."""
    shared = prefix_tokens // UNIT_TOKENS if prefix >= 0 else 0
    count = -(-total_tokens // UNIT_TOKENS)
    return [prefix_unit(prefix, j) for j in range(shared)] + [
        own_unit(owner, j) for j in range(shared, count)
    ]


def build_content(
    prefix: np.ndarray, prefix_tokens: np.ndarray, prompt_tokens: np.ndarray
) -> Content:
    """Content of independent requests: request i owns its units (owner id i)."""
    ids: list[int] = []
    offsets = [0]
    for i, (p, length, total) in enumerate(
        zip(prefix.tolist(), prefix_tokens.tolist(), prompt_tokens.tolist(), strict=True)
    ):
        ids.extend(units(p, length, i, total))
        offsets.append(len(ids))
    return Content(
        ids=np.asarray(ids, dtype=np.int64),
        offsets=np.asarray(offsets, dtype=np.int64),
        unit=UNIT_TOKENS,
        tokens=prompt_tokens.copy(),
    )
