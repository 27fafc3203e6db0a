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
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pandas as pd

from sim.metrics.context import SummaryContext

FloatArray = npt.NDArray[np.float64]


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


def step_summary(
    steps: pd.DataFrame, ctx: SummaryContext, first_arrival_s: float
) -> dict[str, float]:
    """Metrics of the step table; `first_arrival_s` starts the span for `busy_fraction`."""
    k = _col(steps, "num_steps", 1.0)
    time = group_durations(steps)
    num_steps = float(k.sum())
    busy_s = float(time.sum())
    seqs = _col(steps, "num_seqs")
    # per-row hardware figures, so that heterogeneous clusters weigh each instance by its own
    if "instance" in steps.columns:
        codes, found = pd.factorize(steps["instance"])
        uniques = np.asarray(found)
    else:
        codes, uniques = np.zeros(len(steps), dtype=np.int64), np.zeros(1, dtype=np.int64)
    table = dict(enumerate(ctx.instances))
    default = (
        ctx.kv_blocks_total,
        ctx.peak_flops,
        ctx.hbm_bandwidth_bytes_per_s,
        ctx.kv_bytes_per_token,
        ctx.block_size,
    )
    per_instance = np.array([table.get(int(u), default) for u in uniques], dtype=float)
    per_instance = per_instance.reshape(-1, 5)
    kv_total = per_instance[codes, 0] if len(steps) else np.zeros(0)
    peak = per_instance[codes, 1] if len(steps) else np.zeros(0)
    bandwidth = per_instance[codes, 2] if len(steps) else np.zeros(0)
    kv_bytes = per_instance[codes, 3] if len(steps) else np.zeros(0)
    block_size = per_instance[codes, 4] if len(steps) else np.zeros(0)
    step_tokens = k * (_col(steps, "num_prefill_tokens") + _col(steps, "num_decode_tokens"))
    step_context = _series_sum(
        k, _col(steps, "sum_context_tokens"), _col(steps, "context_growth_per_step")
    )
    step_bytes = ctx.weight_bytes * k + kv_bytes * step_context
    flops_capacity = float((time * peak).sum())
    bytes_capacity = float((time * bandwidth).sum())

    kv_used = _col(steps, "kv_blocks_used")
    kv_mean = math.nan
    kv_peak = math.nan
    if len(steps) and (per_instance[:, 0] > 0).all():
        # time-weighted per instance first, so a busy instance does not outweigh an idle one
        inst_time = np.bincount(codes, weights=time)
        held = (
            _col(steps, "kv_block_seconds")
            if "kv_block_seconds" in steps.columns
            else kv_used * time
        )
        inst_kv = np.bincount(codes, weights=held)
        valid = inst_time > 0
        if valid.any():
            kv_mean = float((inst_kv[valid] / inst_time[valid] / per_instance[valid, 0]).mean())
        kv_peak = float((kv_used / kv_total).max())

    kv_stats = _kv_token_stats(steps, time, block_size)
    span_end = float(_col(steps, "end_s").max()) if len(steps) else math.nan
    span_start = first_arrival_s
    if math.isnan(span_start) and len(steps):
        span_start = float(_col(steps, "start_s").min())
    span_s = span_end - span_start
    return {
        "num_steps": int(num_steps),
        "busy_s": busy_s,
        "mean_batch_size": _ratio(float((k * seqs).sum()), num_steps),
        "mean_batch_size_time_weighted": _ratio(float((time * seqs).sum()), busy_s),
        "max_batch_size": int(seqs.max()) if len(steps) else 0,
        "slot_utilization": _ratio(
            float((k * _col(steps, "num_active_seqs")).sum()), float((k * seqs).sum())
        ),
        "kv_utilization_mean": kv_mean,
        "kv_utilization_peak": kv_peak,
        "busy_fraction": (
            _ratio(busy_s, ctx.num_instances * span_s) if not math.isnan(span_s) else math.nan
        ),
        "mfu": _ratio(ctx.flops_per_token * float(step_tokens.sum()), flops_capacity),
        "bandwidth_utilization": _ratio(float(step_bytes.sum()), bytes_capacity),
        **kv_stats,
    }


def _kv_token_stats(
    steps: pd.DataFrame, time: FloatArray, block_size: FloatArray
) -> dict[str, float]:
    """Stored tokens and how allocated KV memory is used (sim/core/kv_usage.py), time-weighted over
    busy time and summed over instances; absent for tables without the token-second columns."""
    if "kv_stored_token_seconds" not in steps.columns:
        return {}
    stored = float(_col(steps, "kv_stored_token_seconds").sum())
    fragment = float(_col(steps, "kv_fragment_token_seconds").sum())
    allocated = float((_col(steps, "kv_block_seconds") * block_size).sum())
    busy = float(time.sum())
    return {
        "kv_tokens_stored_mean": _ratio(stored, busy),
        "kv_reserved_utilization": _ratio(stored, allocated),
        "internal_fragmentation": _ratio(fragment, allocated),
    }
