"""Reader of batchsim's own requests table, so that a simulated run can stand where a measured
one does (a replay compared with another replay, a regression check).

`path` is a results folder (its `requests.parquet`, else `requests.csv`) or the table itself.
Columns used: `arrival_s`, `num_prompt_tokens` and `num_output_tokens` (or `prompt_tokens` and
`output_tokens`), `ttft_s`, `e2e_s`, `tpot_s` (the file's own, used where the derivation cannot
be made), `queue_s`, `rejected` (left out, counted in `num_failed`), `id` and `variant`. A table
of several variants gives one: `variant` by name or `benchmark` by index in order of first
appearance, by default the first; meta lists them all. Times are simulated seconds (no clock).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sim.errors import ScenarioError
from sim.inputs.text import check_regular_file
from sim.measured.run import MeasuredRun, assemble
from sim.measured.values import MAX_LATENCY_S, MAX_TOKENS, column

NAMES = {
    "prompt": ("num_prompt_tokens", "prompt_tokens"),
    "output": ("num_output_tokens", "output_tokens"),
}


def _table_path(path: Path) -> Path:
    if path.is_dir():
        for name in ("requests.parquet", "requests.csv"):
            if (path / name).is_file():
                return path / name
        raise ScenarioError(
            "results folder has no requests.parquet or requests.csv", file=str(path)
        )
    check_regular_file(path, "requests table")
    return path


def _load(path: Path) -> pd.DataFrame:
    try:
        if path.suffix.lower() == ".parquet":
            return pd.read_parquet(path)
        return pd.read_csv(path, low_memory=False)
    except (ValueError, OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ScenarioError(f"not a readable requests table ({reason})", file=str(path)) from None


def _pick_variant(
    frame: pd.DataFrame, file: str, benchmark: int | None, variant: str | None
) -> tuple[pd.DataFrame, str | None, list[str]]:
    if "variant" not in frame.columns:
        if variant is not None or (benchmark or 0) > 0:
            raise ScenarioError("the table has no variant column", file=file)
        return frame, None, []
    names = [str(v) for v in pd.unique(frame["variant"].astype(str))]
    if variant is not None:
        if variant not in names:
            raise ScenarioError(f"no variant {variant!r}; the table has {names}", file=file)
        chosen = variant
    else:
        index = benchmark or 0
        if index >= len(names):
            raise ScenarioError(
                f"variant {index} asked for; the table has {len(names)}: {names}", file=file
            )
        chosen = names[index]
    return frame[frame["variant"].astype(str) == chosen], chosen, names


def read_batchsim(
    path: Path, *, benchmark: int | None = None, variant: str | None = None
) -> MeasuredRun:
    """One variant of a batchsim requests table (see the module docstring)."""
    table = _table_path(Path(path))
    file = str(table)
    frame, chosen, names = _pick_variant(_load(table), file, benchmark, variant)
    rows = np.arange(len(frame))

    def record(i: int) -> str:
        return f"row {int(frame.index[i]) + 1}"

    def col(*options: str, required: bool = True) -> str | None:
        found = next((c for c in options if c in frame.columns), None)
        if found is None and required:
            raise ScenarioError(f"the table has no {options[0]} column", file=file)
        return found

    failed = 0
    if (rejected := col("rejected", required=False)) is not None:
        mask = frame[rejected].astype(str).str.lower().isin(("true", "1", "1.0")).to_numpy()
        failed = int(mask.sum())
        frame, rows = frame[~mask], rows[~mask]

    def floats(
        name: str | None, *, nan: bool = True, low: float = 0.0, high: float = MAX_LATENCY_S
    ) -> np.ndarray:
        if name is None:
            return np.full(len(frame), np.nan)
        values = pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype=np.float64)
        return column(values, name, file=file, record=record, low=low, high=high, allow_nan=nan)

    prompt_col, output_col = col(*NAMES["prompt"]), col(*NAMES["output"])
    counts = {
        name: floats(c, nan=False, low=1, high=MAX_TOKENS).astype(np.int64)
        for name, c in (("prompt", prompt_col), ("output", output_col))
    }
    arrival = floats(col("arrival_s"), nan=False, high=1e12)
    ttft, e2e = floats(col("ttft_s")), floats(col("e2e_s"))
    with np.errstate(invalid="ignore"):
        late = np.flatnonzero(ttft > e2e + 1e-3)
    if len(late):
        raise ScenarioError("ttft_s exceeds e2e_s", file=file, path=record(int(late[0])))
    ids = frame["id"].astype(str).tolist() if "id" in frame.columns else [str(r) for r in rows]
    meta: dict[str, Any] = {"tool": "batchsim", "variant": chosen, "variants": names}
    return assemble(
        source=file, fmt="batchsim", arrival=arrival, prompt_tokens=counts["prompt"],
        output_tokens=counts["output"], ttft_s=ttft, e2e_s=e2e,
        request_id=ids,
        records=[record(i) for i in range(len(frame))], unix_clock=False, meta=meta,
        num_failed=failed, file_tpot_s=floats(col("tpot_s", required=False)),
        queue_s=floats(q) if (q := col("queue_s", required=False)) is not None else None,
    )  # fmt: skip
