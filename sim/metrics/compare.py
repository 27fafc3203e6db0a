"""Measured against simulated: the comparison `batchsim replay` reports.

A measured run (`sim.measured.MeasuredRun`) is replayed with its exact arrivals and lengths, so
request i of the replay is request i of the run (the simulated requests table's `id`). The
comparison has three parts:

* distributions: mean, p50, p90 and p99 of TTFT, TPOT, ITL and E2E, measured and simulated,
  and the signed error `simulated / measured - 1` (positive: the simulator is slower); output
  and total token throughput over each side's own window (first arrival to last finish);
* per-request agreement over the requests both sides completed: the median absolute percentage
  error, the bias (median signed percentage error) and Pearson's r of measured and simulated
  values, for TTFT, TPOT and E2E;
* counts: requests measured, compared, and those the simulator rejected (by reason) or did not
  finish. Those are left out of the percentiles of both sides, never silently: they are counted
  and named here, and the comparison refuses to call such a replay exact.

Percentiles are numpy's linear interpolation (`np.percentile`), the same on both sides. ITL is
compared only when the measured file has per-token gaps (vLLM bench, AIPerf); the simulated
gaps are the pooled gaps of the replay (`Results.itl`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

STATS = ("mean", "p50", "p90", "p99")
LATENCIES = ("ttft", "tpot", "itl", "e2e")
PER_REQUEST = ("ttft", "tpot", "e2e")


@dataclass(frozen=True)
class Comparison:
    """What one replayed variant gives against the measured run."""

    table: pd.DataFrame  # metric, stat, measured, simulated, error_pct (simulated/measured - 1)
    per_request: pd.DataFrame  # metric, n, median_ape_pct, bias_pct, pearson_r
    counts: dict[str, Any] = field(default_factory=dict)

    def error(self, metric: str, stat: str) -> float:
        """The signed error in percent of one cell (NaN when either side lacks it)."""
        row = self.table[(self.table["metric"] == metric) & (self.table["stat"] == stat)]
        return float(row["error_pct"].iloc[0]) if len(row) else math.nan

    def agreement(self, metric: str, what: str = "median_ape_pct") -> float:
        row = self.per_request[self.per_request["metric"] == metric]
        return float(row[what].iloc[0]) if len(row) else math.nan

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the table as {metric: {stat: {measured, simulated, error_pct}}}."""
        cells: dict[str, dict[str, dict[str, float | None]]] = {}
        for row in self.table.itertuples(index=False):
            cells.setdefault(str(row.metric), {})[str(row.stat)] = {
                "measured": _json_float(row.measured),
                "simulated": _json_float(row.simulated),
                "error_pct": _json_float(row.error_pct),
            }
        agreement = {
            str(metric): {
                "n": int(str(n)),
                "median_ape_pct": _json_float(ape),
                "bias_pct": _json_float(bias),
                "pearson_r": _json_float(r),
            }
            for metric, n, ape, bias, r in self.per_request.itertuples(index=False)
        }
        return {"distributions": cells, "per_request": agreement, "counts": self.counts}


