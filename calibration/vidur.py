"""Table profiles from Vidur's published per-operation GPU timings: `batchsim profile import`.

Vidur (Agrawal et al., MLSys 2024) publishes, per GPU and model, the time of each operation of
one transformer layer at each token count (`compute/<gpu>/<org>/<model>/mlp.csv.gz`, medians in
milliseconds, per tensor-parallel degree), and collective times by message size
(`network/<node>/all_reduce.csv.gz`). A table profile for a catalog model, GPU and
tensor-parallel degree takes:

- linear layers at each measured token count: `num_layers x` the sum of one layer's operations
  (input and post-attention norms, QKV and output projections, rotary, MLP up, activation and
  down, the residual add: Vidur's block time without attention) `+` the embedding once; with
  tp > 1 also two all-reduces per layer of `tokens x hidden x 2` bytes from the node's measured
  all-reduce times (rank 0, all GPUs of one node), interpolated in message size;
- attention from the attention table next to it when there is one (`attention.csv.gz`, or
  `attention_analytic_standin.csv.gz`, whose times come from an analytic roofline and not from a
  GPU: its `attention_backend` column says so and the profile's provenance repeats it):
  decode (`attn_decode + attn_kv_cache_save`) by batch and cached tokens, prefill
  (`attn_prefill + attn_kv_cache_save`) by chunk and prefix, each `x num_layers`; else from the
  roofline model of the same model and GPU (`t_kv`, `t_attn`).

Nothing needs torch or a GPU. The source's commit and license come from the README next to the
data and go into each profile's provenance with the files' SHA-256 and what was summed.

Every file is checked as it is read: a file that is not gzip, not UTF-8 CSV, lacks a column the
import needs, or holds a count or time out of range is one `ScenarioError` naming the file, the
line and the column. The output folder and every profile file are checked before anything is
computed (`sim.io.destination`: a real, writable folder, never the filesystem root; a file is
replaced only when batchsim wrote it), and each file is written atomically.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from calibration.table_build import (
    Grid,
    average,
    fallback_fit_block,
    fallback_for_linear,
    fallback_for_tables,
    grid_from_points,
    make_profile,
)
from sim.costs.catalog import HARDWARE, MODELS, HardwareSpec, ModelSpec
from sim.costs.fits import check_parallelism, min_tensor_parallel
from sim.costs.profile import (
    LINK_NOTE,
    Profile,
    allreduce_terms,
    roofline_file_name,
    roofline_profile,
    save_profile,
)
from sim.errors import ScenarioError
from sim.inputs.text import decode_utf8
from sim.io.destination import check_file_destination, check_out_folder

# Vidur's model folders and GPU names -> catalog names (Vidur profiled A100 80GB SXM4 and H100
# 80GB SXM5 in DGX nodes, and A40 48GB, for which it published no collective timings)
MODEL_NAMES = {
    "meta-llama/Llama-2-7b-hf": "llama-2-7b",
    "meta-llama/Llama-2-70b-hf": "llama-2-70b",
    "meta-llama/Meta-Llama-3-8B": "llama-3-8b",
    "meta-llama/Meta-Llama-3-70B": "llama-3-70b",
    "codellama/CodeLlama-34b-Instruct-hf": "codellama-34b",
}
GPU_NAMES = {"a100": "a100-80g", "h100": "h100-sxm", "a40": "a40"}
NETWORK_NODES = {"a100": "a100_dgx", "h100": "h100_dgx"}
LINEAR_OPS = (
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
)
ATTENTION_FILES = ("attention.csv.gz", "attention_analytic_standin.csv.gz")
DIGITS = 6  # significant digits kept (the medians have 3-4)
# Vidur's files are a few MB uncompressed; more is not a timings file (or a decompression bomb)
MAX_TEXT_BYTES = 256 << 20
MAX_COUNT = 10**9  # tokens, batch sizes, cached tokens, message bytes, workers
MAX_MEDIAN_MS = 1e7  # a few hours: no single operation takes longer
MLP_COLUMNS = (
    "num_tokens",
    "num_tensor_parallel_workers",
    *(f"time_stats.{op}.median" for op in ("emb", *LINEAR_OPS)),
)
NETWORK_COLUMNS = ("num_workers", "devices_per_node", "size", "time_stats.all_reduce.median")
ATTENTION_COLUMNS = (
    "num_tensor_parallel_workers",
    "is_prefill",
    "batch_size",
    "prefill_chunk_size",
    "kv_cache_size",
    "time_stats.attn_kv_cache_save.median",
)


class Row(dict[str, str]):
    """One CSV record, with the line it was read from (for error messages)."""

    line: int = 0


@dataclass(frozen=True)
class Source:
    """One model's timings on one GPU in a Vidur profiling tree."""

    root: Path
    gpu: str  # Vidur's name: a100, h100, a40
    model_dir: str  # org/model, e.g. meta-llama/Llama-2-7b-hf

    @property
    def folder(self) -> Path:
        return self.root / "compute" / self.gpu / self.model_dir

    @property
    def mlp(self) -> Path:
        return self.folder / "mlp.csv.gz"

    @property
    def attention(self) -> Path | None:
        return next((p for n in ATTENTION_FILES if (p := self.folder / n).is_file()), None)

    @property
    def catalog(self) -> tuple[str, str] | None:
        """(model, GPU) catalog names, or None when either is not in the catalog."""
        model, gpu = MODEL_NAMES.get(self.model_dir), GPU_NAMES.get(self.gpu)
        return (model, gpu) if model and gpu else None


