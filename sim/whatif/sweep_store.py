"""A sweep's points and its table: the task of one point, its saved summary, the tidy table.

`points/<id>.json` holds `{"id", "point", "base", "variants"}`: the point's overrides, the
fingerprint of the base scenario it ran on, and its summaries per variant (NaN as null). Each is
written to a temporary file and renamed into place, so a file that exists is complete, and an
interrupted sweep leaves only whole points behind. The table is always built from these JSON
summaries, whether they were just computed or read back, so resumed and fresh sweeps agree.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from sim.errors import ScenarioError

Summaries = dict[str, dict[str, Any]]  # variant -> metric -> value (None for NaN)


@dataclass(frozen=True)
class PointTask:
    """Everything a worker needs to run one point; plain data so that it pickles cheaply."""

    point_id: str
    point: dict[str, Any]  # dotted path -> value
    raw: dict[str, Any]  # the base scenario mapping, `--set` overrides already applied
    file: str
    base_dir: str


def write_atomic(path: Path, write: Callable[[Path], object]) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def save_point(points_dir: Path, task: PointTask, base: str, variants: Summaries) -> None:
    record = {"id": task.point_id, "point": task.point, "base": base, "variants": variants}
    text = json.dumps(record, indent=1, allow_nan=False, default=str)
    write_atomic(points_dir / f"{task.point_id}.json", lambda p: p.write_text(text))


def load_points(points_dir: Path, tasks: list[PointTask], base: str) -> dict[str, Summaries]:
    """Saved summaries of the points in `tasks` that ran on the same base scenario."""
    done: dict[str, Summaries] = {}
    for task in tasks:
        path = points_dir / f"{task.point_id}.json"
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # absent or unreadable: run it again
        if record.get("base") == base and record.get("point") == task.point:
            done[task.point_id] = record["variants"]
    return done


def table(tasks: list[PointTask], grid_keys: list[str], done: dict[str, Summaries]) -> pd.DataFrame:
    """Rows in task order, then variant order: `point_id`, grid keys, `variant`, metrics."""
    rows = []
    for task in tasks:
        for variant, metrics in done[task.point_id].items():
            values = {k: math.nan if v is None else v for k, v in metrics.items()}
            rows.append({"point_id": task.point_id, **task.point, "variant": variant, **values})
    frame = pd.DataFrame(rows)
    for key in grid_keys:  # Parquet needs one type per column: mixed grids become strings
        if frame[key].dtype == object and len({type(v) for v in frame[key]}) > 1:
            frame[key] = frame[key].map(str)
    return frame


def write_table(frame: pd.DataFrame, out: Path) -> None:
    write_atomic(out / "sweep.csv", lambda p: frame.to_csv(p, index=False))
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise ScenarioError(f"{out}/sweep.parquet needs pyarrow; sweep.csv was written") from None
    write_atomic(out / "sweep.parquet", lambda p: frame.to_parquet(p, index=False))
