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
    num_prefills            prompt chunks among the sequences (optional; default: a prefill
                            step's num_seqs, one in a mixed step)
    prefill_prefix_tokens   tokens cached before each prompt chunk (optional; default 0)

Rows of kind `linear` time a step without its attention (the linear layers, norms, rotary,
embedding and LM head on one sequence): they give a table profile its token axis and are left
out of the fits. An optional `weight` column weights each row in the fit.

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
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from calibration.filters import parse_filter, parse_weight
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
    "num_prefills",
    "prefill_prefix_tokens",
)
OPTIONAL_COLUMNS = ("num_prefills", "prefill_prefix_tokens")  # written empty when not measured
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
    num_prefills: FloatArray | None = None  # None: derived (see `prompts`)
    prefill_prefix_tokens: FloatArray | None = None  # None: every chunk starts a prompt
    weight: FloatArray | None = None  # None: every row weighs 1

    def __len__(self) -> int:
        return len(self.step_s)

    @property
    def prompts(self) -> FloatArray:
        """Prompt chunks per row: given, else a prefill step's sequences or one in a mixed step."""
        if self.num_prefills is not None:
            return self.num_prefills
        prefill = np.asarray(self.kind) == "prefill"
        return np.where(self.num_prefill_tokens > 0, np.where(prefill, self.num_seqs, 1.0), 0.0)

    @property
    def prefix(self) -> FloatArray:
        if self.prefill_prefix_tokens is not None:
            return self.prefill_prefix_tokens
        return np.zeros(len(self))

    @property
    def causal_pairs(self) -> FloatArray:
        """sum over chunks of chunk * (prefix + chunk / 2), the chunks of a row being equal."""
        p = self.num_prefill_tokens
        chunk = p / np.maximum(self.prompts, 1.0)
        return p * (self.prefix + chunk / 2)

    @property
    def weights(self) -> FloatArray:
        return self.weight if self.weight is not None else np.ones(len(self))

    def select(self, rows: npt.NDArray[np.bool_]) -> StepTable:
        """The rows where `rows` is True."""
        arrays = {k: getattr(self, k)[rows] for k in ARRAY_COLUMNS}
        return StepTable(
            kind=tuple(k for k, keep in zip(self.kind, rows, strict=True) if keep),
            **arrays,
            notes=self.notes,
            num_prefills=self.prompts[rows],
            prefill_prefix_tokens=self.prefix[rows],
            weight=self.weights[rows],
        )


def meta_path(csv_path: Path) -> Path:
    return csv_path.with_name(csv_path.stem + ".meta.json")