def discover(root: Path) -> list[Source]:
    """Every (GPU, model) with an mlp.csv.gz under `root/compute`."""
    if not (root / "compute").is_dir():
        raise ScenarioError("no compute/ folder: not a Vidur profiling tree", file=str(root))
    found = []
    for path in sorted((root / "compute").glob("*/*/*/mlp.csv.gz")):
        rel = path.parent.relative_to(root / "compute")
        found.append(Source(root, rel.parts[0], "/".join(rel.parts[1:])))
    return found


def read_rows(path: Path, required: tuple[str, ...] = ()) -> list[Row]:
    """The records of a gzip-compressed CSV that has every `required` column, each complete."""
    file = str(path)
    try:
        with gzip.open(path, "rb") as f:
            data = f.read(MAX_TEXT_BYTES + 1)
    except gzip.BadGzipFile:
        raise ScenarioError("not a gzip file (expected a gzip-compressed CSV)", file=file) from None
    except (EOFError, zlib.error):
        raise ScenarioError("corrupt or truncated gzip data", file=file) from None
    except OSError as exc:
        raise ScenarioError(f"cannot read: {exc.strerror or exc}", file=file) from None
    if len(data) > MAX_TEXT_BYTES:
        raise ScenarioError(f"more than {MAX_TEXT_BYTES >> 20} MiB of CSV text", file=file)
    text = decode_utf8(data, file)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows: list[Row] = []
    try:
        header = reader.fieldnames or []
        if not header:
            raise ScenarioError("empty file: expected a CSV header and rows", file=file)
        missing = [c for c in required if c not in header]
        if missing:
            raise ScenarioError(
                f"header lacks column {missing[0]!r}"
                + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""),
                file=file,
                path="line 1",
            )
        for record in reader:
            row = Row(record)
            row.line = reader.line_num
            if None in record or any(record.get(c) is None for c in header):
                raise ScenarioError(
                    f"a record of {len(header)} fields expected", file=file, path=f"line {row.line}"
                )
            rows.append(row)
    except csv.Error as exc:
        raise ScenarioError(f"not CSV: {exc}", file=file, path=f"line {reader.line_num}") from None
    return rows


def _int(row: Row, column: str, path: Path, low: int = 1, high: int = MAX_COUNT) -> int:
    """An integer column of a record (`4096` or `4096.0`), between `low` and `high`."""
    text = (row.get(column) or "").strip()
    try:
        value = int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            number = float("nan")
        if not number.is_integer():  # nan, inf and fractions alike
            raise ScenarioError(
                f"{column} must be an integer, got {text!r}",
                file=str(path),
                path=f"line {row.line}",
            ) from None
        value = int(number)
    if not low <= value <= high:
        raise ScenarioError(
            f"{column} must be in [{low}, {high}], got {text}", file=str(path),
            path=f"line {row.line}",
        )  # fmt: skip
    return value


def _median(row: Row, op: str, path: Path) -> float:
    column = f"time_stats.{op}.median"
    text = row.get(column, "")
    try:
        value = float(text)
    except ValueError:
        raise ScenarioError(
            f"no median time of {op} ({text!r})", file=str(path), path=f"line {row.line}"
        ) from None
    if not 0 <= value <= MAX_MEDIAN_MS:  # also refuses nan
        raise ScenarioError(
            f"{column} must be a time in [0, {MAX_MEDIAN_MS:g}] ms, got {text}",
            file=str(path),
            path=f"line {row.line}",
        )
    return value


