"""Step-table metrics: batch size, slot and KV utilization, busy time, MFU and bandwidth use.

The engine records *step groups*: `num_steps` consecutive decode steps with identical batches,
where step `j` (0-based) of a group lasts `duration_s + j * duration_increment_s` and attention
reads `sum_context_tokens + j * context_growth_per_step` KV tokens. Sums over a group are
therefore arithmetic series, `k * first + increment * k * (k - 1) / 2`, and every metric here is
computed per group in closed form, so a run of a million decode steps costs one row.
`expand_steps` is the slow, explicit view (one row per step) for plots and cross-checks.

Conventions:

* "step-weighted" means each step counts once (a group counts `num_steps` times); "time-weighted"
  weights each step by its duration.
* `kv_block_seconds` is the exact integral of KV blocks held over a group, so the time-weighted KV
  utilization does not depend on how steps are grouped; `kv_blocks_used` (the blocks held in the
  group's last step) serves the peak. Tables without `kv_block_seconds` fall back to
  `kv_blocks_used * duration`.
* MFU counts only the linear-layer FLOPs, `flops_per_token * (prefill + decode tokens)`;
  attention FLOPs are excluded, and padded slots of static batching count as wasted, not useful.
  With speculative decoding the decode tokens are those the target computed, rejected
  verification tokens included (the proposer's FLOPs are not counted).
* Bandwidth utilization counts the model's weights once per step and the KV read; for a
  mixture of experts that is every expert, an upper bound (a step reads only the experts its
  tokens chose: sim/costs/moe.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from sim.metrics.context import SummaryContext

FloatArray = npt.NDArray[np.float64]
ROWS = 1 << 16  # step groups summed at a time


def _col(steps: pd.DataFrame, name: str, default: float = 0.0) -> FloatArray:
    # the per-step growth columns are optional so that plain one-row-per-step tables also work
    if name not in steps.columns:
        return np.full(len(steps), default, dtype=float)
    return steps[name].to_numpy(dtype=float)


def _series_sum(k: FloatArray, first: FloatArray, increment: FloatArray) -> FloatArray:
    """Sum of `first + j * increment` for j in 0..k-1, per group."""
    return k * first + increment * k * (k - 1.0) / 2.0


def group_durations(steps: pd.DataFrame) -> FloatArray:
    """Total busy time of each step group, in seconds."""
    k = _col(steps, "num_steps", 1.0)
    return _series_sum(k, _col(steps, "duration_s"), _col(steps, "duration_increment_s"))


def expand_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """One row per step: the returned table is a valid steps table with every `num_steps == 1`.

    `start_s`, `end_s`, `duration_s` and `sum_context_tokens` follow the group's progressions;
    the growth columns become 0 and every other column is repeated.
    """
    k = _col(steps, "num_steps", 1.0).astype(np.int64)
    out = steps.loc[steps.index.repeat(k)].reset_index(drop=True)
    offsets = np.repeat(np.cumsum(k) - k, k)
    j = (np.arange(int(k.sum())) - offsets).astype(float)
    d0 = np.repeat(_col(steps, "duration_s"), k)
    inc = np.repeat(_col(steps, "duration_increment_s"), k)
    start = np.repeat(_col(steps, "start_s"), k) + j * d0 + inc * j * (j - 1.0) / 2.0
    duration = d0 + j * inc
    out["start_s"] = start
    out["duration_s"] = duration
    out["end_s"] = start + duration
    context = np.repeat(_col(steps, "sum_context_tokens"), k)
    context += j * np.repeat(_col(steps, "context_growth_per_step"), k)
    out["sum_context_tokens"] = context
    out["num_steps"] = 1
    out["duration_increment_s"] = 0.0
    out["context_growth_per_step"] = 0
    return out


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else math.nan


@dataclass
class StepTotals:
    """Mergeable sums over one instance's step groups: everything `step_summary` reads.

    Built from a steps table (`from_table`) or chunk by chunk while a run streams (`add`), so a
    summary of ten million requests needs no table at all."""

    num_steps: float = 0.0
    busy_s: float = 0.0
    seq_steps: float = 0.0  # sum of k * num_seqs
    seq_seconds: float = 0.0  # sum of group time * num_seqs
    active_steps: float = 0.0  # sum of k * num_active_seqs
    max_seqs: int = 0
    tokens: float = 0.0  # sum of k * (prefill + decode tokens)
    context_tokens: float = 0.0  # KV tokens read, summed over steps
    kv_block_seconds: float = 0.0
    kv_blocks_peak: float = 0.0
    stored_token_seconds: float = 0.0
    fragment_token_seconds: float = 0.0
    has_token_seconds: bool = True
    start_s: float = math.inf
    end_s: float = -math.inf
    # speculative decoding: steps that verified proposals, (request, step) pairs that did, tokens
    # proposed and accepted, and the proposal's and the verifying target's seconds
    spec_steps: float = 0.0
    spec_seq_steps: float = 0.0
    spec_proposed: float = 0.0
    spec_accepted: float = 0.0
    spec_proposal_s: float = 0.0
    spec_verify_s: float = 0.0

    def add(self, steps: pd.DataFrame) -> None:
        """Add the groups of `steps` (one instance's), `ROWS` at a time: the float copies of
        columns stay small however long the table (the same blocks a streamed run hands over)."""
        for start in range(0, len(steps), ROWS):
            self._add_rows(steps.iloc[start : start + ROWS])

    def _add_rows(self, steps: pd.DataFrame) -> None:
        k = _col(steps, "num_steps", 1.0)
        time = group_durations(steps)
        seqs = _col(steps, "num_seqs")
        kv_used = _col(steps, "kv_blocks_used")
        self.num_steps += float(k.sum())
        self.busy_s += float(time.sum())
        self.seq_steps += float((k * seqs).sum())
        self.seq_seconds += float((time * seqs).sum())
        self.active_steps += float((k * _col(steps, "num_active_seqs")).sum())
        self.max_seqs = max(self.max_seqs, int(seqs.max()))
        tokens = _col(steps, "num_prefill_tokens") + _col(steps, "num_decode_tokens")
        self.tokens += float((k * tokens).sum())
        context = _series_sum(
            k, _col(steps, "sum_context_tokens"), _col(steps, "context_growth_per_step")
        )
        self.context_tokens += float(context.sum())
        held = (
            _col(steps, "kv_block_seconds")
            if "kv_block_seconds" in steps.columns
            else kv_used * time
        )
        self.kv_block_seconds += float(held.sum())
        self.kv_blocks_peak = max(self.kv_blocks_peak, float(kv_used.max()))
        if "kv_stored_token_seconds" in steps.columns:
            self.stored_token_seconds += float(_col(steps, "kv_stored_token_seconds").sum())
            self.fragment_token_seconds += float(_col(steps, "kv_fragment_token_seconds").sum())
        else:
            self.has_token_seconds = False
        self.start_s = min(self.start_s, float(_col(steps, "start_s").min()))
        self.end_s = max(self.end_s, float(_col(steps, "end_s").max()))
        spec = _col(steps, "num_spec_seqs")
        if spec.any():  # speculative steps are single steps
            self.spec_steps += float((k * (spec > 0)).sum())
            self.spec_seq_steps += float((k * spec).sum())
            self.spec_proposed += float((k * _col(steps, "num_spec_proposed")).sum())
            self.spec_accepted += float((k * _col(steps, "num_spec_accepted")).sum())
            self.spec_proposal_s += float(_col(steps, "spec_proposal_s").sum())
            self.spec_verify_s += float(_col(steps, "spec_verify_s").sum())


def totals_by_instance(steps: pd.DataFrame) -> dict[int, StepTotals]:
    """Per instance index, the totals of a steps table (a table without `instance`: one)."""
    if "instance" not in steps.columns:
        totals = StepTotals()
        totals.add(steps)
        return {0: totals}
    out: dict[int, StepTotals] = {}
    codes, uniques = pd.factorize(steps["instance"], sort=True)
    for code, index in enumerate(np.asarray(uniques).tolist()):
        out[int(index)] = totals = StepTotals()
        # one instance: the table itself, not a masked copy of it (the largest table of a run)
        totals.add(steps if len(uniques) == 1 else steps[codes == code])
    return out


def step_summary(
    steps: pd.DataFrame, ctx: SummaryContext, first_arrival_s: float
) -> dict[str, float]:
    """Metrics of the step table; `first_arrival_s` starts the span for `busy_fraction`."""
    return summary_of_totals(totals_by_instance(steps), ctx, first_arrival_s)


def summary_of_totals(
    totals: dict[int, StepTotals], ctx: SummaryContext, first_arrival_s: float
) -> dict[str, float]:
    """The step metrics from per-instance totals, each instance weighed by its own hardware."""
    table = dict(enumerate(ctx.instances))
    default = (
        ctx.kv_blocks_total,
        ctx.peak_flops,
        ctx.hbm_bandwidth_bytes_per_s,
        ctx.kv_bytes_per_token,
        ctx.block_size,
    )
    active = {i: t for i, t in totals.items() if t.num_steps > 0 or t.busy_s > 0}
    num_steps = sum(t.num_steps for t in active.values())
    busy_s = sum(t.busy_s for t in active.values())
    seq_steps = sum(t.seq_steps for t in active.values())
    flops_capacity = bytes_capacity = step_bytes = allocated = 0.0
    kv_means: list[float] = []
    kv_peak = math.nan
    kv_ok = all(table.get(i, default)[0] > 0 for i in active)
    for i, t in active.items():
        kv_total, peak, bandwidth, kv_bytes, block_size = table.get(i, default)
        flops_capacity += t.busy_s * peak
        bytes_capacity += t.busy_s * bandwidth
        step_bytes += ctx.weight_bytes * t.num_steps + kv_bytes * t.context_tokens
        allocated += t.kv_block_seconds * block_size
        if kv_ok:
            # time-weighted per instance first, so a busy instance does not outweigh an idle one
            if t.busy_s > 0:
                kv_means.append(t.kv_block_seconds / t.busy_s / kv_total)
            fraction = t.kv_blocks_peak / kv_total
            kv_peak = fraction if math.isnan(kv_peak) else max(kv_peak, fraction)
    span_end = max((t.end_s for t in active.values()), default=math.nan)
    span_start = first_arrival_s
    if math.isnan(span_start) and active:
        span_start = min(t.start_s for t in active.values())
    span_s = span_end - span_start
    out = {
        "num_steps": int(num_steps),
        "busy_s": busy_s,
        "mean_batch_size": _ratio(seq_steps, num_steps),
        "mean_batch_size_time_weighted": _ratio(
            sum(t.seq_seconds for t in active.values()), busy_s
        ),
        "max_batch_size": max((t.max_seqs for t in active.values()), default=0),
        "slot_utilization": _ratio(sum(t.active_steps for t in active.values()), seq_steps),
        "kv_utilization_mean": float(np.mean(kv_means)) if kv_means else math.nan,
        "kv_utilization_peak": kv_peak,
        "busy_fraction": (
            _ratio(busy_s, ctx.num_instances * span_s) if not math.isnan(span_s) else math.nan
        ),
        "mfu": _ratio(ctx.flops_per_token * sum(t.tokens for t in active.values()), flops_capacity),
        "bandwidth_utilization": _ratio(step_bytes, bytes_capacity),
    }
    if ctx.speculative:
        out.update(_speculation(list(active.values()), busy_s, num_steps))
    if active and all(t.has_token_seconds for t in active.values()):
        # stored tokens and how allocated KV memory is used (sim/core/kv_usage.py),
        # time-weighted over busy time and summed over instances
        stored = sum(t.stored_token_seconds for t in active.values())
        fragment = sum(t.fragment_token_seconds for t in active.values())
        out["kv_tokens_stored_mean"] = _ratio(stored, busy_s)
        out["kv_reserved_utilization"] = _ratio(stored, allocated)
        out["internal_fragmentation"] = _ratio(fragment, allocated)
    return out


def _speculation(totals: list[StepTotals], busy_s: float, num_steps: float) -> dict[str, float]:
    """Speculative decoding's step metrics (docs/speculative.md)."""
    seq_steps = sum(t.spec_seq_steps for t in totals)
    proposed = sum(t.spec_proposed for t in totals)
    accepted = sum(t.spec_accepted for t in totals)
    return {
        "num_spec_proposed": int(proposed),
        "num_spec_accepted": int(accepted),
        "spec_acceptance_rate": _ratio(accepted, proposed),
        "spec_tokens_per_step": _ratio(accepted + seq_steps, seq_steps),
        "spec_proposed_per_step": _ratio(proposed, seq_steps),
        "spec_step_share": _ratio(sum(t.spec_steps for t in totals), num_steps),
        "spec_proposal_time_share": _ratio(sum(t.spec_proposal_s for t in totals), busy_s),
        "spec_verify_time_share": _ratio(sum(t.spec_verify_s for t in totals), busy_s),
    }
