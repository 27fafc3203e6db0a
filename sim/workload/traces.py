"""Trace readers: turn an arrival trace file into arrays of arrival times and token counts.

Two formats are understood:

* ``azure`` - the Azure LLM inference traces (Splitwise, 2023): header
  ``TIMESTAMP,ContextTokens,GeneratedTokens`` with wall-clock timestamps such as
  ``2023-11-16 18:15:46.6805900`` (seven fractional digits, which plain ``%f`` rejects, hence
  ISO 8601 parsing with nanosecond resolution).
* ``csv`` - batchsim's own: header ``arrival_s,prompt_tokens,output_tokens`` in seconds.

pandas parses everything as strings first so that each check can be vectorized and still point
at the offending line: data row ``i`` (0-based) sits on file line ``i + 2`` because the header is
line 1 and blank lines are kept as rows (then dropped) rather than skipped, which would shift the
numbering. Any bad row raises a `ScenarioError` naming the first bad line and the number of bad
rows. Token counts above `MAX_TOKENS` (2^31 - 1, as a scenario's lengths) are refused before
any int64 conversion, as are times beyond `MAX_TIME_S`. A row with zero output tokens is kept
with output 1: the model emitted end-of-sequence as its first token, which still costs a
prefill and one emitted token.

Reading is pure (no cache): 20k rows parse in a few tens of milliseconds.
"""

from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from sim.errors import ScenarioError
from sim.inputs.text import MAX_TRACE_BYTES, read_text
from sim.workload.spec import MAX_TOKENS

# Per format: (time column, prompt column, output column).
COLUMNS: dict[str, tuple[str, str, str]] = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "csv": ("arrival_s", "prompt_tokens", "output_tokens"),
}


# Azure timestamps must fall in [first, last) of these years: wider than any real trace, narrow
# enough that nanosecond arithmetic cannot overflow.
TIMESTAMP_YEARS = (1970, 2200)
MAX_TIME_S = 1e12  # a csv trace's arrival_s, either sign: 30,000 years
_OFFSET = r"(?:Z|[+-]\d{2}:?\d{2})$"


@dataclass(frozen=True)
class TraceData:
    """A parsed trace, rows in file order."""

    arrival_s: np.ndarray  # float64 seconds after the first row (first is 0.0)
    prompt_tokens: np.ndarray  # int64 >= 1
    output_tokens: np.ndarray  # int64 >= 1 (zero outputs raised to 1)
    num_zero_output: int  # rows whose output was 0 in the file
    # extra columns asked for (a tier column), as stripped strings
    extra: dict[str, np.ndarray] = field(default_factory=dict)


def resolve_path(path: str, base_dir: Path) -> Path:
    """A path from a scenario file: relative paths resolve against the scenario's folder."""
    candidate = Path(path).expanduser()
    return candidate if candidate.is_absolute() else base_dir / candidate


TraceFileFormat = Literal["azure", "csv"]  # the formats `read_trace` reads

# the public traces the shipped scenarios and docs name: (file name prefixes, where to get it)
PUBLIC_TRACES = (
    (("azure_llm_2023_conv", "azurellminferencetrace_conv"),
     "the Azure LLM inference trace 2023, conversation: data/AzureLLMInferenceTrace_conv.csv of "
     "github.com/Azure/AzurePublicDataset (CC-BY 4.0; its first 6,000 requests ship as "
     "scenarios/traces/azure_llm_2023_conv_6000.csv)"),
    (("azure_llm_2023_code", "azurellminferencetrace_code"),
     "the Azure LLM inference trace 2023, code: data/AzureLLMInferenceTrace_code.csv of "
     "github.com/Azure/AzurePublicDataset (CC-BY 4.0)"),
    (("mooncake_conversation", "conversation_trace"),
     "Mooncake's conversation trace: FAST25-release/traces/conversation_trace.jsonl of "
     "github.com/kvcache-ai/Mooncake (Apache-2.0)"),
    (("mooncake_synthetic", "synthetic_trace"),
     "Mooncake's synthetic trace: FAST25-release/traces/synthetic_trace.jsonl of "
     "github.com/kvcache-ai/Mooncake (Apache-2.0)"),
)  # fmt: skip


def check_trace_found(path: Path) -> None:
    """A missing trace that is one of `PUBLIC_TRACES` is an error saying where to get it."""
    if os.path.lexists(path):
        return
    name = path.name.lower()
    for prefixes, source in PUBLIC_TRACES:
        if name.startswith(prefixes):
            raise ScenarioError(f"trace file not found; it is {source}", file=str(path))


