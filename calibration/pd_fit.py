"""Prefill/decode-disaggregated points in the step model's fit: each decode pool's mean TPOT as
a linear row of the unit costs, and the points' leave-one-configuration-out judge.

A disaggregated point's pools feed each other through the clients' loop (a request reaches the
decode pool when its prefill and KV transfer end), so unlike one instance's closed loop its
schedule moves with the unit costs. Its decode pool's mean TPOT is still, to first order, its
decode steps' counted events priced by the unit costs: one simulation at the shipped unit costs
counts the decode instances' events over each request's decode span (weighted as mean TPOT
averages them, `sim.whatif.calibrate_points.metric_weights`), and the time those steps do not
hold (the KV transfer, a decode instance left idle) enters as a constant, so that the row gives
the simulated TPOT exactly at the costs it was counted at. Only TPOT enters the fit: the
point's throughput and TTFT also depend on the prefill pool and the transfer.

Which points: disaggregated rows without speculation that the mapping expresses
(`calibration.published_pd.expressible_pd`) and whose pools fit the catalog's memory. MTP
points stay judged only (their drafts' acceptance is stated, not measured here). The judge
simulates each fitted configuration's points with unit costs fitted without that
configuration (`pinned_unit_costs`), and the MTP points with the full fit.
"""

from __future__ import annotations

import hashlib
import math
import pickle
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd

from calibration.published_events import _group_features, _priced, _sums, model_fields, seconds
from calibration.published_pd import (
    ENGINES_PD,
    _label,
    _pool_hardware,
    expressible_pd,
    pd_errors,
    pd_scenario,
)
from sim.costs.catalog import HardwareSpec, ModelSpec
from sim.costs.step_events import basis, pinned_unit_costs
from sim.errors import ScenarioError
from sim.simulate import simulate
from sim.whatif.calibrate_points import metric_weights

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "results/.published_pd_rows.pkl"


def in_fit(row: Any) -> bool:
    """Whether a training row's decode pool enters the fit (disaggregated, no speculation,
    expressed by the mapping)."""
    return (
        bool(row.disagg) and str(row.spec_decoding) != "mtp" and expressible_pd(row) is None
    )


def config_label(row: Any) -> str:
    """The point's configuration: its label and its decode pool's layout, not its concurrency."""
    dp = " DP-attention" if bool(row.decode_dp_attention) else ""
    return f"{_label(row)} (decode TP{int(row.decode_tp)} EP{int(row.decode_ep)}{dp})"


@dataclass
class PDCounts:
    """A decode pool's counted events, per profile coefficient, weighted as mean TPOT; the
    simulated mean TPOT and the unit costs it was simulated at."""

    tpot_mean: dict[str, float]
    simulated_tpot_s: float
    at: dict[str, float]


def _decode_specs(row: Any) -> tuple[ModelSpec, HardwareSpec, str, bool]:
    raw = pd_scenario(row)
    model = ModelSpec.model_validate(model_fields(row))
    hw = HardwareSpec.model_validate(_pool_hardware(row, "decode"))
    return model, hw, ENGINES_PD[str(row.framework)], bool(raw["engine"]["async_scheduling"])


def pd_counts(row: Any, costs: dict[str, float]) -> PDCounts | None:
    """Simulate the point at `costs` and count its decode pool's events (None: the layout does
    not fit the catalog's memory)."""
    try:
        with pinned_unit_costs(costs):
            result = next(iter(simulate(pd_scenario(row)).variants.values()))
    except ScenarioError:
        return None
    model, hw, engine, hidden = _decode_specs(row)
    terms = basis(model, hw, engine, hidden)
    steps, requests = result.steps, result.requests
    done = requests[~requests["rejected"]]
    decoding = int((done["num_output_tokens"] > 1).sum())
    total: dict[str, float] = {}
    for instance in sorted(done["decode_instance"].dropna().unique()):
        own = steps[steps["instance"] == instance].reset_index(drop=True)
        served = done[done["decode_instance"] == instance]
        features = _group_features(own, terms, model, hw, engine, hidden, costs)
        tpot_w, _ = metric_weights(own, served)
        share = int((served["num_output_tokens"] > 1).sum()) / max(decoding, 1)
        for key, value in _sums(features, tpot_w * share).items():
            total[key] = total.get(key, 0.0) + value
    return PDCounts(total, float(result.summary()["tpot_mean_s"]), dict(costs))


def pd_tpot_row(row: Any, counts: PDCounts) -> dict[str, float]:
    """The decode pool's mean TPOT as `{unit cost key: seconds per unit}`, exact at the costs it
    was counted at (the transfer and idle time as `const`)."""
    model, hw, engine, hidden = _decode_specs(row)
    out = _priced(basis(model, hw, engine, hidden), counts.tpot_mean)
    out["const"] = out.get("const", 0.0) + counts.simulated_tpot_s - seconds(out, counts.at)
    return out


