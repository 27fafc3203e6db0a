"""Calibrate the engine terms a step-cost profile leaves out from measured runs, without a GPU
(`batchsim calibrate-engine`).

A profile prices the GPU's work of a step. A real engine adds time the profile never saw, and
the few terms fitted here each have a physical meaning and a plausible range:

- `per_step_s` (`engine.pricing.cpu_overhead.per_step_s`, 0-20 ms): host time of each step
  the GPU waits for (scheduling, input preparation, sampling bookkeeping; vLLM schedules
  synchronously unless async scheduling is on);
- `gpu_time_scale` (`engine.pricing.gpu_time_scale`, 0.5-2): the deployment's kernels against
  the profile's (another attention backend, driver, clocks);
- `frontend_s` (`engine.frontend_s`, 0-50 ms): the API server's share of every request
  (tokenization, the hand-off to the engine core), in TTFT and E2E, not in TPOT;
- `per_seq_s` (`engine.pricing.cpu_overhead.per_seq_s`, 0-0.2 ms): host time per sequence in a
  step (off unless asked: light loads cannot tell it from `per_step_s`).

The fit replays every run with its exact requests and minimizes the per-request error: the mean
over requests and over TTFT, TPOT and E2E of |log(simulated / measured)| (a relative error that
treats too slow and too fast alike and that no single request dominates), from a coarse
grid (`GRID`), refined by bounded Nelder-Mead (scipy) from its best point. Each evaluation is a
replay, so the fit costs some hundred replays: seconds for runs of a few thousand requests.

Held-out error: runs given with `holdout` (or the part of a run outside `fit_window`) are
replayed with the fitted terms and compared, never used by the fit.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from sim.errors import ScenarioError
from sim.measured import MeasuredRun
from sim.metrics.compare import Comparison, compare
from sim.scenario.load import load_scenario_dict
from sim.simulate import simulate
from sim.version import __version__

# term -> (lower, upper, start: the profile's own answer)
TERMS: dict[str, tuple[float, float, float]] = {
    "per_step_s": (0.0, 0.02, 0.0),
    "gpu_time_scale": (0.5, 2.0, 1.0),
    "frontend_s": (0.0, 0.05, 0.0),
    "per_seq_s": (0.0, 2e-4, 0.0),
}
# the coarse grid the fit starts from (the loss has many shallow local minima: scheduling is
# discrete), then Nelder-Mead refines from its best point with steps of about a grid spacing
GRID: dict[str, tuple[float, ...]] = {
    "per_step_s": (0.0, 0.0005, 0.001, 0.002, 0.004),
    "gpu_time_scale": (0.8, 0.9, 1.0, 1.1, 1.25),
    "frontend_s": (0.0, 0.002, 0.005, 0.01),
    "per_seq_s": (0.0, 2e-5, 5e-5),
}
STEP: dict[str, float] = {
    "per_step_s": 0.0003,
    "gpu_time_scale": 0.04,
    "frontend_s": 0.0015,
    "per_seq_s": 1e-5,
}
DEFAULT_TERMS = ("per_step_s", "gpu_time_scale", "frontend_s")
METRICS = ("ttft", "tpot", "e2e")
HEADLINE = tuple((m, s) for m in METRICS for s in ("p50", "p90"))


@dataclass(frozen=True)
class FitCase:
    """One measured run and the scenario mapping that replays it (one variant)."""

    run: MeasuredRun
    raw: dict[str, Any]
    base_dir: Path
    label: str  # the run's file (and window) as the report names it


@dataclass
class EngineFit:
    """The fitted terms, and the comparisons before and after on fitted and held-out runs."""

    terms: dict[str, float]
    objective_before: float
    objective_after: float
    evaluations: int
    before: dict[str, Comparison]
    after: dict[str, Comparison]
    holdout_before: dict[str, Comparison] = field(default_factory=dict)
    holdout_after: dict[str, Comparison] = field(default_factory=dict)

    def engine_fields(self, base_engine: dict[str, Any] | None = None) -> dict[str, Any]:
        """The scenario's `engine:` mapping with the fitted terms set."""
        return with_terms(base_engine or {}, self.terms)


