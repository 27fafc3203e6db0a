"""How well allocated KV memory is used: stored tokens and internal fragmentation over time.

Every run of steps a policy applies reports, besides the blocks it held (`kv_block_seconds`),
two more time integrals in token-seconds, exact for any grouping of steps:

* stored: the tokens whose KV the requests holding memory have computed, counted at the end of
  each step (a decode step stores the token it computes). Over a decode run that grows by one
  token per decoding request per step, so the integral is a closed-form series.
* fragment: memory a request holds beyond its whole sequence `prompt + true output`, i.e. what
  it will never fill (the vLLM paper's "internal fragmentation"). Paged allocation wastes at most
  the tail of a request's last block, and only once its sequence reaches that block; a
  contiguous reservation of `max_model_len` wastes everything past the true length all along.

Allocated token-seconds are `kv_block_seconds * block_size`; the summary derives
`kv_reserved_utilization = stored / allocated` and `internal_fragmentation = fragment /
allocated`. The rest (allocated, not yet stored, but to be filled later) is the reservation
for a request's future tokens.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from sim.core.recorder import StepTimes
from sim.core.request import Request


class KVUsage(NamedTuple):
    blocks_held: int  # blocks held during the run's last step
    block_seconds: float  # blocks held, integrated over the run
    stored_token_seconds: float
    fragment_token_seconds: float


def series_token_seconds(first: float, growth: float, num_steps: int, times: StepTimes) -> float:
    """Integral of `first + m * growth` tokens held during step m+1 (m = 0..k-1) of a run."""
    k = num_steps
    s1 = k * (k - 1) // 2
    s2 = (k - 1) * k * (2 * k - 1) // 6
    d0, inc = times.first_duration_s, times.increment_s
    return k * first * d0 + (first * inc + growth * d0) * s1 + growth * inc * s2


def _span(times: StepTimes, j0: int, k: int) -> float:
    """Duration of steps j0..k (1-based) of a run."""
    start = times.start_s if j0 <= 1 else times.end(j0 - 1)
    return times.end(k) - start


def fragment_token_seconds(
    holders: Iterable[Request],
    growing: dict[Request, int],
    num_steps: int,
    block_size: int,
    times: StepTimes,
) -> float:
    """Token-seconds held beyond each holder's whole sequence over a run (see the docstring).

    `growing` are the requests of a paged decode run (they take blocks as they grow, one token
    per step); every other holder keeps its holding for the whole run. Call after the run was
    applied: holdings and computed tokens are those of its last step.
    """
    total = 0.0
    span = times.end(num_steps) - times.start_s
    bs = block_size
    for req in holders:
        final = req.num_prompt_tokens + req.max_output_tokens
        if req in growing:
            # during step j it holds ceil(t_j / bs) blocks, t_j = start + j; past `final` only
            # once t_j reaches the block that `final` ends in, by a constant tail
            last_block = -(-final // bs)
            tail = last_block * bs - final
            if tail <= 0:
                continue
            start = req.num_computed_tokens - num_steps
            j0 = max(1, (last_block - 1) * bs - start + 1)
            if j0 <= num_steps:
                total += tail * _span(times, j0, num_steps)
            continue
        over = req.kv_blocks * bs - final
        if over > 0:
            total += over * span
    return total
