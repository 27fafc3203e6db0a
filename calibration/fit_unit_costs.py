"""Fit the events profile's unit costs on published deployments; judge them on configurations
left out of the fit.

    python -m calibration.fit_unit_costs            # fit, cross-validate, write the outputs
    python -m calibration.fit_unit_costs --check    # fit and report; write nothing

Data: `calibration/training/inferencex_train.csv` (921 closed-loop points in 115
configurations; its README says how they were measured). The disaggregated points without MTP
enter by their decode pools' mean TPOT (`calibration.pd_fit`: linear about the costs they were
counted at, so counted twice, at the shipped costs and at the first fit's), each of their
configurations judged by simulation with a fit that left it out (`pd_judged.csv`). The points
batchsim can express as one instance (no prefill/decode pools, no MTP) are simulated once each
(`calibration.published_events.point_rows`): every point's duration, mean TPOT and mean TTFT
are then exact linear functions of the unit costs, so fitting needs no further simulation.

The fit: each unit cost is its stated prior (`sim.costs.step_events.PRIORS`) times `exp(z)`;
efficiencies stay at or below 1. It minimizes the robust (soft-L1, scale 5 %) log errors of
throughput per GPU and mean TPOT, each configuration weighted equally, plus `RIDGE * z` per unit
cost, which keeps a unit cost that few configurations see near its prior. TTFT is not fitted
into the step costs (it carries the benchmark's cold start: no warm-up); `frontend_s` per engine
is the median of measured minus simulated mean TTFT, reported apart. Points that ran cold
(`calibration.published_events.cold_started`) carry `cold_start_s@<engine>`, fitted with the
rest: a stall before the first step adds to the duration and the first wave's TTFT only.

Cross-validation: leave one configuration out (all its concurrencies), refit, predict it; the
errors quoted in docs/accuracy.md are those predictions, never the fit's own. Outputs:
`sim/costs/unit_costs.yaml` (values and provenance), `docs/accuracy.md` and
`docs/accuracy_scatter.png`, and `calibration/training/accuracy_gate.json` (the CI gate's
sample and its recorded errors, tests/calibration/test_accuracy_gate.py).
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from scipy.optimize import least_squares

from calibration.op_level import OpRow, op_rows
from calibration.pd_fit import (
    CACHE as PD_CACHE,
)
from calibration.pd_fit import (
    PDDesign,
    counted_pd,
    load_pd_points,
    pd_tpot_row,
)
from calibration.published_events import (
    CONFIG,
    PointCounts,
    PointRows,
    cold_started,
    expressible,
    point_counts,
    rows_for,
    seconds,
)
from calibration.published_pd import JUDGED
from sim.costs.step_events import (
    FIXED,
    HIERARCHICAL,
    INVERSE_KINDS,
    PRIORS,
    catalog_unit_costs,
    prior,
    reread_unit_costs,
    vendor_key,
)

ROOT = Path(__file__).resolve().parents[1]
TRAINING = ROOT / "calibration/training/inferencex_train.csv"
UNIT_COSTS = ROOT / "sim/costs/unit_costs.yaml"
ACCURACY_DOC = ROOT / "docs/accuracy.md"
SCATTER = ROOT / "docs/accuracy_scatter.png"
GATE = ROOT / "calibration/training/accuracy_gate.json"
CACHE = ROOT / "results/.published_rows.pkl"
# sim/ packages whose code a point's counted schedule depends on (the cache's key)
SCHEDULE_PACKAGES = ("core", "policies", "topology", "costs", "scenario", "workload")
# per unit cost, on z = log(value / prior): chosen among 0.05, 0.1, 0.2 and 0.4 by the
# leave-one-configuration-out error (0.2 the lowest median for dense and MoE alike)
RIDGE = 0.2
LOSS_SCALE = 0.05  # soft-L1: errors beyond about 5 % count linearly
MAX_EFF = 1.0
MIN_EFF = 0.05
COST_RANGE = (0.02, 50.0)  # a unit cost stays within this factor of its prior


def load_points(path: Path = TRAINING) -> pd.DataFrame:
    """The expressible points, with a configuration label and id."""
    rows = pd.read_csv(path)
    rows = rows.rename_axis("row_index").reset_index()
    rows = rows[[expressible(r) is None for r in rows.itertuples()]].copy()
    keyed = rows[CONFIG].astype(str).agg(" ".join, axis=1)
    rows["config"] = keyed
    rows["config_id"] = pd.factorize(keyed)[0]
    return rows.reset_index(drop=True)


def counted(points: pd.DataFrame, cache: Path | None = CACHE) -> list[PointRows]:
    """Every point's linear rows: its events counted by one simulation (cached by the points'
    content and the schedule's code), priced by today's basis."""
    counts = _counts(points, cache)
    return [rows_for(row, c) for row, c in zip(points.itertuples(), counts, strict=True)]


def _counts(points: pd.DataFrame, cache: Path | None) -> list[PointCounts]:
    import hashlib

    import calibration.published_events as counting

    # the schedule's code: the mapping and every package a simulated step goes through
    digest = hashlib.sha256(Path(counting.__file__).read_bytes())
    for package in SCHEDULE_PACKAGES:
        for path in sorted((ROOT / "sim" / package).rglob("*.py")):
            digest.update(path.read_bytes())
    source = digest.hexdigest()
    content = points.drop(columns=["config_id", "row_index"])
    frame = int(pd.util.hash_pandas_object(content, index=False).sum())
    key = f"{frame}-{source}"
    if cache is not None and cache.is_file():
        stored = pickle.loads(cache.read_bytes())
        if stored.get("key") == key:
            return list(stored["rows"])
    started = time.time()
    out = []
    for i, row in enumerate(points.itertuples()):
        out.append(point_counts(row))
        if (i + 1) % 100 == 0:
            print(
                f"  simulated {i + 1}/{len(points)} points ({time.time() - started:.0f} s)",
                file=sys.stderr,
            )
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_bytes(pickle.dumps({"key": key, "rows": out}))
    return out


def fitted_keys(rows: list[PointRows], ops: list[OpRow] | None = None) -> list[str]:
    keys: set[str] = set()
    for r in rows:
        keys |= set(r.duration) | set(r.tpot_mean)
    for op in ops or ():
        keys |= set(op.row)
    names = {k.removeprefix("inv:") for k in keys if k != "const"}
    return sorted(k for k in names if k.split("@")[0] not in FIXED)


def _is_eff(key: str) -> bool:
    return key.split("@")[0] in INVERSE_KINDS


def costs_of(z: np.ndarray, design: Design) -> dict[str, float]:
    """The unit costs at z: each generation's, and each vendor's shared value."""
    values = design.values(z)
    out = {k: float(v) for k, v in zip(design.keys, values, strict=True)}
    for i, parent in enumerate(design.parents):
        out[parent] = _clipped(parent, prior(parent) * math.exp(z[len(design.keys) + i]))
    return out


def _clipped(key: str, value: float) -> float:
    return min(value, MAX_EFF) if _is_eff(key) else value


def bounds(keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = [], []
    for k in keys:
        if _is_eff(k):
            lo.append(math.log(MIN_EFF / prior(k)))
            hi.append(math.log(MAX_EFF / prior(k)))
        else:
            lo.append(math.log(COST_RANGE[0]))
            hi.append(math.log(COST_RANGE[1]))
    return np.array(lo), np.array(hi)


class Design:
    """The points' linear rows as matrices over the unit costs, for fast evaluation."""

    def __init__(
        self,
        points: pd.DataFrame,
        rows: list[PointRows],
        keys: list[str],
        ops: list[OpRow] | None = None,
    ) -> None:
        self.keys = keys
        # a generation's unit cost is its vendor's shared value times its own deviation, each
        # drawn to 1 by the ridge: a generation without deployments takes its vendor's value
        self.parents = sorted({p for k in keys if (p := vendor_key(k)) is not None})
        self.params = keys + self.parents
        at = {p: len(keys) + i for i, p in enumerate(self.parents)}
        self.parent_index = np.array([at.get(vendor_key(k) or "", -1) for k in keys])
        self.priors = np.array([prior(k) for k in keys])
        columns = {k: i for i, k in enumerate(keys)}
        n, m = len(rows), len(keys)
        self.dur_cost, self.dur_inv, self.dur_const = self._matrix(rows, "duration", columns, n, m)
        self.tpot_cost, self.tpot_inv, self.tpot_const = self._matrix(
            rows, "tpot_mean", columns, n, m
        )
        self.ttft_cost, self.ttft_inv, self.ttft_const = self._matrix(
            rows, "ttft_mean", columns, n, m
        )
        tokens = np.array([r.total_tokens for r in rows], float)
        gpus = np.array([r.gpus for r in rows], float)
        self.duration_meas = tokens / gpus / points["tput_per_gpu"].to_numpy(float)
        self.tpot_meas = points["tpot_mean_s"].to_numpy(float)
        self.ttft_meas = points["ttft_mean_s"].to_numpy(float)
        self.config = points["config_id"].to_numpy(int)
        counts = np.bincount(self.config)
        self.weight = 1.0 / np.sqrt(counts[self.config])
        self.is_eff = np.array([_is_eff(k) for k in keys])
        # op-level rows (calibration/op_level.py): each table weighs as one configuration
        ops = ops or []
        self.op_cost, self.op_inv, self.op_const = self._op_matrix(ops, columns, m)
        self.op_meas = np.array([op.measured_s for op in ops], float)
        tables = pd.factorize(pd.Series([op.table for op in ops], dtype=object))[0]
        per_table = np.bincount(tables) if len(ops) else np.zeros(0, int)
        self.op_weight = 1.0 / np.sqrt(per_table[tables]) if len(ops) else np.zeros(0)

    @staticmethod
    def _op_matrix(
        ops: list[OpRow], columns: dict[str, int], m: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows = [PointRows(op.row, {}, {}, 0, 1) for op in ops]
        return Design._matrix(rows, "duration", columns, len(ops), m)

    def predict_ops(self, z: np.ndarray) -> np.ndarray:
        """Each op-level row's seconds at z."""
        values = self.values(z)
        inverse = np.where(self.is_eff, 1.0 / values, 0.0)
        direct = np.where(self.is_eff, 0.0, values)
        return self.op_cost @ direct + self.op_inv @ inverse + self.op_const

    @staticmethod
    def _matrix(
        rows: list[PointRows], field: str, columns: dict[str, int], n: int, m: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(cost multipliers, inverse-efficiency multipliers, fixed seconds incl. priors of
        unit costs not fitted)."""
        cost, inv, const = np.zeros((n, m)), np.zeros((n, m)), np.zeros(n)
        for i, r in enumerate(rows):
            for key, mult in getattr(r, field).items():
                name = key.removeprefix("inv:")
                if key == "const":
                    const[i] += mult
                elif name not in columns:
                    const[i] += seconds({key: mult}, {})
                elif key.startswith("inv:"):
                    inv[i, columns[name]] += mult
                else:
                    cost[i, columns[name]] += mult
        return cost, inv, const

    def values(self, z: np.ndarray) -> np.ndarray:
        """Each key's unit cost at z (efficiencies at most 1)."""
        n = len(self.keys)
        shared = np.where(self.parent_index >= 0, z[np.maximum(self.parent_index, 0)], 0.0)
        values = self.priors * np.exp(z[:n] + shared)
        return np.where(self.is_eff, np.minimum(values, MAX_EFF), values)

    def predict(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        values = self.values(z)
        inverse = np.where(self.is_eff, 1.0 / values, 0.0)
        direct = np.where(self.is_eff, 0.0, values)

        def one(cost: np.ndarray, inv: np.ndarray, const: np.ndarray) -> np.ndarray:
            return cost @ direct + inv @ inverse + const

        return (
            one(self.dur_cost, self.dur_inv, self.dur_const),
            one(self.tpot_cost, self.tpot_inv, self.tpot_const),
            one(self.ttft_cost, self.ttft_inv, self.ttft_const),
        )


def set_ridge(value: float) -> None:
    """The ridge `fit` applies (module-wide: the cross-validation refits use it too)."""
    global RIDGE
    RIDGE = value


def fit(
    design: Design,
    mask: np.ndarray,
    z0: np.ndarray | None = None,
    pd_design: PDDesign | None = None,
    pd_mask: np.ndarray | None = None,
) -> np.ndarray:
    """z (log unit costs over their priors) fitted on the points in `mask` and the
    disaggregated decode pools in `pd_mask` (all of `pd_design`'s by default)."""
    lo, hi = bounds(design.params)
    w = design.weight[mask]
    if pd_design is not None and pd_mask is None:
        pd_mask = np.ones(len(pd_design.meas), bool)
    # unit costs the masked points never use stay at their priors (only the ridge sees them)

    def residuals(z: np.ndarray) -> np.ndarray:
        duration, tpot, _ = design.predict(z)
        r_tput = np.log(duration[mask] / design.duration_meas[mask]) * w
        r_tpot = np.log(tpot[mask] / design.tpot_meas[mask]) * w
        r_ops = np.log(design.predict_ops(z) / design.op_meas) * design.op_weight
        parts = [r_tput, r_tpot, r_ops]
        if pd_design is not None and pd_mask is not None:
            pd_tpot = pd_design.predict(design.values(z), design.is_eff)[pd_mask]
            parts.append(np.log(pd_tpot / pd_design.meas[pd_mask]) * pd_design.weight[pd_mask])
        return np.concatenate([*parts, RIDGE * z])

    start = np.clip(np.zeros(len(design.params)) if z0 is None else z0, lo + 1e-9, hi - 1e-9)
    result = least_squares(
        residuals,
        start,
        bounds=(lo, hi),
        loss="soft_l1",
        f_scale=LOSS_SCALE,
        x_scale=1.0,
        max_nfev=400,
    )
    return np.asarray(result.x)


def frontend(design: Design, z: np.ndarray, engines: np.ndarray, mask: np.ndarray) -> dict:
    """Per engine: the median of measured minus simulated mean TTFT (at least 0)."""
    _, _, ttft = design.predict(z)
    out = {}
    for engine in sorted(set(engines[mask])):
        sel = mask & (engines == engine)
        out[str(engine)] = max(0.0, float(np.median(design.ttft_meas[sel] - ttft[sel])))
    return out


def errors(design: Design, z: np.ndarray, front: dict, engines: np.ndarray) -> pd.DataFrame:
    """Signed errors (simulated / measured - 1, %) of every point at unit costs z."""
    duration, tpot, ttft = design.predict(z)
    offset = np.array([front.get(str(e), 0.0) for e in engines])
    return pd.DataFrame(
        {
            "tput_err": (design.duration_meas / duration - 1) * 100,
            "tpot_err": (tpot / design.tpot_meas - 1) * 100,
            "ttft_err": ((ttft + offset) / design.ttft_meas - 1) * 100,
            "tput_sim_ratio": design.duration_meas / duration,
        }
    )


def cross_validate(
    design: Design,
    z_all: np.ndarray,
    engines: np.ndarray,
    pd_design: PDDesign | None = None,
) -> tuple[pd.DataFrame, dict[int, np.ndarray]]:
    """Leave one configuration out: each configuration's points predicted by a fit without it
    (the disaggregated decode pools stay in every fit)."""
    parts = []
    fits = {}
    for config in np.unique(design.config):
        held = design.config == config
        z = fit(design, ~held, z_all, pd_design)
        front = frontend(design, z, engines, ~held)
        part = errors(design, z, front, engines)[held]
        parts.append(part)
        fits[int(config)] = z
    return pd.concat(parts).sort_index(), fits


FAMILY = {
    "llama70b": "dense (Llama-3.3-70B)",
    "gptoss": "MoE (gpt-oss-120b)",
    "dsr1": "MoE (DeepSeek-R1)",
}


def generation_of(gpu: str) -> str:
    return {
        "h100": "Hopper",
        "h200": "Hopper",
        "b200": "Blackwell",
        "gb200": "Blackwell",
        "mi300x": "AMD CDNA",
        "mi325x": "AMD CDNA",
        "mi355x": "AMD CDNA",
    }[gpu]


def summary_table(points: pd.DataFrame, errs: pd.DataFrame, by: str) -> list[str]:
    """Markdown rows: group, points, configurations, median and worst |error| of throughput
    per GPU, TPOT and mean TTFT, and the share of optimistic throughput predictions."""
    frame = points.assign(**errs)
    lines = []
    for name, g in frame.groupby(by, sort=True):
        cells = [str(name), str(len(g)), str(g["config_id"].nunique())]
        for metric in ("tput_err", "tpot_err", "ttft_err"):
            a = g[metric].abs()
            cells.append(f"{a.median():.1f} / {a.max():.1f}")
        cells.append(f"{(g['tput_err'] > 0).mean() * 100:.0f} %")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _label_columns(points: pd.DataFrame) -> pd.DataFrame:
    family = points["model_key"].map(FAMILY)
    return points.assign(
        cold=[cold_started(r) for r in points.itertuples()],
        family=family,
        kind=np.where(points["model_key"] == "llama70b", "dense", "mixture of experts"),
        generation=points["gpu"].map(generation_of),
        family_generation=family + ", " + points["gpu"].map(generation_of),
    )


def scatter(points: pd.DataFrame, design: Design, cv: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    meas_tput = points["tput_per_gpu"].to_numpy(float)
    sim_tput = meas_tput * (1 + cv["tput_err"].to_numpy() / 100)
    meas_tpot = design.tpot_meas * 1e3
    sim_tpot = meas_tpot * (1 + cv["tpot_err"].to_numpy() / 100)
    labels = _label_columns(points)["family"].to_numpy()
    for ax, meas, sim, title in (
        (axes[0], meas_tput, sim_tput, "throughput per GPU (tok/s)"),
        (axes[1], meas_tpot, sim_tpot, "mean TPOT (ms)"),
    ):
        for family in sorted(set(labels)):
            sel = labels == family
            ax.scatter(meas[sel], sim[sel], s=10, alpha=0.7, label=family)
        lo, hi = min(meas.min(), sim.min()) * 0.8, max(meas.max(), sim.max()) * 1.25
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.plot([lo, hi], [lo * 1.2, hi * 1.2], "k:", lw=0.6)
        ax.plot([lo, hi], [lo / 1.2, hi / 1.2], "k:", lw=0.6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(f"measured {title}")
        ax.set_ylabel(f"simulated {title}, configuration left out")
        ax.legend(fontsize=8)
    fig.suptitle("events profile, leave-one-configuration-out (dotted: +/-20 %)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_unit_costs(costs: dict[str, float], front: dict, stats: dict) -> None:
    entries: dict[str, Any] = {}
    for k in sorted(costs):
        kind, _, where = k.partition("@")
        shared = "the vendor's shared value (a generation without deployments takes it); " if (
            where.split("/")[0] in ("nvidia", "amd") and kind in HIERARCHICAL
        ) else ""
        entries[k] = {
            "value": float(f"{costs[k]:.4g}"),
            "prior": PRIORS[kind][0],
            "source": f"fit: {shared}{stats['points']} points in {stats['configs']} "
            "configurations of calibration/training/inferencex_train.csv and "
            f"{stats.get('op_rows', 0)} op-level timings (calibration/op_level.py; python -m "
            f"calibration.fit_unit_costs); prior: {PRIORS[kind][1]}",
        }
    doc = {
        "kind": "unit_costs",
        "generator": "python -m calibration.fit_unit_costs",
        "fit": stats,
        "frontend_s": {e: float(f"{v:.4g}") for e, v in front.items()},
        "unit_costs": entries,
    }
    header = (
        "# Unit costs of the events profile (sim/costs/step_events.py), written by\n"
        "# `python -m calibration.fit_unit_costs`; a unit cost not listed takes its "
        "stated prior.\n"
    )
    UNIT_COSTS.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=100))


PD_PASSES = 2  # counting passes of the disaggregated points (the second at the first fit)


def disaggregated_rows(
    pd_points: pd.DataFrame, costs: dict[str, float], use_cache: bool
) -> tuple[pd.DataFrame, list[dict[str, float]]]:
    """The disaggregated points whose layout the catalog can place, each decode pool's mean
    TPOT row counted at `costs`; configuration ids renumbered from 0."""
    counts = counted_pd(pd_points, costs, PD_CACHE if use_cache else None)
    kept = [i for i, c in enumerate(counts) if c is not None]
    out = pd_points.iloc[kept].reset_index(drop=True)
    out["config_id"] = pd.factorize(out["config"])[0]
    rows = [pd_tpot_row(r, c) for r, c in zip(out.itertuples(), [counts[i] for i in kept],
                                              strict=True)]  # fmt: skip
    return out, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report only; write nothing")
    parser.add_argument("--no-cache", action="store_true")
    parser.add_argument("--ridge", type=float, default=RIDGE, help="pull towards the priors")
    args = parser.parse_args(argv)
    set_ridge(args.ridge)
    points = load_points()
    rows = counted(points, None if args.no_cache else CACHE)
    ops = op_rows()
    engines = points["framework"].to_numpy(str)
    everything = np.ones(len(points), bool)
    # the disaggregated decode pools, counted at the shipped unit costs, then again at the
    # first fit's (their rows are linear about the costs they were counted at)
    pd_points = load_pd_points()
    at = catalog_unit_costs()
    for _ in range(PD_PASSES):
        pd_points, pd_rows = disaggregated_rows(pd_points, at, not args.no_cache)
        extra = [PointRows(r, {}, {}, 0, 1) for r in pd_rows]
        keys = fitted_keys(rows + extra, ops)
        design = Design(points, rows, keys, ops)
        pd_design = PDDesign(pd_points, pd_rows, keys)
        z = fit(design, everything, None, pd_design)
        at = costs_of(z, design)
    front = frontend(design, z, engines, everything)
    fitted = errors(design, z, front, engines)
    cv, _ = cross_validate(design, z, engines, pd_design)
    labelled = _label_columns(points)
    for name, errs in (("fit", fitted), ("leave-one-configuration-out", cv)):
        print(f"== {name}")
        for by in ("kind", "family_generation", "framework"):
            for line in summary_table(labelled, errs, by):
                print(line)
    from calibration.fit_judges import (
        judge_disaggregated,
        pd_regime_frame,
        pd_summary,
        regime_out,
        regime_row,
    )

    by_regime = regime_out(design, points, z, engines, pd_design, pd_regime_frame(pd_points))
    judged = judge_disaggregated(design, z, pd_design, pd_points)
    for line in pd_summary(judged):
        print(line)
    print("== whole regime left out")
    for label, errs in by_regime:
        print(regime_row(label, labelled.loc[errs.index], errs))
    for k, v in costs_of(z, design).items():
        print(f"{k:28s} {v:.4g}   (prior {prior(k):.4g})")
    print("frontend_s", front)
    if args.check:
        return 0
    stats = {
        "points": len(points),
        "configs": int(points["config_id"].nunique()),
        "op_rows": len(ops),
        "ridge": RIDGE,
        "loss": f"soft_l1, scale {LOSS_SCALE}",
        "fit_median_abs_error_pct": {
            m: round(float(fitted[m].abs().median()), 2)
            for m in ("tput_err", "tpot_err", "ttft_err")
        },
        "cv_median_abs_error_pct": {
            m: round(float(cv[m].abs().median()), 2) for m in ("tput_err", "tpot_err", "ttft_err")
        },
    }
    stats["pd_points"] = len(pd_points)
    stats["pd_configs"] = int(pd_points["config_id"].nunique())
    write_unit_costs(costs_of(z, design), front, stats)
    reread_unit_costs()  # the gate below simulates with the costs just written
    judged.sort_values("row_index").to_csv(JUDGED, index=False, float_format="%.3f")
    from calibration.accuracy_doc import write_accuracy_doc, write_gate

    scatter(points, design, cv, SCATTER)
    regime_rows = [regime_row(label, labelled.loc[e.index], e) for label, e in by_regime]
    write_accuracy_doc(ACCURACY_DOC, labelled, fitted, cv, stats, costs_of(z, design), front,
                       regime_rows)  # fmt: skip
    write_gate(GATE, points)
    print(f"wrote {UNIT_COSTS}, {ACCURACY_DOC}, {SCATTER}, {GATE}")
    return 0


__all__ = [
    "Design",
    "cross_validate",
    "errors",
    "fit",
    "json",
    "load_points",
    "main",
    "statistics",
]

if __name__ == "__main__":
    raise SystemExit(main())
