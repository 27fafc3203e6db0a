"""Per-tier service metrics and SLO checks, so that starvation under a queue order shows.

Each request is judged against its own tier's SLO targets (`slo.tiers`, a tier's unset target
falling back to the default `slo.ttft_s` / `slo.tpot_s`). When the requests carry more than one
tier, or a tier other than "default", the summary gets flat keys per tier:
`tier_<name>_num_requests`, `tier_<name>_ttft_p50_s`, `..._ttft_p99_s`, `..._e2e_p50_s`,
`..._e2e_p99_s`, `..._slo_attainment` and `..._oldest_wait_s` (the longest any request of the
tier waited before its first schedule), over the measured set (see sim.metrics.summary).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import numpy as np
import pandas as pd

from sim.metrics.percentiles import longest

TierTargets = tuple[tuple[str, float | None, float | None], ...]


def slo_targets(
    requests: pd.DataFrame,
    ttft_s: float | None,
    tpot_s: float | None,
    tiers: TierTargets,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-request TTFT and TPOT targets (inf: no target) from each request's tier."""
    n = len(requests)
    default = (math.inf if ttft_s is None else ttft_s, math.inf if tpot_s is None else tpot_s)
    ttft = np.full(n, default[0])
    tpot = np.full(n, default[1])
    if tiers and "tier" in requests.columns:
        tier = requests["tier"].to_numpy()
        for name, t_ttft, t_tpot in tiers:
            mask = tier == name
            ttft[mask] = math.inf if t_ttft is None else t_ttft
            tpot[mask] = math.inf if t_tpot is None else t_tpot
    return ttft, tpot


def meets_slo(
    measured: pd.DataFrame, ttft_target: np.ndarray, tpot_target: np.ndarray
) -> np.ndarray:
    """Finished requests within their TTFT target and (if they have one) their TPOT target."""
    ok = ~np.isnan(measured["finish_s"].to_numpy(dtype=float))
    ok &= ~(measured["ttft_s"].to_numpy(dtype=float) > ttft_target)
    tpot = measured["tpot_s"].to_numpy(dtype=float)
    # single-token requests have no TPOT and so cannot violate its target
    ok &= np.isnan(tpot) | (tpot <= tpot_target)
    return ok


def _pct(values: np.ndarray, q: float) -> float:
    values = values[~np.isnan(values)]
    return float(np.percentile(values, q)) if values.size else math.nan


def tier_metrics(
    name: str,
    num: int,
    num_good: int,
    ttft: Callable[[float], float],
    e2e: Callable[[float], float],
    oldest_wait_s: float,
) -> dict[str, float]:
    """One tier's keys: `num` measured requests, `num_good` within their SLOs, `ttft(q)` and
    `e2e(q)` the q-th percentiles, the longest wait before a first schedule. Both summaries
    (exact and streamed) report a tier through this."""
    key = f"tier_{name}"
    return {
        f"{key}_num_requests": num,
        f"{key}_ttft_p50_s": ttft(50),
        f"{key}_ttft_p99_s": ttft(99),
        f"{key}_e2e_p50_s": e2e(50),
        f"{key}_e2e_p99_s": e2e(99),
        f"{key}_slo_attainment": num_good / num if num else math.nan,
        f"{key}_oldest_wait_s": oldest_wait_s,
    }


def tier_summary(measured: pd.DataFrame, good: np.ndarray) -> dict[str, float]:
    """Flat per-tier keys (see the module docstring); empty with a single default tier."""
    if "tier" not in measured.columns or not len(measured):
        return {}
    tiers = measured["tier"].to_numpy()
    names = list(dict.fromkeys(tiers.tolist()))
    if names == ["default"]:
        return {}
    out: dict[str, float] = {}
    for name in names:
        mask = tiers == name
        rows = measured[mask]
        ttft = rows["ttft_s"].to_numpy(dtype=float)
        e2e = rows["e2e_s"].to_numpy(dtype=float)
        waits = rows["queue_s"].to_numpy(dtype=float)
        out.update(
            tier_metrics(
                str(name),
                int(mask.sum()),
                int(good[mask].sum()),
                partial(_pct, ttft),
                partial(_pct, e2e),
                longest(waits),
            )
        )
    return out
