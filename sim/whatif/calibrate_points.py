"""Calibrate engine terms from closed-loop benchmark points (`batchsim calibrate-engine --points`).

A load sweep (C clients at several concurrencies, each sending its next request when the last
one finished) is what most users have of a deployment: a published table, a `vllm bench serve
--max-concurrency` sweep, a GuideLLM concurrent sweep (`sim.measured.points`). It has no
per-request timeline to replay, but it needs none: with no think time every arrival falls on a
step boundary (the finish that frees its client), so which steps run, with which tokens and
sequences, does not depend on how long the steps take. One simulation of each point with the
terms at their neutral values therefore gives, for the run's duration, mean TPOT and mean TTFT,
three sums (GPU seconds, steps, sequence-steps), and each statistic at any terms is exactly

    gpu_time_scale x GPU seconds + per_step_s x steps + per_seq_s x sequence-steps

(the same additive host time `engine.pricing.cpu_overhead` prices without overlap). The fit:

- the terms named by `--fit` among `gpu_time_scale`, `per_step_s` and `per_seq_s` (ranges as
  `sim.whatif.calibrate_engine.TERMS`) minimize the robust (soft-L1, scale 5 %) log errors of
  throughput and mean TPOT, each sweep (points with the same lengths) weighted equally;
- `frontend_s` (the API server's share of every request, in TTFT only) is the median of
  measured minus simulated mean TTFT over each sweep's lowest-concurrency points, within its
  range. Only there is the delay seen whole: at load a request that reaches the scheduler a
  little late still waits for the step in flight, as it would have without the delay. It is not
  fitted into the step terms, because a benchmark's mean TTFT also carries what no step model
  sees (a cold start when the benchmark ran without warm-up, the client's own HTTP time).

Reported beside the fit's own error: leave one sweep out (each sweep predicted by a fit on the
others; with a single sweep, leave one point out), and a check that re-simulates every point at
the fitted terms (frontend included, which delays each request's admission and so is not
linear), so the quoted errors are those of a real run of the preset.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from sim.errors import ScenarioError
from sim.measured.points import LoadPoint
from sim.scenario.load import load_scenario_dict
from sim.simulate import simulate
from sim.whatif.calibrate_engine import TERMS, preset_header, with_terms

STEP_TERMS = ("gpu_time_scale", "per_step_s", "per_seq_s")  # linear in the counted sums
LOSS_SCALE = 0.05
METRICS = ("tput_err", "tpot_err", "ttft_err")


@dataclass(frozen=True)
class PointSums:
    """One point's counted sums: per statistic (duration, mean TPOT, mean TTFT), the GPU seconds,
    steps and sequence-steps it adds up, at neutral terms."""

    duration: tuple[float, float, float]
    tpot_mean: tuple[float, float, float]
    ttft_mean: tuple[float, float, float]
    tokens: float  # prompt + output tokens of the finished requests
    finished: int


def metric_weights(steps: pd.DataFrame, requests: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per step group: the weight it carries in mean TPOT and in mean TTFT (a request's TPOT
    spans the steps after its first token to its finish, each step's time over its output
    tokens minus one; its TTFT the steps from its arrival to its first token)."""
    ends = steps["end_s"].to_numpy(float)
    starts = steps["start_s"].to_numpy(float)
    g = len(ends)
    eps = 1e-9 * max(1.0, float(ends[-1])) if g else 1e-9
    done = requests[~requests["rejected"]]
    first = np.searchsorted(ends, done["first_token_s"].to_numpy(float) - eps)
    finish = np.searchsorted(ends, done["finish_s"].to_numpy(float) - eps)
    arrive = np.searchsorted(starts, done["arrival_s"].to_numpy(float) - eps)
    outputs = done["num_output_tokens"].to_numpy(float)
    tpot = np.zeros(g + 1)
    decoding = outputs > 1
    share = 1.0 / (outputs[decoding] - 1) / max(1, int(decoding.sum()))
    np.add.at(tpot, first[decoding] + 1, share)
    np.add.at(tpot, finish[decoding] + 1, -share)
    ttft = np.zeros(g + 1)
    np.add.at(ttft, arrive, 1.0 / max(1, len(done)))
    np.add.at(ttft, first + 1, -1.0 / max(1, len(done)))
    return np.cumsum(tpot)[:g], np.cumsum(ttft)[:g]


def group_seconds(steps: pd.DataFrame) -> np.ndarray:
    """Per step group: the seconds its steps take in all (a run of n steps whose first takes
    d and each next one `duration_increment_s` more)."""
    n = steps["num_steps"].to_numpy(float)
    return (steps["duration_s"].to_numpy(float) * n
            + steps["duration_increment_s"].to_numpy(float) * n * (n - 1) / 2)


