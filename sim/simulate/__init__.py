"""`simulate(scenario) -> Results`: the one entry point. It writes nothing.

For each variant: generate (or reuse) the requests, size the KV pool from the model and GPU,
build the policy and the cost model, run the fleet's clock (`sim.core.clock.Clock`) until every
request has finished or been rejected, and turn the flat records into pandas tables. Variants
that share the workload and seed get the very same requests.

The scenario may be a file path, a mapping (as in a notebook) or a loaded `ScenarioSet`.

The pipeline: `checks` (what loading could not know, refused before the run), `run` (one
variant's run, `VariantRun`), `results` (its `VariantResult`) and `tables` (the tables from the
records, which the live server builds too).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from sim.errors import ScenarioError
from sim.metrics.results import Results, VariantResult
from sim.scenario.load import ResolvedScenario, ScenarioSet, load_any
from sim.simulate.checks import check_timers, check_variant
from sim.simulate.results import tables_result
from sim.simulate.run import PROGRESS_WALL_S, ProgressFn, VariantRun, pulls_arrivals, streamed_rows
from sim.simulate.tables import requests_table, steps_table
from sim.workload import RequestArrays
from sim.workload.budget import memory_problem
from sim.workload.generate import workload_for
from sim.workload.stream import Workload

__all__ = [
    "PROGRESS_WALL_S",
    "ProgressFn",
    "VariantRun",
    "check_timers",
    "pulls_arrivals",
    "requests_table",
    "run_variant",
    "run_workload",
    "simulate",
    "steps_table",
    "streamed_rows",
    "tables_result",
    "workload_of",
]


def simulate(
    scenario: ScenarioSet | Mapping[str, Any] | str | os.PathLike[str],
    *,
    overrides: list[str] | tuple[str, ...] = (),
    progress: ProgressFn | None = None,
    tables: bool = True,
) -> Results:
    """Run every variant of a scenario: a YAML path, a mapping or a loaded `ScenarioSet`. With
    `tables=False` no per-request, per-step or gap tables are kept: each variant's summary is
    folded from its records as they come (flat memory; percentiles from sketches)."""
    scenario = load_any(scenario, overrides)
    if tables:  # loading checked what a streamed run needs, and what tables need
        too_big = scenario.tables_problem
        if not scenario.tables_checked:
            too_big = memory_problem([v.spec.workload for v in scenario.variants], tables=True)
        if too_big is not None:
            raise ScenarioError(too_big[1], file=scenario.file, path=too_big[0])
    workloads: dict[str, Workload] = {}
    variants: dict[str, VariantResult] = {}
    for resolved in scenario.variants:
        spec = resolved.spec
        key = json.dumps(
            [
                spec.seed,
                spec.workload.model_dump(mode="json"),
                str(resolved.base_dir),
                spec.model.max_model_len,  # a trace's long prompts depend on it
                not tables and resolved.regenerates_workload,
            ],
            sort_keys=True,
        )
        if key not in workloads:
            try:
                workloads[key] = workload_of(resolved, tables)
            except ScenarioError as exc:
                raise exc.with_file(scenario.file) from None
        workload = workloads[key]
        check_variant(resolved, workload, tables, scenario.file)
        if progress:
            progress(f"{resolved.variant}: {workload.num_requests} requests")
        variants[resolved.variant] = run_workload(resolved, workload, progress, tables=tables)
    return Results(scenario_name=scenario.name, variants=variants)


def workload_of(resolved: ResolvedScenario, tables: bool = True) -> Workload:
    """The requests a run of `resolved` replays: generated whole, or for a streamed run
    (`tables=False`) of a synthetic workload, regenerated from the seed as the run goes."""
    spec = resolved.spec
    return workload_for(
        spec.workload, spec.seed, resolved.base_dir, spec.model.max_model_len,
        regenerate=not tables and resolved.regenerates_workload,
    )  # fmt: skip


def run_variant(
    resolved: ResolvedScenario,
    requests: RequestArrays | Workload,
    progress: ProgressFn | None = None,
    *,
    tables: bool = True,
) -> VariantResult:
    """One variant on the given requests (arrays, or a `Workload`: `workload_of`).
    `tables=False` streams the records into the summary (`sim.metrics.streaming`) and keeps no
    per-request, per-step or gap tables: memory stays flat, percentiles come from sketches."""
    return run_workload(resolved, Workload.of(requests), progress, tables=tables)


def run_workload(
    resolved: ResolvedScenario,
    workload: Workload,
    progress: ProgressFn | None = None,
    *,
    tables: bool = True,
) -> VariantResult:
    """`run_variant` on a workload (what `simulate` holds already)."""
    return VariantRun(resolved, workload, progress, tables=tables).run()
