"""Reader of AIPerf's per-request records, `profile_export.jsonl` (ai-dynamo/aiperf).

One JSON object per line, `{"metadata": {...}, "metrics": {...}, "error": null | {...}}`.
`metadata.request_start_ns` (nanoseconds since the epoch) is the arrival; `x_request_id` the id;
`benchmark_phase` is "profiling" for measured requests (others, such as a warm-up, are skipped
and counted in meta); `was_cancelled` or a non-null `error` marks a failed request (left out,
counted in `num_failed`). Each metric is `{"value": ..., "unit": ...}` and its unit is honoured
(`ns`, `us`, `ms`, `s`/`sec` for times, `tokens` for counts):

- `request_latency` (E2E, required), `time_to_first_token` (TTFT; absent when not streamed);
- `input_sequence_length` and `output_sequence_length` (or `output_token_count`);
- `inter_token_latency`: the request's own mean gap, used as TPOT where the derivation needs
  two output tokens;
- `inter_chunk_latency` (a list): taken as the per-request gaps when every request has one gap
  per token after the first (one token per streamed chunk); otherwise `itl_s` is None.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from sim.errors import ScenarioError
from sim.measured.detect import wrong_tool
from sim.measured.run import MeasuredRun, assemble
from sim.measured.values import (
    column,
    json_file_lines,
    latency,
    mapping,
    same_record,
    tokens,
    ttft_within_e2e,
    unix_seconds,
)

TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0}


def _metric(metrics: dict[str, Any], name: str, *, file: str, at: str) -> tuple[Any, str] | None:
    """(value, unit) of a metric, or None when the record lacks it."""
    entry = metrics.get(name)
    if entry is None:
        return None
    if not isinstance(entry, dict) or "value" not in entry:
        raise ScenarioError(f"metric {name} is not {{value, unit}}", file=file, path=at)
    return entry["value"], str(entry.get("unit", ""))


def _seconds(metrics: dict[str, Any], name: str, *, file: str, at: str) -> float:
    found = _metric(metrics, name, file=file, at=at)
    if found is None:
        return math.nan
    value, unit = found
    if unit not in TIME_UNITS:
        raise ScenarioError(f"metric {name} has unit {unit!r}, not a time unit", file=file, path=at)
    return latency(value, name, file=file, at=at, scale=TIME_UNITS[unit])


def _count(metrics: dict[str, Any], names: tuple[str, ...], *, file: str, at: str) -> int:
    for name in names:
        found = _metric(metrics, name, file=file, at=at)
        if found is not None:
            if found[1] not in ("tokens", ""):
                raise ScenarioError(
                    f"metric {name} has unit {found[1]!r}, not tokens", file=file, path=at
                )
            return tokens(found[0], name, file=file, at=at)
    raise ScenarioError(f"record has no {names[0]}", file=file, path=at)


def read_aiperf(path: Path) -> MeasuredRun:
    """The profiling records of an AIPerf `profile_export.jsonl` (see the module docstring)."""
    file = str(path)
    cols: dict[str, list[Any]] = {
        k: [] for k in ("arrival", "prompt", "output", "ttft", "e2e", "itl")
    }
    ids: list[str] = []
    records: list[str] = []
    chunks: list[np.ndarray | None] = []
    failed = skipped = 0
    for number, record in json_file_lines(path, "AIPerf profile export"):
        at = f"line {number}"
        if "metadata" not in record:
            raise ScenarioError(wrong_tool(record, "aiperf"), file=file, path=at)
        meta = mapping(record["metadata"], "metadata", file=file, at=at)
        if meta.get("benchmark_phase", "profiling") != "profiling":
            skipped += 1
            continue
        if record.get("error") is not None or meta.get("was_cancelled") is True:
            failed += 1
            continue
        metrics = mapping(record.get("metrics"), "metrics", file=file, at=at)
        if meta.get("request_start_ns") is None:
            raise ScenarioError("record has no metadata.request_start_ns", file=file, path=at)
        arrival = unix_seconds(
            meta["request_start_ns"], "request_start_ns", file=file, at=at, scale=1e-9
        )
        e2e = _seconds(metrics, "request_latency", file=file, at=at)
        if math.isnan(e2e):
            raise ScenarioError("record has no request_latency", file=file, path=at)
        ttft = _seconds(metrics, "time_to_first_token", file=file, at=at)
        ttft_within_e2e(ttft, e2e, file=file, at=at)
        output = _count(metrics, ("output_sequence_length", "output_token_count"), file=file, at=at)
        cols["arrival"].append(arrival)
        cols["prompt"].append(_count(metrics, ("input_sequence_length",), file=file, at=at))
        cols["output"].append(output)
        cols["ttft"].append(ttft)
        cols["e2e"].append(e2e)
        cols["itl"].append(_seconds(metrics, "inter_token_latency", file=file, at=at))
        found = _metric(metrics, "inter_chunk_latency", file=file, at=at)
        gaps = None
        if found is not None and isinstance(found[0], list) and found[1] in TIME_UNITS:
            gaps = column(found[0], "inter_chunk_latency", file=file, record=same_record(at))
            gaps = gaps * TIME_UNITS[found[1]] if len(gaps) == output - 1 else None
        chunks.append(gaps)
        ids.append(str(meta.get("x_request_id") or len(ids)))
        records.append(at)
    per_token = bool(chunks) and all(g is not None for g in chunks)
    return assemble(
        source=file, fmt="aiperf", arrival=cols["arrival"], prompt_tokens=cols["prompt"],
        output_tokens=cols["output"], ttft_s=cols["ttft"], e2e_s=cols["e2e"], request_id=ids,
        records=records, unix_clock=True, num_failed=failed, file_tpot_s=cols["itl"],
        itl_s=[g for g in chunks if g is not None] if per_token else None,
        meta={"tool": "aiperf", "records_not_profiling": skipped, **_loadgen(path)},
    )  # fmt: skip


SUMMARY_SUFFIX = "_aiperf.json"  # profile_export.jsonl -> profile_export_aiperf.json beside it
MAX_SUMMARY_BYTES = 64 * 1024 * 1024


def _loadgen(path: Path) -> dict[str, Any]:
    """`{"loadgen": {...}}`: how AIPerf sent the requests (`input_config.loadgen` of the summary
    AIPerf writes beside the records: concurrency, request_rate), or `{"loadgen_note": why}`
    when it is absent or unreadable (the records alone do not say)."""
    summary = path.with_name(path.stem + SUMMARY_SUFFIX)
    try:
        if not summary.is_file():
            return {"loadgen_note": f"no {summary.name} beside it"}
        if summary.stat().st_size > MAX_SUMMARY_BYTES:
            return {"loadgen_note": f"{summary.name} is over 64 MiB"}
        doc = json.loads(summary.read_bytes())
    except (OSError, ValueError, RecursionError):
        return {"loadgen_note": f"{summary.name} is not readable JSON"}
    config = doc.get("input_config") if isinstance(doc, dict) else None
    loadgen = config.get("loadgen") if isinstance(config, dict) else None
    if not isinstance(loadgen, dict):
        return {"loadgen_note": f"{summary.name} has no input_config.loadgen"}
    kept = {k: value for k in ("concurrency", "request_rate", "request_rate_mode")
            if isinstance(value := loadgen.get(k), int | float | str)
            and not isinstance(value, bool)}  # fmt: skip
    return {"loadgen": {**kept, "file": summary.name}}