def point_raw(base: dict[str, Any], point: LoadPoint, terms: dict[str, float]) -> dict[str, Any]:
    """The scenario mapping that runs `point` through `base` with the engine terms set."""
    raw = copy.deepcopy(base)
    raw["workload"] = {
        "num_requests": point.num_requests,
        "clients": {
            "num_clients": point.concurrency,
            "prompt_tokens": point.lengths(point.prompt_tokens),
            "output_tokens": point.lengths(point.output_tokens),
        },
    }
    raw["engine"] = with_terms(raw.get("engine") or {}, terms)
    raw.pop("variants", None)
    return raw


def _run(base: dict[str, Any], point: LoadPoint, terms: dict[str, float]) -> Any:
    scenario = load_scenario_dict(point_raw(base, point, terms), file=point.label)
    return next(iter(simulate(scenario).variants.values()))


def count_point(base: dict[str, Any], point: LoadPoint) -> PointSums:
    """Simulate the point once at neutral terms and count its sums."""
    neutral = {t: TERMS[t][2] for t in (*STEP_TERMS, "frontend_s")}
    result = _run(base, point, neutral)
    steps, requests = result.steps, result.requests
    done = requests[~requests["rejected"]]
    if len(done) == 0:
        reasons = requests["reject_reason"].dropna().astype(str)
        why = f" (rejected: {reasons.iloc[0]})" if len(reasons) and reasons.iloc[0] else ""
        raise ScenarioError(f"{point.label}: no request finished in the simulation{why}; does "
                            "the model fit the GPU's memory, and the lengths its context?")
    if not (done["num_output_tokens"] > 1).any():
        raise ScenarioError(f"{point.label}: no simulated request has a second output token, "
                            "so the point has no TPOT (outputs of 2 tokens or more)")
    seconds = group_seconds(steps)
    n = steps["num_steps"].to_numpy(float)
    seqs = steps["num_seqs"].to_numpy(float) * n
    tpot_w, ttft_w = metric_weights(steps, requests)

    def sums(w: np.ndarray) -> tuple[float, float, float]:
        return float(seconds @ w), float(n @ w), float(seqs @ w)

    return PointSums(
        duration=sums(np.ones(len(steps))), tpot_mean=sums(tpot_w), ttft_mean=sums(ttft_w),
        tokens=float(done["num_prompt_tokens"].sum() + done["num_output_tokens"].sum()),
        finished=len(done),
    )