def read_trace(
    path: Path, fmt: TraceFileFormat, extra_columns: tuple[str, ...] = ()
) -> TraceData:
    """Read and validate a trace file; raise `ScenarioError` (file, 'line N') on bad input.

    `extra_columns` (a tier column) must be present and non-empty on every row."""
    file = str(path)
    check_trace_found(path)
    text = read_text(path, "trace file", max_bytes=MAX_TRACE_BYTES)
    try:
        frame = pd.read_csv(
            io.StringIO(text), dtype=str, keep_default_na=False, skip_blank_lines=False
        )
    except pd.errors.EmptyDataError:
        raise ScenarioError("trace file is empty", file=file) from None
    except pd.errors.ParserError as exc:
        # pandas words this as "Expected 3 fields in line 7, saw 4" with a 1-based line number.
        found = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(exc))
        if found:
            expected, line, saw = found.groups()
            reason = f"{saw} fields where the header has {expected}"
            raise ScenarioError(reason, file=file, path=f"line {line}") from None
        raise ScenarioError(f"malformed CSV: {' '.join(str(exc).split())}", file=file) from None

    time_col, prompt_col, output_col = COLUMNS[fmt]
    _check_header(frame, (time_col, prompt_col, output_col, *extra_columns), fmt, file)

    frame = frame.fillna("")  # short rows come back as NaN even with keep_default_na=False
    blank = (frame[[time_col, prompt_col, output_col]].apply(lambda c: c.str.strip()) == "").all(
        axis=1
    )
    lines = np.arange(len(frame), dtype=np.int64)[~blank.to_numpy()] + 2
    frame = frame[~blank.to_numpy()]
    if len(frame) == 0:
        raise ScenarioError("trace has a header but no rows", file=file, path="line 1")

    times_raw = frame[time_col].str.strip()
    if fmt == "azure":
        seconds, valid_time = _azure_seconds(times_raw, lines, time_col, file)
    else:
        seconds = pd.to_numeric(times_raw, errors="coerce").to_numpy(dtype=np.float64)
        # beyond MAX_TIME_S a difference of two times could overflow (and no trace spans it)
        valid_time = np.isfinite(seconds) & (np.abs(seconds) <= MAX_TIME_S)
        seconds = seconds - (seconds[0] if valid_time[0] else 0.0)
    seconds = np.where(valid_time, seconds, np.nan)

    prompt, prompt_ok = _tokens(frame[prompt_col])
    output, output_ok = _tokens(frame[output_col])
    # A row counts as out of order when it is earlier than the row before it; NaN comparisons
    # are False, so an unparsable neighbour does not produce a second, misleading complaint.
    backwards = np.zeros(len(seconds), dtype=bool)
    backwards[1:] = seconds[1:] < seconds[:-1]

    checks: list[tuple[np.ndarray, str, pd.Series]] = [
        (~valid_time, f"unparsable {time_col} {{!r}}", times_raw),
        (
            backwards,
            f"{time_col} {{!r}} is earlier than the previous row (out of order)",
            times_raw,
        ),
        (~prompt_ok, f"{prompt_col} {{!r}} is not a non-negative integer", frame[prompt_col]),
        (prompt > MAX_TOKENS, f"{prompt_col} {{!r}} is above {MAX_TOKENS}", frame[prompt_col]),
        (
            prompt_ok & (prompt == 0),
            f"{prompt_col} is 0 (a request needs >= 1 prompt token)",
            frame[prompt_col],
        ),
        (~output_ok, f"{output_col} {{!r}} is not a non-negative integer", frame[output_col]),
        (output > MAX_TOKENS, f"{output_col} {{!r}} is above {MAX_TOKENS}", frame[output_col]),
    ]
    for name in extra_columns:
        values = frame[name].str.strip()
        checks.append(((values == "").to_numpy(), f"{name} is empty", values))
    bad = np.zeros(len(frame), dtype=bool)
    for mask, _, _ in checks:
        bad |= mask
    if bad.any():
        row = int(np.argmax(bad))
        mask, template, values = next(check for check in checks if check[0][row])
        reason = template.format(values.iloc[row])
        num_bad = int(bad.sum())
        if num_bad > 1:
            reason += f" ({num_bad} bad rows in total)"
        raise ScenarioError(reason, file=file, path=f"line {lines[row]}")

    zero_output = output == 0
    return TraceData(
        arrival_s=seconds,
        prompt_tokens=prompt,
        output_tokens=np.where(zero_output, 1, output),
        num_zero_output=int(zero_output.sum()),
        extra={name: frame[name].str.strip().to_numpy(dtype=str) for name in extra_columns},
    )


