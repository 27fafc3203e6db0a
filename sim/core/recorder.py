"""Per-instance event records and the one token-accounting rule, applied once for every policy.

`StepTimes` gives the end time of each step of a run from its first duration and the constant
increment per step (attention reads one more token per slot each decode step), in closed form, so
a run of k steps costs O(batch), not O(batch * k).

`advance` applies a planned run to its requests (computed tokens, emitted tokens, first-token,
finish and inter-token times) and records the pooled inter-token gaps; `Recorder` keeps flat rows
that become the per-step and ITL tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim.core.plan import StepPlan
from sim.core.request import Request


@dataclass(frozen=True, slots=True)
class StepTimes:
    start_s: float
    first_duration_s: float
    increment_s: float

    def end(self, j: int) -> float:
        """End time of the j-th step of the run (1-based)."""
        return self.start_s + j * self.first_duration_s + self.increment_s * (j * (j - 1) // 2)

    def duration(self, j: int) -> float:
        """Duration of the j-th step (1-based)."""
        return self.first_duration_s + (j - 1) * self.increment_s


def _block_sum(n: int, bs: int) -> int:
    """sum of ceil(t / bs) for t = 1..n."""
    q, r = divmod(n, bs)
    return bs * q * (q + 1) // 2 + r * (q + 1)


def _weighted_block_sum(n: int, bs: int) -> int:
    """sum of t * ceil(t / bs) for t = 1..n."""
    q, r = divmod(n, bs)
    full = bs * bs * (q - 1) * q * (q + 1) // 3 + bs * (bs + 1) * q * (q + 1) // 4
    return full + (q + 1) * (r * q * bs + r * (r + 1) // 2)


def decode_block_seconds(computed: int, num_steps: int, bs: int, times: StepTimes) -> float:
    """Block-seconds a request holds over a decode run that starts with `computed` tokens.

    During step j (1-based) it holds ceil((computed + j) / bs) blocks for d0 + (j - 1) * inc
    seconds; with t = computed + j both sums are closed forms in integers, so this is O(1).
    """
    end = computed + num_steps
    blocks = _block_sum(end, bs) - _block_sum(computed, bs)
    # sum of (j - 1) * ceil(t / bs) = sum of (t - computed - 1) * ceil(t / bs)
    weighted = _weighted_block_sum(end, bs) - _weighted_block_sum(computed, bs)
    shifted = weighted - (computed + 1) * blocks
    return times.first_duration_s * blocks + times.increment_s * shifted


@dataclass
class Recorder:
    """Flat, append-only rows; converted to DataFrames once at the end of a run."""

    instance: int = 0
    steps: list[tuple[float | int, ...]] = field(default_factory=list)
    itl_gap_s: list[float] = field(default_factory=list)
    itl_count: list[int] = field(default_factory=list)
    # runs of gaps growing by a constant: (first gap, increment, number of gaps, count each)
    itl_runs: list[tuple[float, float, int, int]] = field(default_factory=list)

    def gap(self, gap_s: float, count: int) -> None:
        if count > 0:
            self.itl_gap_s.append(gap_s)
            self.itl_count.append(count)

    def gap_run(self, first_s: float, increment_s: float, num: int, count: int) -> None:
        """`num` gaps `first_s + m * increment_s` (m = 0..num-1), each seen `count` times."""
        if count > 0 and num > 0:
            self.itl_runs.append((first_s, increment_s, num, count))

    def itl_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """All gaps and their counts, the runs expanded (vectorized)."""
        gaps = np.asarray(self.itl_gap_s, dtype=float)
        counts = np.asarray(self.itl_count, dtype=np.int64)
        if not self.itl_runs:
            return gaps, counts
        runs = np.asarray(self.itl_runs, dtype=float)
        num = runs[:, 2].astype(np.int64)
        offsets = np.arange(int(num.sum())) - np.repeat(np.cumsum(num) - num, num)
        run_gaps = np.repeat(runs[:, 0], num) + np.repeat(runs[:, 1], num) * offsets
        run_counts = np.repeat(runs[:, 3].astype(np.int64), num)
        return np.concatenate([gaps, run_gaps]), np.concatenate([counts, run_counts])

    def step(
        self,
        plan: StepPlan,
        num_steps: int,
        times: StepTimes,
        *,
        num_active_seqs: int,
        kv_blocks_used: int,
        kv_block_seconds: float,
        num_waiting: int,
        num_running: int,
        kv_stored_token_seconds: float = 0.0,
        kv_fragment_token_seconds: float = 0.0,
    ) -> None:
        self.steps.append(
            (
                self.instance,
                times.start_s,
                times.end(num_steps),
                num_steps,
                times.first_duration_s,
                times.increment_s,
                plan.num_seqs,
                num_active_seqs,
                plan.num_tokens,
                plan.num_prefill_tokens,
                plan.num_decode_tokens,
                plan.sum_context_tokens,
                plan.context_growth_per_step,
                kv_blocks_used,
                kv_block_seconds,
                num_waiting,
                num_running,
                len(plan.preempted),
                kv_stored_token_seconds,
                kv_fragment_token_seconds,
                plan.swap_s,
            )
        )


STEP_COLUMNS = (
    "instance",
    "start_s",
    "end_s",
    "num_steps",
    "duration_s",
    "duration_increment_s",
    "num_seqs",
    "num_active_seqs",
    "num_tokens",
    "num_prefill_tokens",
    "num_decode_tokens",
    "sum_context_tokens",
    "context_growth_per_step",
    "kv_blocks_used",
    "kv_block_seconds",
    "num_waiting",
    "num_running",
    "num_preempted",
    "kv_stored_token_seconds",
    "kv_fragment_token_seconds",
    "swap_s",
)


def advance(plan: StepPlan, num_steps: int, times: StepTimes, rec: Recorder) -> list[Request]:
    """Apply `num_steps` steps of `plan` to its requests; return those that finished.

    Only the last step of a run may finish a request (the policy cuts runs at the first finish),
    and only single steps carry prefill, so a request emits either once (prefill completing, or a
    single decode) or once per step of a decode run.
    """
    finished: list[Request] = []
    start_s = times.start_s
    end_1 = times.end(1)
    end_k = times.end(num_steps) if num_steps > 1 else end_1
    last_duration = times.duration(num_steps)
    regular = 0  # emitters whose previous token came at the end of the step just before
    emitting = 0
    if not plan.num_prefill_tokens:
        # the hot path: a decode step or run, every request emits one token per step
        for req in plan.scheduled:
            last = req.last_token_s
            gap = end_1 - last
            if last == start_s:
                regular += 1
            else:
                rec.gap(gap, 1)
            if gap < last_duration:
                gap = last_duration
            if gap > req.max_itl_s:
                req.max_itl_s = gap
            req.num_computed_tokens += num_steps
            out = req.num_output_tokens + num_steps
            req.num_output_tokens = out
            req.last_token_s = end_k
            if out >= req.max_output_tokens:
                req.finish_s = end_k
                finished.append(req)
        emitting = len(plan.scheduled)
        plan_items: list[tuple[Request, int]] = []
    else:
        plan_items = list(plan.scheduled.items())
    for req, n in plan_items:
        if n < req.num_prompt_tokens + req.num_output_tokens - req.num_computed_tokens:
            req.num_computed_tokens += n  # a prefill chunk: no token yet
            continue
        emitting += 1
        if req.num_output_tokens:
            gap = end_1 - req.last_token_s
            if req.last_token_s == start_s:
                regular += 1
            else:
                rec.gap(gap, 1)
            longest = gap if last_duration < gap else last_duration
            if longest > req.max_itl_s:
                req.max_itl_s = longest
        else:
            req.first_token_s = end_1
        req.num_computed_tokens += n * num_steps  # n == 1 whenever num_steps > 1
        req.num_output_tokens += num_steps
        req.last_token_s = end_k
        if req.num_output_tokens >= req.max_output_tokens:
            req.finish_s = end_k
            finished.append(req)
    rec.gap(times.first_duration_s, regular)
    if num_steps > 1 and emitting:
        if times.increment_s == 0.0:
            rec.gap(times.first_duration_s, emitting * (num_steps - 1))
        else:
            rec.gap_run(times.duration(2), times.increment_s, num_steps - 1, emitting)
    return finished
