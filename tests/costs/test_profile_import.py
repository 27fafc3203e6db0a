"""Table profiles made from timings: Vidur's published per-operation files (small fixtures in
their format) and calibration raw CSVs; both without torch."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scenario_factory import scenario, trace

from calibration.raw import write_raw
from calibration.table_from_raw import table_from_raw
from calibration.vidur import LINEAR_OPS, import_tree
from sim import ScenarioError, load_scenario_dict, simulate
from sim.cli.main import main
from sim.core.plan import StepFeatures
from sim.costs.catalog import HARDWARE, MODELS
from sim.costs.profile import allreduce_latency_for, allreduce_terms, load_profile
from sim.costs.table_model import TableCostModel

STATS = ("min", "max", "mean", "median", "std")
TOKENS = [1, 2, 8, 16, 64, 512, 4096]
README = """# Vidur profiling data
Published with the Vidur simulator, repository microsoft/vidur, commit 7d47513 (2024-11-19),
MIT License, Copyright (c) Microsoft Corporation. Files are gzip-compressed copies.
"""


def op_ms(op: str, n: int, tp: int) -> float:
    """A made-up median (ms) for each operation: a fixed part and a per-token part."""
    return (0.01 + 0.001 * LINEAR_OPS.index(op) + 1e-5 * n) / tp if op != "emb" else 0.02


def write_gz(path: Path, header: list[str], rows: list[list[Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def mlp_file(path: Path, model: str, tps: tuple[int, ...] = (1, 2)) -> None:
    spec = MODELS[model]
    ops = ("emb", *LINEAR_OPS)
    header = [f"time_stats.{op}.{s}" for op in ops for s in STATS]
    header += ["n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size"]
    header += ["use_gated_mlp", "num_tokens", "num_tensor_parallel_workers"]
    rows = []
    for tp in tps:
        for n in TOKENS:
            stats = [op_ms(op, n, tp) if s != "std" else 0.0 for op in ops for s in STATS]
            model_cols = [spec.num_attention_heads, spec.num_kv_heads, spec.hidden_size, 11008]
            rows.append([*stats, *model_cols, 32000, True, n, tp])
    write_gz(path, header, rows)


def attention_file(path: Path) -> None:
    header = [f"time_stats.attn_{k}.{s}" for k in ("prefill", "decode", "kv_cache_save")
              for s in STATS]  # fmt: skip
    header += ["n_embd", "n_q_head", "n_kv_head", "block_size", "num_tensor_parallel_workers"]
    header += ["max_model_len", "batch_size", "prefill_chunk_size", "kv_cache_size"]
    header += ["is_prefill", "attention_backend"]
    tail = [4096, 32, 32, 16, 1, 4096]
    rows = []
    for b in (1, 2, 4):
        for kv in (32, 64, 128):
            decode = 0.01 + 1e-5 * b * kv
            rows.append(["", "", "", "", "", *[decode] * 4, 0.0, *[0.004] * 4, 0.0, *tail,
                         b, 0, kv, False, "SYNTHETIC_ROOFLINE_H100"])  # fmt: skip
    for chunk in (32, 64):
        for prefix in range(0, 257, chunk):
            prefill = 0.012 + 1e-7 * chunk * (prefix + chunk / 2)
            rows.append([*[prefill] * 4, 0.0, "", "", "", "", "", *[0.005] * 4, 0.0, *tail,
                         1, chunk, prefix, True, "SYNTHETIC_ROOFLINE_H100"])  # fmt: skip
    write_gz(path, header, rows)


def allreduce_file(path: Path) -> None:
    header = ["", *[f"time_stats.all_reduce.{s}" for s in STATS], "rank", "num_workers", "size"]
    header += ["collective", "devices_per_node", "max_devices_per_node"]
    rows = []
    for i, size in enumerate([2048, 1 << 20, 1 << 26]):
        ms = 0.02 + size * 1e-9
        rows.append([i, *[ms] * 4, 0.0, 0, 2, size, "all_reduce", 2, 8])
        rows.append([i, *[9.0] * 4, 0.0, 0, 2, size, "all_reduce", 1, 8])  # across nodes
    write_gz(path, header, rows)


@pytest.fixture
def vidur_tree(tmp_path: Path) -> Path:
    root = tmp_path / "vidur"
    compute = root / "compute"
    mlp_file(compute / "a100" / "meta-llama" / "Llama-2-7b-hf" / "mlp.csv.gz", "llama-2-7b")
    mlp_file(compute / "h100" / "meta-llama" / "Llama-2-7b-hf" / "mlp.csv.gz", "llama-2-7b")
    attention_file(
        compute / "h100" / "meta-llama" / "Llama-2-7b-hf" / "attention_analytic_standin.csv.gz"
    )
    mlp_file(compute / "a40" / "meta-llama" / "Llama-2-7b-hf" / "mlp.csv.gz", "llama-2-7b")
    # a model the catalog does not have (its columns borrowed: only the folder name matters)
    mlp_file(compute / "a40" / "tiiuae" / "falcon-7b" / "mlp.csv.gz", "llama-2-7b")
    allreduce_file(root / "network" / "a100_dgx" / "all_reduce.csv.gz")
    (root / "README.md").write_text(README)
    return root


def linear_s(n: int, tp: int, layers: int = 32) -> float:
    per_layer = sum(op_ms(op, n, tp) for op in LINEAR_OPS)
    return float(f"{(layers * per_layer + op_ms('emb', n, tp)) * 1e-3:.6g}")


def test_import_sums_the_operations_and_records_provenance(
    vidur_tree: Path, tmp_path: Path
) -> None:
    written, skipped = import_tree(vidur_tree, tmp_path / "out")
    assert sorted(p.name for p in written) == [
        "llama-2-7b_a100-80g.yaml",
        "llama-2-7b_a40.yaml",
        "llama-2-7b_h100-sxm.yaml",
    ]
    assert skipped == ["a40/tiiuae/falcon-7b: not in the catalog"]
    profile = load_profile(tmp_path / "out" / "llama-2-7b_a100-80g.yaml")
    assert profile.model_form == "table" and profile.source == "imported"
    assert profile.table is not None and profile.table.decode_attention is None
    assert profile.table.linear.tokens == TOKENS
    assert profile.table.linear.seconds == [linear_s(n, 1) for n in TOKENS]
    source = profile.provenance["source"]
    assert (source["commit"], source["license"]) == ("7d47513", "MIT")
    assert source["repository"] == "microsoft/vidur"
    assert source["path"] == "compute/a100/meta-llama/Llama-2-7b-hf"
    assert len(source["files"]["mlp.csv.gz"]) == 64  # a SHA-256
    assert "emb" in profile.provenance["summed"]["linear"]
    # attention from the roofline: the coefficients keep its t_kv and t_attn
    roof = profile.provenance["attention"]["roofline"]
    assert profile.coefficients.t_kv_s_per_token == roof["t_kv_s_per_token"]


def test_import_takes_a_synthetic_attention_table_and_says_so(
    vidur_tree: Path, tmp_path: Path
) -> None:
    import_tree(vidur_tree, tmp_path, hardware="h100-sxm")
    profile = load_profile(tmp_path / "llama-2-7b_h100-sxm.yaml")
    table = profile.table
    assert table is not None and table.decode_attention is not None
    assert profile.provenance["attention"]["synthetic"] is True
    assert "SYNTHETIC" in profile.provenance["attention"]["note"]
    assert table.decode_attention.batch == [1, 2, 4]
    assert table.decode_attention.context == [32, 64, 128]
    # decode: (attn_decode + kv save) x 32 layers, in seconds
    want = (0.01 + 1e-5 * 2 * 64 + 0.004) * 32e-3
    assert table.decode_attention.seconds[1][1] == pytest.approx(want, rel=1e-6)
    prefill = table.prefill_attention
    assert prefill is not None and prefill.chunk == [32, 64] and prefill.prefix[-1] == 256
    # a prefix measured for the 32-token chunk only is filled in the 64-token row between
    # its measured neighbours (64 and 128), and the row ends where its measurements end
    row64 = prefill.seconds[1]
    at = {p: v for p, v in zip(prefill.prefix, row64, strict=True)}
    assert at[96] == pytest.approx((at[64] + at[128]) / 2, rel=1e-6)  # type: ignore[operator]
    assert at[256] is not None and all(v is not None for v in row64)
    # a decode step of 2 sequences over 64 tokens, inside the tables, prices the parts
    cost = TableCostModel(profile)
    first, _ = cost.run_times(StepFeatures(2, 2, 0, 2, 2 * 65, 0, 0, 2, 0, ()))
    assert first == pytest.approx(linear_s(2, 1) + table.decode_attention.seconds[1][1], rel=1e-12)
    assert not cost.last_extrapolated


def test_tensor_parallel_adds_the_measured_all_reduces(vidur_tree: Path, tmp_path: Path) -> None:
    import_tree(vidur_tree, tmp_path, hardware="a100-80g", tensor_parallel=2)
    profile = load_profile(tmp_path / "llama-2-7b_a100-80g_tp2.yaml")
    assert profile.table is not None
    xs, ys = [2048, 1 << 20, 1 << 26], [(0.02 + s * 1e-9) * 1e-3 for s in (2048, 1 << 20, 1 << 26)]
    for n, got in zip(TOKENS, profile.table.linear.seconds, strict=True):
        allreduce = float(np.interp(n * 4096 * 2, xs, ys))
        assert got == pytest.approx(linear_s(n, 2) + 2 * 32 * allreduce, rel=1e-5), n
    assert "all-reduces" in profile.provenance["summed"]["allreduce"]


def test_without_measured_collectives_the_all_reduces_are_the_rooflines_and_say_so(
    vidur_tree: Path, tmp_path: Path
) -> None:
    # the tree has all-reduce timings for A100 nodes only, like Vidur's (none for the A40)
    import_tree(vidur_tree, tmp_path, hardware="a40", tensor_parallel=2)
    profile = load_profile(tmp_path / "llama-2-7b_a40_tp2.yaml")
    assert profile.table is not None
    a40 = HARDWARE["a40"].with_tensor_parallel(2)
    per_step, per_token = allreduce_terms(MODELS["llama-2-7b"], a40)
    # two per layer, each at the nearest measured GPU's (A100 DGX) small-message latency
    assert per_step == 2 * 32 * allreduce_latency_for(a40)[0] == 2 * 32 * 46.0e-6
    for n, got in zip(TOKENS, profile.table.linear.seconds, strict=True):
        assert got == pytest.approx(linear_s(n, 2) + per_step + per_token * n, rel=1e-5), n
    allreduce = profile.provenance["source"]["allreduce"]
    assert (
        allreduce["analytic"] is True
        and allreduce["missing"] == "network/a40_dgx/all_reduce.csv.gz"
    )
    assert "ANALYTIC" in profile.provenance["summed"]["allreduce"]
    assert "ANALYTIC" in profile.table.notes["allreduce"]


def test_import_errors_are_clear(vidur_tree: Path, tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="not a Vidur"):
        import_tree(tmp_path / "nothing", tmp_path)
    with pytest.raises(ScenarioError, match="no Vidur timings of llama-3-8b"):
        import_tree(vidur_tree, tmp_path, model="llama-3-8b")
    with pytest.raises(ScenarioError, match="no rows for 4 tensor-parallel"):
        import_tree(vidur_tree, tmp_path, hardware="a100-80g", tensor_parallel=4)


def test_profile_import_command_and_a_simulation(vidur_tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "profiles"
    assert (
        main(["profile", "import", str(vidur_tree), "--out", str(out), "--hardware", "h100-sxm"])
        == 0
    )
    imported = scenario(
        seed=0,  # the schema's default: the scenario sets none
        workload=trace(tmp_path, [(0, 100, 20), (0.01, 200, 20)]),
        hardware="h100-sxm",
        profile=str(out / "llama-2-7b_h100-sxm.yaml"),
    )
    res = simulate(load_scenario_dict(imported, base_dir=tmp_path))
    assert res.requests["finish_s"].notna().all()


# -- raw CSV -> table profile ----------------------------------------------------------------


def lin(n: float) -> float:
    return 0.005 + 1e-5 * n + (2e-4 if n > 64 else 0.0)  # a tile jump above 64 tokens


def dec(b: float, ctx: float) -> float:
    return 1e-5 + 2e-8 * b * ctx + 1e-6 * b


def pre(c: float, p: float) -> float:
    return 2e-5 + 1e-9 * c * (p + c / 2)


def raw_rows(with_linear: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def add(kind: str, b: int, n: int, p: int, ctx: int, step: float, **extra: Any) -> None:
        rows.append({"kind": kind, "num_seqs": b, "num_tokens": n, "num_prefill_tokens": p,
                     "context_tokens_per_seq": ctx, "sum_context_tokens": 0,
                     "prefill_attention_term": 0, "step_s": step, "step_s_p10": step,
                     "step_s_p90": step, "repeats": 3} | extra)  # fmt: skip

    for b in (1, 4, 16, 64):
        for ctx in (128, 512, 2048):
            add("decode", b, b, 0, ctx, lin(b) + dec(b, ctx), sum_context_tokens=b * (ctx + 1))
    for c in (64, 256, 1024):
        for p in (0, 512):
            add("prefill", 1, c, c, 0, lin(c) + pre(c, p), num_prefills=1,
                prefill_prefix_tokens=p, sum_context_tokens=p + c,
                prefill_attention_term=c * (p + c))  # fmt: skip
    # a mixed step and a prefill of two prompts: composed from the parts
    add("mixed", 5, 260, 256, 512, lin(260) + dec(4, 512) + pre(256, 0), num_prefills=1,
        sum_context_tokens=4 * 513 + 256, prefill_attention_term=256 * 256)  # fmt: skip
    add("prefill", 2, 512, 512, 0, lin(512) + 2 * pre(256, 0), num_prefills=2,
        sum_context_tokens=512, prefill_attention_term=2 * 256 * 256)  # fmt: skip
    if with_linear:
        for n in (1, 4, 16, 64, 65, 256, 260, 512, 1024):
            add("linear", 1, n, n, 0, lin(n))
    return rows


@pytest.mark.parametrize("with_linear", [True, False], ids=["linear-rows", "fitted-linear"])
def test_a_raw_csv_becomes_a_table_without_a_fit(tmp_path: Path, with_linear: bool) -> None:
    raw = tmp_path / "raw.csv"
    write_raw(raw, raw_rows(with_linear), {"device": {"name": "synthetic"}})
    outcome = table_from_raw(raw, tmp_path / "t")
    profile = load_profile(outcome.profile_path)
    assert profile == outcome.profile and profile.model_form == "table"
    assert profile.fit is not None and profile.fit.num_points == 12 + 6 + 2
    # every decode and one-prompt prefill step is a grid point, reproduced
    assert outcome.on_grid.sum() == 18
    assert np.all(outcome.errors[outcome.on_grid] < 1e-12)
    if with_linear:
        # the parts add up: the composed steps are right too (up to the CSV's 6 digits)
        assert np.all(outcome.errors < 1e-5)
        assert profile.table is not None and 65 in profile.table.linear.tokens
    assert "measured_with" not in profile.provenance  # no benchmark metadata here
    assert profile.provenance["generator"].startswith("batchsim profile table")


def test_profile_table_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = tmp_path / "raw.csv"
    write_raw(raw, raw_rows(True), {"device": {"name": "synthetic"}})
    assert main(["profile", "table", str(raw), "--out", str(tmp_path / "p")]) == 0
    assert "on the grids" in capsys.readouterr().out
    assert load_profile(tmp_path / "p" / "profile.yaml").name == "p"


REPO = Path(__file__).resolve().parents[2]
COMMITTED = sorted((REPO / "calibration" / "profiles" / "imported" / "vidur").glob("*.yaml"))


def test_committed_imported_profiles_load_and_say_where_they_come_from() -> None:
    assert [p.name for p in COMMITTED] == [  # every model and GPU Vidur timed
        "codellama-34b_a100-80g.yaml",
        "codellama-34b_a40_tp2.yaml",
        "codellama-34b_h100-sxm.yaml",
        "llama-2-70b_a100-80g_tp2.yaml",
        "llama-2-70b_a40_tp4.yaml",
        "llama-2-70b_h100-sxm_tp2.yaml",
        "llama-2-7b_a100-80g.yaml",
        "llama-2-7b_a40.yaml",
        "llama-2-7b_h100-sxm.yaml",
        "llama-3-70b_a100-80g_tp2.yaml",
        "llama-3-8b_a100-80g.yaml",
    ]
    for path in COMMITTED:
        profile = load_profile(path)
        assert profile.model_form == "table" and profile.source == "imported"
        source = profile.provenance["source"]
        assert (source["commit"], source["license"]) == ("7d47513", "MIT"), path.name
        synthetic = profile.provenance["attention"].get("synthetic", False)
        assert synthetic == (path.name == "llama-2-7b_h100-sxm.yaml"), path.name
        cost = TableCostModel(profile)
        first, _ = cost.run_times(StepFeatures(8, 8, 0, 8, 8 * 513, 0, 0, 8, 0, ()))
        assert 0.004 < first < 0.1 and not cost.last_extrapolated, path.name


def test_roofline_comparison_table(vidur_tree: Path, tmp_path: Path) -> None:
    from calibration.compare import markdown

    import_tree(vidur_tree, tmp_path, hardware="a100-80g")
    text = markdown([tmp_path / "llama-2-7b_a100-80g.yaml"], None)
    header, _, row = text.splitlines()
    assert "fixed (1 token)" in header and row.count("x**") == 3
