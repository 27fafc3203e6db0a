"""The split form (prompt and decode slopes, a per-sequence term, causal attention by chunk shape)
recovered from synthetic timings; row weights; range filters."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from calibration.filters import parse_filter, parse_weight
from calibration.fit import fit, fit_form
from calibration.raw import StepTable, read_steps, write_raw
from sim import ScenarioError
from sim.core.plan import StepFeatures
from sim.costs.cost_model import CostModel
from sim.costs.profile import Coefficients, Profile

SPLIT = Coefficients(
    t_mem_s=0.006,
    t_flop_s_per_token=5e-5,
    t_decode_s_per_token=2e-5,
    t_seq_s_per_seq=4e-5,
    t_kv_s_per_token=1e-7,
    t_attn_s_per_pair=3e-9,
)


def shapes() -> list[tuple[str, int, int, int, int, int, int]]:
    """(kind, decodes, context, chunk per prompt, prompts, prefix) step shapes."""
    out = []
    for ctx in (128, 1024, 4096):
        for b in (1, 4, 16, 64, 256):
            out.append(("decode", b, ctx, 0, 0, 0))
    for prompts in (1, 4):
        for chunk in (128, 512, 2048):
            for prefix in (0, 1024, 4096):
                out.append(("prefill", 0, 0, chunk, prompts, prefix))
    for chunk, b, ctx in ((256, 32, 1024), (512, 8, 2048), (1024, 64, 512)):
        out.append(("mixed", b, ctx, chunk, 1, 512))
    return [(k, b, ctx, c, n, p, 0) for k, b, ctx, c, n, p in out]


def table_of(c: Coefficients, noise: float = 0.0) -> StepTable:
    """The shapes priced by the cost model itself, as a StepTable the fit reads."""
    cost = CostModel(Profile(schema_version=1, name="t", source="inline", model_form="split",
                             coefficients=c))  # fmt: skip
    cols: dict[str, list[float]] = {k: [] for k in ("b", "n", "p", "L", "ctx", "a", "k", "pre")}
    kinds, times = [], []
    for kind, b, ctx, chunk, prompts, prefix, _ in shapes():
        p = chunk * prompts
        chunks = ((chunk, prefix),) * prompts
        total = b * (ctx + 1) + prompts * (prefix + chunk)
        term = prompts * chunk * (prefix + chunk)
        features = StepFeatures(b + prompts, b + p, p, b, total, term, 0, b + prompts, 0, chunks)
        times.append(cost.run_times(features)[0])
        kinds.append(kind)
        for key, value in zip(cols, (b + prompts, b + p, p, ctx, total, term, prompts, prefix),
                              strict=True):  # fmt: skip
            cols[key].append(float(value))
    step = np.asarray(times) * (1 + noise * np.random.default_rng(1).standard_normal(len(times)))
    arr = {k: np.asarray(v) for k, v in cols.items()}
    return StepTable(
        kind=tuple(kinds), num_seqs=arr["b"], num_tokens=arr["n"], num_prefill_tokens=arr["p"],
        context_tokens_per_seq=arr["L"], sum_context_tokens=arr["ctx"],
        prefill_attention_term=arr["a"], step_s=step, num_prefills=arr["k"],
        prefill_prefix_tokens=arr["pre"],
    )  # fmt: skip


def test_split_form_is_recovered_and_chosen() -> None:
    table = table_of(SPLIT)
    got = fit_form(table, "split", np.ones(len(table), dtype=bool))
    for key, want in SPLIT.model_dump(exclude_none=True).items():
        assert getattr(got, key) == pytest.approx(want, rel=1e-6, abs=1e-15), key
    report = fit(table)
    assert report.form == "split"
    assert report.fits["split"].max_rel_error < 1e-9
    assert report.fits["extended"].heldout_max_rel_error > 0.01  # one slope cannot do it


def test_split_form_with_noise() -> None:
    report = fit(table_of(SPLIT, noise=0.01))
    assert report.form == "split"
    c = report.fits["split"].coefficients
    assert c.t_mem_s == pytest.approx(0.006, rel=0.05)
    assert c.t_flop_s_per_token == pytest.approx(5e-5, rel=0.05)
    assert c.t_attn_s_per_pair == pytest.approx(3e-9, rel=0.1)


def test_causal_pairs_follow_the_chunk_shape() -> None:
    table = table_of(SPLIT)
    # a chunk of c after p cached tokens scores c * (p + c / 2) pairs; the old attention term
    # c * (p + c) does not tell a chunk late in a long prompt from a whole short prompt
    i = next(j for j, s in enumerate(shapes()) if s[0] == "prefill" and s[3:6] == (512, 4, 1024))
    assert table.causal_pairs[i] == 4 * 512 * (1024 + 256)
    assert table.prefill_attention_term[i] == 4 * 512 * (1024 + 512)


def test_row_weights_leave_out_or_favour_rows() -> None:
    table = table_of(SPLIT)
    corrupted = table.step_s.copy()
    corrupted[:3] *= 3.0  # three decode rows measured badly
    weight = np.ones(len(table))
    weight[:3] = 0.0
    bad = StepTable(**{**table.__dict__, "step_s": corrupted, "weight": weight})
    report = fit(bad)
    assert report.form == "split"
    got = report.fits["split"].coefficients
    assert got.t_mem_s == pytest.approx(SPLIT.t_mem_s, rel=1e-6)
    unweighted = fit(StepTable(**{**table.__dict__, "step_s": corrupted}))
    assert unweighted.fits["split"].coefficients.t_mem_s != pytest.approx(SPLIT.t_mem_s, rel=1e-3)


def test_range_filters_and_weights_in_the_reader(tmp_path: Path) -> None:
    rows = [
        {"kind": "decode", "num_seqs": b, "num_tokens": b, "num_prefill_tokens": 0,
         "context_tokens_per_seq": 100, "sum_context_tokens": b * 101,
         "prefill_attention_term": 0, "step_s": 0.01 + b * 1e-5, "step_s_p10": 0.01,
         "step_s_p90": 0.01, "repeats": 3}
        for b in (1, 8, 64, 512)
    ]  # fmt: skip
    raw = tmp_path / "raw.csv"
    write_raw(raw, rows, {})
    assert read_steps(raw, ["num_seqs<=64"]).num_seqs.tolist() == [1, 8, 64]
    assert read_steps(raw, ["num_seqs>8", "num_seqs!=512"]).num_seqs.tolist() == [64]
    assert read_steps(raw, ["num_seqs=8.0"]).num_seqs.tolist() == [8]
    assert read_steps(raw, ["kind=decode"]).num_seqs.tolist() == [1, 8, 64, 512]
    weighted = read_steps(raw, weights=["num_seqs>=64:0.5", "num_seqs=512:4"])
    assert weighted.weights.tolist() == [1, 1, 0.5, 2]
    with pytest.raises(ScenarioError, match="needs a number"):
        parse_filter("kind<decode")
    with pytest.raises(ScenarioError, match="COLUMN=VALUE"):
        parse_filter("num_seqs")
    with pytest.raises(ScenarioError, match="FILTER:W"):
        parse_weight("kind=decode")
    with pytest.raises(ScenarioError, match="no column 'gpu'"):
        read_steps(raw, ["gpu=a100"])
    assert parse_filter("num_tokens >= 4096").op == ">="
