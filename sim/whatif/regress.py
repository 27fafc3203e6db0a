"""CI regression of policy metrics: rerun pinned-seed scenarios and compare with baselines.

Every `*.yaml` under `scenarios/ci/` is a small scenario (a few hundred requests, well under a
second) with a fixed seed; together they cover every batching policy and mode. A new policy is
covered by dropping one more file there and running `batchsim regress --update`.
`results/baselines/<file stem>.json` holds its committed summary: `{"scenario", "source",
"tolerances": {metric: relative tolerance}, "variants": {variant: {metric: value or null}}}`.

Why the tolerances are so tight: the simulator is deterministic, so the same code and seed must
reproduce every metric up to floating-point noise; only the platform's libm and BLAS differ
between machines, and they move the last few bits, not the sixth digit. Counts (`num_*`) must
match exactly; every other metric within a relative 1e-6 (with an absolute floor of 1e-12 for
values near zero). Anything beyond that is a change in behaviour, in either direction, and fails:
a faster scheduler is still a change someone must look at and accept with `--update`.

A scenario whose file name ends in `.stream.yaml` runs as `batchsim run --stream` does: no
tables, its records folded chunk by chunk into the summary (`sim.metrics.streaming`; samples
past 65,536 rows go to sketches, so such a baseline pins the streamed figures, not the exact
ones). Its baseline is `<name>.stream.json`.

Per-metric overrides live in the baseline file itself: the `tolerances` it records are the ones
used to compare, so loosening one metric is an edit reviewed with the baseline, and `--update`
keeps it. Metrics new in the code get the default tolerance; a metric that disappeared fails.

Every baseline is checked before anything is simulated (`Baseline`): a mapping with `variants`
(each a mapping of metric to a finite number or null) and optional `scenario`, `source` and
`tolerances` (each a relative tolerance from 0 to 1); anything else is an error naming the file
and the key.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, Strict, ValidationError

from sim.errors import ScenarioError
from sim.inputs.strict_model import StrictModel
from sim.io.output import summary_document
from sim.simulate import simulate

CI_SCENARIOS = Path("scenarios/ci")
BASELINES = Path("results/baselines")
DEFAULT_RTOL = 1e-6
ABS_FLOOR = 1e-12


MAX_BASELINE_BYTES = 16 * 2**20

Metric = Annotated[float, Strict()]  # an int (a count) or a float, never a bool or a string


class Baseline(StrictModel):
    """A baseline file's document (see the module docstring); NaN is written as null."""

    scenario: str | None = None
    source: str | None = None
    tolerances: dict[str, Annotated[float, Strict(), Field(ge=0, le=1)]] = Field(
        default_factory=dict
    )
    variants: dict[str, dict[str, Metric | None]]


def default_tolerance(metric: str) -> float:
    return 0.0 if metric.startswith("num_") else DEFAULT_RTOL


@dataclass(frozen=True)
class Move:
    """One metric of one variant that differs from its baseline."""

    scenario: str
    variant: str
    metric: str
    baseline: float | None  # None: undefined (NaN) or absent
    now: float | None
    rtol: float
    regression: bool  # beyond tolerance (or appeared/disappeared)

    @property
    def change(self) -> float:
        """Relative change; NaN when either side is undefined or the baseline is zero."""
        if self.baseline is None or self.now is None or self.baseline == 0:
            return math.nan
        return (self.now - self.baseline) / abs(self.baseline)


def ci_scenarios(folder: Path) -> list[Path]:
    files = sorted(folder.glob("*.yaml"))
    if not files:
        raise ScenarioError(f"no CI scenarios (*.yaml) in {folder}")
    return files


def baseline_path(scenario: Path, baselines: Path) -> Path:
    return baselines / f"{scenario.stem}.json"


STREAMED_SUFFIX = ".stream.yaml"


def streamed(scenario: Path) -> bool:
    """Whether the scenario runs with its summary streamed (no tables, sketch percentiles)."""
    return scenario.name.endswith(STREAMED_SUFFIX)