def _json_float(value: Any) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def _stats(values: np.ndarray) -> dict[str, float]:
    values = values[np.isfinite(values)]
    if not len(values):
        return dict.fromkeys(STATS, math.nan)
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"mean": float(values.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def measured_tpot(ttft_s: np.ndarray, e2e_s: np.ndarray, output: np.ndarray) -> np.ndarray:
    """(E2E - TTFT) / (output - 1) for outputs of at least 2 tokens, NaN otherwise."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(output >= 2, (e2e_s - ttft_s) / np.maximum(output - 1, 1), np.nan)


def throughput(arrival_s: np.ndarray, e2e_s: np.ndarray, tokens: np.ndarray) -> float:
    """Tokens per second over the window first arrival .. last finish (finished requests)."""
    done = np.isfinite(e2e_s)
    if not done.any():
        return math.nan
    span = float(np.max(arrival_s[done] + e2e_s[done]) - np.min(arrival_s[done]))
    return float(tokens[done].sum() / span) if span > 0 else math.nan


def compare(
    measured: Any,
    simulated: pd.DataFrame,
    simulated_itl_s: np.ndarray | None = None,
) -> Comparison:
    """Compare a `MeasuredRun` with the requests table of its replay (one variant, `id` = the
    measured run's row); `simulated_itl_s` are the replay's pooled inter-token gaps."""
    n = len(measured)
    sim = simulated.set_index("id").reindex(np.arange(n))
    sim_ttft = sim["ttft_s"].to_numpy(dtype=float)
    sim_e2e = sim["e2e_s"].to_numpy(dtype=float)
    sim_tpot = sim["tpot_s"].to_numpy(dtype=float)
    rejected = sim["rejected"].fillna(False).to_numpy(dtype=bool)
    finished = np.isfinite(sim_e2e) & ~rejected
    meas_ttft = np.asarray(measured.ttft_s, dtype=float)
    meas_e2e = np.asarray(measured.e2e_s, dtype=float)
    meas_tpot = np.asarray(measured.tpot_s, dtype=float)
    both = finished  # the requests compared: the simulator completed them
    sides = {
        "ttft": (meas_ttft, sim_ttft),
        "tpot": (meas_tpot, sim_tpot),
        "e2e": (meas_e2e, sim_e2e),
    }
    rows: list[dict[str, Any]] = []
    for metric in LATENCIES:
        if metric == "itl":
            gaps = measured.itl_s
            if gaps is None or simulated_itl_s is None:
                continue
            kept = [g for g, keep in zip(gaps, both, strict=True) if keep and len(g)]
            meas_stats = _stats(np.concatenate(kept) if kept else np.zeros(0))
            sim_stats = _stats(np.asarray(simulated_itl_s, dtype=float))
        else:
            meas, simv = sides[metric]
            meas_stats, sim_stats = _stats(meas[both]), _stats(simv[both])
        for stat in STATS:
            rows.append(_row(metric, stat, meas_stats[stat], sim_stats[stat]))
    arrival = np.asarray(measured.arrival_s, dtype=float)
    output = np.asarray(measured.output_tokens, dtype=float)
    total = output + np.asarray(measured.prompt_tokens, dtype=float)
    for name, tokens in (("output_tokens_per_s", output), ("total_tokens_per_s", total)):
        meas_tp = throughput(arrival[both], meas_e2e[both], tokens[both])
        sim_tp = throughput(arrival[both], sim_e2e[both], tokens[both])
        rows.append(_row(name, "mean", meas_tp, sim_tp))
    table = pd.DataFrame(rows, columns=["metric", "stat", "measured", "simulated", "error_pct"])
    agreement = [_agreement(metric, *sides[metric], both) for metric in PER_REQUEST]
    per_request = pd.DataFrame(
        agreement, columns=["metric", "n", "median_ape_pct", "bias_pct", "pearson_r"]
    )
    reasons = sim.loc[rejected, "reject_reason"].astype(str).value_counts().to_dict()
    counts: dict[str, Any] = {
        "measured_requests": n,
        "compared_requests": int(both.sum()),
        "rejected_by_simulator": int(rejected.sum()),
        "rejected_reasons": {str(k): int(v) for k, v in reasons.items()},
        "unfinished_in_simulation": int((~finished & ~rejected).sum()),
        "failed_in_measurement": int(getattr(measured, "num_failed", 0)),
    }
    return Comparison(table, per_request, counts)


def _row(metric: str, stat: str, meas: float, simv: float) -> dict[str, Any]:
    ok = math.isfinite(meas) and math.isfinite(simv) and meas != 0
    error = 100.0 * (simv / meas - 1.0) if ok else math.nan
    return {"metric": metric, "stat": stat, "measured": meas, "simulated": simv, "error_pct": error}


def _agreement(
    metric: str, meas: np.ndarray, simv: np.ndarray, both: np.ndarray
) -> dict[str, Any]:
    keep = both & np.isfinite(meas) & np.isfinite(simv) & (meas > 0)
    m, s = meas[keep], simv[keep]
    if not len(m):
        return {"metric": metric, "n": 0, "median_ape_pct": math.nan, "bias_pct": math.nan,
                "pearson_r": math.nan}
    rel = s / m - 1.0
    r = math.nan
    if len(m) > 2 and np.std(m) > 0 and np.std(s) > 0:
        r = float(np.corrcoef(m, s)[0, 1])
    return {
        "metric": metric,
        "n": len(m),
        "median_ape_pct": float(100.0 * np.median(np.abs(rel))),
        "bias_pct": float(100.0 * np.median(rel)),
        "pearson_r": r,
    }


def format_comparison(comparison: Comparison, title: str = "") -> str:
    """A plain-text table: measured vs simulated, ms for latencies, with the signed error."""
    lines = [title] if title else []
    lines.append(f"{'metric':<22}{'measured':>12}{'simulated':>12}{'error':>9}")
    for metric, stat, measured, simulated, error in comparison.table.itertuples(index=False):
        latency = metric in LATENCIES
        unit = 1000.0 if latency else 1.0
        name = f"{metric} {stat} (ms)" if latency else f"{metric}"
        err = "" if not math.isfinite(float(error)) else f"{float(error):+.1f}%"
        lines.append(
            f"{name:<22}{float(measured) * unit:>12.1f}{float(simulated) * unit:>12.1f}{err:>9}"
        )
    for row in comparison.per_request.itertuples(index=False):
        lines.append(
            f"per-request {row.metric}: median |error| {row.median_ape_pct:.1f}%, bias "
            f"{row.bias_pct:+.1f}%, r {row.pearson_r:.3f} (n={row.n})"
        )
    c = comparison.counts
    left = c["measured_requests"] - c["compared_requests"]
    if left:
        why = ", ".join(f"{k}: {v}" for k, v in c["rejected_reasons"].items())
        lines.append(
            f"left out: {left} of {c['measured_requests']} requests ({c['rejected_by_simulator']} "
            f"rejected by the simulator{': ' + why if why else ''}; "
            f"{c['unfinished_in_simulation']} unfinished)"
        )
    return "\n".join(lines)