def with_terms(engine: dict[str, Any], terms: dict[str, float]) -> dict[str, Any]:
    """`engine` (a scenario's engine mapping) with the given terms set."""
    out = copy.deepcopy(engine)
    pricing = dict(out.get("pricing") or {})
    cpu = dict(pricing.get("cpu_overhead") or {})
    for name, value in terms.items():
        if name in ("per_step_s", "per_seq_s"):
            cpu[name] = float(value)
        elif name == "gpu_time_scale":
            pricing["gpu_time_scale"] = float(value)
        elif name == "frontend_s":
            out["frontend_s"] = float(value)
        else:
            raise ValueError(f"unknown engine term {name!r}")
    if cpu:
        cpu.setdefault("overlap", False)
        pricing["cpu_overhead"] = cpu
    out["pricing"] = pricing
    return out


def _replay(case: FitCase, terms: dict[str, float]) -> Comparison:
    raw = copy.deepcopy(case.raw)
    raw["engine"] = with_terms(raw.get("engine") or {}, terms)
    scenario = load_scenario_dict(raw, file=case.label, base_dir=case.base_dir)
    results = simulate(scenario)
    variant = next(iter(results.variants.values()))
    return compare(case.run, variant.requests)


def per_request_loss(case: FitCase, terms: dict[str, float]) -> tuple[float, int]:
    """(sum over requests and metrics of |log(sim / measured)|, number of terms summed)."""
    raw = copy.deepcopy(case.raw)
    raw["engine"] = with_terms(raw.get("engine") or {}, terms)
    scenario = load_scenario_dict(raw, file=case.label, base_dir=case.base_dir)
    table = next(iter(simulate(scenario).variants.values())).requests
    sim = table.set_index("id").reindex(np.arange(len(case.run)))
    total, count = 0.0, 0
    run = case.run
    for metric, meas in (("ttft", run.ttft_s), ("tpot", run.tpot_s), ("e2e", run.e2e_s)):
        simv = sim[f"{metric}_s"].to_numpy(dtype=float)
        keep = np.isfinite(meas) & (meas > 0) & np.isfinite(simv) & (simv > 0)
        # a request the simulator lost counts as a large error, never as a free pass
        lost = int((np.isfinite(meas) & (meas > 0) & ~np.isfinite(simv)).sum())
        total += float(np.abs(np.log(simv[keep] / meas[keep])).sum()) + 5.0 * lost
        count += int(keep.sum()) + lost
    return total, count


def fit_engine(
    cases: Sequence[FitCase],
    holdout: Sequence[FitCase] = (),
    terms: Sequence[str] = DEFAULT_TERMS,
    max_evaluations: int = 400,
    progress: Callable[[str], None] | None = None,
) -> EngineFit:
    """Fit `terms` to `cases` by per-request error; report `holdout` before and after."""
    from scipy.optimize import minimize

    unknown = [t for t in terms if t not in TERMS]
    if unknown or not terms:
        raise ScenarioError(
            f"unknown engine terms {', '.join(unknown) or '(none)'}; fit some of "
            f"{', '.join(TERMS)}",
            path="--fit",
        )
    lower = np.array([TERMS[t][0] for t in terms])
    upper = np.array([TERMS[t][1] for t in terms])
    step = np.array([STEP[t] for t in terms])  # the optimizer works in units of these
    evaluations = 0

    def loss_at(values: np.ndarray) -> float:
        nonlocal evaluations
        evaluations += 1
        named = dict(zip(terms, np.clip(values, lower, upper).tolist(), strict=True))
        total, count = 0.0, 0
        for case in cases:
            s, c = per_request_loss(case, named)
            total, count = total + s, count + c
        if progress is not None and evaluations % 20 == 0:
            progress(f"fit: {evaluations} replays, error {100 * total / max(count, 1):.2f} %")
        return total / max(count, 1)

    start = np.array([TERMS[t][2] for t in terms])
    before_loss = loss_at(start)
    best_x, best = start, before_loss
    for point in itertools.product(*(GRID[t] for t in terms)):
        value = loss_at(np.array(point))
        if value < best:
            best_x, best = np.array(point), value
    budget = max(max_evaluations - evaluations, 10)
    result = minimize(
        lambda z: loss_at(z * step),
        best_x / step,
        method="Nelder-Mead",
        bounds=list(zip((lower / step).tolist(), (upper / step).tolist(), strict=True)),
        options={"maxfev": budget, "xatol": 0.05, "fatol": 1e-6,
                 "initial_simplex": _simplex(best_x / step)},
    )
    if result.fun < best:
        best_x, best = np.asarray(result.x) * step, float(result.fun)
    fitted = dict(zip(terms, np.clip(best_x, lower, upper).tolist(), strict=True))
    fitted = {k: _round(v) for k, v in fitted.items()}
    plain = {t: TERMS[t][2] for t in terms}
    return EngineFit(
        terms=fitted,
        objective_before=before_loss,
        objective_after=best,
        evaluations=evaluations,
        before={c.label: _replay(c, plain) for c in cases},
        after={c.label: _replay(c, fitted) for c in cases},
        holdout_before={c.label: _replay(c, plain) for c in holdout},
        holdout_after={c.label: _replay(c, fitted) for c in holdout},
    )