class Design:
    """The points' sums as matrices: each statistic = sums @ (scale, per_step, per_seq)."""

    def __init__(self, points: Sequence[LoadPoint], sums: Sequence[PointSums]) -> None:
        self.duration = np.array([s.duration for s in sums])
        self.tpot = np.array([s.tpot_mean for s in sums])
        self.ttft = np.array([s.ttft_mean for s in sums])
        self.tokens = np.array([s.tokens for s in sums])
        self.tput_meas = np.array([p.throughput_tok_s for p in points])
        self.tpot_meas = np.array([p.tpot_mean_s for p in points])
        self.ttft_meas = np.array([math.nan if p.ttft_mean_s is None else p.ttft_mean_s
                                   for p in points])
        labels = [p.group for p in points]
        self.group = pd.factorize(pd.Series(labels))[0]
        counts = np.bincount(self.group)
        self.weight = 1.0 / np.sqrt(counts[self.group])
        # each sweep's points at its lowest concurrency: where no step in flight hides the
        # front end's delay (at load a request reaching the scheduler a little late still waits
        # for the step in flight, as it would have without the delay)
        clients = np.array([p.concurrency for p in points])
        lowest = pd.Series(clients).groupby(self.group).transform("min").to_numpy()
        self.lightest = clients == lowest

    @staticmethod
    def vector(terms: dict[str, float]) -> np.ndarray:
        return np.array([terms.get("gpu_time_scale", 1.0), terms.get("per_step_s", 0.0),
                         terms.get("per_seq_s", 0.0)])

    def predict(self, terms: dict[str, float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(throughput tok/s, mean TPOT s, mean TTFT s) of every point at `terms`."""
        v = self.vector(terms)
        return (self.tokens / (self.duration @ v), self.tpot @ v,
                self.ttft @ v + terms.get("frontend_s", 0.0))

    def errors(self, terms: dict[str, float], rows: np.ndarray | None = None) -> pd.DataFrame:
        """Signed errors (simulated / measured - 1, %) at `terms`."""
        tput, tpot, ttft = self.predict(terms)
        frame = pd.DataFrame({
            "tput_err": (tput / self.tput_meas - 1) * 100,
            "tpot_err": (tpot / self.tpot_meas - 1) * 100,
            "ttft_err": (ttft / self.ttft_meas - 1) * 100,
        })  # fmt: skip
        return frame if rows is None else frame[rows]


def fit_terms(design: Design, terms: Sequence[str], mask: np.ndarray) -> dict[str, float]:
    """The named terms fitted on the points in `mask` (the others at their neutral values)."""
    from scipy.optimize import least_squares

    step = [t for t in terms if t in STEP_TERMS]
    fitted: dict[str, float] = {t: TERMS[t][2] for t in terms}
    if step:
        # each term in units of a plausible size, so the optimizer's steps are comparable
        unit = np.array([{"gpu_time_scale": 1.0, "per_step_s": 1e-3, "per_seq_s": 1e-5}[t]
                         for t in step])
        lo = np.array([TERMS[t][0] for t in step]) / unit
        hi = np.array([TERMS[t][1] for t in step]) / unit
        w = design.weight[mask]

        def residuals(x: np.ndarray) -> np.ndarray:
            named = dict(zip(step, (x * unit).tolist(), strict=True))
            tput, tpot, _ = design.predict(named)
            return np.concatenate([np.log(tput[mask] / design.tput_meas[mask]) * w,
                                   np.log(tpot[mask] / design.tpot_meas[mask]) * w])

        start = np.clip(np.array([TERMS[t][2] for t in step]) / unit, lo, hi)
        if not np.isfinite(residuals(start)).all():
            raise ScenarioError("a point's simulated throughput or TPOT is not a positive number "
                                "at the neutral terms; nothing to fit", path="--points")
        result = least_squares(residuals, start, bounds=(lo, hi), loss="soft_l1",
                               f_scale=LOSS_SCALE, max_nfev=200)
        fitted |= dict(zip(step, (np.asarray(result.x) * unit).tolist(), strict=True))
    if "frontend_s" in terms:
        _, _, ttft = design.predict({**fitted, "frontend_s": 0.0})
        gap = (design.ttft_meas - ttft)[mask & design.lightest]
        gap = gap[np.isfinite(gap)]
        low, high = TERMS["frontend_s"][:2]
        fitted["frontend_s"] = min(max(float(np.median(gap)), low), high) if len(gap) else 0.0
    return {k: _round(v) for k, v in fitted.items()}


def _round(value: float) -> float:
    return float(f"{value:.4g}") if value else 0.0


def cross_validate(design: Design, terms: Sequence[str]) -> tuple[pd.DataFrame, str]:
    """Every point predicted by a fit that never saw its sweep (or, with one sweep, itself)."""
    units = design.group if design.group.max() > 0 else np.arange(len(design.group))
    how = "leave one sweep out" if design.group.max() > 0 else "leave one point out"
    parts = []
    if len(units) < 2:
        return design.errors({}).iloc[0:0], how
    for unit in np.unique(units):
        held = units == unit
        parts.append(design.errors(fit_terms(design, terms, ~held), held))
    return pd.concat(parts).sort_index(), how


@dataclass
class PointsFit:
    """The fitted terms and the errors of every point: before the fit (neutral terms), at the
    fit, predicted by cross-validation, and re-simulated at the fitted terms."""

    terms: dict[str, float]
    points: list[LoadPoint]
    before: pd.DataFrame
    fitted: pd.DataFrame
    cross_validated: pd.DataFrame
    simulated: pd.DataFrame
    cv_method: str
    notes: list[str] = field(default_factory=list)

    def engine_fields(self, base_engine: dict[str, Any] | None = None) -> dict[str, Any]:
        return with_terms(base_engine or {}, self.terms)


def check_terms(terms: Sequence[str], base: dict[str, Any]) -> None:
    allowed = (*STEP_TERMS, "frontend_s")
    unknown = [t for t in terms if t not in allowed]
    if unknown or not terms:
        raise ScenarioError(f"unknown engine terms {', '.join(unknown) or '(none)'}; from "
                            f"closed-loop points fit some of {', '.join(allowed)}", path="--fit")
    cpu = ((base.get("engine") or {}).get("pricing") or {}).get("cpu_overhead") or {}
    if cpu.get("overlap") and any(t in ("per_step_s", "per_seq_s") for t in terms):
        raise ScenarioError("host time is fitted as added to each step; the scenario's "
                            "engine.pricing.cpu_overhead.overlap is true (set it false or fit "
                            "gpu_time_scale alone)", path="--fit")


def fit_points(
    base: dict[str, Any],
    points: Sequence[LoadPoint],
    terms: Sequence[str],
    progress: Callable[[str], None] | None = None,
) -> PointsFit:
    """Count every point once, fit `terms`, cross-validate, and re-simulate at the fit."""
    check_terms(terms, base)
    sums = []
    for i, point in enumerate(points):
        sums.append(count_point(base, point))
        if progress is not None and (i + 1) % 10 == 0:
            progress(f"counted {i + 1}/{len(points)} points")
    design = Design(points, sums)
    everything = np.ones(len(points), bool)
    fitted_terms = fit_terms(design, terms, everything)
    cv, how = cross_validate(design, terms)
    rows = []
    for point in points:
        result = _run(base, point, fitted_terms)
        summary = result.summary()
        done = result.requests[~result.requests["rejected"]]
        tokens = float(done["num_prompt_tokens"].sum() + done["num_output_tokens"].sum())
        rows.append((tokens / float(summary["duration_s"]), float(summary["tpot_mean_s"]),
                     float(summary["ttft_mean_s"])))
    sim = np.array(rows)
    simulated = pd.DataFrame({
        "tput_err": (sim[:, 0] / design.tput_meas - 1) * 100,
        "tpot_err": (sim[:, 1] / design.tpot_meas - 1) * 100,
        "ttft_err": (sim[:, 2] / design.ttft_meas - 1) * 100,
    })  # fmt: skip
    neutral = {t: TERMS[t][2] for t in terms}
    return PointsFit(
        terms=fitted_terms, points=list(points), before=design.errors(neutral),
        fitted=design.errors(fitted_terms), cross_validated=cv, simulated=simulated,
        cv_method=how,
    )


def error_summary(frame: pd.DataFrame) -> dict[str, dict[str, float | None]]:
    """Median and worst |error| (%) of each statistic, and its share of optimistic points."""
    out: dict[str, dict[str, float | None]] = {}
    for metric in METRICS:
        values = frame[metric].to_numpy(float) if metric in frame else np.array([])
        values = values[np.isfinite(values)]
        if not len(values):
            out[metric] = {"median_abs_pct": None, "worst_abs_pct": None}
            continue
        optimistic = values > 0 if metric == "tput_err" else values < 0
        out[metric] = {
            "median_abs_pct": round(float(np.median(np.abs(values))), 2),
            "worst_abs_pct": round(float(np.max(np.abs(values))), 2),
            "optimistic_share": round(float(optimistic.mean()), 3),
        }
    return out


def points_table(fit: PointsFit) -> pd.DataFrame:
    """One row per point: its load, measurements and the errors of each stage."""
    rows = []
    for i, p in enumerate(fit.points):
        row: dict[str, Any] = {
            "point": p.label, "sweep": p.group, "clients": p.concurrency,
            "measured_tput_tok_s": p.throughput_tok_s, "measured_tpot_s": p.tpot_mean_s,
            "measured_ttft_s": p.ttft_mean_s,
        }  # fmt: skip
        for stage, frame in (("before", fit.before), ("fit", fit.fitted),
                             ("cv", fit.cross_validated), ("simulated", fit.simulated)):
            for metric in METRICS:
                value = frame[metric].get(i) if i in frame.index else None
                row[f"{stage}_{metric}"] = None if value is None or not math.isfinite(value) \
                    else round(float(value), 2)
        rows.append(row)
    return pd.DataFrame(rows)


def points_preset_document(
    fit: PointsFit, *, name: str, engine: dict[str, Any], files: Sequence[dict[str, Any]],
    setup: dict[str, Any],
) -> dict[str, Any]:
    """The preset file: the engine fields, and where they come from with the errors."""
    doc = preset_header(name, engine, "batchsim calibrate-engine --points", setup)
    doc["provenance"] |= {
        "points": list(files),
        "fit": {
            "terms": dict(fit.terms),
            "objective": "soft-L1 (5 %) log errors of throughput and mean TPOT, each sweep "
            "weighted equally; frontend_s: median of measured - simulated mean TTFT",
            "points": len(fit.points),
            "sweeps": len({p.group for p in fit.points}),
            "errors_before": error_summary(fit.before),
            "errors_fit": error_summary(fit.fitted),
            "errors_cross_validated": error_summary(fit.cross_validated),
            "cross_validation": fit.cv_method,
            "errors_simulated_at_fit": error_summary(fit.simulated),
        },
    }
    return doc
