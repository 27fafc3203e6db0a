"""Summaries of runs too large to keep as tables: chunks in, mergeable sums and sketches out.

With tables off (`simulate(..., tables=False)`, `batchsim run --tables summary`) the engine hands
its records over in chunks of bounded size and forgets them; `StreamSummary` folds each chunk into
counts, sums, maxima, per-instance step totals (`sim.metrics.steps.StepTotals`) and quantile
sketches, so memory stays flat whatever the number of requests, and the summary has the same keys
as the tables' (`sim.metrics.summary.summarize`). Which requests count where, goodput, stalls and
the rates are defined once for both (`sim.metrics.request_metrics`), applied here chunk by chunk.

Counts, sums, means, rates, utilizations and maxima are exact. Percentiles have one definition
everywhere, the tables' (numpy's linear interpolation between the order statistics at ranks
`floor(h)` and `floor(h) + 1`, `h = q * (n - 1)`; `sim.metrics.percentiles`):

* while a sample has at most `EXACT_ROWS` rows (values, or weighted gaps) it is kept whole and
  its percentiles are the tables' to the bit, so runs of up to about 65,000 requests (every
  probe of a deployment search at its default size) report exactly what `batchsim run` reports;
* past that, it is folded into a DDSketch (Masson et al., VLDB 2019: logarithmic bins of
  relative width `RELATIVE_ACCURACY`, each stood for by a value within that relative error of
  every value in it), and a percentile interpolates between the bins holding those two order
  statistics with the tables' weight: a convex combination of two values each within
  `RELATIVE_ACCURACY` of its order statistic, so `|p - x| <= RELATIVE_ACCURACY * x` against the
  exact, interpolated percentile `x`, whatever the sample's size.

`StreamSummary.inexact_percentiles` gives, for the percentiles that came from a sketch, the
interval the exact value lies in, so that a judge (the deployment search) can be sure. Values
are binned with numpy a chunk at a time, so a sketch costs O(bins) per chunk, not O(values).
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from sim.metrics.context import SummaryContext
from sim.metrics.fleet import fleet_summary
from sim.metrics.instances import INSTANCE_METRICS, instance_identity
from sim.metrics.percentiles import QUANTILES, FloatArray, longest, weighted_percentiles
from sim.metrics.request_metrics import (
    LATENCIES,
    emissions,
    finished,
    good,
    in_window,
    mean_queue_length,
    measured_window,
    rates,
    refused,
    stall_stats,
    stalls,
)
from sim.metrics.steps import StepTotals, summary_of_totals
from sim.metrics.tiers import tier_metrics
from sim.metrics.timeline import WindowFold, check_windows, default_window_s, origin_of

RELATIVE_ACCURACY = 0.005  # 0.5 %: about 460 bins cover 1 ms to 10,000 s
# rows of a sample kept whole (two float64 arrays: 1 MB per sketch at most) before it is sketched
EXACT_ROWS = 1 << 16


def _max(current: float, value: float) -> float:
    """The larger, where NaN means no value (yet)."""
    if math.isnan(value):
        return current
    return value if math.isnan(current) else max(current, value)


class Sketch:
    """Percentiles of non-negative values (weighted), exact while the sample is small and within
    `relative_accuracy` of the exact ones after; exact count, sum and max."""

    def __init__(
        self, relative_accuracy: float = RELATIVE_ACCURACY, exact_rows: int = EXACT_ROWS
    ) -> None:
        self.alpha = relative_accuracy
        gamma = (1 + relative_accuracy) / (1 - relative_accuracy)
        self.log_gamma = math.log(gamma)
        # DDSketch's representative of bin k, gamma^k * 2 / (1 + gamma), lies within alpha of
        # every value in (gamma^(k-1), gamma^k]
        self.scale = 2.0 / (1.0 + gamma)
        self.min_positive = sys.float_info.min * gamma  # smaller values count as zeros
        self.exact_rows = exact_rows
        # the sample itself while small: (values, weights or None for ones) per chunk
        self.kept: list[tuple[FloatArray, npt.NDArray[Any] | None]] | None = []
        self.kept_rows = 0
        self.bins: dict[int, float] = {}
        self.zeros = 0.0
        self.count = 0.0
        self.total = 0.0
        self.max = -math.inf

    @property
    def exact(self) -> bool:
        """True while the percentiles are the exact ones (the sample is still kept whole)."""
        return self.kept is not None

    def add(self, values: npt.ArrayLike, weights: npt.ArrayLike | None = None) -> None:
        v = np.asarray(values, dtype=float)
        w = None if weights is None else np.asarray(weights)
        if w is not None and w.dtype.kind not in "iu":
            w = w.astype(float, copy=False)
        keep = ~np.isnan(v) if w is None else ~np.isnan(v) & (w > 0)
        v = v[keep]  # boolean indexing copies: the caller's arrays are not held
        w = None if w is None else w[keep]
        if not v.size:
            return
        self.count += float(v.size if w is None else w.sum())
        self.total += float(v.sum() if w is None else (v * w).sum())
        self.max = max(self.max, float(v.max()))
        if self.kept is None:
            self._bin(v, w)
            return
        self.kept.append((v, w))
        self.kept_rows += v.size
        if self.kept_rows > self.exact_rows:  # too large to keep: sketch it from now on
            for values_kept, weights_kept in self.kept:
                self._bin(values_kept, weights_kept)
            self.kept = None

    def _bin(self, v: FloatArray, w: npt.NDArray[Any] | None) -> None:
        weights = np.ones_like(v) if w is None else w.astype(float)
        positive = v > self.min_positive
        if not positive.all():
            self.zeros += float(weights[~positive].sum())
        if positive.any():
            # the bin of each value, as DDSketch's logarithmic mapping computes it
            keys = np.ceil(np.log(v[positive]) / self.log_gamma).astype(np.int64)
            found, inverse = np.unique(keys, return_inverse=True)
            totals = np.bincount(inverse, weights=weights[positive])
            for key, total in zip(found.tolist(), totals.tolist(), strict=True):
                self.bins[key] = self.bins.get(key, 0.0) + total

    def quantiles(self, qs: Sequence[float]) -> list[float]:
        """The percentiles `qs` (0..100); NaN when empty."""
        if not self.count:
            return [math.nan] * len(qs)
        if self.kept is not None:
            values = np.concatenate([v for v, _ in self.kept])
            if all(w is None for _, w in self.kept):  # plain samples: as `latency_stats`
                return [float(x) for x in np.percentile(values, list(qs))]
            weights = np.concatenate([np.ones_like(v) if w is None else w for v, w in self.kept])
            return weighted_percentiles(values, weights, qs)
        # the bins in ascending order stand for their values: the same rank rule on them
        keys = np.fromiter(sorted(self.bins), dtype=np.int64, count=len(self.bins))
        stand_ins = np.exp(keys * self.log_gamma) * self.scale
        weights = np.fromiter((self.bins[k] for k in keys.tolist()), float, count=keys.size)
        if self.zeros:
            stand_ins = np.concatenate([[0.0], stand_ins])
            weights = np.concatenate([[self.zeros], weights])
        return weighted_percentiles(stand_ins, weights, qs)

    def quantile(self, q: float) -> float:
        """The q-th percentile (0..100); NaN when empty."""
        return self.quantiles([q])[0]

    def bounds(self, q: float) -> tuple[float, float]:
        """The least and the most the exact q-th percentile can be (the same when exact)."""
        value = self.quantile(q)
        if self.exact or math.isnan(value):
            return value, value
        # |value - x| <= alpha * x; a hair wider for the rounding of the logarithms
        slack = 1e-9
        return value / (1 + self.alpha) * (1 - slack), value / (1 - self.alpha) * (1 + slack)

    def stats(self, prefix: str, quantiles: Sequence[int] = QUANTILES) -> dict[str, float]:
        """`<prefix>_mean_s` (exact) and `<prefix>_p<q>_s`, like `latency_stats`."""
        out = {f"{prefix}_mean_s": self.total / self.count if self.count else math.nan}
        for q, value in zip(quantiles, self.quantiles(quantiles), strict=True):
            out[f"{prefix}_p{q}_s"] = value
        return out


class _Tier:
    def __init__(self) -> None:
        self.num = 0
        self.good = 0
        self.ttft = Sketch()
        self.e2e = Sketch()
        self.oldest_wait = math.nan


class _Measured:
    """The measured window's tallies: its requests, those offered, done and good, their span,
    tokens and longest queue wait."""

    def __init__(self) -> None:
        self.num = self.offered = self.good = self.done = 0
        self.first_arrival = math.inf
        self.last_finish = -math.inf
        self.output_tokens = self.prompt_tokens = 0.0
        self.oldest_wait = math.nan

    def add_rejected(self, num: int) -> None:
        """Requests of the window rejected: offered, never served."""
        self.offered += num

    def add(self, measured: pd.DataFrame, finish: np.ndarray, met: np.ndarray) -> None:
        """Served requests of the window, their finish times and which met their SLOs."""
        done = ~np.isnan(finish)
        self.num += len(measured)
        self.offered += len(measured)
        self.done += int(done.sum())
        self.first_arrival = min(self.first_arrival, float(measured["arrival_s"].min()))
        if done.any():
            self.last_finish = max(self.last_finish, float(finish[done].max()))
        self.output_tokens += float(measured["num_output_tokens"].to_numpy()[done].sum())
        self.prompt_tokens += float(measured["num_prompt_tokens"].to_numpy()[done].sum())
        self.good += int(met.sum())
        waits = measured["queue_s"].to_numpy(dtype=float)
        self.oldest_wait = _max(self.oldest_wait, longest(waits))

    def rates(self) -> dict[str, float]:
        out = rates(
            self.first_arrival,
            self.last_finish,
            num_done=self.done,
            num_good=self.good,
            num_offered=self.offered,
            output_tokens=self.output_tokens,
            prompt_tokens=self.prompt_tokens,
        )
        out["oldest_wait_s"] = self.oldest_wait
        return out


class StreamSummary:
    """One variant's summary, built from chunks of its requests, steps and gaps."""

    def __init__(
        self,
        ctx: SummaryContext,
        first_s: float,
        last_s: float,
        last_known_s: float | None = None,
        num_links: int = 0,
        window_s: float | None = None,
    ) -> None:
        """`first_s` and `last_s` are the run's first and last arrivals (NaN: no request;
        `last_s` infinite when closed-loop sessions' later turns are not known before the run,
        so such a run measures to the end: `simulate` refuses a cooldown for it);
        `last_known_s` is the last arrival known now (default `last_s`)."""
        self.ctx = ctx
        self.first_arrival = first_s
        self.last_arrival = last_s
        self.window = measured_window(self.first_arrival, self.last_arrival, ctx)
        # the timeline's windows (sim.metrics.timeline): `window_s`, or the default from the span
        # of the arrivals known now (a closed loop's later turns are not)
        self.timeline_fold: WindowFold | None = None
        last_known = last_s if last_known_s is None else last_known_s
        if first_s == first_s:  # some arrival is known (not NaN)
            w = default_window_s(last_known - first_s) if window_s is None else window_s
            check_windows(first_s, last_known, w)
            self.timeline_fold = WindowFold(ctx, origin_of(first_s, w), w)
        self.counts = dict.fromkeys(
            (
                "num_requests",
                "num_finished",
                "num_rejected",
                "num_preemptions",
                "num_recomputed_tokens",
                "num_swaps",
                "swapped_bytes",
                "num_kv_transfers",
            ),
            0,
        )
        self.latency = {m: Sketch() for m in (*LATENCIES, "stall")}
        self.transfer = {m: Sketch() for m in ("kv_transfer", "kv_transfer_queue")}
        self.transfer_busy_s = 0.0
        self.itl = Sketch()
        self.emission_gaps = Sketch()  # speculative decoding: whole gaps between emissions
        self.itl_max = math.nan
        self.measured = _Measured()
        self.served_waits = 0.0
        self.served_wait_count = 0
        self.served_last_finish = -math.inf
        self.last_finish = -math.inf
        self.tiers: dict[str, _Tier] = {}
        self.steps: dict[int, StepTotals] = {}
        self.taken: dict[int, int] = {}  # requests per instance (prefill and decode sides)
        self.reject_reasons: Counter[str] = Counter()
        self.num_links = num_links

    # -- chunks in --------------------------------------------------------------------------------

    def use_context(self, ctx: SummaryContext) -> None:
        """The run's context as it ended (an autoscaled fleet's instances and lifetimes)."""
        self.ctx = ctx

    def add_requests(self, chunk: pd.DataFrame) -> None:
        """A chunk of the requests table (any rows, any order)."""
        c = self.counts
        rejected = chunk["rejected"].to_numpy(dtype=bool)
        finish = chunk["finish_s"].to_numpy(dtype=float)
        arrival = chunk["arrival_s"].to_numpy(dtype=float)
        c["num_requests"] += len(chunk)
        if self.timeline_fold is not None:
            self.timeline_fold.add_requests(chunk)
        c["num_finished"] += int(finished(rejected, finish).sum())
        turned_away = refused(chunk, rejected)  # not those aborted by their clients
        c["num_rejected"] += int(turned_away.sum())
        if rejected.any() and "reject_reason" in chunk.columns:
            self.reject_reasons.update(chunk.loc[rejected, "reject_reason"].astype(str).tolist())
        for key in ("num_preemptions", "num_recomputed_tokens", "num_swaps", "swapped_bytes"):
            c[key] += int(chunk[key].sum())
        for column in ("instance", "decode_instance"):
            for index, count in chunk[column].value_counts().items():
                if int(index) >= 0:  # type: ignore[call-overload]
                    key = int(index)  # type: ignore[call-overload]
                    self.taken[key] = self.taken.get(key, 0) + int(count)
        if (~np.isnan(finish)).any():
            self.last_finish = max(self.last_finish, float(np.nanmax(finish)))
        served = ~rejected
        waits = chunk["queue_s"].to_numpy(dtype=float)[served]
        self.served_waits += float(np.nansum(waits))
        self.served_wait_count += int((~np.isnan(waits)).sum())
        self.served_last_finish = _max(self.served_last_finish, longest(finish[served]))
        window = in_window(arrival, self.window)
        # the stall percentiles cover the measured set, like the latencies
        self.latency["stall"].add(stalls(chunk, served & window))
        self.itl_max = _max(self.itl_max, longest(chunk["max_itl_s"].to_numpy(dtype=float)[served]))
        self.measured.add_rejected(int((window & turned_away).sum()))
        measured = chunk[window & served]
        self._add_measured(measured)
        if self.num_links and "transfer_s" in chunk.columns:
            moved = chunk[chunk["transfer_s"].notna()]
            c["num_kv_transfers"] += len(moved)
            self.transfer["kv_transfer"].add(moved["transfer_s"].to_numpy(dtype=float))
            self.transfer["kv_transfer_queue"].add(moved["transfer_queue_s"].to_numpy(dtype=float))
            self.transfer_busy_s += float(moved["transfer_s"].sum())

    def _add_measured(self, measured: pd.DataFrame) -> None:
        if not len(measured):
            return
        for metric in LATENCIES:
            self.latency[metric].add(measured[f"{metric}_s"].to_numpy(dtype=float))
        finish = measured["finish_s"].to_numpy(dtype=float)
        met = good(measured, self.ctx)
        self.measured.add(measured, finish, met)
        waits = measured["queue_s"].to_numpy(dtype=float)
        if "tier" in measured.columns:
            tiers = measured["tier"].to_numpy()
            for name in dict.fromkeys(tiers.tolist()):
                mask = tiers == name
                tier = self.tiers.setdefault(str(name), _Tier())
                tier.num += int(mask.sum())
                tier.good += int(met[mask].sum())
                tier.ttft.add(measured["ttft_s"].to_numpy(dtype=float)[mask])
                tier.e2e.add(measured["e2e_s"].to_numpy(dtype=float)[mask])
                tier.oldest_wait = _max(tier.oldest_wait, longest(waits[mask]))

    def add_steps(self, instance: int, chunk: pd.DataFrame) -> None:
        """A chunk of one instance's step groups."""
        self.steps.setdefault(instance, StepTotals()).add(chunk)
        if self.timeline_fold is not None and len(chunk):
            self.timeline_fold.add_busy(
                chunk["start_s"].to_numpy(dtype=float), chunk["end_s"].to_numpy(dtype=float)
            )

    def add_itl(
        self, gaps: npt.ArrayLike, counts: npt.ArrayLike, tokens: npt.ArrayLike | None = None
    ) -> None:
        """Per-token gaps and their counts; `tokens`: the size of the emission each belongs to
        (speculative decoding; None: one token each)."""
        self.itl.add(gaps, counts)
        if self.ctx.speculative:
            self.emission_gaps.add(*emissions(gaps, counts, tokens))

    # -- the summary ------------------------------------------------------------------------------

    def instance_summary(self, instances: pd.DataFrame) -> pd.DataFrame:
        """`sim.metrics.instances.instance_summary` from the streamed step totals."""
        rows = []
        for inst in instances.to_dict("records"):
            index = int(inst["index"])
            own = replace(
                self.ctx,
                num_instances=1,
                instances=(),
                kv_blocks_total=int(inst["kv_blocks_total"]),
                peak_flops=float(inst["peak_flops"]),
                hbm_bandwidth_bytes_per_s=float(inst["hbm_bandwidth_bytes_per_s"]),
                kv_bytes_per_token=float(inst["kv_bytes_per_token"]),
                block_size=int(inst["block_size"]),
            )
            totals = {0: self.steps[index]} if index in self.steps else {}
            metrics = summary_of_totals(totals, own, self.first_arrival)
            row = instance_identity(inst, self.taken.get(index, 0))
            row.update({key: metrics[key] for key in INSTANCE_METRICS})
            rows.append(row)
        return pd.DataFrame(rows)

    def timeline(
        self, instances: pd.DataFrame | None = None, fleet_events: pd.DataFrame | None = None
    ) -> pd.DataFrame:
        """The run's timeline (`sim.metrics.timeline`), as the tables would give it: counts and
        fleet figures exact, percentiles within the sketches' relative accuracy."""
        if self.timeline_fold is None:
            return WindowFold(self.ctx, 0.0, 1.0).frame()
        return self.timeline_fold.frame(instances, fleet_events)

    def sketches(self) -> dict[str, Sketch]:
        """Every percentile's sketch, by the prefix of its summary keys."""
        out: dict[str, Sketch] = {**self.latency, "itl": self.itl}
        if self.ctx.speculative:
            out["spec_emission_gap"] = self.emission_gaps
        if self.num_links:
            out.update(self.transfer)
        for name, tier in self.tiers.items():
            out[f"tier_{name}_ttft"], out[f"tier_{name}_e2e"] = tier.ttft, tier.e2e
        return out

    def inexact_percentiles(self) -> dict[str, tuple[float, float]]:
        """`<prefix>_p<q>_s` -> (least, most) the exact percentile can be, for the percentiles
        of samples too large to keep whole (empty when every percentile is exact)."""
        return {
            f"{prefix}_p{q}_s": sketch.bounds(q)
            for prefix, sketch in self.sketches().items()
            if not sketch.exact
            for q in QUANTILES
        }

    def summary(self) -> dict[str, float]:
        out: dict[str, float] = {k: v for k, v in self.counts.items() if k != "num_kv_transfers"}
        for metric in LATENCIES:
            out.update(self.latency[metric].stats(metric))
        out.update(self.measured.rates())
        if list(self.tiers) != ["default"]:
            for name, tier in self.tiers.items():
                ttft, e2e = tier.ttft.quantile, tier.e2e.quantile
                out.update(tier_metrics(name, tier.num, tier.good, ttft, e2e, tier.oldest_wait))
        out.update(self.itl.stats("itl"))
        if self.ctx.speculative:
            out.update(self.emission_gaps.stats("spec_emission_gap"))
        out["itl_max_s"] = self.itl_max
        out.update(summary_of_totals(self.steps, self.ctx, self.first_arrival))
        out.update(
            fleet_summary(self.steps, self.ctx, self.first_arrival, out["output_tokens_per_s"])
        )
        out["mean_queue_length"] = mean_queue_length(
            self.served_waits, self.served_wait_count, self.first_arrival, self.served_last_finish
        )
        out.update(stall_stats(self.latency["stall"].stats("stall")))
        if self.num_links:
            for metric, sketch in self.transfer.items():
                out.update(sketch.stats(metric))
            out["num_kv_transfers"] = self.counts["num_kv_transfers"]
            span = self.last_finish - self.first_arrival
            busy = self.transfer_busy_s
            out["link_utilization"] = busy / (self.num_links * span) if span > 0 else math.nan
        return {
            k: (int(v) if isinstance(v, (int, np.integer)) else float(v)) for k, v in out.items()
        }
