"""A table profile straight from measured steps: `batchsim profile table raw.csv --out DIR`.

The measured step times become the tables, not the input of a fit:

- linear layers: the attention-free `linear` rows when the CSV has them (the `tables` grid of
  `calibration/gpu_tables.py` measures a dense token sweep), else the fitted form's fixed cost
  and token slope(s) (`t_mem + flop(n)`) at every token count measured, which stands in for the
  part of a step that is not attention;
- decode attention at each measured (batch, context): the decode step's time minus the linear
  layers at its batch size;
- prefill attention at each measured (chunk, prefix) of one-prompt prefill rows: the step's time
  minus the linear layers at its chunk.

So every measured decode and one-prompt prefill step is reproduced exactly, whatever the fit.
`--out` is checked before anything is read (`sim.io.destination`), and `profile.yaml` there is
replaced, atomically, only when batchsim wrote it.
Mixed steps and prefills of several prompts are composed from the parts (linear layers once,
attention per part) and serve as a check: the profile's `fit` block reports the error on them
apart. The fitted form of the same rows (every form, by held-out error) prices steps outside
the tables.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from calibration.fit import fit
from calibration.raw import StepTable, read_meta, read_steps
from calibration.table_build import (
    average,
    fallback_fit_block,
    grid_from_points,
    linear_lookup,
    linear_seconds,
    make_profile,
)
from sim.core.plan import StepFeatures
from sim.costs.catalog import MODELS
from sim.costs.profile import FitSummary, Profile, save_profile
from sim.costs.table_model import TableCostModel
from sim.errors import ScenarioError
from sim.io.destination import check_file_destination, check_out_folder

PROFILE_FILE = "profile.yaml"
Source = Literal["measured", "imported"]


@dataclass(frozen=True)
class TableOutcome:
    profile: Profile
    profile_path: Path
    errors: np.ndarray  # relative error of the table profile on each measured step
    on_grid: np.ndarray  # whether the step is a grid point of the tables
    extrapolated: np.ndarray  # whether the step fell outside the tables


def _features(steps: StepTable, i: int) -> StepFeatures:
    b, n = int(steps.num_seqs[i]), int(steps.num_tokens[i])
    p, k = int(steps.num_prefill_tokens[i]), int(steps.prompts[i])
    chunks = ((p // k, int(steps.prefix[i])),) * k if p else ()
    return StepFeatures(
        b, n, p, n - p, int(steps.sum_context_tokens[i]), int(steps.prefill_attention_term[i]),
        0, b, 0, chunks,
    )  # fmt: skip


def table_from_raw(
    csv_path: Path,
    out_dir: Path,
    *,
    name: str | None = None,
    filters: tuple[str, ...] = (),
    model: str | None = None,
    source: Source = "measured",
    extra: dict[str, Any] | None = None,
    file_name: str = PROFILE_FILE,
) -> TableOutcome:
    """Build the table profile of the timings in `csv_path` and write it to `out_dir/file_name`
    (this imports neither torch nor matplotlib)."""
    if model is not None and model not in MODELS:
        raise ScenarioError(f"unknown model {model!r}", path="--model")
    # before any work: a real, writable folder, and a profile file there only when batchsim
    # wrote it (save_profile then replaces it atomically)
    check_out_folder(out_dir)
    check_file_destination(out_dir / file_name)
    everything = read_steps(csv_path, filters, keep_linear=True)
    meta = read_meta(csv_path)  # a corrupt sidecar is refused before the fit, not after
    kinds = np.asarray(everything.kind)
    steps = everything.select(kinds != "linear")
    if len(steps) < 2:
        raise ScenarioError("need at least 2 timed steps", file=str(csv_path))
    report = fit(steps)
    form, coefficients = report.form, report.fits[report.form].coefficients
    notes: dict[str, str] = {}
    if (kinds == "linear").any():
        rows = everything.select(kinds == "linear")
        per_n = average(
            ((int(n), 0), float(t)) for n, t in zip(rows.num_tokens, rows.step_s, strict=True)
        )
        tokens = sorted(n for n, _ in per_n)
        seconds = [per_n[(n, 0)] for n in tokens]
        notes["linear"] = "measured attention-free steps (linear rows)"
    else:
        plain = report if form != "split" else fit(steps, forms=("seed", "extended", "two_regime"))
        c = plain.fits[plain.form].coefficients
        tokens = sorted({1, *(int(n) for n in steps.num_tokens), *(int(b) for b in steps.num_seqs)})
        seconds = linear_seconds(c, plain.form, tokens)
        notes["linear"] = (
            f"t_mem + flop(n) of the fitted {plain.form} form (no attention-free rows)"
        )
    linear = linear_lookup(tokens, seconds)
    decode, prefill = [], []
    for i, kind in enumerate(steps.kind):
        b, n = int(steps.num_seqs[i]), int(steps.num_tokens[i])
        if kind == "decode" and b in linear:
            key = (b, int(steps.context_tokens_per_seq[i]))
            decode.append((key, float(steps.step_s[i]) - linear[b]))
        elif kind == "prefill" and steps.prompts[i] == 1 and n in linear:
            prefill.append(((n, int(steps.prefix[i])), float(steps.step_s[i]) - linear[n]))
    notes["decode_attention"] = "decode step time - linear(batch), at each measured point"
    notes["prefill_attention"] = "one-prompt prefill step time - linear(chunk), at each point"
    provenance: dict[str, Any] = {
        "generator": "batchsim profile table (calibration/table_from_raw.py)",
        **{k: v for k, v in meta.items() if k != "generator"},
    }
    if "generator" in meta:
        provenance["measured_with"] = meta["generator"]
    if model is not None and "model" not in provenance:
        provenance["model"] = MODELS[model].model_dump()
    provenance |= (extra or {}) | {
        "data_file": str(csv_path),
        "data_sha256": hashlib.sha256(csv_path.read_bytes()).hexdigest(),
        "filters": list(filters),
        "notes": list(steps.notes),
        "fallback_fit": fallback_fit_block(report, "the measured steps of the data file"),
        "build_date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
    }
    draft = make_profile(
        name=name or out_dir.name,
        source=source,
        linear=(tokens, seconds),
        decode=grid_from_points(average(decode)) if decode else None,
        prefill=grid_from_points(average(prefill)) if prefill else None,
        coefficients=coefficients,
        form=form,
        provenance=provenance,
        notes=notes,
    )
    cost = TableCostModel(draft)
    features = [_features(steps, i) for i in range(len(steps))]
    priced = [cost.price(f, f.num_tokens, f.num_seqs) for f in features]
    predicted = np.asarray([p[0] for p in priced])
    outside = np.asarray([p[3] for p in priced])
    errors = np.abs(predicted - steps.step_s) / steps.step_s
    kinds = np.asarray(steps.kind)
    on_grid = ((kinds == "decode") | ((kinds == "prefill") & (steps.prompts == 1))) & ~outside
    total = float(np.sum((steps.step_s - steps.step_s.mean()) ** 2))
    residual = float(np.sum((predicted - steps.step_s) ** 2))
    off = errors[~on_grid]
    summary = {
        "r2": 1.0 - residual / total if total > 0 else 1.0,
        "max_rel_error": float(errors.max()),
        "num_points": len(steps),
        "num_on_grid": int(on_grid.sum()),
        "on_grid_max_rel_error": float(errors[on_grid].max()) if on_grid.any() else None,
        "off_grid_max_rel_error": float(off.max()) if len(off) else None,
        "num_extrapolated": int(outside.sum()),
        "method": "measured steps are the tables; off-grid steps (mixed, several prompts, "
        "outside the tables) check how the parts compose",
    }
    profile = draft.model_copy(update={"fit": FitSummary.model_validate(summary)})
    path = out_dir / file_name
    save_profile(profile, path)
    return TableOutcome(profile, path, errors, on_grid, outside)


def format_table_outcome(outcome: TableOutcome) -> str:
    fit_summary = outcome.profile.fit
    table = outcome.profile.table
    assert fit_summary is not None and table is not None
    extra = fit_summary.model_extra or {}
    lines = [
        f"{fit_summary.num_points} steps: {extra.get('num_on_grid')} on the grids "
        f"(max rel err {_pct(extra.get('on_grid_max_rel_error'))}), the others composed "
        f"(max rel err {_pct(extra.get('off_grid_max_rel_error'))}), "
        f"{extra.get('num_extrapolated')} outside the tables",
        f"linear: {len(table.linear.tokens)} token counts; decode grid: "
        f"{_shape(table.decode_attention)}; prefill grid: {_shape(table.prefill_attention)}",
        f"outside the tables: {table.fallback_form} form",
        f"wrote {outcome.profile_path}",
    ]
    return "\n".join(lines)


def _pct(value: Any) -> str:
    return "-" if value is None else f"{value:.2%}"


def _shape(grid: Any) -> str:
    if grid is None:
        return "none (attention from the fitted coefficients)"
    first, second = grid.axes()
    return f"{len(first)} x {len(second)}"