def _round(x: float) -> float:
    return float(f"{x:.{DIGITS}g}")


def _check_model(row: Row, model: ModelSpec, path: Path) -> None:
    dims = {
        "n_embd": model.hidden_size,
        "n_head": model.num_attention_heads,
        "n_kv_head": model.num_kv_heads,
    }
    for column, want in dims.items():
        if column in row and _int(row, column, path) != want:
            raise ScenarioError(
                f"{column} is {row[column]}, catalog {model.name} has {want}",
                file=str(path),
                path=f"line {row.line}",
            )


def linear_layers(source: Source, model: ModelSpec, tp: int) -> tuple[list[int], list[float]]:
    """Seconds of one step's linear layers at each measured token count (without all-reduce)."""
    path = source.mlp
    rows = [
        r
        for r in read_rows(path, MLP_COLUMNS)
        if _int(r, "num_tensor_parallel_workers", path) == tp
    ]
    if not rows:
        raise ScenarioError(f"no rows for {tp} tensor-parallel workers", file=str(path))
    _check_model(rows[0], model, path)
    per_layer = average(
        ((_int(r, "num_tokens", path), 0), sum(_median(r, op, path) for op in LINEAR_OPS))
        for r in rows
    )
    emb = average(((_int(r, "num_tokens", path), 0), _median(r, "emb", path)) for r in rows)
    tokens = sorted(n for n, _ in per_layer)
    seconds = [(model.num_layers * per_layer[(n, 0)] + emb[(n, 0)]) * 1e-3 for n in tokens]
    return tokens, seconds


def _network_file(root: Path, gpu: str) -> Path:
    return root / "network" / NETWORK_NODES.get(gpu, f"{gpu}_dgx") / "all_reduce.csv.gz"


def allreduce_seconds(
    root: Path, gpu: str, tp: int, sizes: np.ndarray
) -> tuple[np.ndarray, dict[str, Any]]:
    """Seconds of one all-reduce of each message size among `tp` GPUs of one node."""
    path = _network_file(root, gpu)
    if not path.is_file():
        raise ScenarioError(f"no all-reduce timings for {gpu} (needed at tp {tp})", file=str(path))
    rows = [
        r
        for r in read_rows(path, NETWORK_COLUMNS)
        if _int(r, "num_workers", path) == tp
        and _int(r, "devices_per_node", path) == tp
        and r.get("rank", "0") == "0"
    ]
    if not rows:
        raise ScenarioError(f"no all-reduce rows for {tp} GPUs in one node", file=str(path))
    by_size = average(((_int(r, "size", path), 0), _median(r, "all_reduce", path)) for r in rows)
    xs = np.asarray(sorted(s for s, _ in by_size), dtype=np.float64)
    ys = np.asarray([by_size[(int(s), 0)] for s in xs]) * 1e-3
    info = {
        "file": str(path),
        "sha256": _sha256(path),
        "rows": f"num_workers = devices_per_node = {tp}, rank 0",
        "sizes_outside_measured": int(((sizes < xs[0]) | (sizes > xs[-1])).sum()),
    }
    return np.interp(sizes, xs, ys), info  # clamped at either end (counted above)


def attention_grids(
    path: Path, model: ModelSpec, tp: int
) -> tuple[Grid | None, Grid | None, list[str]]:
    """Decode (batch x cached tokens) and prefill (chunk x prefix) attention grids, seconds for
    all layers, and the attention backends the file names."""
    rows = [
        r
        for r in read_rows(path, ATTENTION_COLUMNS)
        if _int(r, "num_tensor_parallel_workers", path) == tp
    ]
    if not rows:
        return None, None, []
    decode, prefill = [], []
    for r in rows:
        save = _median(r, "attn_kv_cache_save", path)
        if r["is_prefill"] not in ("True", "False"):
            raise ScenarioError(
                f"is_prefill must be True or False, got {r['is_prefill']!r}",
                file=str(path),
                path=f"line {r.line}",
            )
        if r["is_prefill"] == "True":
            if _int(r, "batch_size", path) != 1:
                continue
            key = (_int(r, "prefill_chunk_size", path), _int(r, "kv_cache_size", path, low=0))
            prefill.append(
                (key, (_median(r, "attn_prefill", path) + save) * model.num_layers * 1e-3)
            )
        else:
            key = (_int(r, "batch_size", path), _int(r, "kv_cache_size", path, low=0))
            decode.append((key, (_median(r, "attn_decode", path) + save) * model.num_layers * 1e-3))
    backends = sorted({r.get("attention_backend", "") for r in rows} - {""})
    return (
        _rounded(grid_from_points(average(decode))) if decode else None,
        _rounded(grid_from_points(average(prefill))) if prefill else None,
        backends,
    )


