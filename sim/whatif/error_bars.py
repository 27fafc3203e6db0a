"""Error bars of a run: its headline metrics over seeds, and over a band on the GPU step time.

`batchsim run --seeds N` runs every variant N times, on seeds `seed`, `seed + 1`, ...,
`seed + N - 1` (each variant from its own `seed`). The scenario seed drives every random stream
of a run (the workload's draws, the routers', speculative decoding's acceptance rates), so these
are independent draws of the same scenario. Each headline metric gets its mean, the 95 %
interval of that mean (Student's t, `sim.metrics.intervals`), its minimum and maximum.

`--band X` reruns every variant with each step's GPU time scaled by `1 - X/100` and
`1 + X/100` (`engine.pricing.gpu_time_scale`, times the scale the variant already has, whether
from `engine.pricing`, an engine preset or its profile), on the scenario's own seed, and reports
each metric's range over the three runs. A variant's SLO verdict (attainment 100 %) that differs
at an end of the band from the one at nominal is a flip (`slo_flips`).

The first run (seed `seed`, nominal scale) is the command's ordinary run; the others keep no
tables (`simulate(..., tables=False)`: flat memory) and come back as summaries only. They run
in worker processes with `sim.whatif.sweep_backends.run_local`. The table (`intervals.csv`) has
one row per (source, variant, metric), in the summary's own units (seconds, fractions):
`mean, ci_low, ci_high` are the mean over seeds and its 95 % interval (`source` seeds), or the
nominal value and the band's range (`source` band: `ci_low` and `ci_high` are `min` and `max`);
`n` is the number of runs with a value; `slo_flips` is set on the band's rows.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from sim.errors import ScenarioError
from sim.io.output import summary_document
from sim.metrics.intervals import mean_interval
from sim.metrics.side_by_side import rows_for
from sim.scenario.load import ResolvedScenario, ScenarioSet, load_scenario_dict, set_path, source_of
from sim.simulate import simulate
from sim.whatif.sweep_backends import Progress, run_local

MIN_SEEDS, MAX_SEEDS = 2, 1000
COLUMNS = ("variant", "metric", "mean", "ci_low", "ci_high", "min", "max", "n", "source",
           "slo_flips")  # fmt: skip
# headline metrics beyond the printed table's rows, where a run reports them
EXTRA_METRICS = ("energy_per_output_token_j",)
SCALE_PATH = ("engine", "pricing", "gpu_time_scale")

Summaries = dict[str, dict[str, Any]]  # variant -> metric -> value (None for NaN)
Edits = tuple[tuple[tuple[str, ...], Any], ...]


@dataclass(frozen=True)
class RunTask:
    """One extra run: the base scenario mapping and the edits that make it (plain data)."""

    source: str  # "seeds" or "band"
    step: int  # seeds: the offset k of seed + k; band: -1 (faster end) or +1 (slower end)
    edits: Edits
    raw: dict[str, Any]
    file: str
    base_dir: str
    tables: bool  # keep tables: only where a streamed run is refused (closed loop + cooldown)


def task_scenario(task: RunTask) -> ScenarioSet:
    raw = copy.deepcopy(task.raw)
    for path, value in task.edits:
        set_path(raw, list(path), value)
    return load_scenario_dict(raw, file=task.file, base_dir=Path(task.base_dir))


def run_task(task: RunTask) -> Summaries:
    """Simulate one extra run (all its variants); its summaries, NaN as None."""
    results = simulate(task_scenario(task), tables=task.tables)
    variants: Summaries = summary_document(results.scenario_name, results.summary())["variants"]
    return variants


def nominal_scale(resolved: ResolvedScenario) -> float:
    """The GPU-time scale a variant runs at: `engine.pricing`'s (a preset's included) where it
    gives one, else its profile's; instance groups whose profiles differ there are refused."""
    pricing = resolved.spec.engine.pricing
    if pricing is not None and "gpu_time_scale" in pricing.model_fields_set:
        return pricing.gpu_time_scale
    profiles = [g.profile for g in resolved.groups] or [resolved.profile]
    scales = {p.pricing.gpu_time_scale if p.pricing is not None else 1.0 for p in profiles}
    if len(scales) > 1:
        raise ScenarioError(
            f"variant {resolved.variant!r}: its instance groups' profiles have different "
            f"gpu_time_scale values ({', '.join(f'{s:g}' for s in sorted(scales))}); set "
            "engine.pricing.gpu_time_scale to say which one the band is around",
            path="--band",
        )
    return scales.pop()


def _edits(scenario: ScenarioSet, field: tuple[str, ...], values: dict[str, Any]) -> Edits:
    """Set `field` per variant (in `variants.NAME`, where the scenario has variants)."""
    variants = scenario.raw.get("variants")
    if isinstance(variants, dict) and variants:
        return tuple((("variants", name, *field), values[name]) for name in values)
    return ((field, values[scenario.variants[0].variant]),)


def _needs_tables(scenario: ScenarioSet) -> bool:
    """Whether a run keeps its tables even summarised: a closed loop (sessions, clients, agents,
    rollouts, or a trace's sessions) with a cooldown cannot be streamed (`sim.simulate`)."""
    for v in scenario.variants:
        workload = v.spec.workload
        loop = any(
            getattr(workload, k) is not None for k in ("sessions", "clients", "agents", "rollouts")
        )
        if v.spec.metrics.cooldown_s and (loop or workload.trace is not None):
            return True
    return False