def _simplex(x: np.ndarray) -> np.ndarray:
    """A starting simplex one step (a unit here) along each term, staying non-negative."""
    points = [x]
    for i in range(len(x)):
        p = x.copy()
        p[i] = p[i] + 1.0 if p[i] < 1.0 else p[i] - 1.0
        points.append(p)
    return np.array(points)


def _round(value: float) -> float:
    """Four significant digits: more would claim a precision no measurement has."""
    return float(f"{value:.4g}") if value else 0.0


def file_digest(path: Path) -> str:
    """sha256 of a file, or of a folder's files in name order."""
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        with file.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def headline(comparison: Comparison) -> dict[str, float | None]:
    """The p50 and p90 errors of TTFT, TPOT and E2E and the median per-request E2E error."""
    out: dict[str, float | None] = {}
    for metric, stat in HEADLINE:
        value = comparison.error(metric, stat)
        out[f"{metric}_{stat}_error_pct"] = round(value, 2) if math.isfinite(value) else None
    ape = comparison.agreement("e2e")
    out["e2e_median_ape_pct"] = round(ape, 2) if math.isfinite(ape) else None
    return out


def preset_header(
    name: str, engine: dict[str, Any], generator: str, setup: dict[str, Any]
) -> dict[str, Any]:
    """An engine preset's fields and the start of its provenance (the fit adds the rest)."""
    return {
        "schema_version": 1,
        "kind": "engine_preset",
        "name": name,
        "engine": engine,
        "provenance": {
            "generator": f"{generator} (batchsim {__version__})",
            "date": date.today().isoformat(),
            "setup": setup,
        },
    }


def preset_document(
    fit: EngineFit,
    *,
    name: str,
    engine: dict[str, Any],
    runs: Sequence[dict[str, Any]],
    holdout: Sequence[dict[str, Any]],
    setup: dict[str, Any],
) -> dict[str, Any]:
    """The preset file: the engine fields, and where they come from."""
    doc = preset_header(name, engine, "batchsim calibrate-engine", setup)
    doc["provenance"] |= {
        "runs": list(runs),
        "holdout": list(holdout),
        "fit": {
            "terms": dict(fit.terms),
            "objective": "mean over requests and TTFT, TPOT, E2E of |log(sim / measured)|",
            "objective_before": round(fit.objective_before, 5),
            "objective_after": round(fit.objective_after, 5),
            "replays": fit.evaluations,
            "errors_before": {k: headline(v) for k, v in fit.before.items()},
            "errors_after": {k: headline(v) for k, v in fit.after.items()},
            "holdout_before": {k: headline(v) for k, v in fit.holdout_before.items()},
            "holdout_after": {k: headline(v) for k, v in fit.holdout_after.items()},
        },
    }
    return doc
