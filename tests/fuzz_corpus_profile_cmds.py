"""The fuzz corpus, part 9: `batchsim profile import` and `profile table` (and `fit`, which
reads the same sidecar): corrupt Vidur files, corrupt raw-CSV sidecars, integer flags and
`--out`; and `--out` of `search` and `sweep` pointed at folders batchsim did not write.

Every case is generated from a valid input (`vidur_files`, `raw_files`: checked to import
cleanly by tests/costs/test_profile_out.py) with one thing broken, so each names what it broke: the
file and line or column, or the flag.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from typing import Any

from fuzz_corpus import BASE, Case, dump
from fuzz_corpus_search import _search

from calibration.vidur import LINEAR_OPS
from sim.costs.catalog import MODELS

STATS = ("min", "max", "mean", "median", "std")
TOKENS = (1, 8, 64, 512, 4096)
MODEL_DIR = "vidur/compute/a100/meta-llama/Llama-2-7b-hf"
MLP = f"{MODEL_DIR}/mlp.csv.gz"
ATTENTION = f"{MODEL_DIR}/attention.csv.gz"
NETWORK = "vidur/network/a100_dgx/all_reduce.csv.gz"
TARGET = "llama-2-7b_a100-80g.yaml"  # the file `profile import` writes for that source
IMPORT = ("profile", "import", "vidur", "--out", "out", "--hardware", "a100-80g")
TABLE = ("profile", "table", "raw.csv", "--out", "p")
INT_COLUMNS = ("num_tokens", "num_tensor_parallel_workers")
BAD_INTS = {"text": "abc", "nan": "nan", "inf": "inf", "neg": "-4", "huge": "1e30", "frac": "2.5"}
BAD_TIMES = {"text": "x", "nan": "nan", "neg": "-1", "huge": "1e300"}


def gz(text: str | bytes) -> bytes:
    return gzip.compress(text.encode() if isinstance(text, str) else text, mtime=0)


def table_text(header: list[str], rows: list[list[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def mlp_table(tps: tuple[int, ...] = (1, 2)) -> tuple[list[str], list[list[Any]]]:
    """Vidur's mlp.csv.gz columns for llama-2-7b: made-up medians, real model dimensions."""
    spec = MODELS["llama-2-7b"]
    ops = ("emb", *LINEAR_OPS)
    header = [f"time_stats.{op}.{s}" for op in ops for s in STATS]
    header += ["n_head", "n_kv_head", "n_embd", "num_tokens", "num_tensor_parallel_workers"]
    rows = []
    for tp in tps:
        for n in TOKENS:
            ms = [(0.01 + 1e-5 * n) / tp if s != "std" else 0.0 for _ in ops for s in STATS]
            dims = [spec.num_attention_heads, spec.num_kv_heads, spec.hidden_size]
            rows.append([*ms, *dims, n, tp])
    return header, rows


def attention_table() -> tuple[list[str], list[list[Any]]]:
    kinds = ("prefill", "decode", "kv_cache_save")
    header = [f"time_stats.attn_{k}.{s}" for k in kinds for s in STATS]
    header += ["num_tensor_parallel_workers", "batch_size", "prefill_chunk_size"]
    header += ["kv_cache_size", "is_prefill"]
    rows: list[list[Any]] = []
    for b in (1, 2):
        for kv in (32, 64):
            rows.append(["", "", "", "", "", *[0.01 * b] * 4, 0, *[0.004] * 4, 0,
                         1, b, 0, kv, False])  # fmt: skip
    for chunk in (32, 64):
        for prefix in (0, 64):
            rows.append([*[0.012] * 4, 0, "", "", "", "", "", *[0.005] * 4, 0,
                         1, 1, chunk, prefix, True])  # fmt: skip
    return header, rows


def network_table() -> tuple[list[str], list[list[Any]]]:
    header = [*[f"time_stats.all_reduce.{s}" for s in STATS], "rank", "num_workers", "size"]
    header += ["devices_per_node"]
    rows = [[*[0.02 + s * 1e-9] * 4, 0, 0, 2, s, 2] for s in (2048, 1 << 20, 1 << 26)]
    return header, rows


def vidur_files(**replace: bytes | None) -> dict[str, bytes | None]:
    """A valid Vidur tree (llama-2-7b on A100, tp 1 and 2, attention and all-reduce tables),
    with files replaced (a path -> its bytes, or None for a folder in its place)."""
    files: dict[str, bytes | None] = {
        MLP: gz(table_text(*mlp_table())),
        ATTENTION: gz(table_text(*attention_table())),
        NETWORK: gz(table_text(*network_table())),
        "vidur/README.md": b"repository microsoft/vidur, commit 7d47513, MIT License\n",
    }
    for key, value in replace.items():
        files[{"mlp": MLP, "attention": ATTENTION, "network": NETWORK}.get(key, key)] = value
    return files


