"""The PyTorch microbenchmark on CPU: a tiny model on a tiny grid in seconds, sane timings, model
dimensions that match the catalog, grid points counted as the simulator counts steps, and
`batchsim calibrate` end to end."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from calibration.bench import Bench
from calibration.bench_model import TINY, dims_for
from calibration.calibrate import run_calibration
from calibration.grid import Point, preset
from calibration.raw import read_meta, read_steps
from sim.cli.main import main
from sim.costs.catalog import MODELS
from sim.costs.profile import load_profile


@pytest.mark.parametrize("name", ["llama-2-7b", "llama-3-8b", "mistral-7b"])
def test_model_dimensions_add_up_to_the_catalog_parameter_count(name: str) -> None:
    assert dims_for(name).num_parameters() == MODELS[name].num_parameters


def test_points_count_features_as_the_simulator_does() -> None:
    mixed = Point("mixed", num_decodes=4, context=64, chunk=32).features()
    # the prefill chunk reads its own 32 tokens; each decode reads its cache plus its new token
    assert mixed["num_seqs"] == 5 and mixed["num_tokens"] == 36
    assert mixed["sum_context_tokens"] == 4 * 65 + 32
    assert mixed["prefill_attention_term"] == 32 * 32
    split = Point("prefill", chunk=256, prompts=4).features()
    assert split["prefill_attention_term"] == 4 * 64 * 64


def test_tiny_model_benchmark_on_cpu(tmp_path: Path) -> None:
    outcome = run_calibration("llama-tiny-test", "cpu", "fp32", preset("tiny"), tmp_path)
    table = read_steps(tmp_path / "raw.csv")
    assert len(table) == len(preset("tiny").points())
    assert set(table.kind) == {"decode", "prefill", "mixed"}
    assert (table.step_s > 0).all()

    # each row's step features are those the simulator prices (timings themselves are not
    # compared: on a shared CI machine one slow repeat can reorder any two points; the speed
    # of the model is what the benchmark reports, not what a test asserts)
    decodes = table.num_prefill_tokens == 0
    assert (table.num_tokens[decodes] == table.num_seqs[decodes]).all()
    expected = table.num_seqs * (table.context_tokens_per_seq + 1)
    assert (table.sum_context_tokens[decodes] == expected[decodes]).all()
    meta = read_meta(tmp_path / "raw.csv")
    assert meta["layers_timed"] == 2 and meta["model"]["hidden_size"] == TINY.hidden_size
    assert meta["device"]["probes"]["bandwidth_gb_per_s"] > 0
    profile = load_profile(outcome.profile_path)
    assert profile.source == "measured"
    assert profile.provenance["torch_version"] == meta["torch_version"]
    assert (tmp_path / "fit.png").is_file()


def test_points_that_cannot_fit_are_reported() -> None:
    import torch

    bench = Bench(TINY, preset("tiny"), "cpu", torch.float32)
    # a petabyte of KV cache: no device holds it, so the point is skipped with the sizes
    reason = bench.skip_reason(Point("decode", num_decodes=256, context=10**12))
    assert reason is not None and "GiB" in reason
    assert bench.skip_reason(Point("decode", num_decodes=1, context=16)) is None


def test_calibrate_command_on_cpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tiny"
    args = ["calibrate", "--model", "llama-tiny-test", "--device", "cpu", "--grid", "tiny"]
    assert main([*args, "--repeats", "2", "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    assert load_profile(out / "profile.yaml").name == "tiny"
    assert main(["calibrate", "--model", "gpt-9", "--device", "cpu", "--out", str(out)]) == 2
    assert "unknown model 'gpt-9'" in capsys.readouterr().err


def test_table_grid_points_count_chunk_shapes() -> None:
    chunk = Point("prefill", chunk=64, prefix=192).features()
    assert chunk["sum_context_tokens"] == 256 and chunk["prefill_attention_term"] == 64 * 256
    assert (chunk["num_prefills"], chunk["prefill_prefix_tokens"]) == (1, 192)
    linear = Point("linear", chunk=40).features()
    assert (linear["num_seqs"], linear["num_tokens"], linear["sum_context_tokens"]) == (1, 40, 0)
    grid = preset("tables", max_context=4096)
    kinds = [p.kind for p in grid.points()]
    assert kinds.count("linear") == 3 + 256 + 48  # 1, 2, 4, every 8 to 2048, every 128 to 8192
    assert all(p.chunk + p.prefix <= 4096 for p in grid.points() if p.prefix)


def test_gpu_tables_entry_on_cpu(tmp_path: Path) -> None:
    import torch

    from calibration.gpu_tables import main as gpu_tables

    # CPU timings share the machine with the other test workers: one torch thread (no
    # oversubscription of the cores) and the median of 7 repeats keep a stall from turning a
    # derived attention cell negative
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        code = gpu_tables(["--model", "llama-tiny-test", "--device", "cpu", "--dtype", "fp32",
                           "--grid", "tiny-tables", "--repeats", "7",
                           "--out", str(tmp_path)])  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    assert code == 0
    raw = read_steps(tmp_path / "tables.csv", keep_linear=True)
    assert set(raw.kind) == {"linear", "decode", "prefill", "mixed"}
    assert len(raw) == len(preset("tiny-tables").points())
    profile = load_profile(tmp_path / "table.yaml")
    assert profile.model_form == "table" and profile.source == "measured"
    assert profile.table is not None and profile.table.linear.tokens == [1, 4, 8, 16, 32, 64, 96]
    prefill = profile.table.prefill_attention
    assert prefill is not None and prefill.prefix == [0, 64]
    assert profile.provenance["measured_with"].startswith("batchsim calibrate")
    assert profile.fit is not None and profile.fit.model_extra["on_grid_max_rel_error"] < 1e-9
