"""The engine's configuration, read from a vLLM server's startup log (V1 engine, vLLM 0.8-0.11;
the V0 block line too).

A log may hold several restarts: only the last start counts, the last `vLLM API server version`
line (or, in a log without one, the last `Initializing a V1 LLM engine (vX) with config:`) and
the lines after it. The values come from, in order of precedence within that part:

- the engine's config line (`model='...', dtype=torch.float16, max_seq_len=4096,
  tensor_parallel_size=1, ..., enable_prefix_caching=True, chunked_prefill_enabled=True,
  compilation_config={...json...}`), whose `cudagraph_capture_sizes` give the CUDA-graph sizes;
- `non-default args: {...}` (a Python dict literal: what the user set, e.g. `max_num_seqs`,
  `gpu_memory_utilization`, `block_size`);
- the lines `Chunked prefill is enabled with max_num_batched_tokens=N.`, `Using max model len
  N`, `Available KV cache memory: X GiB`, `GPU KV cache size: N tokens`, `... num_gpu_blocks is:
  N` (V0: `# GPU blocks: N, # CPU blocks: M`).

A line may start with a process tag (`(EngineCore_DP0 pid=12)`) and carry ANSI colours: both
are stripped first. A field the log does not state is None; `EngineConfig.require` turns the
fields a caller needs into one clear error. `lines` maps each field to the log line it came from.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from sim.errors import ScenarioError
from sim.inputs.text import read_text

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_TAG = re.compile(r"^\s*\([A-Za-z0-9_]+ pid=\d+\)\s*")
_API = re.compile(r"vLLM API server version (\S+)")
_INIT = re.compile(r"Initializing an? (?:V1 )?LLM engine \(v([^)]+)\) with config: (.*)$")
_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})\s*$")
_CHUNKED = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")
_MAX_LEN = re.compile(r"Using max model len (\d+)")
_KV_MEMORY = re.compile(r"Available KV cache memory: ([0-9.]+) GiB")
_KV_TOKENS = re.compile(r"GPU KV cache size: ([0-9,]+) tokens")
_BLOCKS_V1 = re.compile(r"num_gpu_blocks is: (\d+)")
_BLOCKS_V0 = re.compile(r"# GPU blocks: (\d+)")
_BLOCK_SIZE = re.compile(r"(?:block size|block_size) to (\d+)")
_MAX_INT = 10**9  # bound on every integer the log gives (blocks, tokens, sizes)
_MAX_CAPTURE = 65_536  # a CUDA-graph capture size above this is no engine's
# values the engine cannot run with at 0 (every integer the reader keeps but the KV tokens)
_POSITIVE = frozenset({"tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
                       "max_num_seqs", "max_num_batched_tokens", "max_model_len", "block_size",
                       "max_seq_len", "GPU blocks", "block size", "max model len",
                       "tokens"})  # fmt: skip


@dataclass(frozen=True)
class EngineConfig:
    """What a vLLM startup log says of the engine that served (None: not logged)."""

    version: str | None = None
    model: str | None = None
    served_model_name: str | None = None
    dtype: str | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    data_parallel_size: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    kv_cache_tokens: int | None = None
    kv_cache_memory_gib: float | None = None
    prefix_caching: bool | None = None
    chunked_prefill: bool | None = None
    cuda_graph_capture_sizes: list[int] | None = None
    enforce_eager: bool | None = None
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    gpu_memory_utilization: float | None = None
    lines: dict[str, int] = field(default_factory=dict, compare=False)

    def require(self, *names: str, file: str | None = None) -> EngineConfig:
        """This config, or one error naming every field in `names` that the log lacks."""
        known = {f.name for f in fields(self)}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"EngineConfig has no field {unknown}")
        missing = [n for n in names if getattr(self, n) is None]
        if missing:
            raise ScenarioError(
                f"{', '.join(missing)} not logged (the vLLM startup log lacks the line)", file=file
            )
        return self


def _integer(text: str, name: str, *, file: str, line: int) -> int:
    """A whole number the log states (at least 1 where the engine cannot run with 0)."""
    digits = text.strip().replace(",", "").replace("_", "")
    if not digits.isdigit():
        raise ScenarioError(f"{name} {text[:40]!r} is not a whole number", file=file,
                            path=f"line {line}")  # fmt: skip
    value = int(digits)
    low = 1 if name in _POSITIVE else 0
    if not low <= value <= _MAX_INT:
        raise ScenarioError(f"{name} {text!r} is out of range ({low} to {_MAX_INT:,})",
                            file=file, path=f"line {line}")  # fmt: skip
    return value


def _config_items(config: str) -> dict[str, str]:
    """Top-level `key=value` pairs of the engine's config line (values as written)."""
    out: dict[str, str] = {}
    for match in re.finditer(r"(?:^|, )([a-z_]+)=('(?:[^'\\]|\\.)*'|[^,(){}\[\]]*)", config):
        out.setdefault(match.group(1), match.group(2).strip("'"))
    start = config.find("compilation_config=")
    if start >= 0:
        out["compilation_config"] = config[start + len("compilation_config=") :]
    return out


