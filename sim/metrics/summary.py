"""From the flat requests / steps / itl tables of one variant to a flat dict of summary metrics.

The definitions follow the README ("Metrics"): TTFT = first token - arrival, TPOT = (finish - first
token) / (output tokens - 1) for requests with at least two output tokens, E2E = finish - arrival,
queue delay = first scheduled - arrival. The requests table already carries these as `ttft_s`,
`tpot_s`, `e2e_s`, `queue_s` (NaN where undefined, e.g. rejected or unfinished requests); this
module only aggregates.

Which requests count where:

* The *measured set* is the non-rejected requests arriving within `[first arrival + warmup_s,
  last arrival - cooldown_s]` (arrival span taken over all requests, rejected ones included).
  Latency percentiles, throughput, goodput and SLO attainment use it.
* The *measured window* runs from the earliest arrival to the latest finish of the measured set
  (`duration_s`); throughput counts the tokens and requests of finished measured requests over it.
* Counts (`num_requests`, `num_finished`, `num_rejected`, preemptions, recomputed tokens) cover
  the whole run, so they can be checked for conservation against the workload.
* ITL percentiles come from the pooled `itl` table, which has no request ids and therefore
  covers the whole run; `itl_max_s` likewise is the longest stall of any served request (the
  max of `max_itl_s`), so that with consistent tables `itl_max_s >= itl_p99_s`.
* Speculative decoding emits several tokens of a request at once: the `itl` table gives each of
  them the gap divided by their number (`itl_*` is per token), and `spec_emission_gap_*` pools
  the whole gaps between emissions; stalls (`max_itl_s`) are whole gaps (docs/speculative.md).

Step metrics (batch size, utilizations, MFU) live in `sim.metrics.steps`, the fleet's price and
power in `sim.metrics.fleet`. Every value returned is
a plain Python `int` or `float`; undefined metrics are NaN rather than exceptions.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sim.metrics.context import SummaryContext
from sim.metrics.fleet import fleet_summary
from sim.metrics.percentiles import latency_stats, weighted_percentile, weighted_stats
from sim.metrics.steps import expand_steps, summary_of_totals, totals_by_instance
from sim.metrics.tiers import meets_slo, slo_targets, tier_summary

__all__ = ["SummaryContext", "expand_steps", "summarize", "weighted_percentile"]


REQUEST_COLUMNS = (
    "arrival_s",
    "num_prompt_tokens",
    "num_output_tokens",
    "finish_s",
    "queue_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "max_itl_s",
    "num_preemptions",
    "num_recomputed_tokens",
    "rejected",
)
ITL_COLUMNS = ("gap_s", "count")
MEASURED_COLUMNS = (
    "arrival_s",
    "num_prompt_tokens",
    "num_output_tokens",
    "finish_s",
    "queue_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "tier",
)


def _with_columns(frame: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    # an empty run may hand over column-less frames; a non-empty one must honour the schema
    missing = [c for c in columns if c not in frame.columns]
    if missing and len(frame):
        raise KeyError(f"table lacks columns {missing}")
    return frame.assign(**{c: pd.Series(dtype=float) for c in missing}) if missing else frame


def _floats(frame: pd.DataFrame, column: str) -> np.ndarray:
    return frame[column].to_numpy(dtype=float)


def _meets_slo(measured: pd.DataFrame, ctx: SummaryContext) -> np.ndarray:
    """Mask of measured requests that finished and meet every SLO of their tier that is set."""
    ttft, tpot = slo_targets(measured, ctx.slo_ttft_s, ctx.slo_tpot_s, ctx.slo_tiers)
    return meets_slo(measured, ttft, tpot)


def _request_summary(requests: pd.DataFrame, ctx: SummaryContext) -> dict[str, float]:
    rejected = requests["rejected"].to_numpy(dtype=bool)
    arrival = _floats(requests, "arrival_s")
    finish = _floats(requests, "finish_s")
    finished = ~rejected & ~np.isnan(finish)
    out: dict[str, float] = {
        "num_requests": len(requests),
        "num_finished": int(finished.sum()),
        "num_rejected": int(rejected.sum()),
        "num_preemptions": int(requests["num_preemptions"].sum()),
        "num_recomputed_tokens": int(requests["num_recomputed_tokens"].sum()),
    }
    for column in ("num_swaps", "swapped_bytes"):  # absent from hand-made tables
        out[column] = int(requests[column].sum()) if column in requests.columns else 0
    if len(requests):
        lo = float(arrival.min()) + ctx.warmup_s
        hi = float(arrival.max()) - ctx.cooldown_s
        in_window = (arrival >= lo) & (arrival <= hi)
    else:
        in_window = np.zeros(0, dtype=bool)
    # only the columns the measured set is read for: a filtered copy of every column of a
    # million-request table would cost more memory than the run itself
    wanted = [c for c in MEASURED_COLUMNS if c in requests.columns]
    measured = requests.loc[in_window & ~rejected, wanted]
    for metric in ("ttft", "tpot", "e2e", "queue"):
        out.update(latency_stats(metric, _floats(measured, f"{metric}_s")))

    done = measured[~np.isnan(_floats(measured, "finish_s"))]
    duration = math.nan
    if len(done):
        duration = float(_floats(done, "finish_s").max() - _floats(measured, "arrival_s").min())
    output_tokens = float(done["num_output_tokens"].sum())
    prompt_tokens = float(done["num_prompt_tokens"].sum())
    good = _meets_slo(measured, ctx)
    num_good = int(good.sum())
    num_offered = len(measured) + int((in_window & rejected).sum())

    def rate(x: float) -> float:
        return x / duration if duration > 0 else math.nan

    out.update(
        duration_s=duration,
        output_tokens_per_s=rate(output_tokens),
        total_tokens_per_s=rate(output_tokens + prompt_tokens),
        requests_per_s=rate(float(len(done))),
        goodput_rps=rate(float(num_good)),
        slo_attainment=num_good / num_offered if num_offered else math.nan,
    )
    waits = _floats(measured, "queue_s")
    out["oldest_wait_s"] = float(np.nanmax(waits)) if (~np.isnan(waits)).any() else math.nan
    out.update(tier_summary(measured, good))
    return out


def emission_gap_stats(itl: pd.DataFrame) -> dict[str, float]:
    """Percentiles of the gaps between a request's consecutive emissions, undivided: an emission
    of n tokens (a speculative step) is one gap of `n * gap_s` (`gap_s` is per token)."""
    tokens = _floats(itl, "tokens") if "tokens" in itl.columns else np.ones(len(itl))
    gaps = _floats(itl, "gap_s") * tokens
    return weighted_stats("spec_emission_gap", gaps, _floats(itl, "count") / tokens)


def summarize(
    requests: pd.DataFrame, steps: pd.DataFrame, itl: pd.DataFrame, ctx: SummaryContext
) -> dict[str, float]:
    """All summary metrics of one variant's run, keyed by name (see the module docstring)."""
    requests = _with_columns(requests, REQUEST_COLUMNS)
    itl = _with_columns(itl, ITL_COLUMNS)
    out = _request_summary(requests, ctx)
    out.update(weighted_stats("itl", _floats(itl, "gap_s"), itl["count"].to_numpy()))
    if ctx.speculative:
        out.update(emission_gap_stats(itl))
    stalls = _floats(requests, "max_itl_s")[~requests["rejected"].to_numpy(dtype=bool)]
    stalls = stalls[~np.isnan(stalls)]
    out["itl_max_s"] = float(stalls.max()) if stalls.size else math.nan
    first_arrival = float(_floats(requests, "arrival_s").min()) if len(requests) else math.nan
    totals = totals_by_instance(steps)
    out.update(summary_of_totals(totals, ctx, first_arrival))
    out.update(fleet_summary(totals, ctx, first_arrival, out["output_tokens_per_s"]))
    # time-average number of requests waiting for their first schedule (Little's law on the
    # queue): exact, unlike a per-step sample, whatever the grouping of steps
    served = ~requests["rejected"].to_numpy(dtype=bool)
    waits = _floats(requests, "queue_s")[served]
    waits = waits[~np.isnan(waits)]
    last = float(_floats(requests, "finish_s")[served].max()) if served.any() else math.nan
    span = last - first_arrival
    out["mean_queue_length"] = float(waits.sum() / span) if waits.size and span > 0 else math.nan
    # plain Python scalars so that json.dumps and YAML need no numpy awareness
    return {
        key: (int(v) if isinstance(v, (int, np.integer)) else float(v)) for key, v in out.items()
    }
