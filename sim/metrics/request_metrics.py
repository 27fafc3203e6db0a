"""Per-request metrics, defined once for the exact summary and the streamed one.

Each request's latencies are columns of the requests table (`sim.simulate.tables.requests_table`):
`queue_s`, `ttft_s`, `tpot_s`, `e2e_s` and `max_itl_s` (its longest gap between two tokens),
NaN where undefined. What a summary makes of them is defined here, on rows: the exact summary
(`sim.metrics.summary`, `sim.metrics.instances.stall_summary`) applies it to the whole table,
the streamed one (`sim.metrics.streaming`) to each chunk as it comes, so that both count the
same requests in the same samples:

* the measured window of arrivals, and which requests finished;
* goodput: a measured request that finished within its tier's SLO targets;
* stalls: the longest gaps of measured requests with at least two output tokens;
* emissions: the pooled per-token gaps as whole gaps between a request's emissions;
* the rates over the measured window, and the time-average queue length.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pandas as pd

from sim.core.request import ABORTED
from sim.metrics.context import SummaryContext
from sim.metrics.percentiles import FloatArray
from sim.metrics.tiers import meets_slo, slo_targets

BoolArray = npt.NDArray[np.bool_]

# each `<name>_s` column summarized as `<name>_mean_s` and `<name>_p<q>_s` over the measured set
LATENCIES = ("ttft", "tpot", "e2e", "queue")


def floats(frame: pd.DataFrame, column: str) -> FloatArray:
    return frame[column].to_numpy(dtype=float)


def measured_window(
    first_arrival: float, last_arrival: float, ctx: SummaryContext
) -> tuple[float, float]:
    """The arrival times measured: the arrival span less `warmup_s` and `cooldown_s`."""
    return first_arrival + ctx.warmup_s, last_arrival - ctx.cooldown_s


def in_window(arrival: FloatArray, window: tuple[float, float]) -> BoolArray:
    lo, hi = window
    return (arrival >= lo) & (arrival <= hi)


def finished(rejected: BoolArray, finish: FloatArray) -> BoolArray:
    """Served requests that emitted their last token."""
    return ~rejected & ~np.isnan(finish)


def refused(requests: pd.DataFrame, rejected: BoolArray) -> BoolArray:
    """The rejected requests the engine refused, without those their clients aborted
    (`batchsim serve`): an aborted request is neither a rejection nor an SLO miss."""
    if "reject_reason" not in requests.columns or not rejected.any():
        return rejected
    return rejected & (requests["reject_reason"].to_numpy(dtype=object) != ABORTED)


def good(measured: pd.DataFrame, ctx: SummaryContext) -> BoolArray:
    """Mask of measured requests that finished and meet every SLO of their tier that is set."""
    ttft, tpot = slo_targets(measured, ctx.slo_ttft_s, ctx.slo_tpot_s, ctx.slo_tiers)
    return meets_slo(measured, ttft, tpot)


def stalls(requests: pd.DataFrame, counted: BoolArray) -> FloatArray:
    """The longest gaps of the `counted` requests that have a gap (two output tokens or more);
    NaN ones left for the sample to drop."""
    multi = requests["num_output_tokens"].to_numpy() >= 2
    return floats(requests, "max_itl_s")[counted & multi]


def stall_stats(stats: dict[str, float]) -> dict[str, float]:
    """The stall percentiles as reported: no `stall_mean_s` when no request had a gap."""
    return {k: v for k, v in stats.items() if k != "stall_mean_s" or not math.isnan(v)}


def emissions(
    gaps: npt.ArrayLike, counts: npt.ArrayLike, tokens: npt.ArrayLike | None = None
) -> tuple[FloatArray, FloatArray]:
    """The pooled per-token gaps as gaps between emissions, with their weights: an emission of
    n tokens (a speculative step) is one gap of `n * gap_s`; `tokens` None: one token each."""
    g = np.asarray(gaps, dtype=float)
    t = np.ones_like(g) if tokens is None else np.asarray(tokens, dtype=float)
    return g * t, np.asarray(counts, dtype=float) / t


def rates(
    first_arrival: float,
    last_finish: float,
    *,
    num_done: int,
    num_good: int,
    num_offered: int,
    output_tokens: float,
    prompt_tokens: float,
) -> dict[str, float]:
    """Throughput, goodput and SLO attainment of the measured set: `num_done` of its requests
    finished (the last at `last_finish`; the first arrived at `first_arrival`), `num_good` of
    them within their SLOs, out of `num_offered` (rejected ones in the window included)."""
    duration = last_finish - first_arrival if num_done else math.nan

    def rate(x: float) -> float:
        return x / duration if duration > 0 else math.nan

    return {
        "duration_s": duration,
        "output_tokens_per_s": rate(output_tokens),
        "total_tokens_per_s": rate(output_tokens + prompt_tokens),
        "requests_per_s": rate(float(num_done)),
        "goodput_rps": rate(float(num_good)),
        "slo_attainment": num_good / num_offered if num_offered else math.nan,
    }


def mean_queue_length(
    waited_s: float, num_waits: int, first_arrival: float, last_finish: float
) -> float:
    """The time-average number of requests waiting for their first schedule (Little's law on
    the queue: served requests' `waited_s` seconds of waiting over the run's span), exact
    whatever the grouping of steps."""
    span = last_finish - first_arrival
    return waited_s / span if num_waits and span > 0 else math.nan
