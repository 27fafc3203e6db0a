"""Metrics over time: one row per window of the run, for runs long enough that the load, the
fleet and the latencies change during them (a day of traffic, an autoscaled fleet).

`timeline(result, window_s)` cuts the run into windows `[start, end)` of `window_s` seconds,
aligned to multiples of `window_s` (the first holds the first arrival) up to the run's end (the
last arrival, finish, step end or fleet event), and gives per window (`TIMELINE_COLUMNS`):

* `window_start_s`, `window_end_s`; `covered_s`, the part of the window inside the run (the run
  starts at the first arrival), which the rates and averages below divide by;
* `arrivals`, `arrival_rate` (arrivals / covered_s), `completed` (requests that finished in the
  window), `rejected` (requests arriving in the window that were refused);
* `slo_attainment`: the share of the requests arriving in the window that finished within their
  tier's TTFT and TPOT targets (rejected and unfinished ones count as misses, as in the summary's
  `slo_attainment`); NaN when no SLO target is set or nothing arrived;
* `ttft_p50_s`, `ttft_p90_s`, `tpot_p90_s`, `e2e_p90_s`: percentiles over the served requests
  arriving in the window (what the window's arrivals experienced; numpy's linear rule);
* `instances_serving`: time-average number of instances ready and not draining;
  `instances_billed`: time-average number launched and not yet retired;
  `busy_fraction`: seconds the instances ran steps over the instance-seconds billed;
* `usd`: the fleet's rent within the window, the sum over instances of GPUs x price per GPU-hour
  x the overlap of its billed lifetime with the window (plus the KV tiers' rent, held for the
  whole run); `usd_per_hour` = usd / covered_s x 3600. NaN when the prices are unknown.

Unlike the summary, nothing is left out for warm-up or cool-down: a window shows what happened
in it. Instance lifetimes come from the instance table's `launch_s`, `ready_s`, `drain_s` and
`retire_s` (an autoscaled run; NaN where the event did not happen): billed from launch (from the
run's start when not launched during it) until retired (the run's end when never), serving from
ready (the run's start for an instance there from the beginning; never for one launched and
cancelled before it was ready) until the first of drain and retire. Without those columns every
instance serves and is billed for the whole run.

The default window (`metrics.window_s` unset) is a round length near 1 % of the arrival span,
at least 1 s (`default_window_s`). Everything is computed with numpy over whole columns: a table
of a million requests and two million step groups takes one to two seconds on one core. The
streamed run (`sim.metrics.streaming`) folds the same figures chunk by chunk through
`WindowFold`: counts and lifetimes exactly, percentiles exactly while the sample is small and
from per-window DDSketch bins after (within `RELATIVE_ACCURACY` of the exact value, as the
summary's; `sim.metrics.window_sample`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from sim.errors import ScenarioError
from sim.metrics.context import SummaryContext
from sim.metrics.request_metrics import good
from sim.metrics.window_sample import WindowSample

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

TIMELINE_COLUMNS = (
    "window_start_s",
    "window_end_s",
    "covered_s",
    "arrivals",
    "arrival_rate",
    "completed",
    "rejected",
    "slo_attainment",
    "ttft_p50_s",
    "ttft_p90_s",
    "tpot_p90_s",
    "e2e_p90_s",
    "instances_serving",
    "instances_billed",
    "busy_fraction",
    "usd",
    "usd_per_hour",
)
# (column, request-table column, percentile)
PERCENTILES = (
    ("ttft_p50_s", "ttft_s", 50.0),
    ("ttft_p90_s", "ttft_s", 90.0),
    ("tpot_p90_s", "tpot_s", 90.0),
    ("e2e_p90_s", "e2e_s", 90.0),
)
SAMPLES = ("ttft_s", "tpot_s", "e2e_s")
# round window lengths, seconds: 1 s .. 1 day
NICE_WINDOWS_S = (1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 900, 1200, 1800, 3600, 7200,
                  10800, 21600, 43200, 86400)  # fmt: skip
TARGET_WINDOWS = 100  # the default window is near 1 % of the arrival span
MAX_WINDOWS = 200_000  # a day in half-second windows
LIFETIME_COLUMNS = ("launch_s", "ready_s", "drain_s", "retire_s")
# rows of a window sample kept whole before it is binned (as sim.metrics.streaming.EXACT_ROWS)
EXACT_ROWS = 1 << 16


def default_window_s(span_s: float) -> float:
    """The round length in `NICE_WINDOWS_S` nearest (in ratio) to 1 % of `span_s`."""
    if not span_s > 0 or not math.isfinite(span_s):
        return 1.0
    target = math.log(span_s / TARGET_WINDOWS)
    return float(min(NICE_WINDOWS_S, key=lambda w: abs(math.log(w) - target)))


def has_slo(ctx: SummaryContext) -> bool:
    """Whether any request can be judged against a target."""
    if ctx.slo_ttft_s is not None or ctx.slo_tpot_s is not None:
        return True
    return any(t is not None or p is not None for _, t, p in ctx.slo_tiers)


def check_windows(first_s: float, last_s: float, window_s: float) -> None:
    """A ScenarioError when `window_s` cuts `[first_s, last_s]` into more than MAX_WINDOWS."""
    if not (window_s > 0 and math.isfinite(window_s)):
        raise ScenarioError(f"must be a positive number of seconds, got {window_s}",
                            path="metrics.window_s")  # fmt: skip
    span = last_s - first_s
    if math.isfinite(span) and span / window_s > MAX_WINDOWS:
        raise ScenarioError(
            f"{window_s:g} s cuts the run's {span:g} s into more than {MAX_WINDOWS:,} windows; "
            f"use at least {span / MAX_WINDOWS:.3g} s",
            path="metrics.window_s",
        )


def overlap_per_window(
    start: FloatArray, end: FloatArray, weight: FloatArray, origin: float, width: float, n: int
) -> FloatArray:
    """Per window `k` (`[origin + k * width, origin + (k + 1) * width)`, k < n): the sum of
    `weight * |[start, end) & window|` over the intervals, exactly, without a loop over them
    (intervals within one window add their length, longer ones their two ends and a run of
    full windows through a difference array)."""
    out = np.zeros(n)
    keep = (end > start) & np.isfinite(start) & np.isfinite(end) & (weight != 0)
    if not keep.any():
        return out
    a, b, w = start[keep], end[keep], weight[keep]
    first = np.clip(np.floor((a - origin) / width).astype(np.int64), 0, n - 1)
    last = np.clip(np.floor((b - origin) / width).astype(np.int64), 0, n - 1)
    edge_after_first = origin + (first + 1) * width
    edge_of_last = origin + last * width
    same = first == last
    out += np.bincount(first[same], weights=w[same] * (b[same] - a[same]), minlength=n)
    multi = ~same
    if multi.any():
        f, la, wm = first[multi], last[multi], w[multi]
        out += np.bincount(f, weights=wm * (edge_after_first[multi] - a[multi]), minlength=n)
        out += np.bincount(la, weights=wm * (b[multi] - edge_of_last[multi]), minlength=n)
        diff = np.bincount(f + 1, weights=wm, minlength=n + 1)
        diff -= np.bincount(la, weights=wm, minlength=n + 1)
        out += np.cumsum(diff)[:n] * width
    return out


class WindowFold:
    """The timeline's per-window figures, folded from chunks of the requests table and of step
    groups in any order (`sim.metrics.streaming` feeds it as the run goes; `timeline` feeds it
    whole tables with `exact=True`: percentiles from the whole sample whatever its size)."""

    def __init__(
        self,
        ctx: SummaryContext,
        origin: float,
        window_s: float,
        *,
        exact: bool = False,
    ) -> None:
        self.ctx = ctx
        self.origin = origin
        self.window_s = window_s
        self.judged = has_slo(ctx)
        self.counts: dict[str, FloatArray] = {
            k: np.zeros(0) for k in ("arrivals", "completed", "rejected", "good", "busy_s")
        }
        # exact (the tables'): each sample kept whole whatever its size
        exact_rows = None if exact else EXACT_ROWS
        self.samples = {column: WindowSample(exact_rows) for column in SAMPLES}
        self.first_arrival = math.inf
        self.last_time = -math.inf  # the latest arrival, finish or step end seen

    def _index(self, times: FloatArray) -> IntArray:
        """Each time's window; times past the last window the timeline keeps (`MAX_WINDOWS`:
        finishes long after the last arrival, e.g. behind a very slow KV link) share one bin
        past it, which `frame` leaves out (the summary still counts them)."""
        with np.errstate(invalid="ignore"):
            raw = np.floor((times - self.origin) / self.window_s)
        return np.minimum(raw, MAX_WINDOWS).astype(np.int64)

    def _add(self, key: str, index: IntArray, weights: FloatArray | None = None) -> None:
        if not index.size:
            return
        counts = np.bincount(index, weights=weights)
        own = self.counts[key]
        if counts.size > own.size:
            own = np.concatenate([own, np.zeros(counts.size - own.size)])
        own[: counts.size] += counts
        self.counts[key] = own

    def _seen(self, times: FloatArray) -> None:
        finite = times[np.isfinite(times)]
        if finite.size:
            self.last_time = max(self.last_time, float(finite.max()))

    def add_requests(self, chunk: pd.DataFrame) -> None:
        """A chunk of the requests table (any rows, any order)."""
        if not len(chunk):
            return
        arrival = chunk["arrival_s"].to_numpy(dtype=float)
        finish = chunk["finish_s"].to_numpy(dtype=float)
        rejected = chunk["rejected"].to_numpy(dtype=bool)
        known = ~np.isnan(arrival)
        if known.any():
            self.first_arrival = min(self.first_arrival, float(arrival[known].min()))
        self._seen(arrival)
        self._seen(finish)
        index = self._index(np.where(known, arrival, self.origin))
        self._add("arrivals", index[known])
        self._add("rejected", index[known & rejected])
        done = ~rejected & ~np.isnan(finish)
        self._add("completed", self._index(finish[done]))
        if self.judged:
            met = good(chunk, self.ctx) & known
            self._add("good", index[met])
        served = known & ~rejected
        for column in SAMPLES:
            self.samples[column].add(index[served], chunk[column].to_numpy(dtype=float)[served])

    def add_busy(self, start: FloatArray, end: FloatArray) -> None:
        """Step groups `[start, end)` of any instances."""
        ok = np.isfinite(start) & np.isfinite(end) & (end > start)
        if not ok.any():
            return
        start, end = np.maximum(start[ok], self.origin), end[ok]
        self._seen(end)
        end = np.minimum(end, self.origin + MAX_WINDOWS * self.window_s)  # the kept windows
        if not (end > start).any():
            return
        start, end = start[end > start], end[end > start]
        first = int(self._index(np.array([start.min()]))[0])
        n = int(self._index(np.array([end.max()]))[0]) + 1
        shift = self.origin + first * self.window_s
        busy = overlap_per_window(start, end, np.ones(start.size), shift, self.window_s, n - first)
        self._add("busy_s", np.arange(first, n, dtype=np.int64), busy)

    def frame(
        self, instances: pd.DataFrame | None = None, fleet_events: pd.DataFrame | None = None
    ) -> pd.DataFrame:
        """The timeline (`TIMELINE_COLUMNS`) of what was folded, with the fleet's lifetimes from
        the instance table and the scaling events (which may extend the run's end)."""
        if not math.isfinite(self.first_arrival):
            return pd.DataFrame({c: pd.Series(dtype=float) for c in TIMELINE_COLUMNS})
        instances = instances if instances is not None else pd.DataFrame()
        run_start = self.first_arrival
        run_end = max(self.last_time, run_start)
        for column in LIFETIME_COLUMNS:
            if column in instances.columns:
                times = instances[column].to_numpy(dtype=float)
                if np.isfinite(times).any():
                    run_end = max(run_end, float(np.nanmax(times[np.isfinite(times)])))
        if fleet_events is not None and len(fleet_events) and "time_s" in fleet_events.columns:
            run_end = max(run_end, float(fleet_events["time_s"].max()))
        w = self.window_s
        n = math.floor((run_end - self.origin) / w) + 1
        if n > MAX_WINDOWS:  # the timeline stops at its last kept window
            n = MAX_WINDOWS
            run_end = self.origin + n * w
        starts = self.origin + w * np.arange(n)
        ends = starts + w
        covered = np.clip(np.minimum(ends, run_end) - np.maximum(starts, run_start), 0.0, None)
        if run_end == run_start:  # a single instant: the window stands for it
            covered[:] = 0.0

        def counts(key: str) -> FloatArray:
            own = self.counts[key][:n]
            return np.concatenate([own, np.zeros(n - own.size)])

        def per(x: FloatArray, by: FloatArray) -> FloatArray:
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(by > 0, x / np.where(by > 0, by, 1.0), math.nan)

        arrivals = counts("arrivals")
        out: dict[str, Any] = {
            "window_start_s": starts,
            "window_end_s": ends,
            "covered_s": covered,
            "arrivals": arrivals.astype(np.int64),
            "arrival_rate": per(arrivals, covered),
            "completed": counts("completed").astype(np.int64),
            "rejected": counts("rejected").astype(np.int64),
            "slo_attainment": per(counts("good"), arrivals) if self.judged else np.full(n, np.nan),
        }
        for source in SAMPLES:
            wanted = [(column, q) for column, s, q in PERCENTILES if s == source]
            found = self.samples[source].percentiles(n, tuple(q for _, q in wanted))
            out.update({column: values for (column, _), values in zip(wanted, found, strict=True)})
        serving, billed, usd = fleet_per_window(
            instances, self.ctx, run_start, run_end, self.origin, w, n
        )
        out["instances_serving"] = per(serving, covered)
        out["instances_billed"] = per(billed, covered)
        out["busy_fraction"] = per(counts("busy_s"), billed)
        out["usd"] = usd
        out["usd_per_hour"] = per(usd * 3600.0, covered)
        return pd.DataFrame(out, columns=list(TIMELINE_COLUMNS))


def _prices(instances: pd.DataFrame, ctx: SummaryContext) -> FloatArray:
    """Dollars per second of each instance row: GPUs x price from `ctx.fleet` by index; an
    index past it (an instance launched during the run) takes the price of another instance of
    its group; NaN when unknown."""
    index = instances["index"].to_numpy(dtype=np.int64)
    fleet = ctx.fleet
    rate = np.array(
        [fleet[i][0] * fleet[i][1] / 3600.0 if 0 <= i < len(fleet) else math.nan for i in index]
    )
    if np.isnan(rate).any() and "group" in instances.columns:
        groups = instances["group"].astype(str).to_numpy()
        known = pd.Series(rate).groupby(groups).transform("first").to_numpy(dtype=float)
        rate = np.where(np.isnan(rate), known, rate)
    return rate


def lifetimes(
    instances: pd.DataFrame, run_start: float, run_end: float
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """(serve start, serve end, bill start, bill end) of each instance row, within the run (see
    the module docstring)."""
    n = len(instances)

    def column(name: str) -> FloatArray:
        if name in instances.columns:
            return instances[name].to_numpy(dtype=float)
        return np.full(n, math.nan)

    launch, ready, drain, retire = (column(c) for c in LIFETIME_COLUMNS)
    bill_start = np.where(np.isnan(launch), run_start, launch)
    bill_end = np.where(np.isnan(retire), run_end, retire)
    # there from the start (never launched): serving from the start; launched and never ready:
    # never serving
    serve_start = np.where(np.isnan(ready), np.where(np.isnan(launch), run_start, np.inf), ready)
    stop = np.fmin(drain, retire)  # the first that happened (fmin ignores a NaN)
    serve_end = np.where(np.isnan(stop), run_end, stop)

    def clip(x: FloatArray) -> FloatArray:
        return np.clip(x, run_start, run_end)

    return clip(serve_start), clip(serve_end), clip(bill_start), clip(bill_end)


def fleet_per_window(
    instances: pd.DataFrame,
    ctx: SummaryContext,
    run_start: float,
    run_end: float,
    origin: float,
    window_s: float,
    n: int,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Per window: instance-seconds serving, instance-seconds billed, dollars of rent."""
    if not len(instances) or "index" not in instances.columns:
        count = len(ctx.fleet) or ctx.num_instances
        instances = pd.DataFrame({"index": np.arange(count)})
    serve_start, serve_end, bill_start, bill_end = lifetimes(instances, run_start, run_end)
    ones = np.ones(len(instances))
    serving = overlap_per_window(serve_start, serve_end, ones, origin, window_s, n)
    billed = overlap_per_window(bill_start, bill_end, ones, origin, window_s, n)
    if not ctx.fleet:
        return serving, billed, np.full(n, math.nan)
    rate = _prices(instances, ctx)
    usd = overlap_per_window(bill_start, bill_end, np.nan_to_num(rate), origin, window_s, n)
    if np.isnan(rate).any():
        # an unpriced instance: the windows it was billed in have an unknown rent
        unknown = np.isnan(rate)
        hours = overlap_per_window(
            bill_start[unknown], bill_end[unknown], ones[unknown], origin, window_s, n
        )
        usd[hours > 0] = math.nan
    if ctx.memory_usd_per_hour:
        run = overlap_per_window(
            np.array([run_start]), np.array([run_end]), np.ones(1), origin, window_s, n
        )
        usd += run * ctx.memory_usd_per_hour / 3600.0
    return serving, billed, usd


def _window_for(requests: pd.DataFrame, window_s: float | None) -> tuple[float, float]:
    arrival = requests["arrival_s"].to_numpy(dtype=float)
    arrival = arrival[~np.isnan(arrival)]
    first, last = float(arrival.min()), float(arrival.max())
    w = default_window_s(last - first) if window_s is None else float(window_s)
    return first, w


def origin_of(first_arrival: float, window_s: float) -> float:
    """The first window's start: the multiple of `window_s` at or before the first arrival."""
    return math.floor(first_arrival / window_s) * window_s


def timeline_of_tables(
    requests: pd.DataFrame,
    steps: pd.DataFrame,
    ctx: SummaryContext,
    instances: pd.DataFrame | None = None,
    fleet_events: pd.DataFrame | None = None,
    window_s: float | None = None,
) -> pd.DataFrame:
    """The timeline of one variant's tables (see the module docstring)."""
    if not len(requests) or not requests["arrival_s"].notna().any():
        return pd.DataFrame({c: pd.Series(dtype=float) for c in TIMELINE_COLUMNS})
    first, w = _window_for(requests, window_s)
    last = float(requests["arrival_s"].max())
    check_windows(first, last, w)
    fold = WindowFold(ctx, origin_of(first, w), w, exact=True)
    fold.add_requests(requests)
    if len(steps) and {"start_s", "end_s"} <= set(steps.columns):
        fold.add_busy(steps["start_s"].to_numpy(dtype=float), steps["end_s"].to_numpy(dtype=float))
    return fold.frame(instances, fleet_events)


def timeline(result: Any, window_s: float | None = None) -> pd.DataFrame:
    """The timeline of a `VariantResult` (tables or streamed). `window_s` None: the scenario's
    `metrics.window_s`, else the default. A streamed run has the windows it was folded with
    (`StreamSummary(window_s=...)`), so asking it for another `window_s` is a ValueError."""
    if result.streamed is not None:
        folded = result.streamed.timeline_fold
        if window_s is not None and folded is not None and window_s != folded.window_s:
            raise ValueError(
                f"a streamed run's timeline has the {folded.window_s:g} s windows it was folded "
                f"with, not {window_s:g} s"
            )
        return result.streamed.timeline(result.instances, result.fleet_events)
    if window_s is None:
        metrics = result.scenario.get("metrics") if isinstance(result.scenario, dict) else None
        if isinstance(metrics, dict) and metrics.get("window_s") is not None:
            window_s = float(metrics["window_s"])
    return timeline_of_tables(
        result.requests,
        result.steps,
        result.context,
        result.instances,
        result.fleet_events,
        window_s,
    )


def worst_window_slo_attainment(frame: pd.DataFrame) -> float:
    """The lowest SLO attainment of any window that had arrivals; NaN when none is judged."""
    if not len(frame):
        return math.nan
    values = frame["slo_attainment"].to_numpy(dtype=float)
    values = values[~np.isnan(values)]
    return float(values.min()) if values.size else math.nan
