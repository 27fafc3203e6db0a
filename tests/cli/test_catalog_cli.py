"""`batchsim catalog`: both tables, a pair's KV capacity, and bad input as exit code 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sim.cli.main import main
from sim.costs.catalog import HARDWARE, MODELS


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["catalog", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_lists_every_model_and_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys)
    assert (code, err) == (0, "")
    for name in [*MODELS, *HARDWARE]:
        assert f" {name} " in out or f"\n{name} " in out, name
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    # model row: params_B active_B layers heads kv_heads head_dim weights kv GiB KV B/token len
    assert lines["mixtral-8x7b"][1:7] == ["46.7", "12.9", "32", "32", "8", "128"]
    assert lines["qwen2.5-7b"][-2:] == ["57344", "32768"]
    # GPU row: memory GiB, HBM TB/s, bf16, fp8 and fp4 TFLOP/s, link GB/s, scale-up domain,
    # $/GPU-h, TDP and idle W
    assert lines["h100-sxm"][1:] == [
        "79.6", "3.4", "989.0", "1,979.0", "-", "900.0", "8", "2.99", "700.0", "140.0"
    ]  # fmt: skip
    assert lines["a100-80g"][4] == "-"  # no fp8
    assert lines["gb200"][5] == "10,000.0" and lines["gb200"][7] == "72"  # fp4, NVL72
    # a mixture of experts: routed experts / per token + shared, and the experts' dtype
    assert lines["deepseek-v3"][7:10] == ["fp8", "256/8+1", "bf16"]
    assert lines["gpt-oss-120b"][7] == "bf16+mxfp4"
    assert "KV capacity" not in out  # only with --model or --hardware


def test_pair_capacity_with_tensor_parallel(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--model", "llama-3-70b", "--hardware", "h100-sxm",
                       "--tensor-parallel", "4")  # fmt: skip
    assert code == 0
    row = out.strip().splitlines()[-1].split()
    # model gpu tp gpus usable_GiB weights_GiB kv_bytes/token kv_tokens blocks_of_16 max_len
    assert row == ["llama-3-70b", "h100-sxm", "4", "4", "286.7", "131.4", "327680", "495826",
                   "30989", "60"]  # fmt: skip


def test_data_parallel_ranks_each_keep_the_dense_weights(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "--model", "deepseek-v3", "--hardware", "h200",
                       "--data-parallel", "8", "--expert-parallel")  # fmt: skip
    assert code == 0
    row = out.strip().splitlines()[-1].split()
    model = MODELS["deepseek-v3"]
    stored = (model.weight_bytes + 7 * model.dense_weight_bytes) / 2**30
    assert row[:4] == ["deepseek-v3", "h200", "1", "8"]
    assert row[5] == f"{stored:,.1f}"
    code, _, err = run(capsys, "--model", "llama-3-70b", "--hardware", "h100-sxm",
                       "--data-parallel", "2")  # fmt: skip
    assert code == 2 and "--data-parallel needs a mixture-of-experts model" in err


def test_one_model_on_every_gpu_with_fp8_kv(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--model", "llama-3-8b", "--kv-dtype", "fp8")
    assert code == 0
    rows = {r.split()[1]: r.split() for r in out.splitlines() if r.startswith("llama-3-8b ")}
    assert rows["h100-sxm"][6:8] == ["65536", "913001"]  # twice the bf16 456,500 (+1 floor)
    code, out, _ = run(capsys, "--hardware", "a100-80g")
    lines = {r.split()[0]: r for r in out.splitlines()[-len(MODELS) :]}
    assert lines["llama-3-70b"].endswith("too big; fits at tp 2")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--model", "nope"], "--model: unknown model 'nope' (known: llama-2-7b"),
        (["--hardware", "a100"], "--hardware: unknown hardware 'a100'"),
        (
            ["--model", "llama-3-70b", "--hardware", "h100-sxm"],
            "--model: llama-3-70b does not fit on one h100-sxm: weights 131.4 GiB",
        ),
        (
            ["--model", "qwen2.5-72b", "--hardware", "l40s", "--tensor-parallel", "2"],
            "usable memory 81.0 GiB (2 x 45.0 GiB x gpu_memory_utilization 0.9); "
            "--tensor-parallel 4 would fit",
        ),
        (
            ["--model", "qwen2.5-7b", "--hardware", "h100-sxm", "--tensor-parallel", "8"],
            "--tensor-parallel: the degree (8) must divide qwen2.5-7b's num_attention_heads (28)",
        ),
        (["--tensor-parallel", "0"], "--tensor-parallel: 0 must be from 1 to 1024"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("batchsim: error: ") and err.count("\n") == 1
    assert expected in err


def test_console_entry_point() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sim", "catalog", "--hardware", "b200", "--weight-dtype", "int4"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "int4" in done.stdout and "KV capacity" in done.stdout


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly() -> None:
    """`batchsim catalog | head -1`: the reader is gone before the table is written; the
    command stops with no traceback (it used to end in BrokenPipeError)."""
    child = subprocess.Popen([sys.executable, "-m", "sim", "catalog"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)  # fmt: skip
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()
    err = child.stderr.read().decode()
    assert child.wait(timeout=60) == 0
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_a_config_json_shows_its_figures_and_what_it_leaves_out(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from sim.costs.catalog_models import CONFIGS_DIR

    folder = tmp_path / "Kimi-K2-Instruct"
    folder.mkdir()
    (folder / "config.json").write_text((CONFIGS_DIR / "kimi-k2.json").read_text())
    code, out, err = run(capsys, "--model", str(folder), "--hardware", "b300",
                         "--tensor-parallel", "8")  # fmt: skip
    assert (code, err) == (0, "")
    assert out.startswith("Kimi-K2-Instruct: not priced: rope_scaling yarn x32")
    rows: dict[str, list[str]] = {}  # each name's first row: the model table's
    for line in out.splitlines()[1:]:
        if line.strip():
            rows.setdefault(line.split()[0], line.split())
    # the catalog's Kimi-K2, read from the same file: 1,026.4B parameters, 32.9B active, fp8
    assert rows["Kimi-K2-Instruct"][1:3] == ["1,026.4", "32.9"]
    assert rows["Kimi-K2-Instruct"][7:9] == ["fp8", "384/8+1"]
    capacity = out.strip().splitlines()[-1].split()
    assert capacity[:4] == ["Kimi-K2-Instruct", "b300", "8", "8"]
    assert capacity[6] == str(int(MODELS["kimi-k2"].kv_bytes_per_token) * 8)
