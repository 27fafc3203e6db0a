"""Checked values of a measured file: every number is range-checked before it is used or turned
into an int64, and every failure is one `ScenarioError` naming the file and the record.

JSON gives numbers as int or float, OTLP gives integers as strings (`"intValue": "1527"`), and a
bool is an int to Python: all three are handled here, once, for every reader.
"""

from __future__ import annotations

import codecs
import json
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from sim.errors import ScenarioError
from sim.inputs.text import check_regular_file, read_text

MAX_TOKENS = 10_000_000  # prompt or output tokens of one request: above this the file is wrong
MAX_LATENCY_S = 30 * 86400.0  # one request's latency: a month is no longer a measurement
CLOCK_SLACK_S = 1e-3  # TTFT may exceed E2E by this much: two clocks read a moment apart
# Seconds since the epoch of a plausible measurement (2000-01-01 .. 2100-01-01): a timestamp
# outside is on another clock or in another unit (seconds where nanoseconds are expected).
UNIX_LOW_S, UNIX_HIGH_S = 946_684_800.0, 4_102_444_800.0
MAX_FILE_BYTES = 2 * 1024**3
# one line of a JSON-lines file: an OTLP export batches spans (512 by default, about 1 MiB) and an
# AIPerf record holds one request; a longer line is a file joined without newlines, not a record
MAX_LINE_BYTES = 64 * 2**20
PROGRESS_BYTES = 64 * 2**20  # a file this large shows its reading's progress (on a terminal)


def read_file(path: Path, what: str) -> str:
    return read_text(path, what, max_bytes=MAX_FILE_BYTES)


def cut_short(exc: json.JSONDecodeError) -> bool:
    """Whether a JSON error means the text ends too early (a file cut while being written)."""
    return exc.pos >= len(exc.doc.rstrip()) or exc.msg.startswith("Unterminated string")


def json_document(text: str, file: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        reason = "truncated" if cut_short(exc) else "not JSON"
        raise ScenarioError(
            f"{reason} ({exc.msg} at column {exc.colno})", file=file, path=f"line {exc.lineno}"
        ) from None


def _json_object(line: str, number: int, file: str) -> Any:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        reason = "truncated line" if cut_short(exc) else "not JSON"
        raise ScenarioError(
            f"{reason} ({exc.msg} at column {exc.colno})", file=file, path=f"line {number}"
        ) from None
    if not isinstance(obj, dict):
        raise ScenarioError("not a JSON object", file=file, path=f"line {number}")
    return obj


def json_file_lines(path: Path, what: str) -> Iterator[tuple[int, Any]]:
    """(line number, object) for each non-blank line of a JSON-lines file, read a line at a time
    (the file is never held whole: at most `MAX_FILE_BYTES`, and a line at most `MAX_LINE_BYTES`),
    with a progress bar in bytes on a terminal for a file of `PROGRESS_BYTES` or more."""
    check_regular_file(path, what)
    file = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ScenarioError(
                f"{what} is {size / 2**20:.1f} MiB; at most {MAX_FILE_BYTES / 2**20:.0f} MiB "
                "expected",
                file=file,
            )
        handle = path.open("rb")
    except OSError as exc:
        raise ScenarioError(f"cannot read {what}: {exc.strerror or exc}", file=file) from None
    from tqdm import tqdm

    bar = tqdm(
        total=size, unit="B", unit_scale=True, desc=f"reading {path.name}", leave=False,
        file=sys.stderr, disable=None if size >= PROGRESS_BYTES else True,
    )  # fmt: skip
    offset = 0
    try:
        with handle:
            for number, raw in enumerate(iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b""),
                                         start=1):  # fmt: skip
                if len(raw) > MAX_LINE_BYTES:
                    raise ScenarioError(
                        f"line longer than {MAX_LINE_BYTES >> 20} MiB (one record per line is "
                        "expected; is the file joined without newlines?)",
                        file=file, path=f"line {number}",
                    )  # fmt: skip
                if number == 1 and raw.startswith(codecs.BOM_UTF8):
                    raw, offset = raw[len(codecs.BOM_UTF8) :], len(codecs.BOM_UTF8)
                line = _decoded(raw, number, offset, file)
                offset += len(raw)
                if not number & 4095:
                    bar.update(offset - bar.n)
                if line.strip():
                    yield number, _json_object(line, number, file)
        bar.update(offset - bar.n)
    except OSError as exc:
        raise ScenarioError(f"cannot read {what}: {exc.strerror or exc}", file=file) from None
    finally:
        bar.close()


