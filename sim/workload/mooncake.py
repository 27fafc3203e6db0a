"""Reader of the Mooncake request traces (Qin et al., FAST 2025; kvcache-ai/Mooncake).

One JSON object per line: `timestamp` (arrival, milliseconds from the trace's start),
`input_length` and `output_length` (tokens) and `hash_ids`: the prompt's KV blocks of 512 tokens
as remapped hashes, equal ids meaning the same prefix block (the last block may be partial).
Those ids become the requests' content (`Content`, one id per 512 tokens), so prefix caching
sees the trace's real reuse whatever the engine's block size.

The trace has no session ids. A conversation's later turns start with its earlier turns' blocks,
so the first block after the prefix every request shares (a system prompt: block 0 of every line
of the conversation trace) labels a request's conversation: that is the session `session_sticky`
routing keeps together. It is an approximation: two conversations that open with the same first
message after the system prompt share a label.

Any bad line raises a `ScenarioError` naming the line: not JSON, a missing or non-integer field,
a length above `MAX_TOKENS` or a hash id outside int64 (both checked before the int64 arrays are
built), a time earlier than the line before, or fewer hash ids than the prompt's blocks.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.errors import ScenarioError
from sim.inputs.text import MAX_TRACE_BYTES, read_text
from sim.workload.spec import MAX_TOKENS
from sim.workload.traces import check_trace_found

UNIT_TOKENS = 512  # tokens per hash id
MAX_HASH_ID = 2**63 - 1  # ids are stored as int64 (and -1 means "no block")
MAX_TIMESTAMP_MS = 1e15  # 30,000 years: unix milliseconds fit, float seconds stay exact to us


@dataclass(frozen=True)
class MooncakeData:
    arrival_s: np.ndarray  # float64 seconds after the first line
    prompt_tokens: np.ndarray  # int64 >= 1
    output_tokens: np.ndarray  # int64 >= 1 (0 raised to 1, as for the other traces)
    hash_ids: np.ndarray  # int64, flat
    offsets: np.ndarray  # int64, len + 1
    session: np.ndarray  # int64 per request: its conversation's label (see above)


def session_labels(hash_ids: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Each request's first block id after the prefix common to all requests (its last block
    when its whole prompt is that prefix)."""
    starts, ends = offsets[:-1], offsets[1:]
    lengths = ends - starts
    common = 0
    shortest = int(lengths.min()) if len(lengths) else 0
    while common < shortest and np.all(hash_ids[starts + common] == hash_ids[starts[0] + common]):
        common += 1
    at = np.minimum(starts + common, ends - 1)
    return np.where(lengths > 0, hash_ids[np.maximum(at, 0)], -1).astype(np.int64)


def _short(value: object) -> str:
    """A value as the error shows it: a 400-digit integer is cut, not printed whole."""
    text = repr(value)
    return text if len(text) <= 24 else f"{text[:12]}...({len(text)} characters)"


def _integer(row: dict[str, object], key: str, file: str, line: int, low: int) -> int:
    """A token count in [low, MAX_TOKENS], checked before it becomes an int64."""
    value = row.get(key)
    at = f"line {line}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ScenarioError(f"{key} {_short(value)} is not an integer", file=file, path=at)
    # compared as Python numbers (exact for any int), converted only once in range
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise ScenarioError(f"{key} {_short(value)} is not an integer", file=file, path=at)
    if value < low:
        raise ScenarioError(f"{key} {_short(value)} is below {low}", file=file, path=at)
    if value > MAX_TOKENS:
        reason = f"{key} {_short(value)} is above {MAX_TOKENS} tokens"
        raise ScenarioError(reason, file=file, path=at)
    return int(value)


def _timestamp(value: object, file: str, line: int) -> float:
    """Milliseconds, finite and within `MAX_TIMESTAMP_MS` (a huge JSON integer is refused, not
    converted: float() of it would overflow)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ScenarioError(f"timestamp {value!r} is not a number", file=file, path=f"line {line}")
    if not (isinstance(value, float) and not math.isfinite(value)) and (
        -MAX_TIMESTAMP_MS <= value <= MAX_TIMESTAMP_MS
    ):
        return float(value)
    raise ScenarioError(
        f"timestamp {_short(value)} is not a finite number of milliseconds within "
        f"+-{MAX_TIMESTAMP_MS:g}",
        file=file,
        path=f"line {line}",
    )


def read_mooncake(path: Path) -> MooncakeData:
    file = str(path)
    check_trace_found(path)
    text = read_text(path, "trace file", max_bytes=MAX_TRACE_BYTES)
    times: list[float] = []
    prompts: list[int] = []
    outputs: list[int] = []
    ids: list[int] = []
    offsets = [0]
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ScenarioError(f"not JSON ({exc.msg})", file=file, path=f"line {line}") from None
        if not isinstance(row, dict):
            raise ScenarioError("not a JSON object", file=file, path=f"line {line}")
        ms = _timestamp(row.get("timestamp"), file, line)
        if times and ms / 1000.0 < times[-1]:
            raise ScenarioError(
                f"timestamp {ms!r} is earlier than the line before (out of order)",
                file=file,
                path=f"line {line}",
            )
        prompt = _integer(row, "input_length", file, line, 1)
        output = _integer(row, "output_length", file, line, 0)
        hashes = row.get("hash_ids")
        if not isinstance(hashes, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in hashes
        ):
            raise ScenarioError(
                "hash_ids is not a list of integers", file=file, path=f"line {line}"
            )
        out_of_range = next((h for h in hashes if not 0 <= h <= MAX_HASH_ID), None)
        if out_of_range is not None:
            reason = f"hash id {_short(out_of_range)} is outside 0..2^63-1"
            raise ScenarioError(reason, file=file, path=f"line {line}")
        if len(hashes) < -(-prompt // UNIT_TOKENS):
            raise ScenarioError(
                f"{len(hashes)} hash_ids for {prompt} prompt tokens (one per {UNIT_TOKENS})",
                file=file,
                path=f"line {line}",
            )
        times.append(ms / 1000.0)
        prompts.append(prompt)
        outputs.append(max(1, output))
        ids.extend(hashes)
        offsets.append(len(ids))
    if not times:
        raise ScenarioError("trace file has no requests", file=file)
    arrival = np.asarray(times, dtype=np.float64)
    flat = np.asarray(ids, dtype=np.int64)
    bounds = np.asarray(offsets, dtype=np.int64)
    return MooncakeData(
        arrival_s=arrival - arrival[0],
        prompt_tokens=np.asarray(prompts, dtype=np.int64),
        output_tokens=np.asarray(outputs, dtype=np.int64),
        hash_ids=flat,
        offsets=bounds,
        session=session_labels(flat, bounds),
    )
