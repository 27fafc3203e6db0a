"""Step timings on disk: the raw CSV the benchmark writes and the formats `batchsim fit` reads.

The raw CSV has one row per timed step shape, in the feature vocabulary of `sim.core.plan.StepPlan`:

    kind                    decode | prefill | mixed
    num_seqs                sequences in the step (B; a mixed step counts its prefill prompts too)
    num_tokens              tokens computed: decodes + prefill tokens
    num_prefill_tokens      prompt tokens among them
    context_tokens_per_seq  cached tokens each decode attends over before the step (L; 0 if none)
    sum_context_tokens      KV tokens read, counted after the step as the simulator does
    prefill_attention_term  sum over prefill chunks of chunk * context after the step
    step_s                  median step time in seconds (full model depth)
    step_s_p10, step_s_p90  spread over the repeats
    repeats                 timed repeats behind the median

Metadata (device, probes, versions, model dimensions, layers timed and scaling) lives in a sidecar
`<name>.meta.json` next to the CSV, so the CSV stays a plain table.

`read_steps` also accepts timings measured elsewhere: the simple external format
`num_seqs,num_tokens,sum_context_tokens,step_s` (optional `num_prefill_tokens`,
`prefill_attention_term`, default 0), and the reference format of
`shared/reference-timings/a100_step_times.csv` (`kind`, `context_tokens_per_seq`, no attention
term), whose features are recomputed the way the simulator prices a step: a decode row reads
B * (L + 1) context tokens, a prefill row of B prompts of c tokens each reads B * (L + c) and has
an attention term of B * c * (L + c). Rows with an empty `step_s` are skipped with a note.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from sim.errors import ScenarioError
from sim.inputs.text import read_text

RAW_COLUMNS = (
    "kind",
    "num_seqs",
    "num_tokens",
    "num_prefill_tokens",
    "context_tokens_per_seq",
    "sum_context_tokens",
    "prefill_attention_term",
    "step_s",
    "step_s_p10",
    "step_s_p90",
    "repeats",
)
_REQUIRED = ("num_seqs", "num_tokens", "sum_context_tokens", "step_s")
_REFERENCE = ("kind", "num_seqs", "num_tokens", "context_tokens_per_seq", "step_s")

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class StepTable:
    """Measured steps as parallel arrays (one entry per row kept)."""

    kind: tuple[str, ...]
    num_seqs: FloatArray
    num_tokens: FloatArray
    num_prefill_tokens: FloatArray
    context_tokens_per_seq: FloatArray
    sum_context_tokens: FloatArray
    prefill_attention_term: FloatArray
    step_s: FloatArray
    notes: tuple[str, ...] = field(default=())  # rows skipped and why, for the user

    def __len__(self) -> int:
        return len(self.step_s)


def meta_path(csv_path: Path) -> Path:
    return csv_path.with_name(csv_path.stem + ".meta.json")


def write_raw(path: Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    """Write benchmark rows (dicts keyed by RAW_COLUMNS) and the metadata sidecar."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=RAW_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _fmt(row[k]) for k in RAW_COLUMNS})
    meta_path(path).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def _fmt(value: Any) -> str:
    # six significant digits keep the committed CSVs small without losing any measured precision
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def read_meta(csv_path: Path) -> dict[str, Any]:
    """The sidecar metadata of a raw CSV, or {} for timings measured elsewhere."""
    path = meta_path(csv_path)
    return json.loads(path.read_text()) if path.is_file() else {}


