"""Parameter sweeps: one scenario run over the product of value grids, as one tidy table.

A grid is `a.b.c=v1,v2,v3`: a dotted scenario path (the semantics of `--set`, so any field,
variants included) and a comma-separated list of values, each parsed as a YAML scalar. Several
grids make a Cartesian product; each *point* of it runs every variant of the scenario. A point's
id is a hash of its overrides (keys sorted), so it does not depend on the order of the grids.

Every point is validated before anything runs: each grid value alone first (an error names that
`--grid` and value), then every combination (an error names the point). A value listed twice in
one grid is an error (it would run the same point twice). A sweep of more than `LARGE_SWEEP`
points states its size and an estimated time before it starts (from the requests per point and
the simulator's typical speed), and one of more than `MAX_POINTS` is refused.

The table has one row per (point, variant): `point_id`, one column per grid key (named by its
dotted path), `variant`, then every summary metric. Rows follow the grid expansion order and the
scenario's variant order, never the order in which points finish, so that the same seed gives the
same table whatever the backend and number of workers (each point is itself deterministic).

The scenario may be a file path, a mapping or a loaded `ScenarioSet`. On disk (`out`, optional
from Python, `results/<name>-sweep/` from the CLI; checked before anything runs, see
`sim.io.destination.check_sweep_folder`) each point's summary
is written atomically to `points/<id>.json` as soon as it finishes; a rerun reads them back and
runs only the missing points (resume). A point file also records a fingerprint of the base
scenario (YAML mapping after `--set`), and is reused only when that still matches, so editing the
scenario between runs recomputes instead of mixing old and new rows. The fingerprint does not
cover files the scenario refers to (traces, profiles): pass `resume=False` after changing those.
The final table goes to `sweep.parquet` and `sweep.csv`, each written to a temporary file first
(`sim.whatif.sweep_store`).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from sim.errors import ScenarioError
from sim.io.destination import check_sweep_folder, mark_sweep_folder
from sim.io.output import summary_document
from sim.scenario.load import ScenarioSet, load_scenario_dict, parse_set, set_path, source_of
from sim.simulate import simulate
from sim.whatif.sweep_backends import Progress, check_ray, default_workers, run_local, run_ray
from sim.whatif.sweep_store import PointTask, Summaries, load_points, save_point, table, write_table
from sim.workload.budget import expected_requests

__all__ = ["PointTask", "expand", "parse_grid", "point_id", "run_point", "sweep"]

LARGE_SWEEP = 2000
MAX_POINTS = 100_000
# simulated requests per second of one core (docs/speed.md), for the estimate of a large sweep
REQUESTS_PER_CORE_S = 7000.0

Source = ScenarioSet | Mapping[str, Any] | str | os.PathLike[str]


def parse_grid(text: str) -> tuple[str, list[Any]]:
    """`a.b=1,2,4` -> ("a.b", [1, 2, 4]); each item is a YAML scalar, as with `--set`."""
    if "=" not in text:
        raise ScenarioError(f"--grid {text!r}: expected KEY.PATH=V1,V2,...")
    key, _, values = text.partition("=")
    items = values.split(",")
    if not values.strip() or any(not item.strip() for item in items):
        raise ScenarioError(f"--grid {text!r}: empty value in the list")
    parsed = [parse_set(f"{key}={item}") for item in items]
    return ".".join(parsed[0][0]), [value for _, value in parsed]


def read_raw(scenario: Source, overrides: Sequence[str]) -> dict[str, Any]:
    """The scenario's mapping with `--set` overrides applied, not yet validated."""
    raw, _, _ = source_of(scenario, tuple(overrides))
    return raw