def _none(value: str) -> str | None:
    return None if value in ("None", "") else value


def _flag(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    return {"True": True, "False": False}.get(str(value))


def _start(lines: list[str]) -> int:
    api = [i for i, text in enumerate(lines) if _API.search(text)]
    init = [i for i, text in enumerate(lines) if _INIT.search(text)]
    if not api and not init:
        return -1
    if not init or (api and api[-1] > init[-1]):
        return api[-1]
    before = [i for i in api if i < init[-1]]
    return before[-1] if before else init[-1]


def read_vllm_log(path: Path) -> EngineConfig:
    """The configuration of the last engine start in a vLLM log (see the module docstring)."""
    file = str(path)
    raw = read_text(path, "vLLM log", max_bytes=512 * 1024**2).splitlines()
    lines = [_TAG.sub("", _ANSI.sub("", text)) for text in raw]
    start = _start(lines)
    if start < 0:
        raise ScenarioError(
            "no engine start found (no 'vLLM API server version' or 'Initializing a V1 LLM "
            "engine' line): not a vLLM server log",
            file=file,
        )
    values: dict[str, Any] = {}
    where: dict[str, int] = {}

    def put(name: str, value: Any, line: int, *, override: bool = True) -> None:
        if value is not None and (override or name not in values):
            values[name] = value
            where[name] = line

    for index in range(start, len(lines)):
        text, line = lines[index], index + 1
        if match := _API.search(text):
            put("version", match.group(1), line)
        elif match := _NON_DEFAULT.search(text):
            _non_default(match.group(1), put, file=file, line=line)
        elif match := _INIT.search(text):
            put("version", match.group(1), line)
            _engine_config(_config_items(match.group(2)), put, file=file, line=line)
        elif match := _CHUNKED.search(text):
            put("chunked_prefill", True, line)
            put(
                "max_num_batched_tokens",
                _integer(match.group(1), "tokens", file=file, line=line),
                line,
            )
        elif match := _MAX_LEN.search(text):
            put(
                "max_model_len",
                _integer(match.group(1), "max model len", file=file, line=line),
                line,
            )
        elif match := _KV_MEMORY.search(text):
            put("kv_cache_memory_gib", float(match.group(1)), line)
        elif match := _KV_TOKENS.search(text):
            put(
                "kv_cache_tokens", _integer(match.group(1), "KV tokens", file=file, line=line), line
            )
        elif match := _BLOCKS_V1.search(text) or _BLOCKS_V0.search(text):
            put(
                "num_gpu_blocks", _integer(match.group(1), "GPU blocks", file=file, line=line), line
            )
        elif match := _BLOCK_SIZE.search(text):
            put("block_size", _integer(match.group(1), "block size", file=file, line=line), line)
    if (
        "block_size" not in values
        and values.get("num_gpu_blocks")
        and values.get("kv_cache_tokens")
    ):
        blocks, kv_tokens = values["num_gpu_blocks"], values["kv_cache_tokens"]
        if kv_tokens % blocks == 0:
            put("block_size", kv_tokens // blocks, where["num_gpu_blocks"])
    if values.get("enforce_eager") is True:
        values["cuda_graph_capture_sizes"] = None
    return EngineConfig(**values, lines=where)


def _non_default(literal: str, put: Any, *, file: str, line: int) -> None:
    try:
        args = ast.literal_eval(literal) if len(literal) < 100_000 else None
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        args = None
    if not isinstance(args, dict):
        raise ScenarioError(
            "non-default args are not a Python dict literal", file=file, path=f"line {line}"
        )
    for key in ("model", "dtype", "kv_cache_dtype", "quantization"):
        if isinstance(args.get(key), str):
            put(key, args[key], line, override=False)
    name = args.get("served_model_name")
    if isinstance(name, list) and name:
        name = name[0]
    if isinstance(name, str):
        put("served_model_name", name, line, override=False)
    for key in (
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "data_parallel_size",
        "max_num_seqs",
        "max_num_batched_tokens",
        "max_model_len",
        "block_size",
    ):
        value = args.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise ScenarioError(f"non-default args: {key} {value!r} is not a whole number",
                                file=file, path=f"line {line}")  # fmt: skip
        put(key, _integer(str(value), key, file=file, line=line), line, override=False)
    utilization = args.get("gpu_memory_utilization")
    if isinstance(utilization, int | float) and not isinstance(utilization, bool):
        if not 0 < utilization <= 1:
            raise ScenarioError(
                f"gpu_memory_utilization {utilization} is not in (0, 1]",
                file=file,
                path=f"line {line}",
            )
        put("gpu_memory_utilization", float(utilization), line)
    for key, name in (
        ("enable_prefix_caching", "prefix_caching"),
        ("enable_chunked_prefill", "chunked_prefill"),
        ("enforce_eager", "enforce_eager"),
    ):
        if isinstance(args.get(key), bool):
            put(name, args[key], line, override=False)


def _engine_config(items: dict[str, str], put: Any, *, file: str, line: int) -> None:
    for key in ("model", "served_model_name", "kv_cache_dtype"):
        if key in items:
            put(key, _none(items[key]), line)
    if "dtype" in items:
        put("dtype", items["dtype"].removeprefix("torch."), line)
    if "quantization" in items:
        put("quantization", _none(items["quantization"]), line)
    for key, name in (
        ("tensor_parallel_size", None),
        ("pipeline_parallel_size", None),
        ("data_parallel_size", None),
        ("max_seq_len", "max_model_len"),
    ):
        if key in items and _none(items[key].strip()) is not None:
            put(name or key, _integer(items[key], key, file=file, line=line), line)
    for key, name in (
        ("enable_prefix_caching", "prefix_caching"),
        ("chunked_prefill_enabled", "chunked_prefill"),
        ("enforce_eager", "enforce_eager"),
    ):
        if key in items:
            put(name, _flag(items[key]), line)
    if "compilation_config" in items:
        try:
            compilation, _ = json.JSONDecoder().raw_decode(items["compilation_config"])
        except json.JSONDecodeError:
            compilation = None  # a config printed in another form: the sizes stay unknown
        sizes = (
            compilation.get("cudagraph_capture_sizes") if isinstance(compilation, dict) else None
        )
        if sizes is None:
            return
        if not isinstance(sizes, list) or not all(
            isinstance(s, int) and not isinstance(s, bool) and 0 < s <= _MAX_CAPTURE
            for s in sizes
        ):
            raise ScenarioError(
                f"cudagraph_capture_sizes {str(sizes)[:60]}: each must be a whole number from 1 "
                f"to {_MAX_CAPTURE:,}", file=file, path=f"line {line}",
            )  # fmt: skip
        put("cuda_graph_capture_sizes", sorted(set(sizes)), line)
