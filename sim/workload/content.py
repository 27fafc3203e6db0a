"""Content ids for synthetic workloads: shared system prompts, and ids unique to a request.

Prefix caching needs to know which tokens of different requests are equal. A synthetic workload
describes its tokens in units of `UNIT_TOKENS`: a unit of a shared system prompt has an id every
request using that prompt shares; any other unit has an id of its own. A unit that would hold
both a system prompt's tail and a request's own tokens is the request's own (its tokens differ).

Shared prefixes: a pool of `num_prefixes` system prompts with lengths from a distribution and
Zipf popularity (rank k drawn with weight 1 / k**zipf) is put in front of a `fraction` of the
prompts, which grow by the prefix's length. Everything is drawn from the generator given, so the
rest of the workload does not move when prefixes are added.

The ids' memory is estimated from the spec before anything is generated (`sim.workload.budget`)
and checked again here from the real token counts before the ids are built.
"""

from __future__ import annotations

import numpy as np

from sim.errors import ScenarioError
from sim.workload.arrays import Content
from sim.workload.budget import CONTENT_UNIT_TOKENS, content_problem
from sim.workload.lengths import TraceCache, sample_lengths
from sim.workload.spec import SharedPrefixSpec

UNIT_TOKENS = CONTENT_UNIT_TOKENS
_PREFIX_BASE = 1 << 40  # prefix k's unit j: _PREFIX_BASE + k * 2**24 + j
_OWN_BASE = 1 << 50  # owner o's unit j: _OWN_BASE + o * 2**24 + j


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


def content_ids(
    prefix: np.ndarray, prefix_tokens: np.ndarray, owner: np.ndarray, total_tokens: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Content ids of many token sequences at once, and where each one's start (`offsets`, one
    more than sequences): sequence i has its prefix's whole units (none when prefix[i] < 0),
    then units of its owner's own."""
    shared = np.where(prefix >= 0, prefix_tokens // UNIT_TOKENS, 0)
    count = -(-total_tokens // UNIT_TOKENS)
    offsets = np.zeros(len(count) + 1, dtype=np.int64)
    np.cumsum(count, out=offsets[1:])
    # the ids are known to be too many only now for a trace's prompts or drawn lengths: refused
    # with the estimate before the arrays are built, not by the allocator
    too_many = content_problem(int(offsets[-1]))
    if too_many is not None:
        raise ScenarioError(too_many, path="workload")
    position = np.arange(offsets[-1], dtype=np.int64) - np.repeat(offsets[:-1], count)
    ids = np.where(
        position < np.repeat(shared, count),
        _PREFIX_BASE + (np.repeat(prefix, count) << 24) + position,
        _OWN_BASE + (np.repeat(owner, count) << 24) + position,
    )
    return ids.astype(np.int64), offsets


def build_content(
    prefix: np.ndarray, prefix_tokens: np.ndarray, prompt_tokens: np.ndarray, first: int = 0
) -> Content:
    """Content of independent requests: request i owns its units (owner id `first` + i, its
    id in the workload when these are a chunk of it from request `first` on)."""
    owner = np.arange(first, first + len(prompt_tokens), dtype=np.int64)
    ids, offsets = content_ids(prefix, prefix_tokens, owner, prompt_tokens)
    return Content(ids=ids, offsets=offsets, unit=UNIT_TOKENS, tokens=prompt_tokens.copy())


def shared_prompt_prefix(prompt_tokens: np.ndarray, prefix_tokens: int, groups: int) -> Content:
    """Content of a trace whose prompts start with a shared prefix: request i's first
    `prefix_tokens` tokens (at most all but its last) are prefix i mod `groups`'s, the rest its
    own (a benchmark client's `prefix_tokens` or `--random-prefix-len`)."""
    n = len(prompt_tokens)
    prefix = np.arange(n, dtype=np.int64) % groups
    shared = np.minimum(prefix_tokens, prompt_tokens - 1).astype(np.int64)
    return build_content(prefix, shared, prompt_tokens)
