"""Fit step-cost coefficients to measured step times and pick the model form.

Each form of the step cost model (`docs/profiles.md`) is linear in its coefficients, so a fit is one
least-squares solve over the columns of `design`:

    seed        1, num_tokens
    extended    1, num_tokens, sum_context_tokens, prefill_attention_term
    two_regime  1, min(num_tokens, ridge), max(num_tokens - ridge, 0), sum_context, attention
    split       1, prefill tokens, decode tokens, num_seqs, sum_context, causal pairs
                (sum over chunks of chunk * (prefix + chunk / 2))

The two_regime ridge is not linear; it is searched over the token counts of the data (and the
geometric midpoints between them), keeping the ridge with the smallest training error. Rows are
weighted by 1 / measured time, so the fit minimizes relative error: step times span two orders of
magnitude, and a 1 ms decode step mispriced by 20 % matters as much to latency as a long prefill.
Row weights (a `weight` column, `--weight`) scale each row's squared relative error; a row of
weight 0 is left out.
Coefficients are kept non-negative (a negative per-token cost is unphysical and extrapolates
badly) with a small Lawson-Hanson active-set solver, so numpy is the only dependency.

Model selection: every fifth row (sorted by shape, so the split is deterministic and spread over
the grid) is held out; each form is fitted on the rest and scored by its worst relative error on
the held-out rows of positive weight. A richer form wins only if it cuts that error by more than
`MARGIN` (10 %) and by more than `MIN_GAIN` (0.1 percentage point), so noise never buys extra
parameters. The chosen form is then refitted on all rows, which is what the
profile records; R² and the worst relative error are over all rows, the held-out error is the
split fit's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from calibration.raw import FloatArray, StepTable
from sim.costs.profile import Coefficients

BoolArray = npt.NDArray[np.bool_]

# simplest first: ties go to the simpler form
FORMS = ("seed", "extended", "two_regime", "split")
MARGIN = 0.1  # a richer form must cut the held-out worst relative error by more than 10 %
MIN_GAIN = 1e-3  # ... and by more than 0.1 percentage point (timings carry ~6 digits at best)
HOLDOUT_EVERY = 5
MIN_POINTS_FOR_HOLDOUT = 15  # below this every point is needed to pin four coefficients


@dataclass(frozen=True)
class FormFit:
    form: str
    coefficients: Coefficients
    r2: float
    max_rel_error: float
    heldout_max_rel_error: float | None


@dataclass(frozen=True)
class FitReport:
    form: str  # the chosen form; `fits[form]` holds its all-rows coefficients
    fits: dict[str, FormFit]
    seed_by_context: list[dict[str, float]]
    num_points: int
    num_heldout: int


def nnls(a: FloatArray, b: FloatArray) -> FloatArray:
    """argmin |a x - b| subject to x >= 0 (Lawson and Hanson's active-set method)."""
    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0
    a = a / scale  # columns span ~1 to ~1e8: normalize so tolerances mean the same for each
    n = a.shape[1]
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    tol = 1e-12 * max(1.0, float(np.abs(a.T @ b).max()))
    for _ in range(4 * n + 10):
        gradient = a.T @ (b - a @ x)
        if passive.all() or gradient[~passive].max() <= tol:
            break
        passive[int(np.argmax(np.where(passive, -np.inf, gradient)))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            # step back towards x until the first coefficient hits zero, then drop it
            blocked = passive & (z <= 0)
            alpha = np.min(x[blocked] / (x[blocked] - z[blocked]))
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
    return x / scale


def design(table: StepTable, form: str, ridge: float | None = None) -> FloatArray:
    n = table.num_tokens
    columns = [np.ones_like(n)]
    if form == "split":
        p = table.num_prefill_tokens
        return np.column_stack(
            [*columns, p, n - p, table.num_seqs, table.sum_context_tokens, table.causal_pairs]
        )
    if form == "two_regime":
        assert ridge is not None
        columns += [np.minimum(n, ridge), np.maximum(n - ridge, 0.0)]
    else:
        columns.append(n)
    if form != "seed":
        columns += [table.sum_context_tokens, table.prefill_attention_term]
    return np.column_stack(columns)


def _coefficients(form: str, x: FloatArray, ridge: float | None) -> Coefficients:
    values = [float(v) for v in x]
    if form == "seed":
        return Coefficients(t_mem_s=values[0], t_flop_s_per_token=values[1])
    if form == "split":
        t_mem, t_flop, t_decode, t_seq, t_kv, t_pair = values
        return Coefficients(
            t_mem_s=t_mem,
            t_flop_s_per_token=t_flop,
            t_decode_s_per_token=t_decode,
            t_seq_s_per_seq=t_seq,
            t_kv_s_per_token=t_kv,
            t_attn_s_per_pair=t_pair,
        )
    if form == "extended":
        t_mem, t_flop, t_kv, t_attn = values
        return Coefficients(
            t_mem_s=t_mem,
            t_flop_s_per_token=t_flop,
            t_kv_s_per_token=t_kv,
            t_attn_s_per_token2=t_attn,
        )
    t_mem, t_flop, t_high, t_kv, t_attn = values
    return Coefficients(
        t_mem_s=t_mem,
        t_flop_s_per_token=t_flop,
        t_kv_s_per_token=t_kv,
        t_attn_s_per_token2=t_attn,
        ridge_tokens=ridge,
        t_flop_high_s_per_token=t_high,
    )


def predict(c: Coefficients, table: StepTable) -> FloatArray:
    """Step seconds by the formula of `sim.costs.cost_model.CostModel.step_time`, vectorized."""
    n = table.num_tokens
    flop = c.t_flop_s_per_token * n
    if c.t_decode_s_per_token is not None:  # split form
        p = table.num_prefill_tokens
        flop = c.t_flop_s_per_token * p + c.t_decode_s_per_token * (n - p)
        flop = flop + c.t_seq_s_per_seq * table.num_seqs + c.t_attn_s_per_pair * table.causal_pairs
    if c.ridge_tokens is not None and c.t_flop_high_s_per_token is not None:
        ridge, high = c.ridge_tokens, c.t_flop_high_s_per_token
        flop = np.where(n <= ridge, flop, c.t_flop_s_per_token * ridge + high * (n - ridge))
    return (
        c.t_mem_s
        + flop
        + c.t_kv_s_per_token * table.sum_context_tokens
        + c.t_attn_s_per_token2 * table.prefill_attention_term
    )


def _solve(table: StepTable, form: str, rows: BoolArray, ridge: float | None) -> FloatArray:
    a = design(table, form, ridge)[rows]
    y = table.step_s[rows]
    root_w = np.sqrt(table.weights[rows])
    return nnls(a / y[:, None] * root_w[:, None], root_w)


def _ridges(table: StepTable) -> list[float]:
    tokens = np.unique(table.num_tokens)
    inner = tokens[1:-1]  # a ridge at either end is the extended form again
    mids = np.sqrt(tokens[1:] * tokens[:-1])[1:-1]
    return sorted({float(t) for t in np.concatenate([inner, mids])})


def fit_form(table: StepTable, form: str, rows: BoolArray) -> Coefficients:
    """Best non-negative coefficients of `form` on the selected rows (a boolean mask)."""
    if form != "two_regime":
        return _coefficients(form, _solve(table, form, rows, None), None)
    best: tuple[float, FloatArray, float] | None = None
    y, w = table.step_s[rows], table.weights[rows]
    for ridge in _ridges(table) or [float(np.median(table.num_tokens))]:
        x = _solve(table, form, rows, ridge)
        error = float(np.sum(w * (design(table, form, ridge)[rows] @ x / y - 1.0) ** 2))
        if best is None or error < best[0] - 1e-15:
            best = (error, x, ridge)
    assert best is not None
    return _coefficients(form, best[1], best[2])


def rel_errors(c: Coefficients, table: StepTable) -> FloatArray:
    return np.abs(predict(c, table) - table.step_s) / table.step_s


def r_squared(c: Coefficients, table: StepTable) -> float:
    residual = float(np.sum((predict(c, table) - table.step_s) ** 2))
    total = float(np.sum((table.step_s - table.step_s.mean()) ** 2))
    return 1.0 - residual / total if total > 0 else 1.0


def heldout_mask(table: StepTable) -> npt.NDArray[np.bool_]:
    """True for rows held out of the selection fit: every fifth row in shape order."""
    mask = np.zeros(len(table), dtype=bool)
    if len(table) < MIN_POINTS_FOR_HOLDOUT:
        return mask
    order = np.lexsort(
        (
            table.prefill_attention_term,
            table.sum_context_tokens,
            table.num_tokens,
            np.asarray(table.kind),
        )
    )
    mask[order[HOLDOUT_EVERY // 2 :: HOLDOUT_EVERY]] = True
    return mask


def seed_by_context(table: StepTable) -> list[dict[str, float]]:
    """The seed model (`docs/profiles.md`) fitted to the decode rows of each context length."""
    out = []
    decode = table.num_prefill_tokens == 0
    for context in np.unique(table.context_tokens_per_seq[decode]):
        rows = decode & (table.context_tokens_per_seq == context)
        if len(np.unique(table.num_seqs[rows])) < 2:
            continue
        c = _coefficients("seed", _solve(table, "seed", rows, None), None)
        err = rel_errors(c, table)[rows]
        out.append(
            {
                "context_tokens_per_seq": float(context),
                "t_mem_s": c.t_mem_s,
                "t_flop_s_per_token": c.t_flop_s_per_token,
                "max_rel_error": float(err.max()),
                "num_points": int(rows.sum()),
            }
        )
    return out


def fit(table: StepTable, forms: tuple[str, ...] = FORMS) -> FitReport:
    """Fit every form, choose one by held-out error, refit it (and the others) on all rows."""
    weighted = table.weights > 0
    heldout = heldout_mask(table) & weighted
    train = ~heldout & weighted
    everything = weighted
    fits: dict[str, FormFit] = {}
    chosen, chosen_score = forms[0], np.inf
    for form in forms:
        scored_on = heldout if heldout.any() else everything
        score = float(rel_errors(fit_form(table, form, train), table)[scored_on].max())
        if form == forms[0] or score < min(chosen_score * (1 - MARGIN), chosen_score - MIN_GAIN):
            chosen, chosen_score = form, score
        c = fit_form(table, form, everything)
        fits[form] = FormFit(
            form=form,
            coefficients=c,
            r2=r_squared(c, table),
            max_rel_error=float(rel_errors(c, table).max()),
            heldout_max_rel_error=score if heldout.any() else None,
        )
    return FitReport(chosen, fits, seed_by_context(table), len(table), int(heldout.sum()))


def fit_block(report: FitReport) -> dict[str, Any]:
    """The profile's `fit` mapping: the chosen form's summary plus every candidate's scores."""
    best = report.fits[report.form]
    return {
        "r2": best.r2,
        "max_rel_error": best.max_rel_error,
        "num_points": report.num_points,
        "heldout_max_rel_error": best.heldout_max_rel_error,
        "num_heldout": report.num_heldout,
        "weighting": "relative (least squares on predicted / measured - 1), coefficients >= 0",
        "selection": f"held-out worst relative error; a richer form must cut it by {MARGIN:.0%} "
        f"and by {MIN_GAIN:.1%} at least",
        "candidates": {
            f.form: {
                "r2": f.r2,
                "max_rel_error": f.max_rel_error,
                "heldout_max_rel_error": f.heldout_max_rel_error,
                "coefficients": f.coefficients.model_dump(exclude_none=True),
            }
            for f in report.fits.values()
        },
    }