def _azure_seconds(
    times_raw: pd.Series, lines: np.ndarray, column: str, file: str
) -> tuple[np.ndarray, np.ndarray]:
    """Seconds after the first row, and a mask of parsable rows, from ISO 8601 timestamps.

    Timestamps either all carry a UTC offset (then they are compared in UTC, so a trace that
    crosses a daylight-saving change stays in order) or none does (local wall-clock time);
    a mix is ambiguous and refused. A timestamp outside `TIMESTAMP_YEARS` is refused as such:
    it is a corrupt row, not an out-of-order one."""
    has_offset = times_raw.str.contains(_OFFSET, regex=True).to_numpy(dtype=bool)
    if has_offset.any() and not has_offset.all():
        row = int(np.argmax(has_offset != has_offset[0]))
        this, other = ("has a", "none") if has_offset[row] else ("has no", "one")
        raise ScenarioError(
            f"{column} {times_raw.iloc[row]!r} {this} UTC offset while line {lines[0]} has "
            f"{other} (mixed timezones): give every timestamp an offset, or none",
            file=file,
            path=f"line {lines[row]}",
        )
    stamps = pd.to_datetime(times_raw, format="ISO8601", errors="coerce", utc=bool(has_offset[0]))
    lo, hi = (pd.Timestamp(f"{year}-01-01", tz=stamps.dt.tz) for year in TIMESTAMP_YEARS)
    outside = (stamps.notna() & ((stamps < lo) | (stamps >= hi))).to_numpy(dtype=bool)
    # years pandas cannot hold at nanosecond resolution come back unparsed: read the year itself
    year = pd.to_numeric(times_raw.str.extract(r"^(\d{4})-", expand=False), errors="coerce")
    year_np = year.to_numpy(dtype=float)
    outside = outside | (year_np < TIMESTAMP_YEARS[0]) | (year_np >= TIMESTAMP_YEARS[1])
    if outside.any():
        row = int(np.argmax(outside))
        count = int(outside.sum())
        more = f" ({count} such rows in total)" if count > 1 else ""
        raise ScenarioError(
            f"{column} {times_raw.iloc[row]!r} is outside the supported years "
            f"{TIMESTAMP_YEARS[0]}-{TIMESTAMP_YEARS[1] - 1}{more}",
            file=file,
            path=f"line {lines[row]}",
        )
    valid = stamps.notna().to_numpy()
    nanos = stamps.dt.tz_localize(None) if stamps.dt.tz is not None else stamps
    nanos_i = nanos.to_numpy(dtype="datetime64[ns]").astype(np.int64)
    first = nanos_i[0] if valid[0] else 0
    # Integer nanoseconds first, then float: keeps sub-microsecond spacing exact enough.
    return (nanos_i - first).astype(np.float64) / 1e9, valid


def _check_header(frame: pd.DataFrame, expected: tuple[str, ...], fmt: str, file: str) -> None:
    """Exactly the expected columns, in any order; whitespace around names is forgiven."""
    frame.columns = [str(name).strip() for name in frame.columns]
    found = list(frame.columns)
    missing = [name for name in expected if name not in found]
    extra = [name for name in found if name not in expected]
    problems = []
    if missing:
        problems.append(f"missing column(s) {', '.join(missing)}")
    if extra:
        problems.append(f"unexpected column(s) {', '.join(extra)}")
    if problems:
        reason = "; ".join(problems) + f" (format {fmt!r} expects {','.join(expected)})"
        raise ScenarioError(reason, file=file, path="line 1")


def _tokens(raw: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Parse a token column: int64 values (0 where bad) and a mask of valid entries."""
    values = pd.to_numeric(raw.str.strip(), errors="coerce").to_numpy(dtype=np.float64)
    # Accept "12.0" (some exporters write floats) but not 12.5, negatives, NaN or infinity.
    ok = np.isfinite(values) & (values >= 0) & (np.floor(values) == values)
    # checked as floats before the int64 conversion: anything above MAX_TOKENS is kept as
    # MAX_TOKENS + 1 (exact in both), for the caller to refuse by name
    capped = np.minimum(np.where(ok, values, 0), MAX_TOKENS + 1)
    return capped.astype(np.int64), ok
