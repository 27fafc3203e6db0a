"""The calibration fit and CSV readers (numpy only, no torch): exact recovery, noise, selection,
clear errors for bad timings, profiles that load and drive a simulation, and `batchsim fit`."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from scenario_factory import scenario, trace

from calibration.fit import fit, fit_form, nnls
from calibration.raw import RAW_COLUMNS, StepTable, read_steps, write_raw
from calibration.report import fit_timings
from sim import ScenarioError, load_scenario_dict, simulate
from sim.cli.main import main
from sim.costs.cost_model import CostModel
from sim.costs.profile import Coefficients, Profile, load_profile

TRUE = {
    "seed": Coefficients(t_mem_s=0.01, t_flop_s_per_token=6e-5),
    "extended": Coefficients(
        t_mem_s=0.01, t_flop_s_per_token=6e-5, t_kv_s_per_token=3e-7, t_attn_s_per_token2=2e-9
    ),
    "two_regime": Coefficients(
        t_mem_s=0.01,
        t_flop_s_per_token=2e-5,
        t_kv_s_per_token=3e-7,
        t_attn_s_per_token2=2e-9,
        ridge_tokens=256,
        t_flop_high_s_per_token=8e-5,
    ),
}


def shapes() -> list[dict[str, float]]:
    """Decode, prefill and mixed step shapes, counted as the simulator counts them."""
    rows = []
    for context in (128, 512, 2048):
        for b in (1, 2, 4, 8, 16, 32, 64, 128, 256):
            rows.append(dict(kind="decode", b=b, n=b, p=0, L=context, ctx=b * (context + 1), a=0))
    for prompts in (1, 4):
        for p in (128, 256, 512, 1024, 2048, 4096):
            c = p // prompts
            rows.append(dict(kind="prefill", b=prompts, n=p, p=p, L=0, ctx=p, a=prompts * c * c))
    for chunk, b, context in ((256, 32, 1024), (512, 64, 512), (1024, 16, 2048)):
        ctx = b * (context + 1) + chunk
        rows.append(
            dict(kind="mixed", b=b + 1, n=chunk + b, p=chunk, L=context, ctx=ctx, a=chunk**2)
        )
    return rows


def table_for(c: Coefficients, form: str, noise: float = 0.0, seed: int = 0) -> StepTable:
    cost = CostModel(Profile(schema_version=1, name="t", source="inline", model_form=form,
                             coefficients=c))  # fmt: skip
    rows = shapes()
    step = np.array([cost.step_time(int(r["n"]), int(r["ctx"]), int(r["a"])) for r in rows])
    step *= 1 + noise * np.random.default_rng(seed).standard_normal(len(step))
    col = {k: np.array([float(r[k]) for r in rows]) for k in ("b", "n", "p", "L", "ctx", "a")}
    return StepTable(
        kind=tuple(str(r["kind"]) for r in rows),
        num_seqs=col["b"],
        num_tokens=col["n"],
        num_prefill_tokens=col["p"],
        context_tokens_per_seq=col["L"],
        sum_context_tokens=col["ctx"],
        prefill_attention_term=col["a"],
        step_s=step,
    )


def write_table(path: Path, table: StepTable) -> Path:
    rows = [
        {
            "kind": table.kind[i],
            "num_seqs": int(table.num_seqs[i]),
            "num_tokens": int(table.num_tokens[i]),
            "num_prefill_tokens": int(table.num_prefill_tokens[i]),
            "context_tokens_per_seq": int(table.context_tokens_per_seq[i]),
            "sum_context_tokens": int(table.sum_context_tokens[i]),
            "prefill_attention_term": int(table.prefill_attention_term[i]),
            "step_s": float(table.step_s[i]),
            "step_s_p10": float(table.step_s[i]),
            "step_s_p90": float(table.step_s[i]),
            "repeats": 1,
        }
        for i in range(len(table))
    ]
    write_raw(path, rows, {"device": {"name": "synthetic"}})
    return path


@pytest.mark.parametrize("form", ["seed", "extended", "two_regime"])
def test_exact_timings_give_back_the_coefficients(form: str) -> None:
    table = table_for(TRUE[form], form)
    got = fit_form(table, form, np.ones(len(table), dtype=bool)).model_dump()
    for key, want in TRUE[form].model_dump(exclude_none=True).items():
        assert got[key] == pytest.approx(want, rel=1e-6, abs=1e-15), key


@pytest.mark.parametrize("form", ["seed", "extended", "two_regime"])
def test_selection_picks_the_form_that_made_the_timings(form: str) -> None:
    report = fit(table_for(TRUE[form], form))
    assert report.form == form
    assert report.fits[form].max_rel_error < 1e-9
    assert report.fits[form].r2 == pytest.approx(1.0)
    assert report.num_heldout == len(shapes()) // 5


def test_two_percent_noise_gives_small_errors() -> None:
    table = table_for(TRUE["extended"], "extended", noise=0.02, seed=3)
    report = fit(table, forms=("seed", "extended"))
    assert report.form == "extended"
    got = report.fits["extended"].coefficients
    assert got.t_mem_s == pytest.approx(0.01, rel=0.03)
    assert got.t_flop_s_per_token == pytest.approx(6e-5, rel=0.1)
    assert got.t_kv_s_per_token == pytest.approx(3e-7, rel=0.1)
    assert report.fits["extended"].max_rel_error < 0.08
    assert report.fits["extended"].heldout_max_rel_error is not None
    assert report.fits["extended"].heldout_max_rel_error < 0.08


def test_nnls_keeps_coefficients_non_negative() -> None:
    a = np.column_stack([np.ones(5), np.arange(5.0)])
    x = nnls(a, 3.0 - 0.5 * np.arange(5.0))  # the unconstrained slope would be -0.5
    assert x[1] == 0.0
    assert x[0] == pytest.approx(2.0)  # the best constant once the slope is held at zero


def test_reference_and_external_formats(tmp_path: Path) -> None:
    ref = tmp_path / "ref.csv"
    ref.write_text(
        "gpu,model,kind,num_seqs,num_tokens,context_tokens_per_seq,sum_context_tokens,step_s\n"
        "g,m1,decode,4,4,512,2048,0.01\n"
        "g,m1,decode,8,8,512,4096,\n"
        "g,m2,decode,8,8,512,4096,0.02\n"
        "g,m1,prefill,1,128,0,0,0.012\n"
    )
    with pytest.raises(ScenarioError, match=r"several models.*--filter model=m1"):
        read_steps(ref)
    table = read_steps(ref, ["model=m1"])
    assert table.kind == ("decode", "prefill")
    # recomputed as the simulator counts: context after the step, attention over the prompt
    assert table.sum_context_tokens.tolist() == [4 * 513, 128]
    assert table.prefill_attention_term.tolist() == [0, 128 * 128]
    assert table.notes == ("skipped 1 row(s) without step_s: lines [3]",)
    ext = tmp_path / "ext.csv"
    ext.write_text("num_seqs,num_tokens,sum_context_tokens,step_s\n8,8,4104,0.011\n")
    table = read_steps(ext)
    assert table.kind == ("decode",) and table.context_tokens_per_seq.tolist() == [512]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty file"),
        ("num_seqs,step_s\n1,0.1\n", "header: missing column.*num_tokens, sum_context_tokens"),
        (
            "num_seqs,num_tokens,sum_context_tokens,step_s\n1,1,10,fast\n",
            "line 2: step_s must be a",
        ),
        ("num_seqs,num_tokens,sum_context_tokens,step_s\n1,1,10,0.1\n2,2,2,0\n", "line 3: step_s"),
        ("num_seqs,num_tokens,sum_context_tokens,step_s\n1,1,10,-1\n", "line 2: step_s must be >="),
        ("num_seqs,num_tokens,sum_context_tokens,step_s\n1,1,10,\n", "no timed rows"),
    ],
)
def test_bad_timings_are_clear_errors(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=match) as info:
        read_steps(path)
    assert info.value.file == str(path)


def test_fitted_profile_loads_and_drives_a_simulation(tmp_path: Path) -> None:
    raw = write_table(tmp_path / "raw.csv", table_for(TRUE["extended"], "extended"))
    outcome = fit_timings(raw, tmp_path / "prof", plot=False)
    profile = load_profile(outcome.profile_path)
    assert profile == outcome.profile
    assert profile.source == "measured" and profile.model_form == "extended"
    assert profile.provenance["device"] == {"name": "synthetic"}
    assert profile.fit is not None and profile.fit.num_points == len(shapes())
    # seed 0 is the schema's default: the scenario sets none
    fitted = scenario(seed=0, workload=trace(tmp_path, [(0, 100, 3)]), profile="prof/profile.yaml")
    results = simulate(load_scenario_dict(fitted, base_dir=tmp_path))
    [ttft_s] = results.requests["ttft_s"].tolist()
    c = TRUE["extended"]
    prefill = c.t_mem_s + 100 * c.t_flop_s_per_token + 100 * 3e-7 + 100 * 100 * 2e-9
    assert ttft_s == pytest.approx(prefill, rel=1e-6)


def test_fit_command_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = write_table(tmp_path / "raw.csv", table_for(TRUE["two_regime"], "two_regime"))
    assert main(["fit", str(raw), "--out", str(tmp_path / "p"), "--model", "llama-3-8b"]) == 0
    assert "<- chosen" in capsys.readouterr().out
    profile = load_profile(tmp_path / "p" / "profile.yaml")
    assert profile.model_form == "two_regime" and profile.name == "p"
    assert profile.coefficients.ridge_tokens == 256
    assert (tmp_path / "p" / "fit.png").stat().st_size > 0
    bad = tmp_path / "bad.csv"
    bad.write_text(",".join(RAW_COLUMNS) + "\n")
    assert main(["fit", str(bad), "--out", str(tmp_path / "q")]) == 2
    assert "no timed rows" in capsys.readouterr().err


def test_calibrate_without_torch_is_a_user_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    for name in ("calibration.calibrate", "calibration.bench", "calibration.bench_model"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    code = main(["calibrate", "--model", "llama-3-8b", "--device", "cpu", "--out", str(tmp_path)])
    assert code == 2
    assert "torch is not installed" in capsys.readouterr().err