def load_pd_points() -> pd.DataFrame:
    """The training file's disaggregated points that enter the fit, with a configuration id
    of their own (`config_id`, from 0)."""
    from calibration.fit_unit_costs import TRAINING

    rows = pd.read_csv(TRAINING).rename_axis("row_index").reset_index()
    rows = rows[[in_fit(r) for r in rows.itertuples()]].reset_index(drop=True)
    rows["config"] = [config_label(r) for r in rows.itertuples()]
    rows["config_id"] = pd.factorize(rows["config"])[0]
    return rows


def _count_one(args: tuple[dict[str, Any], dict[str, float]]) -> PDCounts | None:
    fields, costs = args
    return pd_counts(SimpleNamespace(**fields), costs)


def counted_pd(
    points: pd.DataFrame, costs: dict[str, float], cache: Path | None = CACHE, jobs: int = 2
) -> list[PDCounts | None]:
    """Every point's counts at `costs` (cached by the points, the costs and the code)."""
    from concurrent.futures import ProcessPoolExecutor

    from calibration.fit_unit_costs import SCHEDULE_PACKAGES

    digest = hashlib.sha256(Path(__file__).read_bytes())
    digest.update((ROOT / "calibration/published_pd.py").read_bytes())
    digest.update((ROOT / "calibration/published_events.py").read_bytes())
    for package in SCHEDULE_PACKAGES:
        for path in sorted((ROOT / "sim" / package).rglob("*.py")):
            digest.update(path.read_bytes())
    digest.update(repr(sorted(costs.items())).encode())
    frame = int(pd.util.hash_pandas_object(points.drop(columns=["config_id"]), index=False).sum())
    key = f"{frame}-{digest.hexdigest()}"
    if cache is not None and cache.is_file():
        stored = pickle.loads(cache.read_bytes())
        if stored.get("key") == key:
            return list(stored["counts"])
    started = time.time()
    records = points.drop(columns=["config", "config_id"]).to_dict("records")
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        out = list(pool.map(_count_one, [(r, costs) for r in records]))
    print(f"  counted {len(out)} disaggregated points ({time.time() - started:.0f} s)",
          file=sys.stderr)  # fmt: skip
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_bytes(pickle.dumps({"key": key, "counts": out}))
    return out


class PDDesign:
    """The decode pools' TPOT rows as matrices over a fit's unit costs (`Design.keys`)."""

    def __init__(self, points: pd.DataFrame, rows: list[dict[str, float]], keys: list[str]) -> None:
        from calibration.fit_unit_costs import Design
        from calibration.published_events import PointRows

        columns = {k: i for i, k in enumerate(keys)}
        wrapped = [PointRows(r, {}, {}, 0, 1) for r in rows]
        self.cost, self.inv, self.const = Design._matrix(
            wrapped, "duration", columns, len(rows), len(keys)
        )
        self.meas = points["tpot_mean_s"].to_numpy(float)
        self.config = points["config_id"].to_numpy(int)
        counts = np.bincount(self.config) if len(points) else np.zeros(0, int)
        self.weight = 1.0 / np.sqrt(counts[self.config]) if len(points) else np.zeros(0)

    def predict(self, values: np.ndarray, is_eff: np.ndarray) -> np.ndarray:
        """Each point's mean TPOT at the unit costs `values` (`Design.values`)."""
        inverse = np.where(is_eff, 1.0 / values, 0.0)
        direct = np.where(is_eff, 0.0, values)
        return self.cost @ direct + self.inv @ inverse + self.const


def _judge_one(args: tuple[dict[str, Any], dict[str, float]]) -> dict[str, Any]:
    fields, costs = args
    row = SimpleNamespace(**fields)
    out: dict[str, Any] = {"row_index": int(row.row_index), "config": _label(row),
                           "conc": int(row.conc), "framework": row.framework,
                           "mtp": str(row.spec_decoding) == "mtp"}  # fmt: skip
    try:
        with pinned_unit_costs(costs):
            out |= pd_errors(row)
    except ScenarioError as exc:
        out["not_simulated"] = exc.message()
    return out


def judge(
    points: pd.DataFrame, costs_by_row: list[dict[str, float]], jobs: int = 2
) -> pd.DataFrame:
    """Simulate each point at its own unit costs; signed errors in % (as
    `published_pd.pd_errors`)."""
    from concurrent.futures import ProcessPoolExecutor

    records = points.to_dict("records")
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        judged = list(pool.map(_judge_one, list(zip(records, costs_by_row, strict=True))))
    return pd.DataFrame(judged)


def median_abs(values: pd.Series) -> float:
    v = values.dropna().abs()
    return float(v.median()) if len(v) else math.nan
