"""From a timings file to a profile folder: fit, provenance, `profile.yaml`, `fit.png`, a summary.

This is the part `batchsim fit` and `batchsim calibrate` share. The output folder holds
`profile.yaml` (what a scenario's `profile:` names) and `fit.png`; `calibrate` also leaves its
`raw.csv` and `raw.meta.json` there. Provenance is the benchmark's sidecar metadata when there is
one, plus what the caller knows (model, device, origin of imported data), the data file with its
SHA-256, the per-context seed fits and the date of the fit.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from calibration.fit import FitReport, fit, fit_block
from calibration.plot import plot_fit
from calibration.raw import StepTable, read_meta, read_steps
from sim.costs.catalog import MODELS
from sim.costs.profile import Coefficients, FitSummary, Profile, save_profile
from sim.errors import ScenarioError

PROFILE_FILE = "profile.yaml"
PLOT_FILE = "fit.png"
Source = Literal["measured", "imported"]


@dataclass(frozen=True)
class FitOutcome:
    profile: Profile
    report: FitReport
    table: StepTable
    profile_path: Path
    plot_path: Path | None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fit_timings(
    csv_path: Path,
    out_dir: Path,
    *,
    name: str | None = None,
    source: Source = "measured",
    filters: tuple[str, ...] = (),
    weights: tuple[str, ...] = (),
    model: str | None = None,
    extra: dict[str, Any] | None = None,
    plot: bool = True,
) -> FitOutcome:
    """Fit the timings in `csv_path` and write the profile (and plot) into `out_dir`."""
    if model is not None and model not in MODELS:
        known = ", ".join(sorted(MODELS))
        raise ScenarioError(f"unknown model {model!r} (known: {known})", path="--model")
    table = read_steps(csv_path, filters, weights)
    if len(table) < 2:
        raise ScenarioError("need at least 2 timed rows to fit", file=str(csv_path))
    report = fit(table)
    provenance: dict[str, Any] = {"generator": "batchsim fit (calibration/report.py)"}
    provenance |= read_meta(csv_path)
    if model is not None and "model" not in provenance:
        provenance["model"] = MODELS[model].model_dump()
    provenance |= extra or {}
    provenance |= {
        "data_file": str(csv_path),
        "data_sha256": _sha256(csv_path),
        "filters": list(filters),
        "weights": list(weights),
        "rows_used": len(table),
        "notes": list(table.notes),
        "seed_by_context": report.seed_by_context,
        "fit_date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
    }
    chosen: Coefficients = report.fits[report.form].coefficients
    profile = Profile(
        schema_version=1,
        name=name or out_dir.name,
        source=source,
        model_form=report.form,
        coefficients=chosen,
        provenance=provenance,
        fit=FitSummary.model_validate(fit_block(report)),
    )
    profile_path = out_dir / PROFILE_FILE
    save_profile(profile, profile_path)
    plot_path = plot_fit(table, profile, out_dir / PLOT_FILE) if plot else None
    return FitOutcome(profile, report, table, profile_path, plot_path)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.4g} ms"


def format_outcome(outcome: FitOutcome) -> str:
    """A short human summary: notes, each form's errors, the chosen coefficients, the seed table."""
    report = outcome.report
    lines = list(outcome.table.notes)
    lines.append(f"{report.num_points} points, {report.num_heldout} held out")
    lines.append(f"{'form':<11} {'R2':>8} {'max rel err':>12} {'held-out max':>13}")
    for f in report.fits.values():
        held = "-" if f.heldout_max_rel_error is None else f"{f.heldout_max_rel_error:.2%}"
        mark = "  <- chosen" if f.form == report.form else ""
        lines.append(f"{f.form:<11} {f.r2:>8.5f} {f.max_rel_error:>12.2%} {held:>13}{mark}")
    c = outcome.profile.coefficients
    lines.append(
        f"t_mem {_ms(c.t_mem_s)}, t_flop {c.t_flop_s_per_token * 1e6:.4g} us/token, "
        f"t_kv {c.t_kv_s_per_token * 1e9:.4g} ns/token, "
        f"t_attn {c.t_attn_s_per_token2 * 1e12:.4g} ps/token^2"
    )
    if c.ridge_tokens is not None and c.t_flop_high_s_per_token is not None:
        lines.append(
            f"ridge {c.ridge_tokens:.0f} tokens, above it t_flop "
            f"{c.t_flop_high_s_per_token * 1e6:.4g} us/token"
        )
    if report.seed_by_context:
        lines.append("seed model per decode context length (T = t_mem + B * t_flop):")
        for row in report.seed_by_context:
            lines.append(
                f"  L={row['context_tokens_per_seq']:<7g} t_mem {_ms(row['t_mem_s']):>11}  "
                f"t_flop {row['t_flop_s_per_token'] * 1e6:8.4g} us/token  "
                f"max rel err {row['max_rel_error']:.2%}"
            )
    lines.append(f"wrote {outcome.profile_path}")
    if outcome.plot_path is not None:
        lines.append(f"wrote {outcome.plot_path}")
    return "\n".join(lines)
