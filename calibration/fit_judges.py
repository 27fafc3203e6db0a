"""The fit's judges beyond one configuration left out: whole regimes left out in turn (their
disaggregated decode pools with them), and every disaggregated and MTP point simulated as a
user writes it with a fit that left its configuration out (`calibration.fit_unit_costs`
calls them; docs/accuracy.md shows them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from calibration.fit_unit_costs import (
    FAMILY,
    Design,
    costs_of,
    errors,
    fit,
    frontend,
    generation_of,
)
from calibration.pd_fit import PDDesign, judge, median_abs

RegimeTest = Callable[[pd.DataFrame], np.ndarray]


def regime_tests(points: pd.DataFrame) -> list[tuple[str, RegimeTest]]:
    """Whole regimes to leave out in turn, each a (label, test of a frame's points): the
    highest concurrency of every configuration (the saturated end), tensor parallelism 8, each
    GPU generation, each engine and each model family. A test reads `config_id`, `conc`, `tp`,
    `gpu`, `framework` and `model_key`, so that it also picks a regime's disaggregated points
    (`pd_regime_frame`)."""

    def top(f: pd.DataFrame) -> np.ndarray:
        return f["conc"].to_numpy() == f.groupby("config_id")["conc"].transform("max").to_numpy()

    def column(name: str, value: Any, of: Callable[[Any], Any] = lambda v: v) -> RegimeTest:
        return lambda f: f[name].map(of).to_numpy(object) == value

    out: list[tuple[str, RegimeTest]] = [
        ("the highest concurrency of every configuration", top),
        ("tensor parallelism 8 (every 8-GPU layout)", lambda f: f["tp"].to_numpy() == 8),
    ]
    for name in sorted(set(points["gpu"].map(generation_of))):
        out.append((f"GPU generation {name}", column("gpu", name, generation_of)))
    for name in sorted(set(points["framework"])):
        out.append((f"engine {name}", column("framework", name)))
    for name in sorted(set(points["model_key"])):
        out.append((f"model {FAMILY[name]}", column("model_key", name)))
    return out


def regimes(points: pd.DataFrame) -> list[tuple[str, np.ndarray]]:
    """`regime_tests` applied to `points`: each regime's (label, mask)."""
    return [(label, test(points)) for label, test in regime_tests(points)]


def pd_regime_frame(pd_points: pd.DataFrame) -> pd.DataFrame:
    """The disaggregated points in the columns `regime_tests` reads: the decode pool's tensor
    parallelism, the engine under its single-instance name (Dynamo's SGLang is SGLang)."""
    single = {"dynamo-sglang": "sglang", "sglang-disagg": "sglang", "dynamo-trt": "trt"}
    return pd.DataFrame({
        "config_id": pd_points["config_id"].to_numpy(),
        "conc": pd_points["conc"].to_numpy(),
        "tp": pd_points["decode_tp"].to_numpy(),
        "gpu": pd_points["gpu"].to_numpy(),
        "framework": pd_points["framework"].map(single).to_numpy(),
        "model_key": pd_points["model_key"].to_numpy(),
    })  # fmt: skip


def regime_out(
    design: Design,
    points: pd.DataFrame,
    z_all: np.ndarray,
    engines: np.ndarray,
    pd_design: PDDesign | None = None,
    pd_frame: pd.DataFrame | None = None,
) -> list[tuple[str, pd.DataFrame]]:
    """Each regime's points predicted by unit costs (and front-end times) fitted without the
    whole regime, its disaggregated decode pools left out with it: how the step model
    transfers to what it has not seen."""
    out = []
    for label, test in regime_tests(points):
        held = test(points)
        if not held.any() or held.all():
            continue
        pd_mask = None if pd_frame is None else ~test(pd_frame)
        z = fit(design, ~held, z_all, pd_design, pd_mask)
        front = frontend(design, z, engines, ~held)
        out.append((label, errors(design, z, front, engines)[held]))
    return out


def regime_row(label: str, points: pd.DataFrame, errs: pd.DataFrame) -> str:
    """A markdown row: the regime, its points and configurations, median and worst |error| of
    throughput per GPU, TPOT and mean TTFT, the share of optimistic throughput, and per kind
    (dense, mixture of experts) the throughput and TPOT medians."""
    from calibration.accuracy_doc import error_cells

    frame = points.assign(**errs)
    cells = error_cells(label, frame)
    for kind in ("dense", "mixture of experts"):
        g = frame[frame["kind"] == kind]
        cells.append(
            f"{g['tput_err'].abs().median():.1f} / {g['tpot_err'].abs().median():.1f}"
            if len(g) else "-"
        )
    return "| " + " | ".join(cells) + " |"


def judge_disaggregated(
    design: Design, z: np.ndarray, pd_design: PDDesign, pd_points: pd.DataFrame
) -> pd.DataFrame:
    """Every disaggregated and MTP point simulated as a user writes it: a fitted
    configuration's points at unit costs fitted without that configuration (its decode pool
    left out), the others (MTP, never fitted) at the fit's. Also each point's error with every
    disaggregated pool left out of the fit (`*_err_no_pd`): what fitting on them changed."""
    from calibration.published_pd import pd_points as judged_points

    everything = np.ones(len(design.duration_meas), bool)
    full = costs_of(z, design)
    without = costs_of(fit(design, everything, z), design)
    left_out: dict[int, dict[str, float]] = {}
    for config in np.unique(pd_design.config):
        held = pd_design.config == config
        costs = costs_of(fit(design, everything, z, pd_design, ~held), design)
        for row_index in pd_points.loc[held, "row_index"]:
            left_out[int(row_index)] = costs
    rows = judged_points().sort_values("conc", kind="stable").reset_index(drop=True)
    own = [left_out.get(int(r), full) for r in rows["row_index"]]
    table = judge(rows, own)
    table["fitted_left_out"] = [int(r) in left_out for r in rows["row_index"]]
    base = judge(rows, [without] * len(rows))
    for metric in ("tput_err", "tpot_err", "ttft_err"):
        if metric in base:
            table[f"{metric}_no_pd"] = base[metric].to_numpy()
    return table


def pd_summary(judged: pd.DataFrame) -> list[str]:
    """Console lines: the judge's median |error| per engine, against the fit without pools."""
    done = judged[judged["tput_err"].notna()] if "tput_err" in judged else judged[:0]
    out = ["== disaggregated and MTP points (fitted configurations left out)"]
    groups = done.assign(group=done["framework"] + done["mtp"].map({True: " + MTP", False: ""}))
    for name, g in [("all", groups), *groups.groupby("group", sort=True)]:
        out.append(
            f"{name:24s} {len(g):4d} points  tput {median_abs(g['tput_err']):5.1f} % "
            f"tpot {median_abs(g['tpot_err']):5.1f} %   (no pools in the fit: "
            f"{median_abs(g['tput_err_no_pd']):5.1f} / {median_abs(g['tpot_err_no_pd']):5.1f} %)"
        )
    return out


