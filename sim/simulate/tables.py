"""The run's tables from its records: the step groups of every instance (`steps_table`) and one
row per request (`requests_table`), which the live server builds too (`sim.serve.live`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.core.arrivals import ChunkWindow
from sim.core.recorder import STEP_COLUMNS, RequestLog, StepLog


def steps_table(logs: list[StepLog]) -> pd.DataFrame:
    """Every instance's step groups, ordered by start time (then instance); none (a fleet that
    never launched an instance) is an empty table."""
    parts = [log.columns() for log in logs] or [StepLog(0).columns()]
    if len(parts) == 1:
        columns = parts[0]
    else:
        columns = {name: np.concatenate([p[name] for p in parts]) for name in STEP_COLUMNS}
    steps = pd.DataFrame(columns, copy=False)
    if len(logs) > 1:
        steps = steps.sort_values(["start_s", "instance"], kind="stable", ignore_index=True)
    return steps


def requests_table(window: ChunkWindow, log: RequestLog, tpot: str = "after_first") -> pd.DataFrame:
    """One row per request the log holds (all of them, in id order, unless streamed): the
    workload's columns (from `window`, which a streamed run lets drop the chunks taken) and the
    run's outcomes; `tpot` is `metrics.tpot`, the definition the tpot_s column follows."""
    ids, f, n = log.block()
    work = window.take(ids)
    reasons = np.asarray(log.reasons, dtype=object)[n["reject_code"]]
    df = pd.DataFrame(
        {
            "id": ids,
            "instance": n["instance"],
            "arrival_s": f["arrival_s"],
            "num_prompt_tokens": work["num_prompt_tokens"],
            "max_output_tokens": work["max_output_tokens"],
            "num_output_tokens": n["num_output_tokens"],
            "first_scheduled_s": f["first_scheduled_s"],
            "first_token_s": f["first_token_s"],
            "finish_s": f["finish_s"],
            "max_itl_s": f["max_itl_s"],
            "num_preemptions": n["num_preemptions"],
            "num_recomputed_tokens": n["num_recomputed_tokens"],
            "num_swaps": n["num_swaps"],
            "num_cached_tokens": n["num_cached_tokens"],
            "swapped_bytes": n["swapped_bytes"],
            "tier": work["tier"],
            "predicted_output_tokens": work["predicted_output_tokens"],
            "rejected": n["reject_code"] > 0,
            "reject_reason": reasons,
            "decode_instance": n["decode_instance"],
            "handoff_s": f["handoff_s"],
            "transfer_start_s": f["transfer_start_s"],
            "transfer_end_s": f["transfer_end_s"],
            "num_spec_steps": n["num_spec_steps"],
            "num_spec_proposed": n["num_spec_proposed"],
            "num_spec_accepted": n["num_spec_accepted"],
        },
        copy=False,
    )
    # a trace's own request ids; session labels; an agents workload's type and tool waits
    for name in ("source_id", "session", "agent", "wait_s", "wave"):
        if name in work:
            df[name] = work[name]
    df["queue_s"] = df["first_scheduled_s"] - df["arrival_s"]
    df["ttft_s"] = df["first_token_s"] - df["arrival_s"]
    df["e2e_s"] = df["finish_s"] - df["arrival_s"]
    outputs = df["num_output_tokens"]
    if tpot == "per_output_token":  # the decode time over every output token
        per = outputs.where(outputs >= 1).astype(float)
    else:  # over the tokens after the first: each one's share of the time since the first
        per = (outputs - 1).where(outputs >= 2).astype(float)
    df["tpot_s"] = (df["finish_s"] - df["first_token_s"]) / per
    df["transfer_queue_s"] = df["transfer_start_s"] - df["handoff_s"]
    df["transfer_s"] = df["transfer_end_s"] - df["transfer_start_s"]
    return df
