"""Measured runs of real serving engines, read into one common form (`MeasuredRun`) so that they
can be replayed through the simulator and compared; and the engine's configuration read from a
vLLM startup log (`read_vllm_log`).

    run = read_measured(Path("traces.json"))               # format detected from the content
    run = read_measured(Path("sweep.json"), "guidellm", benchmark=2)

Formats (`FORMATS`): `vllm_otlp` (vLLM's OpenTelemetry spans), `vllm_bench` (`vllm bench serve
--save-result --save-detailed`), `guidellm` (GuideLLM's benchmarks JSON), `aiperf` (AIPerf's
`profile_export.jsonl`) and `batchsim` (batchsim's own requests table or results folder). This
package reads files only; it imports nothing of the simulator.
"""

from __future__ import annotations

import json
from pathlib import Path

from sim.errors import ScenarioError
from sim.measured.detect import TOOL_NAMES, looks_like
from sim.measured.run import FORMATS, MeasuredRun
from sim.measured.vllm_log import EngineConfig, read_vllm_log

__all__ = [
    "FORMATS",
    "EngineConfig",
    "MeasuredRun",
    "detect_format",
    "read_measured",
    "read_vllm_log",
]

_TABLE_SUFFIXES = (".parquet", ".csv")


def _first_json_value(path: Path) -> object:
    """The first JSON value of the file (a whole document, or its first line)."""
    with path.open("rb") as handle:
        head = handle.read(1 << 20)
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff").lstrip()
    first_line = text.split("\n", 1)[0]
    for candidate in (first_line, text):
        try:
            return json.loads(candidate)
        except json.JSONDecodeError:
            continue
    # a large single document: its opening keys tell the tool
    for key in ("benchmarks", "input_lens", "ttfts", "resourceSpans"):
        if f'"{key}"' in text:
            return {key: []} if key != "resourceSpans" else {key: None}
    return None


def detect_format(path: Path) -> str:
    """The format of the file or folder at `path`, from its content (or a table's suffix)."""
    file = str(path)
    if path.is_dir() or path.suffix.lower() in _TABLE_SUFFIXES:
        return "batchsim"
    from sim.inputs.text import check_regular_file

    check_regular_file(path, "measured run")
    try:
        fmt = looks_like(_first_json_value(path))
    except OSError as exc:
        raise ScenarioError(f"cannot read measured run: {exc.strerror or exc}", file=file) from None
    if fmt is None:
        known = "; ".join(f"{name}: {what}" for name, what in TOOL_NAMES.items())
        raise ScenarioError(
            f"cannot tell which tool wrote this file; known formats are {known} "
            "(or name one with --format)",
            file=file,
        )
    return fmt


def read_measured(
    path: Path,
    fmt: str | None = None,
    *,
    benchmark: int | None = None,
    variant: str | None = None,
    drop_duplicates: bool = False,
) -> MeasuredRun:
    """The measured run in `path`, read by the reader of `fmt` (detected when None).

    `benchmark` picks one benchmark of a GuideLLM sweep, one result of an appended `vllm bench`
    file, or one variant of a batchsim folder (0-based); `variant` names a batchsim variant.
    A request id that appears twice (a span exported twice, two files concatenated) is an
    error, or with `drop_duplicates` its first row is kept and the rest counted
    (`MeasuredRun.num_duplicates`).
    """
    run = _read(path, fmt, benchmark, variant)
    duplicate, extra = run.duplicate_ids()
    if extra and not drop_duplicates:
        raise ScenarioError(
            f"request id {duplicate[:60]!r} appears more than once ({extra} repeated rows in "
            "all): the same requests exported twice? (--drop-duplicates keeps each id's first)",
            file=str(path),
        )
    return run.without_duplicates() if extra else run


def _read(path: Path, fmt: str | None, benchmark: int | None, variant: str | None) -> MeasuredRun:
    path = Path(path)
    if fmt is None:
        fmt = detect_format(path)
    if fmt not in FORMATS:
        raise ScenarioError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}", file=str(path))
    if benchmark is not None and benchmark < 0:
        raise ScenarioError(f"benchmark index {benchmark} is negative", file=str(path))
    if benchmark is not None and fmt in ("vllm_otlp", "aiperf"):
        raise ScenarioError(
            f"a {fmt} file holds one benchmark; --benchmark does not apply", file=str(path)
        )
    if variant is not None and fmt != "batchsim":
        raise ScenarioError("a variant applies to batchsim results only", file=str(path))
    if fmt == "vllm_otlp":
        from sim.measured.vllm_otlp import read_vllm_otlp

        return read_vllm_otlp(path)
    if fmt == "vllm_bench":
        from sim.measured.vllm_bench import read_vllm_bench

        return read_vllm_bench(path, benchmark=benchmark)
    if fmt == "guidellm":
        from sim.measured.guidellm import read_guidellm

        return read_guidellm(path, benchmark=benchmark)
    if fmt == "aiperf":
        from sim.measured.aiperf import read_aiperf

        return read_aiperf(path)
    from sim.measured.batchsim import read_batchsim

    return read_batchsim(path, benchmark=benchmark, variant=variant)
