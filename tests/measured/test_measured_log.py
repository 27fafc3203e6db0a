"""The engine's configuration read from a vLLM startup log (`sim.measured.vllm_log`), on logs
written here from real vLLM 0.11 lines: restarts, process tags, colours, V0 lines."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers_measured import start

from sim.errors import ScenarioError
from sim.measured import EngineConfig, read_vllm_log


def write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "vllm.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_last_start_is_read_with_every_field_and_its_line(tmp_path: Path) -> None:
    crashed = start("0.10.2", max_model_len=8192)[:2]  # a restart that died early
    lines = [*start("0.10.1", 2048), *crashed, "some noise", *start()]
    config = read_vllm_log(write(tmp_path, lines))
    assert config == EngineConfig(
        version="0.11.0",
        model="/m/llama",
        served_model_name="meta-llama/L",
        dtype="float16",
        tensor_parallel_size=2,
        pipeline_parallel_size=1,
        data_parallel_size=1,
        max_num_seqs=256,
        max_num_batched_tokens=4096,
        max_model_len=4096,
        block_size=16,  # 119,008 tokens / 7438 blocks
        num_gpu_blocks=7438,
        kv_cache_tokens=119008,
        kv_cache_memory_gib=58.12,
        prefix_caching=True,
        chunked_prefill=True,
        cuda_graph_capture_sizes=[1, 2, 4, *range(8, 513, 8)],
        enforce_eager=False,
        kv_cache_dtype="auto",
        quantization=None,
        gpu_memory_utilization=0.85,
    )
    first = 8 + 2 + 1  # lines before the last start
    assert config.lines["version"] == first + 4  # the engine line restates it
    assert config.lines["max_num_seqs"] == first + 2
    assert config.lines["num_gpu_blocks"] == first + 8
    assert config.lines["kv_cache_tokens"] == first + 6


def test_enforce_eager_has_no_capture_sizes_and_v0_block_line_is_read(tmp_path: Path) -> None:
    lines = [
        *start(eager=True)[:4],
        "INFO 01-21 10:49:49 executor_base.py:110] # GPU blocks: 7438, # CPU blocks: 512",
        "INFO 01-21 10:49:49 cache.py:10] Setting block size to 32",
    ]
    config = read_vllm_log(write(tmp_path, lines))
    assert config.enforce_eager is True and config.cuda_graph_capture_sizes is None
    assert config.num_gpu_blocks == 7438 and config.block_size == 32
    assert config.kv_cache_tokens is None


def test_require_names_every_missing_field_in_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, start()[:3])
    config = read_vllm_log(path)
    assert config.num_gpu_blocks is None and config.max_num_seqs == 256
    with pytest.raises(ScenarioError) as info:
        config.require("max_num_seqs", "num_gpu_blocks", "block_size", file=str(path))
    assert info.value.message() == (
        f"{path}: num_gpu_blocks, block_size not logged (the vLLM startup log lacks the line)"
    )
    assert config.require("max_num_seqs") is config


def test_a_log_without_an_engine_start_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, ["2026-01-21 INFO vllm.platforms: Automatically detected platform"])
    with pytest.raises(ScenarioError, match="no engine start found"):
        read_vllm_log(path)


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        (
            "Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: "
            "99999999999",
            "line 2: GPU blocks '99999999999' is out of range",
        ),
        (
            "INFO vllm.entrypoints.utils: non-default args: {'model': oops}",
            "line 2: non-default args are not a Python dict literal",
        ),
        (
            "INFO vllm.entrypoints.utils: non-default args: {'gpu_memory_utilization': 1.5}",
            "line 2: gpu_memory_utilization 1.5 is not in (0, 1]",
        ),
    ],
)
def test_out_of_range_values_name_their_line(tmp_path: Path, line: str, expect: str) -> None:
    path = write(tmp_path, [start()[0], line])
    with pytest.raises(ScenarioError, match=expect.replace("(", r"\(").replace(")", r"\)")):
        read_vllm_log(path)
