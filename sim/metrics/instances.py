"""Metrics beyond the core summary: per-instance breakdowns, stalls and the KV link of P/D.

`instance_summary` applies the step metrics to each instance alone (with that instance's own
hardware figures), so a hot or idle instance behind a router stands out. `stall_summary` gives
the distribution over requests of each one's longest inter-token gap. `transfer_summary`
reports how long prompts' KV waited for the link (and for decode capacity: backpressure) and
how long the transfers took, plus the link's utilization over the run.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import replace
from typing import Any

import pandas as pd

from sim.metrics.context import SummaryContext
from sim.metrics.percentiles import latency_stats
from sim.metrics.request_metrics import in_window, measured_window, stall_stats, stalls
from sim.metrics.steps import step_summary

INSTANCE_METRICS = (
    "num_steps",
    "busy_fraction",
    "mean_batch_size",
    "max_batch_size",
    "kv_utilization_mean",
    "kv_utilization_peak",
    "mfu",
    "bandwidth_utilization",
)


def transfer_summary(requests: pd.DataFrame, ctx: SummaryContext) -> dict[str, float]:
    """KV-transfer queueing and duration percentiles, and link utilization (P/D only)."""
    if ctx.num_links == 0 or "transfer_s" not in requests.columns:
        return {}
    out: dict[str, float] = {}
    moved = requests[requests["transfer_s"].notna()]
    out.update(latency_stats("kv_transfer", moved["transfer_s"].to_numpy(dtype=float)))
    out.update(latency_stats("kv_transfer_queue", moved["transfer_queue_s"].to_numpy(dtype=float)))
    out["num_kv_transfers"] = len(moved)
    busy = float(moved["transfer_s"].sum())
    start = float(requests["arrival_s"].min()) if len(requests) else math.nan
    end = float(requests["finish_s"].max()) if len(requests) else math.nan
    span = end - start
    out["link_utilization"] = busy / (ctx.num_links * span) if span > 0 else math.nan
    return out


def instance_identity(inst: Mapping[Hashable, Any], num_requests: int) -> dict[str, object]:
    """The leading columns of an instance's row: what it is, its KV capacity and where that
    figure comes from ("memory", or "stated" by the policy's num_gpu_blocks), requests taken."""
    return {
        "instance": inst["index"],
        "role": inst["role"],
        "group": inst["group"],
        "hardware": inst["hardware"],
        "kv_blocks": inst["kv_blocks_total"],
        "kv_capacity": inst.get("kv_capacity", "memory"),
        "requests": num_requests,
    }


def instance_summary(
    requests: pd.DataFrame, steps: pd.DataFrame, instances: pd.DataFrame, ctx: SummaryContext
) -> pd.DataFrame:
    """One row per instance: its role, group and hardware, requests taken, and step metrics."""
    first_arrival = float(requests["arrival_s"].min()) if len(requests) else math.nan
    taken = requests.groupby("instance").size() if len(requests) else pd.Series(dtype=int)
    decoded = (
        requests[requests["decode_instance"] >= 0].groupby("decode_instance").size()
        if "decode_instance" in requests.columns and len(requests)
        else pd.Series(dtype=int)
    )
    rows = []
    for inst in instances.to_dict("records"):
        own = steps[steps["instance"] == inst["index"]]
        own_ctx = replace(
            ctx,
            num_instances=1,
            instances=(),
            kv_blocks_total=int(inst["kv_blocks_total"]),
            peak_flops=float(inst["peak_flops"]),
            hbm_bandwidth_bytes_per_s=float(inst["hbm_bandwidth_bytes_per_s"]),
            kv_bytes_per_token=float(inst.get("kv_bytes_per_token", ctx.kv_bytes_per_token)),
            block_size=int(inst.get("block_size", ctx.block_size)),
        )
        metrics = step_summary(own, own_ctx, first_arrival)
        served = int(taken.get(inst["index"], 0)) + int(decoded.get(inst["index"], 0))
        row = instance_identity(inst, served)
        row.update({key: metrics[key] for key in INSTANCE_METRICS})
        rows.append(row)
    return pd.DataFrame(rows)


def stall_summary(requests: pd.DataFrame, ctx: SummaryContext | None = None) -> dict[str, float]:
    """Percentiles over requests of the longest gap each saw between two of its tokens.

    Like the latencies, they cover the measured set: served requests arriving after the first
    `warmup_s` and before the last `cooldown_s` of the arrival span (`ctx`; None: every one)."""
    served = ~requests["rejected"].to_numpy(dtype=bool)
    if ctx is not None and len(requests) and (ctx.warmup_s or ctx.cooldown_s):
        arrival = requests["arrival_s"].to_numpy(dtype=float)
        bounds = measured_window(float(arrival.min()), float(arrival.max()), ctx)
        served &= in_window(arrival, bounds)
    return stall_stats(latency_stats("stall", stalls(requests, served)))
