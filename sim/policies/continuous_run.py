"""Runs of continuous-batching steps: how far a decode run may go, and applying a run.

`decode_horizon` bounds a run of identical decode steps so that the engine can jump over it;
`apply_run` applies a run to the requests and the KV pool and measures the KV held over it
(blocks, stored and fragment token-seconds, sim/core/kv_usage.py), exactly for any grouping of
steps.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from sim.core.kv_cache import BlockManager
from sim.core.kv_usage import KVUsage, fragment_token_seconds, series_token_seconds
from sim.core.plan import StepPlan
from sim.core.recorder import Recorder, StepTimes, advance
from sim.core.request import Request


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
        k = num_steps
        inc = times.increment_s
        # The hot path: exact block-seconds, stored and fragment token-seconds of the growing
        # requests in one pass. A request starting the run with c tokens in b0 blocks, s free
        # slots in its last one, holds b0 + ceil((j - s) / bs) blocks in step j > s: with
        # F(n) = sum ceil(t/bs) and G(n) = sum t*ceil(t/bs) over t = 1..n (closed forms), the
        # block-steps are k*b0 + F(k - s) and the (j - 1)-weighted ones, which the growing step
        # durations need, b0*k(k-1)/2 + G(k - s) + (s - 1)*F(k - s). Reference implementation:
        # sim.core.recorder.decode_block_seconds (tests compare both with step-by-step runs).
        sum_b0 = 0
        extra_steps = 0
        extra_weighted = 0
        stored_end = 0
        fragment = 0.0
        for req in plan.scheduled:
            e = req.num_computed_tokens
            if req.kv_blocks * bs < e and kv.allocate(req, e) is None:
                raise AssertionError("decode run outgrew the KV pool")
            growing_blocks += req.kv_blocks
            stored_end += e
            c = e - k
            b0 = -(-c // bs)
            sum_b0 += b0
            n = k - (b0 * bs - c)
            if n > 0:
                q, r = divmod(n, bs)
                f = bs * q * (q + 1) // 2 + r * (q + 1)
                extra_steps += f
                if inc:
                    g = (
                        bs * bs * (q - 1) * q * (q + 1) // 3
                        + bs * (bs + 1) * q * (q + 1) // 4
                        + (q + 1) * (r * q * bs + r * (r + 1) // 2)
                    )
                    extra_weighted += g + (b0 * bs - c - 1) * f
            # fragment: the tail of the block its whole sequence ends in, once it reaches it
            final = req.num_prompt_tokens + req.max_output_tokens
            last_block = -(-final // bs)
            tail = last_block * bs - final
            if tail > 0:
                j0 = (last_block - 1) * bs - c + 1
                if j0 <= k:
                    start = times.start_s if j0 <= 1 else times.end(j0 - 1)
                    fragment += tail * (times.end(k) - start)
        block_steps = k * sum_b0 + extra_steps
        weighted = sum_b0 * (k * (k - 1) // 2) + extra_weighted
        grown = times.first_duration_s * block_steps + inc * weighted
        held = kv.num_used
        span = times.end(num_steps) - times.start_s
        block_seconds = grown + (held - growing_blocks) * span  # the rest hold still
        held_by = holders if isinstance(holders, list) else list(holders)
        # the growing requests are among the holders: equal counts mean nobody else holds KV
        others = [] if len(held_by) == len(growing) else [r for r in held_by if r not in growing]
        stored_end += sum(r.num_computed_tokens for r in others)
        growth = len(plan.scheduled)
        stored = series_token_seconds(stored_end - growth * (k - 1), growth, k, times)
        fragment += fragment_token_seconds(others, {}, k, bs, times)
        for req in finished:
            kv.free(req)
        return RunResult(KVUsage(held, block_seconds, stored, fragment), finished)
    stored_end = sum(r.num_computed_tokens for r in holders)
    growth = len(plan.scheduled) if num_steps > 1 else 0
    stored = series_token_seconds(stored_end - growth * (num_steps - 1), growth, num_steps, times)
    fragment = fragment_token_seconds(holders, growing, num_steps, bs, times)
    for req in finished:
        kv.free(req)
    return RunResult(KVUsage(held, block_seconds, stored, fragment), finished)