def _edited(table: tuple[list[str], list[list[Any]]], column: str, value: Any) -> bytes:
    """The table gzipped with `column` set to `value` in its first record (line 2)."""
    header, rows = table
    rows = [list(r) for r in rows]
    rows[0][header.index(column)] = value
    return gz(table_text(header, rows))


def _without(table: tuple[list[str], list[list[Any]]], column: str) -> bytes:
    header, rows = table
    keep = [i for i, c in enumerate(header) if c != column]
    return gz(table_text([header[i] for i in keep], [[r[i] for i in keep] for r in rows]))


def _import(case_id: str, files: dict[str, bytes | None], *expect: str, flags: tuple = ()) -> Case:
    return Case(f"profile-import-{case_id}", (*IMPORT, *flags), expect, files)


def mlp_cases() -> list[Case]:
    mlp = mlp_table()
    header = mlp[0]
    text = table_text(*mlp)
    cases = [
        _import("mlp-plain-csv", vidur_files(mlp=text.encode()), "mlp.csv.gz", "not a gzip"),
        _import("mlp-truncated", vidur_files(mlp=gz(text)[:200]), "mlp.csv.gz", "truncated"),
        _import("mlp-garbage", vidur_files(mlp=b"\x1f\x8b\x08\x00" + b"\xff" * 64),
                "mlp.csv.gz", "gzip"),
        _import("mlp-empty", vidur_files(mlp=gz("")), "mlp.csv.gz", "empty"),
        _import("mlp-latin1", vidur_files(mlp=gz(text.encode() + b"caf\xe9\n")),
                "mlp.csv.gz", "line 12", "not UTF-8"),
        _import("mlp-short-record", vidur_files(mlp=gz(text + "1,2,3\n")),
                "mlp.csv.gz", "line 12", "fields"),
        _import("mlp-folder", vidur_files(mlp=None, **{f"{MLP}/x": b""}), "mlp.csv.gz"),
        _import("mlp-no-rows-for-tp", vidur_files(mlp=gz(table_text(*mlp_table((2,))))),
                "mlp.csv.gz", "no rows for 1"),
        _import("mlp-model-dims", vidur_files(mlp=_edited(mlp, "n_embd", 8)),
                "mlp.csv.gz", "line 2", "n_embd"),
    ]  # fmt: skip
    needed = [*INT_COLUMNS, *(c for c in header if c.endswith(".median"))]
    cases += [
        _import(f"mlp-no-{column}", vidur_files(mlp=_without(mlp, column)),
                "mlp.csv.gz", "line 1", column)
        for column in needed
    ]  # fmt: skip
    cases += [
        _import(f"mlp-{column}-{label}", vidur_files(mlp=_edited(mlp, column, value)),
                "mlp.csv.gz", "line 2", column)
        for column in INT_COLUMNS
        for label, value in BAD_INTS.items()
    ]  # fmt: skip
    cases += [
        _import(f"mlp-{op}-{label}", vidur_files(mlp=_edited(mlp, f"time_stats.{op}.median", v)),
                "mlp.csv.gz", "line 2", op)
        for op in ("emb", *LINEAR_OPS)
        for label, v in BAD_TIMES.items()
    ]  # fmt: skip
    return cases


def other_file_cases() -> list[Case]:
    attention, network = attention_table(), network_table()
    tp2 = ("--tensor-parallel", "2")
    return [
        _import("attention-plain", vidur_files(attention=b"a,b\n1,2\n"),
                "attention.csv.gz", "not a gzip"),
        _import("attention-no-kv-size", vidur_files(attention=_without(attention, "kv_cache_size")),
                "attention.csv.gz", "kv_cache_size"),
        _import("attention-is-prefill",
                vidur_files(attention=_edited(attention, "is_prefill", "?")),
                "attention.csv.gz", "line 2", "is_prefill"),
        _import("attention-batch-neg", vidur_files(attention=_edited(attention, "batch_size", -1)),
                "attention.csv.gz", "line 2", "batch_size"),
        _import("attention-kv-huge", vidur_files(attention=_edited(attention, "kv_cache_size",
                "1e30")), "attention.csv.gz", "line 2", "kv_cache_size"),
        _import("attention-decode-nan", vidur_files(attention=_edited(
                attention, "time_stats.attn_decode.median", "nan")),
                "attention.csv.gz", "line 2", "attn_decode"),
        _import("network-truncated", vidur_files(network=gz(table_text(*network))[:60]),
                "all_reduce.csv.gz", flags=tp2),
        _import("network-no-size", vidur_files(network=_without(network, "size")),
                "all_reduce.csv.gz", "size", flags=tp2),
        _import("network-size-text", vidur_files(network=_edited(network, "size", "big")),
                "all_reduce.csv.gz", "line 2", "size", flags=tp2),
        _import("network-workers-inf", vidur_files(network=_edited(network, "num_workers", "inf")),
                "all_reduce.csv.gz", "line 2", "num_workers", flags=tp2),
    ]  # fmt: skip