def run_ci_scenario(path: Path) -> dict[str, Any]:
    """The scenario's summary document (variants -> metrics, NaN as None); streamed when the
    file name ends in `.stream.yaml`."""
    results = simulate(path, tables=not streamed(path))
    document = summary_document(results.scenario_name, results.summary())
    parsed: dict[str, Any] = json.loads(json.dumps(document, allow_nan=False))
    return parsed


def _differs(base: Any, now: Any, rtol: float) -> tuple[bool, bool]:
    """(differs at all, differs beyond tolerance)."""
    if base is None or now is None:
        return base is not now, base is not now
    if base == now:
        return False, False
    return True, abs(now - base) > max(rtol * abs(base), ABS_FLOOR if rtol else 0.0)


def compare(name: str, baseline: dict[str, Any], current: dict[str, Any]) -> list[Move]:
    """Every metric that differs from `baseline`, flagged when beyond its tolerance."""
    tolerances: dict[str, float] = baseline.get("tolerances", {})
    moves = []
    base_variants: dict[str, dict[str, Any]] = baseline["variants"]
    now_variants: dict[str, dict[str, Any]] = current["variants"]
    for variant in dict.fromkeys([*base_variants, *now_variants]):
        base, now = base_variants.get(variant), now_variants.get(variant)
        if base is None or now is None:  # a variant added or removed: behaviour changed
            moves.append(Move(name, variant, "(variant)", None, None, 0.0, True))
            continue
        for metric in dict.fromkeys([*base, *now]):
            if metric not in base:
                continue  # a metric new in the code: nothing to compare yet
            rtol = tolerances.get(metric, default_tolerance(metric))
            differs, beyond = _differs(base[metric], now.get(metric), rtol)
            if metric not in now:
                differs = beyond = True
            if differs:
                moves.append(
                    Move(name, variant, metric, base[metric], now.get(metric), rtol, beyond)
                )
    return moves


def write_baseline(path: Path, source: Path, current: dict[str, Any], old: dict[str, Any]) -> None:
    """Write a baseline atomically, keeping per-metric tolerances set in the old one."""
    metrics = dict.fromkeys(m for v in current["variants"].values() for m in v)
    kept = old.get("tolerances", {})
    tolerances = {m: kept.get(m, default_tolerance(m)) for m in metrics}
    document = {
        "scenario": current["scenario"],
        "source": source.as_posix(),
        "tolerances": tolerances,
        "variants": current["variants"],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(json.dumps(document, indent=2, allow_nan=False) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _read_baseline(path: Path) -> dict[str, Any] | None:
    """The checked baseline at `path` (None when there is none)."""
    from sim.inputs.messages import as_error, problems
    from sim.inputs.text import check_regular_file, read_text

    if not os.path.lexists(path):
        return None
    check_regular_file(path, "baseline")
    text = read_text(path, "baseline", max_bytes=MAX_BASELINE_BYTES)
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ScenarioError(f"unreadable baseline: {exc}", file=str(path)) from None
    try:
        Baseline.model_validate(document)
    except ValidationError as exc:
        raise as_error(problems(exc, Baseline), str(path)) from None
    checked: dict[str, Any] = document
    return checked


def regress(
    scenarios: Path = CI_SCENARIOS, baselines: Path = BASELINES, *, update: bool = False
) -> list[Move]:
    """Rerun every CI scenario; compare with (or, with `update`, rewrite) its baseline."""
    files = ci_scenarios(scenarios)
    if not update:  # fail before simulating anything when a baseline is missing
        missing = [baseline_path(f, baselines) for f in files]
        missing = [p for p in missing if not p.exists()]
        if missing:
            raise ScenarioError(
                f"no baseline {', '.join(map(str, missing))}; create it with: "
                f"batchsim regress --update --scenarios {scenarios} --baselines {baselines}"
            )
    olds = {file: _read_baseline(baseline_path(file, baselines)) for file in files}
    moves: list[Move] = []
    for file in files:
        path = baseline_path(file, baselines)
        old = olds[file]
        current = run_ci_scenario(file)
        moves += compare(file.stem, old, current) if old is not None else []
        if update:
            write_baseline(path, file, current, old or {})
    return moves