def _same_key(value: Any) -> str:
    """Values a scenario cannot tell apart (1 and 1.0) share a key."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(float(value))
    return json.dumps(value, sort_keys=True, default=str)


def _as_grid(grid: Mapping[str, Sequence[Any]] | Sequence[str]) -> dict[str, list[Any]]:
    pairs = [parse_grid(g) for g in grid] if not isinstance(grid, Mapping) else grid.items()
    out: dict[str, list[Any]] = {}
    for key, values in pairs:
        if key in out:
            raise ScenarioError(f"--grid {key}: given twice; list all its values in one --grid")
        if isinstance(values, str) or not list(values):
            raise ScenarioError(f"--grid {key}: needs a non-empty list of values")
        seen: set[str] = set()
        for value in values:
            if _same_key(value) in seen:
                raise ScenarioError(f"--grid {key}: value {value!r} is listed twice")
            seen.add(_same_key(value))
        out[key] = list(values)
    return out


def expand(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """The Cartesian product of the grids, the last grid varying fastest."""
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*grid.values())]


def _digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def point_id(point: Mapping[str, Any]) -> str:
    """12 hex digits of a hash of the overrides, independent of the order of the grids."""
    return _digest(sorted(point.items()))[:12]


def _describe(point: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in point.items())


def point_scenario(task: PointTask) -> ScenarioSet:
    raw = copy.deepcopy(task.raw)
    for key, value in task.point.items():
        set_path(raw, key.split("."), copy.deepcopy(value))
    return load_scenario_dict(raw, file=task.file, base_dir=Path(task.base_dir))


def run_point(task: PointTask) -> Summaries:
    """Simulate one point (all its variants); the summaries in their JSON form."""
    results = simulate(point_scenario(task))
    document = summary_document(results.scenario_name, results.summary())
    variants: Summaries = json.loads(json.dumps(document["variants"], allow_nan=False))
    return variants


def _validate(tasks: list[PointTask], grid: dict[str, list[Any]], base: PointTask) -> None:
    for key, values in grid.items():  # one key at a time, so an error names its --grid
        for value in values:
            single = PointTask("", {key: value}, base.raw, base.file, base.base_dir)
            try:
                point_scenario(single)
            except ScenarioError as exc:
                raise ScenarioError(f"--grid {key}={value}: {exc.message()}") from None
    for task in tasks:
        try:
            point_scenario(task)
        except ScenarioError as exc:
            raise ScenarioError(f"--grid point {_describe(task.point)}: {exc.message()}") from None


def _announce(tasks: list[PointTask], workers: int, base: ScenarioSet) -> None:
    """State the size and estimated time of a large sweep before it starts (on stderr)."""
    per_point = 0.0
    for variant in base.variants:
        size = expected_requests(variant.spec.workload)
        per_point += size[0] if size is not None else 0.0
    seconds = len(tasks) * per_point / REQUESTS_PER_CORE_S / max(workers, 1)
    estimate = f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"
    print(
        f"sweep: {len(tasks)} points x {len(base.variants)} variants (about "
        f"{per_point:.3g} requests per point); estimated {estimate} on {workers} worker(s)",
        file=sys.stderr,
    )


def sweep(
    scenario: Source,
    grid: Mapping[str, Sequence[Any]] | Sequence[str],
    *,
    overrides: Sequence[str] = (),
    backend: Literal["local", "ray"] = "local",
    workers: int | None = None,
    address: str | None = None,
    out: str | Path | None = None,
    resume: bool = True,
    progress: bool = False,
) -> pd.DataFrame:
    """Run `scenario` at every point of `grid` (`{"a.b": [1, 2]}` or `["a.b=1,2"]`).

    The scenario is a YAML path, a mapping or a loaded `ScenarioSet`. Returns the tidy table
    (see the module docstring); writes files only when `out` is given.
    """
    if workers is not None and workers < 1:
        raise ScenarioError(f"--workers {workers}: must be at least 1")
    if backend not in ("local", "ray"):
        raise ScenarioError(f"--backend {backend!r}: expected 'local' or 'ray'")
    raw, file, base_path = source_of(scenario, tuple(overrides))
    grids = _as_grid(grid)
    clash = [k for k in grids if k in ("point_id", "variant")]
    if clash:
        raise ScenarioError(f"--grid {clash[0]}: that name is reserved for a table column")
    size = math.prod(len(values) for values in grids.values())
    if size > MAX_POINTS:
        raise ScenarioError(
            f"--grid: {size} points ({' x '.join(str(len(v)) for v in grids.values())}); at most "
            f"{MAX_POINTS}: split the sweep"
        )
    if out is not None:
        check_sweep_folder(Path(out))
    if backend == "ray":
        check_ray(address)
    base_dir = str(base_path)
    base = PointTask("", {}, raw, file, base_dir)
    tasks = [PointTask(point_id(p), p, raw, file, base_dir) for p in expand(grids)]
    _validate(tasks, grids, base)
    fingerprint = _digest(raw)

    points_dir = Path(out) / "points" if out is not None else None
    done = load_points(points_dir, tasks, fingerprint) if points_dir and resume else {}
    todo = [t for t in tasks if t.point_id not in done]
    if points_dir:
        points_dir.mkdir(parents=True, exist_ok=True)
        mark_sweep_folder(points_dir.parent)
    bar = Progress(len(tasks), initial=len(tasks) - len(todo), enabled=progress)

    def finished(task: PointTask, variants: Summaries) -> None:
        done[task.point_id] = variants
        if points_dir:
            save_point(points_dir, task, fingerprint, variants)
        bar.tick()

    count = min(workers or default_workers(), max(len(todo), 1))
    if progress and len(tasks) > LARGE_SWEEP:
        _announce(todo, count, point_scenario(base))
    # looked up at call time so that tests can substitute the runner on the in-process path
    runner = run_point
    try:
        if backend == "ray":
            run_ray(todo, runner, count, address, finished)
        else:
            run_local(todo, runner, count, finished)
    finally:
        bar.close()
    frame = table(tasks, list(grids), done)
    if out is not None:
        write_table(frame, Path(out))
    return frame