def _number(text: str, file: str, line: int, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ScenarioError(
            f"{column} must be a number, got {text!r}", file=file, path=f"line {line}"
        ) from None
    if not np.isfinite(value) or value < 0:
        raise ScenarioError(f"{column} must be >= 0, got {text}", file=file, path=f"line {line}")
    return value


def _parse_filters(filters: list[str]) -> list[tuple[str, str]]:
    out = []
    for item in filters:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ScenarioError(f"a filter is COLUMN=VALUE, got {item!r}", path="--filter")
        out.append((key.strip(), value.strip()))
    return out


def read_steps(path: Path, filters: list[str] | tuple[str, ...] = ()) -> StepTable:
    """Read step timings in any accepted format; bad input is a ScenarioError naming the line."""
    file = str(path)
    if not path.is_file():
        raise ScenarioError("timings file not found", file=file)
    text = read_text(path, "timings file", max_bytes=None)  # a bad byte: its line, not a crash
    lines = [ln for ln in text.splitlines(keepends=True) if not ln.startswith("#")]
    reader = csv.DictReader(lines)
    header = [c.strip() for c in reader.fieldnames or []]
    if not header:
        raise ScenarioError("empty file: expected a CSV header and rows", file=file)
    reference = "prefill_attention_term" not in header and "context_tokens_per_seq" in header
    required = _REFERENCE if reference else _REQUIRED
    missing = [c for c in required if c not in header]
    if missing:
        raise ScenarioError(f"missing column(s) {', '.join(missing)}", file=file, path="header")
    wanted = _parse_filters(list(filters))
    for key, _ in wanted:
        if key not in header:
            raise ScenarioError(f"no column {key!r} to filter on", file=file, path="--filter")
    cols: dict[str, list[float]] = {c: [] for c in RAW_COLUMNS if c not in ("kind",)}
    kinds: list[str] = []
    skipped: list[int] = []
    # a fit mixes no models or GPUs: a file of several must be filtered down to one
    identities: dict[str, set[str]] = {c: set() for c in ("model", "gpu") if c in header}
    for line, row in enumerate(reader, start=2):
        row = {k.strip(): (v or "").strip() for k, v in row.items() if k is not None}
        if any(row.get(key) != value for key, value in wanted):
            continue
        for column, values in identities.items():
            values.add(row[column])
        if not row["step_s"]:
            skipped.append(line)
            continue
        step_s = _number(row["step_s"], file, line, "step_s")
        if step_s <= 0:
            raise ScenarioError(
                f"step_s must be > 0, got {row['step_s']}", file=file, path=f"line {line}"
            )
        features = _features(row, reference, file, line)
        kinds.append(str(features.pop("kind")))
        for key, value in features.items():
            cols[key].append(float(value))
        cols["step_s"].append(step_s)
    if not kinds:
        raise ScenarioError("no timed rows (after filters)", file=file)
    for column, values in identities.items():
        if len(values) > 1:
            names = sorted(values)
            raise ScenarioError(
                f"rows of several {column}s ({', '.join(names)}); select one with "
                f"--filter {column}={names[0]}",
                file=file,
            )
    notes = (f"skipped {len(skipped)} row(s) without step_s: lines {skipped}",) if skipped else ()
    return StepTable(
        kind=tuple(kinds),
        **{k: np.asarray(v, dtype=np.float64) for k, v in cols.items() if k in ARRAY_COLUMNS},
        notes=notes,
    )


# the numeric step features and the median time: the raw columns between `kind` and the spread
ARRAY_COLUMNS = RAW_COLUMNS[1 : RAW_COLUMNS.index("step_s") + 1]


def _features(row: dict[str, str], reference: bool, file: str, line: int) -> dict[str, Any]:
    """The simulator's features of one row, taken as given or derived (reference format)."""

    def num(column: str, default: float | None = None) -> float:
        text = row.get(column, "")
        if not text and default is not None:
            return default
        return _number(text, file, line, column)

    b, n = num("num_seqs"), num("num_tokens")
    if b < 1 or n < 1:
        raise ScenarioError("num_seqs and num_tokens must be >= 1", file=file, path=f"line {line}")
    if not reference:
        prefill = num("num_prefill_tokens", 0.0)
        context = num("context_tokens_per_seq", -1.0)
        if context < 0:  # external timings: the mean context of a decode is all we can tell
            decodes = max(b - (1 if prefill else 0), 1)
            context = max((num("sum_context_tokens") - prefill) / decodes - 1, 0.0)
        kind = row.get("kind") or (
            "decode" if prefill == 0 else "prefill" if n == prefill else "mixed"
        )
        return {
            "kind": kind,
            "num_seqs": b,
            "num_tokens": n,
            "num_prefill_tokens": prefill,
            "context_tokens_per_seq": context,
            "sum_context_tokens": num("sum_context_tokens"),
            "prefill_attention_term": num("prefill_attention_term", 0.0),
        }
    kind, context = row["kind"], num("context_tokens_per_seq")
    if kind == "decode":
        return {
            "kind": kind,
            "num_seqs": b,
            "num_tokens": n,
            "num_prefill_tokens": 0.0,
            "context_tokens_per_seq": context,
            "sum_context_tokens": b * (context + 1),
            "prefill_attention_term": 0.0,
        }
    if kind == "prefill":
        chunk = n / b
        return {
            "kind": kind,
            "num_seqs": b,
            "num_tokens": n,
            "num_prefill_tokens": n,
            "context_tokens_per_seq": context,
            "sum_context_tokens": b * (context + chunk),
            "prefill_attention_term": b * chunk * (context + chunk),
        }
    raise ScenarioError(
        f"kind must be decode or prefill in this format, got {kind!r} (mixed steps need the "
        "sum_context_tokens and prefill_attention_term columns)",
        file=file,
        path=f"line {line}",
    )