def import_flag_cases() -> list[Case]:
    degrees = {"0": "0", "neg": "-2", "3": "3", "64": "64", "text": "two", "huge": "9" * 30}
    cases = [
        _import(f"tp-{label}", vidur_files(), "--tensor-parallel", flags=("--tensor-parallel", v))
        for label, v in degrees.items()
    ]
    cases += [
        _import("out-file", {**vidur_files(), "f.txt": b"x"}, "--out", "f.txt", "is a file",
                flags=("--out", "f.txt")),
        _import("out-root", vidur_files(), "--out", "filesystem root", flags=("--out", "/")),
        _import("out-users-file", {**vidur_files(), f"out/{TARGET}": b"mine: 1\n"},
                TARGET, "not written by batchsim"),
        _import("out-folder-at-file", {**vidur_files(), f"out/{TARGET}": None},
                TARGET, "not a file"),
    ]  # fmt: skip
    return cases


def raw_files(meta: bytes | None = b'{"device": {"name": "synthetic"}}') -> dict[str, bytes | None]:
    """A valid raw CSV (decode, one-prompt prefill and linear rows) and its sidecar."""
    columns = ["kind", "num_seqs", "num_tokens", "num_prefill_tokens", "context_tokens_per_seq",
               "sum_context_tokens", "prefill_attention_term", "step_s", "num_prefills",
               "prefill_prefix_tokens"]  # fmt: skip
    def linear(n: int) -> float:
        return 0.005 + 1e-5 * n

    rows: list[list[Any]] = []
    for b in (1, 4, 16):
        for ctx in (128, 512):
            step = linear(b) + 1e-4 + 1e-7 * b * ctx
            rows.append(["decode", b, b, 0, ctx, b * (ctx + 1), 0, step, 0, 0])
    for c in (64, 256):
        for p in (0, 256):
            step = linear(c) + 1e-4 + 1e-8 * c * (p + c)
            rows.append(["prefill", 1, c, c, 0, p + c, c * (p + c), step, 1, p])
    for n in (1, 4, 16, 64, 256):
        rows.append(["linear", 1, n, n, 0, 0, 0, linear(n), 1, 0])
    files: dict[str, bytes | None] = {"raw.csv": table_text(columns, rows).encode()}
    files["raw.meta.json"] = meta
    return files


def table_cases() -> list[Case]:
    metas = {
        "truncated": (b'{"device": {"name": ', ("line 1", "not JSON")),
        "list": (b"[1, 2]", ("JSON object",)),
        "string": (b'"hello"', ("JSON object",)),
        "nan": (b'{"x": NaN}', ("NaN",)),
        "latin1": (b'{"x": "caf\xe9"}', ("not UTF-8",)),
        "empty": (b"", ("not JSON",)),
        "deep": (b'{"x": ' + b"[" * 50 + b"]" * 50 + b"}", ("nested",)),
        "very-deep": (b"[" * 100_000 + b"]" * 100_000, ("raw.meta.json",)),
        "huge": (b'{"x": "' + b"a" * (2 << 20) + b'"}', ("MiB",)),
        "line-3": (b'{\n "a": 1,\n "b": }', ("line 3", "not JSON")),
    }
    cases = [
        Case(f"profile-table-meta-{label}", TABLE, ("raw.meta.json", *expect), raw_files(meta))
        for label, (meta, expect) in metas.items()
    ]
    cases += [
        Case(f"fit-meta-{label}", ("fit", "raw.csv", "--out", "o", "--no-plot"),
             ("raw.meta.json", *expect), raw_files(meta))
        for label, (meta, expect) in list(metas.items())[:3]
    ]  # fmt: skip
    cases += [
        Case("profile-table-meta-folder", TABLE, ("raw.meta.json", "folder"),
             {**raw_files(None)}),
        Case("profile-table-out-file", (*TABLE[:3], "--out", "f.txt"), ("--out", "is a file"),
             {**raw_files(), "f.txt": b"x"}),
        Case("profile-table-out-root", (*TABLE[:3], "--out", "/"), ("--out", "filesystem root"),
             raw_files()),
        Case("profile-table-out-users-file", TABLE, ("p/profile.yaml", "not written by batchsim"),
             {**raw_files(), "p/profile.yaml": b"mine: 1\n"}),
        Case("profile-table-out-folder-at-file", TABLE, ("p/profile.yaml", "not a file"),
             {**raw_files(), "p/profile.yaml": None}),
        Case("fit-out-users-file", ("fit", "raw.csv", "--out", "p", "--no-plot"),
             ("p/profile.yaml", "not written by batchsim"),
             {**raw_files(), "p/profile.yaml": b"provenance: {generator: me}\n"}),
    ]  # fmt: skip
    return cases


