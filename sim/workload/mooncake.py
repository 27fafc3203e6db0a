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
a time earlier than the line before, or fewer hash ids than the prompt's blocks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.errors import ScenarioError
from sim.inputs.text import read_text

UNIT_TOKENS = 512  # tokens per hash id


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


def _integer(row: dict[str, object], key: str, file: str, line: int, low: int) -> int:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ScenarioError(f"{key} {value!r} is not an integer", file=file, path=f"line {line}")
    if int(value) < low:
        raise ScenarioError(f"{key} {value!r} is below {low}", file=file, path=f"line {line}")
    return int(value)


def read_mooncake(path: Path) -> MooncakeData:
    file = str(path)
    text = read_text(path, "trace file", max_bytes=None)
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
        ms = row.get("timestamp")
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not np.isfinite(ms):
            raise ScenarioError(f"timestamp {ms!r} is not a number", file=file, path=f"line {line}")
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