def _rounded(grid: Grid) -> Grid:
    first, second, rows = grid
    return first, second, [[None if v is None else _round(v) for v in row] for row in rows]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def source_info(root: Path) -> dict[str, Any]:
    """Repository, commit, license and copyright as the tree's README states them."""
    readme = root / "README.md"
    # only searched for a few phrases: a stray byte must not stop the import
    text = readme.read_bytes()[:1 << 20].decode("utf-8", "replace") if readme.is_file() else ""

    def find(pattern: str) -> str:
        match = re.search(pattern, text)
        return match.group(1) if match else "unknown (no README.md stating it)"

    return {
        "repository": find(r"repository\s+([\w.-]+/[\w.-]+)"),
        "commit": find(r"commit\s+([0-9a-f]{7,40})"),
        "license": find(r"(MIT|Apache[- ]2\.0|BSD[- ]\d-Clause)\s+License"),
        "copyright": find(r"Copyright \(c\) ([^\n.]+)"),
    }


def import_profile(source: Source, hardware: HardwareSpec, model: ModelSpec) -> Profile:
    """The table profile of one Vidur source on `hardware` (its tensor-parallel degree)."""
    tp = hardware.tensor_parallel
    roofline = roofline_profile(model, hardware)
    tokens, seconds = linear_layers(source, model, tp)
    summed = (
        f"linear(n) = {model.num_layers} layers x ({' + '.join(LINEAR_OPS)}) + emb, medians "
        "of mlp.csv.gz at n tokens"
    )
    provenance: dict[str, Any] = {
        "generator": "batchsim profile import (calibration/vidur.py)",
        "origin": "Vidur per-operation GPU timings",
        "source": source_info(source.root)
        | {
            "root": str(source.root),
            "path": str(source.folder.relative_to(source.root)),
            "files": {source.mlp.name: _sha256(source.mlp)},
            "gpu": source.gpu,
            "model_dir": source.model_dir,
        },
        "model": model.model_dump(exclude_none=True),
        "device": {"name": hardware.name, "tensor_parallel": tp},
        "dtype": "bf16 (Vidur profiles fp16/bf16 kernels)",
        "summed": {"linear": summed},
    }
    notes = {"linear": summed}
    network = _network_file(source.root, source.gpu)
    if tp > 1 and network.is_file():
        sizes = np.asarray(tokens, dtype=np.float64) * model.hidden_size * 2
        allreduce, info = allreduce_seconds(source.root, source.gpu, tp, sizes)
        seconds = (np.asarray(seconds) + 2 * model.num_layers * allreduce).tolist()
        provenance["summed"]["allreduce"] = (
            f"+ 2 x {model.num_layers} all-reduces of n x {model.hidden_size} x 2 bytes"
        )
        provenance["source"]["allreduce"] = info
    elif tp > 1:  # no measured collectives for this GPU: the roofline's link model, said so
        per_step, per_token = allreduce_terms(model, hardware)
        seconds = [s + per_step + per_token * n for s, n in zip(seconds, tokens, strict=True)]
        provenance["summed"]["allreduce"] = (
            f"+ 2 x {model.num_layers} all-reduces of n x {model.hidden_size} x 2 bytes, "
            "ANALYTIC (not measured): the roofline's ring over the datasheet link, "
            f"{per_step:.6g} s per step + {per_token:.6g} s per token"
        )
        provenance["source"]["allreduce"] = {
            "analytic": True,
            "missing": str(network.relative_to(source.root)),
            "link_bytes_per_s": hardware.interconnect_bandwidth_bytes_per_s,
            "note": LINK_NOTE,
        }
        notes["allreduce"] = "ANALYTIC link model, not measured"
    seconds = [_round(s) for s in seconds]
    decode = prefill = None
    attention = source.attention
    if attention is not None:
        decode, prefill, backends = attention_grids(attention, model, tp)
        provenance["source"]["files"][attention.name] = _sha256(attention)
        synthetic = any("SYNTHETIC" in b.upper() for b in backends) or "standin" in attention.name
        provenance["attention"] = {
            "file": attention.name,
            "backend": backends,
            "synthetic": synthetic,
            "summed": "(attn_decode or attn_prefill + attn_kv_cache_save) x layers",
        }
        if synthetic:
            provenance["attention"]["note"] = (
                "SYNTHETIC: these attention times come from an analytic roofline of "
                "FlashAttention-class kernels, not from a GPU"
            )
            notes["attention"] = "SYNTHETIC analytic stand-in, not measured"
    if decode is None and prefill is None:
        provenance["attention"] = {
            "from": "roofline model of the same model and GPU (t_kv, t_attn)",
            "roofline": roofline.coefficients.model_dump(exclude_none=True),
        }
        form, coefficients, report = fallback_for_linear(tokens, seconds, roofline.coefficients)
        what = "the linear table (t_mem, token slopes); attention coefficients from the roofline"
    else:
        draft = make_profile(
            name="draft", source="imported", linear=(tokens, seconds), decode=decode,
            prefill=prefill, coefficients=roofline.coefficients, form="extended",
            provenance={},
        )  # fmt: skip
        form, coefficients, report = fallback_for_tables(draft)
        what = "steps priced by the tables on a subsample of their grids"
    provenance["fallback_fit"] = fallback_fit_block(report, what)
    return make_profile(
        name=f"vidur-{Path(roofline_file_name(model, hardware)).stem}",
        source="imported",
        linear=(tokens, seconds),
        decode=decode,
        prefill=prefill,
        coefficients=coefficients,
        form=form,
        provenance=provenance,
        notes=notes,
    )