def write_raw(path: Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    """Write benchmark rows (dicts keyed by RAW_COLUMNS) and the metadata sidecar."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=RAW_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {
                    k: _fmt(row[k]) if k in row or k not in OPTIONAL_COLUMNS else ""
                    for k in RAW_COLUMNS
                }
            )
    meta_path(path).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def _fmt(value: Any) -> str:
    # six significant digits keep the committed CSVs small without losing any measured precision
    return f"{value:.6g}" if isinstance(value, float) else str(value)


MAX_META_BYTES = 1 << 20  # the benchmark writes a few KB
MAX_META_DEPTH = 20  # it nests three levels; the profile's YAML must stay writable


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def read_meta(csv_path: Path) -> dict[str, Any]:
    """The sidecar metadata of a raw CSV, or {} for timings measured elsewhere (no sidecar).

    A sidecar that is there but unusable (not a file, not UTF-8, not JSON, not an object, NaN or
    Infinity, absurdly deep) is a `ScenarioError` naming it: its content goes into the profile's
    provenance, so it is never silently dropped nor trusted blindly."""
    path = meta_path(csv_path)
    if not os.path.lexists(path):
        return {}
    file = str(path)
    text = read_text(path, "metadata sidecar", max_bytes=MAX_META_BYTES)
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ScenarioError(
            f"not JSON: {exc.msg} (column {exc.colno})", file=file, path=f"line {exc.lineno}"
        ) from None
    except ValueError as exc:
        raise ScenarioError(f"not JSON: {exc}", file=file) from None
    except RecursionError:
        raise ScenarioError(f"nested deeper than {MAX_META_DEPTH} levels", file=file) from None
    if not isinstance(data, dict):
        raise ScenarioError(f"expected a JSON object, got {type(data).__name__}", file=file)
    if _depth(data) > MAX_META_DEPTH:
        raise ScenarioError(f"nested deeper than {MAX_META_DEPTH} levels", file=file)
    return data


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


def read_steps(
    path: Path,
    filters: list[str] | tuple[str, ...] = (),
    weights: list[str] | tuple[str, ...] = (),
    *,
    keep_linear: bool = False,
) -> StepTable:
    """Read step timings in any accepted format; bad input is a ScenarioError naming the line.

    `filters` keep the rows matching all of them, `weights` multiply matching rows' weights
    (`calibration.filters`); attention-free `linear` rows are dropped unless `keep_linear`."""
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
    wanted = [parse_filter(f) for f in filters]
    weighted = [parse_weight(w) for w in weights]
    for flt in wanted + [w for w, _ in weighted]:
        if flt.column not in header:
            raise ScenarioError(
                f"no column {flt.column!r} to filter on", file=file, path="--filter"
            )
    cols: dict[str, list[float]] = {c: [] for c in (*ARRAY_COLUMNS, *_EXTRA_ARRAYS)}
    kinds: list[str] = []
    skipped: list[int] = []
    linear = 0
    # a fit mixes no models or GPUs: a file of several must be filtered down to one
    identities: dict[str, set[str]] = {c: set() for c in ("model", "gpu") if c in header}
    for line, row in enumerate(reader, start=2):
        row = {k.strip(): (v or "").strip() for k, v in row.items() if k is not None}
        if not all(flt.matches(row) for flt in wanted):
            continue
        if row.get("kind") == "linear" and not keep_linear:
            linear += 1
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
        weight = _number(row["weight"], file, line, "weight") if row.get("weight") else 1.0
        for flt, factor in weighted:
            if flt.matches(row):
                weight *= factor
        features["weight"] = weight
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
    notes = [f"skipped {len(skipped)} row(s) without step_s: lines {skipped}"] if skipped else []
    if linear:
        notes.append(f"left {linear} attention-free (linear) row(s) out of the fit")
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in cols.items()}
    return StepTable(
        kind=tuple(kinds),
        **{k: arrays[k] for k in ARRAY_COLUMNS},
        notes=tuple(notes),
        num_prefills=arrays["num_prefills"],
        prefill_prefix_tokens=arrays["prefill_prefix_tokens"],
        weight=arrays["weight"],
    )


# the numeric step features and the median time: the raw columns between `kind` and the spread
ARRAY_COLUMNS = RAW_COLUMNS[1 : RAW_COLUMNS.index("step_s") + 1]
_EXTRA_ARRAYS = ("num_prefills", "prefill_prefix_tokens", "weight")


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
        prompts = 0.0 if not prefill else b if kind in ("prefill", "linear") else 1.0
        return {
            "kind": kind,
            "num_seqs": b,
            "num_tokens": n,
            "num_prefill_tokens": prefill,
            "context_tokens_per_seq": context,
            "sum_context_tokens": num("sum_context_tokens"),
            "prefill_attention_term": num("prefill_attention_term", 0.0),
            "num_prefills": num("num_prefills", prompts),
            "prefill_prefix_tokens": num("prefill_prefix_tokens", 0.0),
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
            "num_prefills": 0.0,
            "prefill_prefix_tokens": 0.0,
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
            "num_prefills": b,
            "prefill_prefix_tokens": context,
        }
    raise ScenarioError(
        f"kind must be decode or prefill in this format, got {kind!r} (mixed steps need the "
        "sum_context_tokens and prefill_attention_term columns)",
        file=file,
        path=f"line {line}",
    )
