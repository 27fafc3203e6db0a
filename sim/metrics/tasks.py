"""Metrics of agents' tasks (`workload.agents`): a task is judged by when its last call ends.

The requests table of an agents workload has each call's task (`session`), agent type
(`agent`) and the wait before it (`wait_s`: the tool call's time, 0 for a subagent's first
call, a join, or an agent's next task). `tasks_table` folds it into one row per task:

- `start_s`: its first call's arrival; `end_s`: its last call's finish (NaN while any call is
  unfinished or was refused); `duration_s` the difference: the task's completion time;
- `calls`, `prompt_tokens`, `output_tokens`, `cached_tokens` (prompt tokens found in the prefix
  cache), `recomputed_tokens` (tokens computed again after a preemption);
- `queue_s` and `tool_s`: the time its calls waited for the scheduler and for tools, summed over
  its calls (subagents run side by side, so the sums can exceed the duration);
- `rejected_calls`: calls refused or given up on (the task went on without their answers);
- `wave` (rollouts): the wave the trajectory ran in.

The summary adds `task_duration` percentiles (`task_duration_mean_s`, `_p50_s`, ...), the
number of tasks and finished tasks, the prompt tokens found cached over all tasks' calls
(`task_cache_hit_rate`), and with `slo.task_s` the share of tasks done within it
(`task_slo_attainment`) and those tasks per second of the run (`task_goodput_per_s`). Tasks
that start in the warm-up or cool-down windows count like requests there: not at all.

Rollouts (a `wave` column) add each wave's makespan (its first call's arrival to its last
answer: the time a training step waits for its rollouts; `wave_makespan_mean_s`, `_max_s`)
and its stragglers (`wave_straggler_ratio_mean`: the slowest trajectory's time over the
wave's median trajectory time, averaged over the waves; 1 when all take as long).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sim.metrics.percentiles import latency_stats

TASK_COLUMNS = ("session", "agent", "wait_s")


def is_agents(requests: pd.DataFrame) -> bool:
    """Whether the requests table is an agents workload's (it has tasks)."""
    return all(c in requests.columns for c in TASK_COLUMNS)


def tasks_table(requests: pd.DataFrame) -> pd.DataFrame:
    """One row per task of an agents workload's requests table (see the module)."""
    finish = requests["finish_s"].where(~requests["rejected"].astype(bool))
    frame = pd.DataFrame(
        {
            "task": requests["session"].to_numpy(),
            "agent": requests["agent"].to_numpy(),
            "arrival_s": requests["arrival_s"].to_numpy(float),
            "finish_s": finish.to_numpy(float),
            "prompt_tokens": requests["num_prompt_tokens"].to_numpy(),
            "output_tokens": requests["num_output_tokens"].to_numpy(),
            "cached_tokens": requests["num_cached_tokens"].to_numpy(),
            "recomputed_tokens": requests["num_recomputed_tokens"].to_numpy(),
            "queue_s": requests["queue_s"].to_numpy(float),
            "tool_s": requests["wait_s"].to_numpy(float),
            "rejected_calls": requests["rejected"].to_numpy(bool).astype(np.int64),
        }
    )
    waves = "wave" in requests.columns
    if waves:
        frame["wave"] = requests["wave"].to_numpy()
    grouped = frame.groupby("task", sort=True)
    out = grouped.agg(
        agent=("agent", "first"),
        start_s=("arrival_s", "min"),
        calls=("arrival_s", "size"),
        prompt_tokens=("prompt_tokens", "sum"),
        output_tokens=("output_tokens", "sum"),
        cached_tokens=("cached_tokens", "sum"),
        recomputed_tokens=("recomputed_tokens", "sum"),
        queue_s=("queue_s", "sum"),
        tool_s=("tool_s", "sum"),
        rejected_calls=("rejected_calls", "sum"),
        **({"wave": ("wave", "first")} if waves else {}),
    )
    # the last answer: NaN while any call of the task is unfinished
    unfinished = grouped["finish_s"].apply(lambda s: bool(s.isna().any()))
    end = grouped["finish_s"].max().where(~unfinished)
    out.insert(2, "end_s", end)
    out.insert(3, "duration_s", out["end_s"] - out["start_s"])
    return out.reset_index()


def task_summary(
    requests: pd.DataFrame, window: tuple[float, float], slo_task_s: float | None
) -> dict[str, float]:
    """The summary's task metrics (see the module); `window`: the arrivals that count."""
    if not is_agents(requests) or not len(requests):
        return {}
    tasks = tasks_table(requests)
    low, high = window
    tasks = tasks[(tasks["start_s"] >= low) & (tasks["start_s"] <= high)]
    duration = tasks["duration_s"].to_numpy(float)
    out: dict[str, float] = {
        "num_tasks": len(tasks),
        "num_tasks_finished": int((~np.isnan(duration)).sum()),
    }
    out.update(latency_stats("task_duration", duration))
    prompt = float(tasks["prompt_tokens"].sum())
    out["task_cache_hit_rate"] = (
        float(tasks["cached_tokens"].sum()) / prompt if prompt else math.nan
    )
    out["task_calls_mean"] = float(tasks["calls"].mean()) if len(tasks) else math.nan
    if slo_task_s is not None:
        met = duration <= slo_task_s  # NaN (unfinished) never meets it
        out["task_slo_attainment"] = float(met.mean()) if len(tasks) else math.nan
        span = float(np.nanmax(tasks["end_s"])) - float(tasks["start_s"].min()) if len(tasks) else 0
        out["task_goodput_per_s"] = float(met.sum()) / span if span > 0 else math.nan
    if "wave" in tasks.columns:
        out.update(wave_summary(tasks))
    return out


def wave_summary(tasks: pd.DataFrame) -> dict[str, float]:
    """Each wave's makespan and stragglers, summed up over the waves (see the module)."""
    grouped = tasks.groupby("wave")
    makespan = (grouped["end_s"].max() - grouped["start_s"].min()).to_numpy(float)
    slowest = grouped["duration_s"].max().to_numpy(float)
    median = grouped["duration_s"].median().to_numpy(float)
    ratio = np.divide(slowest, median, out=np.full(len(median), np.nan), where=median > 0)
    return {
        "num_waves": len(makespan),
        "wave_makespan_mean_s": float(np.nanmean(makespan)) if len(makespan) else math.nan,
        "wave_makespan_max_s": float(np.nanmax(makespan)) if len(makespan) else math.nan,
        "wave_straggler_ratio_mean": float(np.nanmean(ratio)) if len(ratio) else math.nan,
    }


def tasks_by_variant(requests: pd.DataFrame) -> pd.DataFrame:
    """`tasks_table` of every variant of a results' requests table, with its `variant`."""
    parts = [
        tasks_table(part).assign(variant=name)
        for name, part in requests.groupby("variant", sort=False)
    ]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