def resolve(source: Source, tp: int | None) -> tuple[ModelSpec, HardwareSpec]:
    names = source.catalog
    if names is None:
        raise ScenarioError(f"{source.gpu}/{source.model_dir} has no catalog model and GPU")
    model, base = MODELS[names[0]], HARDWARE[names[1]]
    if tp is not None and not 1 <= tp <= 1024:  # 0 or -2 would otherwise quietly become the default
        raise ScenarioError(f"{tp} must be from 1 to 1024", path="--tensor-parallel")
    tp = tp or min_tensor_parallel(model, base)
    if tp is None:
        raise ScenarioError(f"{model.name} does not fit on {base.name} at any degree")
    hardware = base.with_tensor_parallel(tp) if tp > 1 else base
    try:
        check_parallelism(model, hardware)
    except ValueError as exc:
        raise ScenarioError(
            f"{tp} cannot shard {model.name} on {base.name}: "
            + str(exc).replace(f"hardware.tensor_parallel ({tp}) ", ""),
            path="--tensor-parallel",
        ) from None
    return model, hardware


def import_tree(
    root: Path,
    out_dir: Path,
    *,
    model: str | None = None,
    hardware: str | None = None,
    tensor_parallel: int | None = None,
) -> tuple[list[Path], list[str]]:
    """Import every catalog (model, GPU) of the tree, or the one named; returns the files
    written and the sources left out (with why)."""
    check_out_folder(out_dir)
    skipped: list[str] = []
    chosen: list[tuple[Source, ModelSpec, HardwareSpec, Path]] = []
    for source in discover(root):
        names = source.catalog
        if names is None:
            skipped.append(f"{source.gpu}/{source.model_dir}: not in the catalog")
            continue
        if (model and names[0] != model) or (hardware and names[1] != hardware):
            continue
        spec, hw = resolve(source, tensor_parallel)
        path = out_dir / roofline_file_name(spec, hw)
        check_file_destination(path)  # before any work, and before any file is written
        chosen.append((source, spec, hw, path))
    if not chosen and (model or hardware):
        raise ScenarioError(
            f"no Vidur timings of {model or 'any model'} on {hardware or 'any GPU'}"
        )
    # every profile is built before the first is written: a bad file leaves the folder as it was
    profiles = [(import_profile(source, hw, spec), path) for source, spec, hw, path in chosen]
    for profile, path in profiles:
        save_profile(profile, path)
    return [path for _, path in profiles], skipped
