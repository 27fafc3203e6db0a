"""Build table profiles: grids from measured points, the fitted fallback, and the profile.

Shared by the two ways a table profile is made: from a calibration raw CSV (`calibration.tables`)
and from Vidur's published per-operation timings (`calibration.vidur`). Measured points become a
rectangular grid: the axes are the distinct values measured, and a cell that was not measured
is filled by linear interpolation along the second axis (context, prefix) between the measured
cells of its row, or left null (outside the table) beyond them.

The fallback is the analytic form that prices steps outside the tables. With attention tables
it is fitted (every form, chosen by held-out error, `calibration.fit`) to steps priced by the
tables themselves on a subsample of their grids; without them the tables' attention is the
analytic model's, so only the linear layers' fixed cost and slope are fitted, to the linear
table, and the attention coefficients are kept as given.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

from calibration.fit import FitReport, fit, fit_block
from calibration.raw import StepTable
from sim.core.plan import StepFeatures
from sim.costs.profile import Coefficients, FitSummary, Profile
from sim.costs.table_model import TableCostModel
from sim.costs.tables import (
    DecodeAttentionTable,
    LinearTable,
    PrefillAttentionTable,
    TableSpec,
    dense_linear,
)

Points = dict[tuple[int, int], float]
Grid = tuple[list[int], list[int], list[list[float | None]]]
SAMPLE = 16  # grid values per axis the fallback is fitted on


def average(points: Iterable[tuple[tuple[int, int], float]]) -> Points:
    """One value per (first, second) point: repeated measurements are averaged."""
    sums: dict[tuple[int, int], list[float]] = defaultdict(list)
    for key, value in points:
        sums[key].append(value)
    return {key: float(np.mean(values)) for key, values in sums.items()}


def grid_from_points(points: Points) -> Grid:
    """The rectangular grid of `points`, gaps inside a row filled along the second axis."""
    first = sorted({a for a, _ in points})
    second = sorted({b for _, b in points})
    rows: list[list[float | None]] = []
    for a in first:
        measured = sorted((b, v) for (x, b), v in points.items() if x == a)
        xs = [float(b) for b, _ in measured]
        ys = [v for _, v in measured]
        row: list[float | None] = []
        for b in second:
            if (a, b) in points:
                row.append(points[(a, b)])
            elif xs[0] < b < xs[-1]:
                row.append(float(np.interp(b, xs, ys)))
            else:
                row.append(None)
        rows.append(row)
    return first, second, rows


def linear_seconds(c: Coefficients, form: str, tokens: list[int]) -> list[float]:
    """The analytic form's non-attention part at each token count: t_mem + flop(n) (the split
    form: every token at the prompt-token slope)."""
    n = np.asarray(tokens, dtype=np.float64)
    flop = c.t_flop_s_per_token * n
    if form == "two_regime" and c.ridge_tokens is not None and c.t_flop_high_s_per_token:
        ridge = c.ridge_tokens
        high = c.t_flop_s_per_token * ridge + c.t_flop_high_s_per_token * (n - ridge)
        flop = np.where(n <= ridge, flop, high)
    values: list[float] = (c.t_mem_s + flop).tolist()
    return values


def linear_lookup(tokens: list[int], seconds: list[float]) -> dict[int, float]:
    """The linear table as the cost model prices it, at every token count it covers."""
    dense = dense_linear(LinearTable(tokens=tokens, seconds=seconds))
    return {tokens[0] + i: v for i, v in enumerate(dense)}


def make_profile(
    *,
    name: str,
    source: str,
    linear: tuple[list[int], list[float]],
    decode: Grid | None,
    prefill: Grid | None,
    coefficients: Coefficients,
    form: str,
    provenance: dict[str, Any],
    fit_summary: dict[str, Any] | None = None,
    notes: dict[str, str] | None = None,
) -> Profile:
    table = TableSpec(
        fallback_form=form,
        linear=LinearTable(tokens=linear[0], seconds=linear[1]),
        decode_attention=None
        if decode is None
        else DecodeAttentionTable(batch=decode[0], context=decode[1], seconds=decode[2]),
        prefill_attention=None
        if prefill is None
        else PrefillAttentionTable(chunk=prefill[0], prefix=prefill[1], seconds=prefill[2]),
        notes=notes or {},
    )
    return Profile(
        schema_version=1,
        name=name,
        source=source,
        model_form="table",
        coefficients=coefficients,
        provenance=provenance,
        fit=None if fit_summary is None else FitSummary.model_validate(fit_summary),
        table=table,
    )


def _subsample(axis: list[int]) -> list[int]:
    if len(axis) <= SAMPLE:
        return axis
    picks = np.unique(np.round(np.geomspace(1, len(axis), SAMPLE)).astype(int) - 1)
    return [axis[i] for i in picks]


def steps_priced_by(profile: Profile) -> StepTable:
    """Decode steps on the decode grid and one-chunk prefills on the prefill grid (both
    subsampled), priced by the profile's tables: what a fallback is fitted to."""
    cost = TableCostModel(profile)
    table = profile.table
    assert table is not None
    rows: list[tuple[str, int, int, int, int, int, int, int]] = []  # kind b n p L ctx a prefix
    if table.decode_attention is not None:
        for b in _subsample(table.decode_attention.batch):
            for ctx in _subsample(table.decode_attention.context):
                rows.append(("decode", b, b, 0, ctx, b * (ctx + 1), 0, 0))
    if table.prefill_attention is not None:
        for c in _subsample(table.prefill_attention.chunk):
            for p in _subsample(table.prefill_attention.prefix):
                rows.append(("prefill", 1, c, c, 0, p + c, c * (p + c), p))
    kinds, times, kept = [], [], []
    for kind, b, n, p, ctx, total, a, prefix in rows:
        chunks = ((n, prefix),) if p else ()
        features = StepFeatures(b, n, p, n - p, total, a, 0, b, 0, chunks)
        first, _, _, outside = cost.price(features, n, b)
        if not outside:
            kinds.append(kind)
            times.append(first)
            kept.append((b, n, p, ctx, total, a, 1 if p else 0, prefix))
    cols = np.asarray(kept, dtype=np.float64).reshape(-1, 8)
    return StepTable(
        kind=tuple(kinds),
        num_seqs=cols[:, 0],
        num_tokens=cols[:, 1],
        num_prefill_tokens=cols[:, 2],
        context_tokens_per_seq=cols[:, 3],
        sum_context_tokens=cols[:, 4],
        prefill_attention_term=cols[:, 5],
        step_s=np.asarray(times),
        num_prefills=cols[:, 6],
        prefill_prefix_tokens=cols[:, 7],
    )