def plan(scenario: ScenarioSet, seeds: int = 1, band: float | None = None) -> list[RunTask]:
    """The extra runs of `--seeds seeds` and `--band band` (percent), checked: a run that would
    be refused is refused now, naming the flag, before anything is simulated."""
    if seeds != 1 and not MIN_SEEDS <= seeds <= MAX_SEEDS:
        raise ScenarioError(f"{seeds}: must be from {MIN_SEEDS} to {MAX_SEEDS}", path="--seeds")
    if band is not None and not (math.isfinite(band) and 0 < band < 100):
        raise ScenarioError(f"{band}: must be a percentage above 0 and below 100", path="--band")
    raw, file, base_dir = source_of(scenario)
    tables = _needs_tables(scenario)

    def task(source: str, step: int, edits: Edits) -> RunTask:
        return RunTask(source, step, edits, raw, file, str(base_dir), tables)

    by_seed = []
    for k in range(1, seeds):
        seed_of = {v.variant: v.spec.seed + k for v in scenario.variants}
        by_seed.append(task("seeds", k, _edits(scenario, ("seed",), seed_of)))
    by_scale = []
    if band is not None:
        scales = {v.variant: nominal_scale(v) for v in scenario.variants}
        for step in (-1, 1):
            factor = (100 + step * band) / 100  # 0.9 and 1.1 exactly as typed for a 10 % band
            scaled = {name: s * factor for name, s in scales.items()}
            by_scale.append(task("band", step, _edits(scenario, SCALE_PATH, scaled)))
    for t in by_scale + by_seed[-1:]:  # seeds differ only in the seed: the last stands for all
        try:
            task_scenario(t)
        except ScenarioError as exc:
            flag = f"--seeds {seeds}" if t.source == "seeds" else f"--band {band:g}"
            raise ScenarioError(f"{flag}: {exc.message()}") from None
    return by_seed + by_scale


def run_extra(
    tasks: list[RunTask], workers: int, progress: bool
) -> list[tuple[RunTask, Summaries]]:
    """Run the extra runs (in `workers` processes), in the order of `tasks`."""
    done: dict[int, Summaries] = {}
    index = {id(t): i for i, t in enumerate(tasks)}
    bar = Progress(len(tasks), enabled=progress and bool(tasks), desc="error bars", unit="run")

    def finished(task: RunTask, summaries: Summaries) -> None:
        done[index[id(task)]] = summaries
        bar.tick()

    runner: Callable[[RunTask], Summaries] = run_task
    try:
        run_local(tasks, runner, min(workers, max(len(tasks), 1)), finished)
    finally:
        bar.close()
    return [(t, done[i]) for i, t in enumerate(tasks)]


def headline_metrics(summary: pd.DataFrame) -> list[str]:
    """The metrics of the printed table, and energy per token where the run reports it."""
    keys = [key for _, key, _, _ in rows_for(summary)]
    extra = [
        key
        for key in EXTRA_METRICS
        if key in summary.columns and pd.to_numeric(summary[key], errors="coerce").notna().any()
    ]
    return keys + extra


def _value(summaries: Summaries, variant: str, metric: str) -> float:
    value = summaries.get(variant, {}).get(metric)
    return math.nan if value is None else float(value)


def slo_met(summaries: Summaries, variant: str) -> bool | None:
    """Whether every request met the scenario's SLO (attainment 100 %); None without a value."""
    attainment = _value(summaries, variant, "slo_attainment")
    return None if math.isnan(attainment) else attainment >= 1.0


def slo_flips(nominal: Summaries, ends: Sequence[Summaries], variant: str) -> bool | None:
    """Whether the SLO verdict at some end of the band differs from the one at nominal."""
    at_nominal = slo_met(nominal, variant)
    if at_nominal is None:
        return None
    return any(slo_met(end, variant) not in (None, at_nominal) for end in ends)


def interval_table(
    nominal: pd.DataFrame, runs: list[tuple[RunTask, Summaries]], seeds: int, band: bool
) -> pd.DataFrame:
    """The rows of `intervals.csv` (see the module docstring). `nominal` is the summary of the
    ordinary run (seed `seed`, nominal scale); `runs` the extra runs of `plan`."""
    base: Summaries = summary_document("", nominal)["variants"]
    metrics = headline_metrics(nominal)
    rows: list[dict[str, Any]] = []
    if seeds > 1:
        draws = [base] + [s for t, s in sorted(runs, key=lambda r: r[0].step)
                          if t.source == "seeds"]  # fmt: skip
        for variant in base:
            for metric in metrics:
                iv = mean_interval(_value(d, variant, metric) for d in draws)
                rows.append({"variant": variant, "metric": metric, "mean": iv.mean,
                             "ci_low": iv.low, "ci_high": iv.high, "min": iv.min, "max": iv.max,
                             "n": iv.n, "source": "seeds", "slo_flips": None})  # fmt: skip
    if band:
        ends = [s for t, s in sorted(runs, key=lambda r: r[0].step) if t.source == "band"]
        for variant in base:
            flips = slo_flips(base, ends, variant)
            for metric in metrics:
                values = [_value(d, variant, metric) for d in (ends[0], base, ends[1])]
                finite = [v for v in values if math.isfinite(v)]
                lo, hi = (min(finite), max(finite)) if finite else (math.nan, math.nan)
                rows.append({"variant": variant, "metric": metric, "mean": values[1],
                             "ci_low": lo, "ci_high": hi, "min": lo, "max": hi, "n": len(finite),
                             "source": "band", "slo_flips": flips})  # fmt: skip
    return pd.DataFrame(rows, columns=list(COLUMNS))


def write_intervals(table: pd.DataFrame, folder: Path) -> None:
    """`intervals.csv` into `folder` (the run's results folder while it is being built)."""
    table.to_csv(folder / "intervals.csv", index=False)