def int_flag_cases() -> list[Case]:
    """Integer flags of the calibration and replay commands: refused by argparse, by name."""
    flags = {
        "calibrate-layers-0": ("calibrate", "--model", "llama-2-7b", "--out", "o", "--layers", "0"),
        "calibrate-repeats-neg": ("calibrate", "--model", "llama-2-7b", "--out", "o",
                                  "--repeats", "-1"),
        "replay-benchmark-neg": ("replay", "run.json", "--scenario", "s.yaml", "--benchmark",
                                 "-1"),
        "replay-prefix-tokens-text": ("replay", "run.json", "--scenario", "s.yaml",
                                      "--prefix-tokens", "many"),
        "calibrate-engine-benchmark-neg": ("calibrate-engine", "run.json", "--scenario",
                                           "s.yaml", "--out", "p.yaml", "--benchmark", "-3"),
    }  # fmt: skip
    return [
        Case(f"intflag-{label}", argv, (argv[-2],), {"s.yaml": dump(BASE)})
        for label, argv in flags.items()
    ]


def out_folder_cases() -> list[Case]:
    """`--out` of search and sweep on folders batchsim did not write, or wrote for another
    command: never adopted (a `points/` folder alone once was, and lost a user's report.html)."""
    lookalike: dict[str, bytes | None] = {"mine/points": None, "mine/report.html": b"<p>mine"}
    legacy_plus = {"mine/points/0123456789ab.json": b"{}", "mine/sweep.csv": b"a\n1\n",
                   "mine/notes.txt": b"mine"}  # fmt: skip
    results = {"mine/.batchsim": b'{"batchsim": "results"}\n', "mine/summary.json": b"{}"}
    sweep_marked = {"mine/.batchsim": b'{"batchsim": "sweep"}\n', "mine/points": None}
    search_marked = {"mine/.batchsim": b'{"batchsim": "search"}\n', "mine/configs": None}
    sweep = ("sweep", "s.yaml", "-q", "--grid", "policy.max_num_seqs=4,8", "--out", "mine")
    return [
        _search("search-out-points-lookalike", "--out", "mine", files=lookalike,
                expect=("--out", "mine", "not a batchsim search folder")),
        _search("search-out-results-folder", "--out", "mine", files=results,
                expect=("--out", "mine", "results folder")),
        _search("search-out-sweep-folder", "--out", "mine", files=sweep_marked,
                expect=("--out", "mine", "sweep folder")),
        Case("sweep-out-points-lookalike", sweep, ("--out", "mine", "not a batchsim sweep"),
             {"s.yaml": dump(BASE), **lookalike}),
        Case("sweep-out-legacy-plus-a-file", sweep, ("--out", "mine", "sweep"),
             {"s.yaml": dump(BASE), **legacy_plus}),
        Case("sweep-out-search-folder", sweep, ("--out", "mine", "search folder"),
             {"s.yaml": dump(BASE), **search_marked}),
        Case("sweep-out-root", (*sweep[:-1], "/"), ("--out", "filesystem root"),
             {"s.yaml": dump(BASE)}),
    ]  # fmt: skip


def profile_cmd_cases() -> list[Case]:
    return [
        *mlp_cases(),
        *other_file_cases(),
        *import_flag_cases(),
        *table_cases(),
        *int_flag_cases(),
        *out_folder_cases(),
    ]


if __name__ == "__main__":  # how many cases each command gets
    from collections import Counter

    print(Counter(" ".join(c.argv[:2]) for c in profile_cmd_cases()))
    print(json.dumps(len(profile_cmd_cases())))