def fallback_for_tables(draft: Profile) -> tuple[str, Coefficients, FitReport]:
    """The fallback form and coefficients of a profile with attention tables, fitted to steps
    its tables price."""
    report = fit(steps_priced_by(draft))
    return report.form, report.fits[report.form].coefficients, report


def fallback_for_linear(
    tokens: list[int], seconds: list[float], attention: Coefficients
) -> tuple[str, Coefficients, FitReport]:
    """Fixed cost and token slope(s) fitted to a linear table (seed or two-regime form, by
    held-out error), with the attention coefficients of `attention` (the analytic model)."""
    n = np.asarray(tokens, dtype=np.float64)
    zeros = np.zeros_like(n)
    steps = StepTable(
        kind=("prefill",) * len(n),
        num_seqs=np.ones_like(n),
        num_tokens=n,
        num_prefill_tokens=n,
        context_tokens_per_seq=zeros,
        sum_context_tokens=zeros,
        prefill_attention_term=zeros,
        step_s=np.asarray(seconds, dtype=np.float64),
    )
    report = fit(steps, forms=("seed", "two_regime"))
    c = report.fits[report.form].coefficients
    merged = c.model_copy(
        update={
            "t_kv_s_per_token": attention.t_kv_s_per_token,
            "t_attn_s_per_token2": attention.t_attn_s_per_token2,
        }
    )
    return ("extended" if report.form == "seed" else report.form), merged, report


def fallback_fit_block(report: FitReport, what: str) -> dict[str, Any]:
    """The fallback's fit summary, for the table profile's provenance."""
    return fit_block(report) | {"fitted_to": what}
