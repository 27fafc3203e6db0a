"""Runs of continuous-batching steps: how far a decode run may go, and applying a run.

`decode_horizon` bounds a run of identical decode steps so that the engine can jump over it;
`apply_run` applies a run to the requests and the KV pool and measures the KV held over it
(blocks, stored and fragment token-seconds, sim/kv_usage.py), exactly for any grouping of steps.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from sim.kv_cache import BlockManager
from sim.kv_usage import KVUsage, fragment_token_seconds, series_token_seconds
from sim.plan import StepPlan
from sim.recorder import Recorder, StepTimes, advance
from sim.request import Request


class RunResult(NamedTuple):
    kv: KVUsage
    finished: list[Request]  # their blocks are already freed


def decode_horizon(kv: BlockManager, decodes: dict[Request, int], *, paged: bool) -> int:
    """Decode steps that can follow the first with nothing but token counts changing.

    No prompt got tokens in this step: waiting requests could not be admitted and prompts in
    progress could not continue, and since decoding only consumes blocks and the budget stays
    the same, that holds until a request finishes. The run ends at the first finish and, paged,
    before the free blocks could run out (a bound that is exact when blocks are scarce); a
    contiguous reservation already holds every block its decodes will need.
    """
    if not decodes:
        return 1
    steps = min(r.max_output_tokens - r.num_output_tokens for r in decodes)
    if steps <= 1 or not paged:
        return max(1, steps)
    free = kv.num_free
    size = len(decodes)
    bs = kv.block_size
    if free >= size:
        extra = bs * (free // size)
    else:  # the (free+1)-th request to cross a block boundary would need a preemption
        slack = sorted(r.kv_blocks * bs - r.num_computed_tokens - 1 for r in decodes)
        extra = slack[free]
    return max(1, min(steps, 1 + extra))


def apply_run(
    kv: BlockManager,
    plan: StepPlan,
    num_steps: int,
    times: StepTimes,
    rec: Recorder,
    holders: Iterable[Request],
    *,
    paged: bool,
) -> RunResult:
    """Apply `num_steps` steps of `plan`; `holders` are the requests holding blocks of `kv`."""
    finished = advance(plan, num_steps, times, rec)
    bs = kv.block_size
    growing: dict[Request, int] = {}
    if num_steps == 1:
        held = kv.num_used
        block_seconds = held * times.first_duration_s
    elif not paged:  # reservations are fixed while requests run
        held = kv.num_used
        block_seconds = held * (times.end(num_steps) - times.start_s)
    else:  # blocks for the run's later tokens (the horizon guaranteed them), integrated
        growing = plan.scheduled
        growing_blocks = 0
        # sum over requests of decode_block_seconds(), inlined (this is the hot path): with
        # F(n) = sum ceil(t/bs) and G(n) = sum t*ceil(t/bs) over t = 1..n, a request going from
        # c to e tokens holds F(e) - F(c) block-steps, weighted by the growing step durations
        # through G(e) - G(c) - (c + 1) * (F(e) - F(c))
        block_steps = 0
        weighted = 0
        for req in plan.scheduled:
            e = req.num_computed_tokens
            if req.kv_blocks * bs < e and kv.allocate(req, e) is None:
                raise AssertionError("decode run outgrew the KV pool")
            growing_blocks += req.kv_blocks
            c = e - num_steps
            qe, re_ = divmod(e, bs)
            qc, rc = divmod(c, bs)
            df = bs * (qe * (qe + 1) - qc * (qc + 1)) // 2 + re_ * (qe + 1) - rc * (qc + 1)
            block_steps += df
            if times.increment_s:
                ge = (bs * bs * (qe - 1) * qe * (qe + 1) // 3 + bs * (bs + 1) * qe * (qe + 1) // 4
                      + (qe + 1) * (re_ * qe * bs + re_ * (re_ + 1) // 2))
                gc = (bs * bs * (qc - 1) * qc * (qc + 1) // 3 + bs * (bs + 1) * qc * (qc + 1) // 4
                      + (qc + 1) * (rc * qc * bs + rc * (rc + 1) // 2))
                weighted += ge - gc - (c + 1) * df
        grown = times.first_duration_s * block_steps + times.increment_s * weighted
        held = kv.num_used
        span = times.end(num_steps) - times.start_s
        block_seconds = grown + (held - growing_blocks) * span  # the rest hold still
    stored_end = sum(r.num_computed_tokens for r in holders)
    growth = len(plan.scheduled) if num_steps > 1 else 0
    stored = series_token_seconds(stored_end - growth * (num_steps - 1), growth, num_steps, times)
    fragment = fragment_token_seconds(holders, growing, num_steps, bs, times)
    for req in finished:
        kv.free(req)
    return RunResult(KVUsage(held, block_seconds, stored, fragment), finished)