def _decoded(raw: bytes, number: int, offset: int, file: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(
            f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at column {exc.start + 1} (byte offset "
            f"{offset + exc.start}); save the file as UTF-8",
            file=file,
            path=f"line {number}",
        ) from None


def number(value: Any, what: str, *, file: str, at: str) -> float:
    """A finite float from a JSON number or a numeric string."""
    if isinstance(value, bool) or value is None:
        raise ScenarioError(f"{what} is {json.dumps(value)}, not a number", file=file, path=at)
    if isinstance(value, str):
        try:
            out = float(value.strip())
        except ValueError:
            raise ScenarioError(f"{what} {value!r} is not a number", file=file, path=at) from None
    elif isinstance(value, int | float):
        out = float(value)
    else:
        raise ScenarioError(f"{what} is a {type(value).__name__}, not a number", file=file, path=at)
    if not math.isfinite(out):
        raise ScenarioError(f"{what} is {out}, not a finite number", file=file, path=at)
    return out


def latency(value: Any, what: str, *, file: str, at: str, scale: float = 1.0) -> float:
    """A latency in seconds (`value * scale`), finite, >= 0 and at most `MAX_LATENCY_S`."""
    out = number(value, what, file=file, at=at) * scale
    if out < 0:
        raise ScenarioError(f"{what} is negative ({out:g} s)", file=file, path=at)
    if out > MAX_LATENCY_S:
        raise ScenarioError(f"{what} is {out:g} s, above {MAX_LATENCY_S:g} s", file=file, path=at)
    return out


def tokens(value: Any, what: str, *, file: str, at: str, low: int = 1) -> int:
    """A token count: an integer in [low, MAX_TOKENS] (checked before any int conversion)."""
    out = number(value, what, file=file, at=at)
    if out != math.floor(out):
        raise ScenarioError(f"{what} {out:g} is not an integer", file=file, path=at)
    if out < low:
        raise ScenarioError(f"{what} is {out:g}, below {low}", file=file, path=at)
    if out > MAX_TOKENS:
        raise ScenarioError(f"{what} is {out:g}, above {MAX_TOKENS:,}", file=file, path=at)
    return int(out)


def unix_seconds(value: Any, what: str, *, file: str, at: str, scale: float = 1.0) -> float:
    """A wall-clock time in seconds since the epoch (`value * scale`), between 2000 and 2100."""
    out = number(value, what, file=file, at=at) * scale
    if not UNIX_LOW_S <= out <= UNIX_HIGH_S:
        unit = {1.0: "seconds", 1e-3: "milliseconds", 1e-6: "microseconds", 1e-9: "nanoseconds"}
        raise ScenarioError(
            f"{what} {value} is not a time between 2000 and 2100 in {unit.get(scale, 'its unit')}"
            " since the epoch (another clock or unit)",
            file=file,
            path=at,
        )
    return out


def ttft_within_e2e(ttft: float, e2e: float, *, file: str, at: str) -> None:
    if math.isfinite(ttft) and math.isfinite(e2e) and ttft > e2e + CLOCK_SLACK_S:
        raise ScenarioError(
            f"time to first token {ttft:.6g} s exceeds the end-to-end latency {e2e:.6g} s",
            file=file,
            path=at,
        )


def mapping(value: Any, what: str, *, file: str, at: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ScenarioError(f"{what} is not a JSON object", file=file, path=at)
    return value


def listing(value: Any, what: str, *, file: str, at: str) -> list[Any]:
    if not isinstance(value, list):
        raise ScenarioError(f"{what} is not a JSON list", file=file, path=at)
    return value


def column(
    values: Any,
    what: str,
    *,
    file: str,
    record: Callable[[int], str],
    low: float = 0.0,
    high: float = MAX_LATENCY_S,
    allow_nan: bool = False,
    integer: bool = False,
) -> np.ndarray:
    """A whole column checked at once (finite, in [low, high], integral when `integer`); the
    first bad value is reported with its record, `record(i)`."""
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        array = None
    if array is None or array.ndim != 1:
        for i, value in enumerate(values):
            number(value, what, file=file, at=record(i))
        raise ScenarioError(f"{what} is not a list of numbers", file=file)
    bad_nan = np.isnan(array) & (not allow_nan)
    with np.errstate(invalid="ignore"):
        bad = bad_nan | np.isinf(array) | (array < low) | (array > high)
        if integer:
            bad |= np.isfinite(array) & (array != np.floor(array))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        value = float(array[i])
        reason = (
            "not a finite number"
            if not np.isfinite(value)
            else "not an integer"
            if integer and value != math.floor(value)
            else f"outside [{low:g}, {high:g}]"
        )
        raise ScenarioError(f"{what} {value:g} is {reason}", file=file, path=record(i))
    return array


def same_record(at: str) -> Callable[[int], str]:
    """A `record` for `column` whose values all belong to one record (a request's gaps)."""
    return lambda _index: at
