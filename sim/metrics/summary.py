"""From the flat requests / steps / itl tables of one variant to a flat dict of summary metrics.

The definitions follow docs/results.md: TTFT = first token - arrival, TPOT = (finish - first
token) / (output tokens - 1) for requests with at least two output tokens, E2E = finish - arrival,
queue delay = first scheduled - arrival. The requests table already carries these as `ttft_s`,
`tpot_s`, `e2e_s`, `queue_s` (NaN where undefined, e.g. rejected or unfinished requests); this
module only aggregates, with the definitions in `sim.metrics.request_metrics` (measured window,
goodput, rates, queue length) that the streamed summary (`sim.metrics.streaming`) shares.

Which requests count where:

* The *measured set* is the non-rejected requests arriving within `[first arrival + warmup_s,
  last arrival - cooldown_s]` (arrival span taken over all requests, rejected ones included).
  Latency percentiles, throughput, goodput and SLO attainment use it. A request its client
  aborted (`batchsim serve`, reject reason "aborted by its client") is left out of it and is
  neither counted in `num_rejected` nor offered to the SLO attainment: no server could have
  served it.
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
from sim.metrics.percentiles import latency_stats, longest, weighted_percentile, weighted_stats
from sim.metrics.request_metrics import (
    LATENCIES,
    emissions,
    finished,
    floats,
    good,
    in_window,
    mean_queue_length,
    measured_window,
    rates,
    refused,
)
from sim.metrics.steps import expand_steps, summary_of_totals, totals_by_instance
from sim.metrics.tasks import task_summary
from sim.metrics.tiers import tier_summary

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


def _request_summary(requests: pd.DataFrame, ctx: SummaryContext) -> dict[str, float]:
    rejected = requests["rejected"].to_numpy(dtype=bool)
    turned_away = refused(requests, rejected)  # not those aborted by their clients
    arrival = floats(requests, "arrival_s")
    out: dict[str, float] = {
        "num_requests": len(requests),
        "num_finished": int(finished(rejected, floats(requests, "finish_s")).sum()),
        "num_rejected": int(turned_away.sum()),
        "num_preemptions": int(requests["num_preemptions"].sum()),
        "num_recomputed_tokens": int(requests["num_recomputed_tokens"].sum()),
    }
    for column in ("num_swaps", "swapped_bytes"):  # absent from hand-made tables
        out[column] = int(requests[column].sum()) if column in requests.columns else 0
    if len(requests):
        bounds = measured_window(float(arrival.min()), float(arrival.max()), ctx)
        window = in_window(arrival, bounds)
    else:
        window = np.zeros(0, dtype=bool)
    # only the columns the measured set is read for: a filtered copy of every column of a
    # million-request table would cost more memory than the run itself
    wanted = [c for c in MEASURED_COLUMNS if c in requests.columns]
    measured = requests.loc[window & ~rejected, wanted]
    for metric in LATENCIES:
        out.update(latency_stats(metric, floats(measured, f"{metric}_s")))

    done = measured[~np.isnan(floats(measured, "finish_s"))]
    met = good(measured, ctx)
    out.update(
        rates(
            float(floats(measured, "arrival_s").min()) if len(done) else math.nan,
            float(floats(done, "finish_s").max()) if len(done) else math.nan,
            num_done=len(done),
            num_good=int(met.sum()),
            num_offered=len(measured) + int((window & turned_away).sum()),
            output_tokens=float(done["num_output_tokens"].sum()),
            prompt_tokens=float(done["num_prompt_tokens"].sum()),
        )
    )
    out["oldest_wait_s"] = longest(floats(measured, "queue_s"))
    if len(requests):
        out.update(task_summary(requests, bounds, ctx.slo_task_s))
    out.update(tier_summary(measured, met))
    return out


def emission_gap_stats(itl: pd.DataFrame) -> dict[str, float]:
    """Percentiles of the gaps between a request's consecutive emissions, undivided
    (`sim.metrics.request_metrics.emissions`)."""
    tokens = floats(itl, "tokens") if "tokens" in itl.columns else None
    gaps, weights = emissions(floats(itl, "gap_s"), floats(itl, "count"), tokens)
    return weighted_stats("spec_emission_gap", gaps, weights)


def summarize(
    requests: pd.DataFrame, steps: pd.DataFrame, itl: pd.DataFrame, ctx: SummaryContext
) -> dict[str, float]:
    """All summary metrics of one variant's run, keyed by name (see the module docstring)."""
    requests = _with_columns(requests, REQUEST_COLUMNS)
    itl = _with_columns(itl, ITL_COLUMNS)
    out = _request_summary(requests, ctx)
    out.update(weighted_stats("itl", floats(itl, "gap_s"), itl["count"].to_numpy()))
    if ctx.speculative:
        out.update(emission_gap_stats(itl))
    served = ~requests["rejected"].to_numpy(dtype=bool)
    out["itl_max_s"] = longest(floats(requests, "max_itl_s")[served])
    first_arrival = float(floats(requests, "arrival_s").min()) if len(requests) else math.nan
    totals = totals_by_instance(steps)
    out.update(summary_of_totals(totals, ctx, first_arrival))
    out.update(fleet_summary(totals, ctx, first_arrival, out["output_tokens_per_s"]))
    waits = floats(requests, "queue_s")[served]
    waits = waits[~np.isnan(waits)]
    last = longest(floats(requests, "finish_s")[served])
    waited = float(waits.sum())
    out["mean_queue_length"] = mean_queue_length(waited, waits.size, first_arrival, last)
    # plain Python scalars so that json.dumps and YAML need no numpy awareness
    return {
        key: (int(v) if isinstance(v, (int, np.integer)) else float(v)) for key, v in out.items()
    }
