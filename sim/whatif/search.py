"""Deployment search: the cheapest fleet (or the one using least energy) that serves a workload
at its rate under its SLOs, over a space of GPUs, degrees of tensor, data, expert and pipeline
parallelism, layouts (P/D pools at their own parallelism too), policies and KV tiers below the
GPU (whose rent the fleet's dollars per hour include).

    search("scenario.yaml", "space.yaml", ["ttft_p99=2", "tpot_p99=0.1"], rate=20)

The scenario gives the workload (synthetic arrivals or a trace), the model, the step-cost profile
(roofline by default, computed for each GPU and degree), the per-request SLO targets and the
metrics window; the space (`sim.whatif.search_space`) gives what to vary; the SLOs are written as
for `batchsim capacity` (`ttft_p99=2`, `slo_attainment>=0.99`). The rate is the workload's own
(its arrival rate, or a trace's rate at its `rate_scale`) unless given.

Phases, each spread over local processes or Ray (`sim.whatif.sweep_backends`):

1. set aside what cannot run (`search_space.expand`: the model does not fit, the degree cannot
   shard it (more pipeline stages than layers too), data or expert parallelism of a dense model,
   an instance wider than a scale-up domain without a scale-out network, static batching split
   into pools, KV tiers without prefix caching or with pipeline stages, the same fleets as an
   earlier configuration, a unit larger than `max_instances`);
2. probe one unit of every other configuration at the whole rate (`search_probe.unit_probe`):
   what it completes bounds the units any of its fleets needs (`search_prune`), which sets aside
   the configurations that would need more than `max_instances` (they cannot meet the SLOs);
3. find the fewest units of the others at the rate (`search_probe.fleet_search`: the instance
   search of `sim.whatif.capacity_instances`, from that bound, confirmed on every seed), in order
   of the bound on their cost, branch and bound: once a fleet is found, every configuration whose
   bound already costs more is dominated and never sized;
4. rank by the objective (`search_result`): the fleet's dollars per hour (`cost`), or its mean
   power (`energy`: at the given rate, energy per hour and per output token alike), with the
   Pareto front of cost against TTFT p99.

`robust=X` (percent) judges every candidate fleet over a band of +/- X % on the GPU step time
(at nominal, then at the slow end, 1 + X/100 times every step's GPU time, then at the fast end;
`search_probe`), phase 2 probing each unit at nominal and at the slow end, phase 3 giving each
configuration its nominal fleet and its fleet over the band, and ranks by the latter: the robust
choice. The nominal columns, the `flips` flag (the nominal fleet fails at an end of the band)
and `SearchResult.robustness` (the nominal choice and what robustness costs) say what the band
changed (`sim.whatif.search_result`).

`exhaustive=True` skips phase 2 and sizes every fleet from one instance: the reference the pruned
search is checked against (and a slow one: a configuration that cannot meet the SLOs is tried
at every fleet size the doubling reaches, up to `max_instances`).

Each configuration's phase result is saved as it finishes under `<out>/configs/` (keyed by a hash
of the question, the configuration and the phase), so an interrupted search resumes where it
stopped; every result is deterministic, so the answer is the same whatever the backend, the
worker count and the interruptions.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from sim.errors import ScenarioError
from sim.io.destination import check_sweep_folder
from sim.whatif.capacity import SLO
from sim.whatif.search_probe import Question, Task, band_ends, max_units
from sim.whatif.search_prune import (
    BandBounds,
    Bounds,
    Unit,
    band_unit,
    cannot_meet,
    units_at_least,
)
from sim.whatif.search_question import Source, prepare
from sim.whatif.search_result import SUMMARY_COLUMNS, SearchResult, build_table
from sim.whatif.search_runs import Runner, Store, digest
from sim.whatif.search_space import Config
from sim.whatif.sweep_backends import check_ray, default_workers

Objective = Literal["cost", "energy"]


def _check_flags(
    objective: str, workers: int | None, backend: str, robust: float | None = None
) -> None:
    if robust is not None and (
        isinstance(robust, bool)
        or not isinstance(robust, (int, float))
        or not (math.isfinite(robust) and 0 < robust < 100)
    ):
        raise ScenarioError(
            f"{robust!r}: must be a percentage above 0 and below 100 (e.g. 10 for ±10 %)",
            path="--robust",
        )
    if objective not in ("cost", "energy"):
        raise ScenarioError(f"--objective {objective!r}: expected 'cost' or 'energy'")
    if workers is not None and workers < 1:
        raise ScenarioError(f"--workers {workers}: must be at least 1")
    if backend not in ("local", "ray"):
        raise ScenarioError(f"--backend {backend!r}: expected 'local' or 'ray'")


def search(
    scenario: Source,
    space: str | os.PathLike[str] | Mapping[str, Any],
    slos: Sequence[str | SLO],
    *,
    rate: float | None = None,
    objective: Objective = "cost",
    overrides: Sequence[str] = (),
    repeats: int = 2,
    exhaustive: bool = False,
    backend: Literal["local", "ray"] = "local",
    workers: int | None = None,
    address: str | None = None,
    out: str | Path | None = None,
    resume: bool = True,
    progress: bool = False,
    robust: float | None = None,
) -> SearchResult:
    """The configurations of `space` ranked by what their fewest instances serving `scenario`'s
    workload at `rate` (default: its own) under `slos` cost; see the module docstring. The
    scenario is a YAML path, a mapping or a loaded `ScenarioSet`, the space a YAML path or a
    mapping. `robust` (percent) ranks by the fleets that meet the SLOs over a band of that
    half-width on the GPU step time. Writes files only when `out` is given
    (`sim.whatif.search_output`)."""
    started = time.perf_counter()
    _check_flags(objective, workers, backend, robust)
    band = None if robust is None else float(robust)
    prepared = prepare(
        scenario,
        space,
        slos,
        rate=rate,
        overrides=overrides,
        repeats=repeats,
        objective=objective,
        band=band,
    )
    question, runnable = prepared.question, prepared.runnable
    if out is not None:
        check_sweep_folder(Path(out), "search")
    if backend == "ray":
        check_ray(address)
    count = workers or default_workers()
    runner = Runner(
        Store(Path(out) if out is not None else None, resume), backend, count, address, progress
    )
    fingerprint = digest(
        [
            question.raw,
            question.file,
            question.rate_rps,
            question.windows,
            [str(s) for s in question.slos],
            question.seeds,
            question.max_instances,
            question.router,
            question.link,
            *([band] if band is not None else []),  # without a band: the ids of before
        ]
    )
    slow = band_ends(band)[0] if band is not None else 1.0

    def task(
        phase: str, config: Config, start: int = 1, scale: float = 1.0, band_start: int = 1
    ) -> Task:
        key: list[Any] = [fingerprint, phase, config.id, start]
        if scale != 1.0:
            key.append(scale)
        if band is not None and phase == "fleet":
            key.append(band_start)
        return Task(digest(key), phase, config, question, start, scale, band_start)

    units: dict[str, dict[str, Any]] = {}
    ends: dict[str, dict[str, Any]] = {}  # a unit at the band's slow end
    fleets: dict[str, dict[str, Any]] = {}
    pruned: dict[str, tuple[str, str]] = {}
    with runner.session():
        if exhaustive:
            tasks = [task("fleet", c) for c in runnable]
            done = runner.run(tasks, "fleets")
            fleets = {t.config.id: done[t.id] for t in tasks}
        else:
            tasks = [task("unit", c) for c in runnable]
            slow_tasks = [task("unit", c, scale=slow) for c in runnable if band is not None]
            done = runner.run(tasks + slow_tasks, "one unit")
            units = {t.config.id: done[t.id] for t in tasks}
            ends = {t.config.id: done[t.id] for t in slow_tasks}
            facts = [_unit(question, c, units[c.id]) for c in runnable]
            limits = {c.id: max_units(question, c) for c in runnable}
            pruned = cannot_meet(facts, limits)
            left = [u for u in facts if u.config.id not in pruned]
            if band is None:
                bounds = Bounds(left, objective)
            else:
                over = [band_unit(u, _unit(question, u.config, ends[u.config.id])) for u in left]
                bounds = BandBounds(left, over, objective)
            while wave := bounds.next_wave():
                tasks = [
                    task("fleet", u.config, u.units_at_least, band_start=_band_start(bounds, u))
                    for u in wave
                ]
                done = runner.run(tasks, f"fleets, wave {bounds.waves}")
                for t in tasks:
                    fleets[t.config.id] = fleet = done[t.id]
                    if isinstance(bounds, BandBounds):
                        bounds.found_both(
                            t.config.label,
                            _objective(fleet, objective) if fleet["found"] else None,
                            _objective(fleet["band"], objective)
                            if fleet["band"]["found"]
                            else None,
                        )
                    elif fleet["found"]:
                        bounds.found(t.config.label, _objective(fleet, objective))
            pruned |= bounds.pruned
    every = prepared.expanded.every
    metrics = [s.metric for s in question.slos]
    rows = [_row(c, prepared.aside, pruned, units, fleets, question, metrics) for c in every]
    if band is not None:
        for row, c in zip(rows, every, strict=True):
            row |= _band_columns(c, units, ends, fleets, question, metrics, row)
    described = {
        "scenario": prepared.name,
        "file": question.file,
        "space": prepared.space_file,
        "rate_rps": question.rate_rps,
        "workload": "trace" if question.windows else "synthetic",
        "native_rate_rps": question.windows[0][1] if question.windows else None,
        "trace_windows": len(set(question.windows)),
        "slos": [str(s) for s in question.slos],
        "objective": objective,
        "seeds": list(question.seeds),
        "max_instances": question.max_instances,
        "exhaustive": exhaustive,
        "backend": backend,
        "workers": count,
        "wall_s": time.perf_counter() - started,
    }
    if band is not None:
        described["robust_percent"] = band
        described["band_scales"] = list(question.scales)
    result = SearchResult(
        build_table(rows, objective),
        _counts(every, prepared.aside, pruned, units, fleets, ends) | _records(runner.store),
        described,
    )
    if out is not None:
        from sim.whatif.search_output import write_search

        write_search(result, Path(out))
    return result


def _unit(question: Question, config: Config, result: dict[str, Any]) -> Unit:
    completed = result["completed_rps"]
    completed = math.nan if completed is None else float(completed)
    passes = bool(result["passes"])
    return Unit(config, completed, passes, units_at_least(question.rate_rps, completed, passes))


def _band_start(bounds: Bounds, unit: Unit) -> int:
    return bounds.band_start(unit) if isinstance(bounds, BandBounds) else 1


def _objective(fleet: dict[str, Any], objective: str) -> float:
    """What a found fleet is ranked by: its dollars per hour, or its mean power."""
    value = fleet["summary"]["fleet_usd_per_hour" if objective == "cost" else "fleet_power_w"]
    return math.inf if value is None else float(value)


def _row(
    config: Config,
    aside: dict[str, tuple[str, str]],
    pruned: dict[str, tuple[str, str]],
    units: dict[str, dict[str, Any]],
    fleets: dict[str, dict[str, Any]],
    question: Question,
    slo_metrics: list[str],
) -> dict[str, Any]:
    """One configuration's row of the table (see `sim.whatif.search_result`): over a band, its
    fleet over the band (the nominal one is in `_band_columns`)."""
    unit, fleet = units.get(config.id), fleets.get(config.id)
    if fleet is not None and question.band is not None:
        fleet = fleet["band"] | {"probes": fleet["probes"]}
    row: dict[str, Any] = {"configuration": config.label, "status": "", "note": ""}
    if unit is not None:
        completed = unit["completed_rps"]
        row["unit_completed_rps"] = math.nan if completed is None else completed
        row["units_at_least"] = units_at_least(
            question.rate_rps, row["unit_completed_rps"], bool(unit["passes"])
        )
    row["num_probes"] = sum(r["probes"] for r in (unit, fleet) if r is not None)
    row["confirmed"] = bool(fleet and fleet["confirmed"])
    if config.id in aside:
        row["status"], row["note"] = aside[config.id]
    elif config.id in pruned:
        row["status"], row["note"] = pruned[config.id]
    elif fleet is not None and fleet["found"]:
        row["status"] = "found"
        row["instances"] = fleet["instances"]
        if config.prefill:
            row["prefill"], row["decode"] = fleet["prefill"], fleet["decode"]
        summary = fleet["summary"]
        for key in (*SUMMARY_COLUMNS, *slo_metrics):
            value = summary.get(key)
            row[key] = math.nan if value is None else value
    elif fleet is not None:
        row["status"] = "no fleet"
        row["note"] = f"no fleet of up to {question.max_instances} instances meets the SLOs"
        if question.band is not None:
            row["note"] += f" over the ±{question.band:g} % band"
    parts = {"gpu": config.gpu, "tensor_parallel": config.tensor_parallel,
             "data_parallel": config.data_parallel,
             "pipeline_parallel": config.pipeline_parallel,
             "expert_parallel": config.expert_parallel_degree, "layout": config.layout,
             "policy": config.policy_label}  # fmt: skip
    if config.tiers_label is not None:  # the space lists tier options
        parts["kv_tiers"] = config.tiers_label
    return row | parts | {"config_id": config.id}


def _band_columns(
    config: Config,
    units: dict[str, dict[str, Any]],
    ends: dict[str, dict[str, Any]],
    fleets: dict[str, dict[str, Any]],
    question: Question,
    slo_metrics: list[str],
    row: dict[str, Any],
) -> dict[str, Any]:
    """The columns a band adds to a configuration's row (`row`, whose probes and note it
    completes): its nominal fleet (instances, GPUs, dollars per hour, power), whether that fleet
    flips within the band (fails the SLOs at an end of it), and the SLO metrics of the band's
    fleet at the slow end."""
    assert question.band is not None
    unit, end, fleet = units.get(config.id), ends.get(config.id), fleets.get(config.id)
    out: dict[str, Any] = {"flips": None, "nominal_instances": None}
    if end is not None:
        row["num_probes"] += end["probes"]
    if row["status"] == "no fleet" and unit is not None and end is not None:
        over = band_unit(_unit(question, config, unit), _unit(question, config, end))
        most = max_units(question, config)
        if over.units_at_least > most:  # not searched over the band: its bound rules it out
            row["note"] = (
                f"over the ±{question.band:g} % band one unit completed "
                f"{over.completed_rps:.4g} req/s at the slow end, so a fleet needs at least "
                f"{over.units_at_least} units; at most {most} fit in max_instances"
            )
    if fleet is None:
        return out
    band = fleet["band"]
    if fleet["found"]:
        summary = fleet["summary"]
        out["nominal_instances"] = fleet["instances"]
        for key in ("num_gpus", "fleet_usd_per_hour", "fleet_power_w"):
            value = summary.get(key)
            out[f"nominal_{key}"] = math.nan if value is None else value
        out["flips"] = not band["found"] or band["units"] != fleet["units"]
        if not band["found"]:
            row["note"] += f"; at nominal: {fleet['instances']} instances"
    if band["found"]:
        for metric in slo_metrics:
            value = band["ends"][0].get(metric)
            out[f"slow_{metric}"] = math.nan if value is None else value
    return out


def _records(store: Store) -> dict[str, Any]:
    """What the search made of the results saved before: how many did not validate (and were
    recomputed), the first of them and why, and how many could not be saved."""
    first = f"{store.invalid[0][0]}: {store.invalid[0][1]}" if store.invalid else ""
    return {"recomputed": len(store.invalid), "first_recomputed": first,
            "unsaved": len(store.unsaved)}  # fmt: skip


def _counts(
    every: list[Config],
    aside: dict[str, tuple[str, str]],
    pruned: dict[str, tuple[str, str]],
    units: dict[str, dict[str, Any]],
    fleets: dict[str, dict[str, Any]],
    ends: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    results = [*units.values(), *ends.values(), *fleets.values()]
    band = {}
    if any("band" in f for f in fleets.values()):
        nominal = [f for f in fleets.values() if f["found"]]
        band = {
            "nominal_found": len(nominal),
            "flips": sum(not f["band"]["found"] or f["band"]["units"] != f["units"]
                         for f in nominal),
        }  # fmt: skip
    found = [f.get("band", f) for f in fleets.values()]
    return {
        "configurations": len(every),
        "set_aside": len(aside),
        "set_aside_by_reason": dict(Counter(why for why, _ in aside.values())),
        "simulated": len(set(units) | set(fleets)),
        "unit_probed": len(units),
        "pruned": len(pruned),
        "pruned_by_reason": dict(Counter(why for why, _ in pruned.values())),
        "fleet_searched": len(fleets),
        "found": sum(bool(f["found"]) for f in found),
        "confirmed": sum(bool(f["confirmed"]) for f in found),
        "probes": sum(int(r["probes"]) for r in results),
        "requests": sum(int(r["requests"]) for r in results),
        **band,
    }
