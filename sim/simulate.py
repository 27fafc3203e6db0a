"""`simulate(scenario) -> Results`: the one entry point. It writes nothing.

For each variant: generate (or reuse) the requests, size the KV pool from the model and GPU,
build the policy and the cost model, run one SimPy environment until every request has finished
or been rejected, and turn the flat records into pandas tables. Variants that share the workload
and seed get the very same requests.

The scenario may be a file path, a mapping (as in a notebook) or a loaded `ScenarioSet`.

Progress: with a `progress` callback, a watcher thread wakes every `PROGRESS_WALL_S` seconds of
wall-clock time and reports the simulated time and the requests done. It lives outside the SimPy
environment and only reads state, so it changes neither the schedule nor the results, and its
cost is bounded by wall time, whatever the simulated time spans (a run over 10^9 simulated
seconds costs it nothing more). Without a callback there is no watcher at all.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd
import simpy

from sim.core.arrivals import ChunkWindow, Source
from sim.core.instance import Instance
from sim.core.recorder import STEP_COLUMNS, ItlLog, RequestLog, StepLog
from sim.costs.figures import InstanceFigures
from sim.errors import ScenarioError
from sim.metrics.context import SummaryContext
from sim.metrics.kv_tiers import cache_counters
from sim.metrics.results import Results, VariantResult
from sim.metrics.streaming import StreamSummary
from sim.metrics.timeline import check_windows
from sim.scenario.kv_tiers import tiers_cost_per_hour
from sim.scenario.load import ResolvedScenario, ScenarioSet, check_tiers, load_any
from sim.topology.cluster import Cluster, build_cluster
from sim.workload import RequestArrays
from sim.workload.budget import memory_problem
from sim.workload.generate import workload_for
from sim.workload.stream import Workload

ProgressFn = Callable[[str], None]
PROGRESS_WALL_S = 1.0



def check_timers(spec: Any, span_s: float, file: str) -> None:
    """A ScenarioError before the run when a periodic timer (an autoscaler's interval, a
    router's load scrape) would add more events than `MAX_TICKS` over the arrivals' span."""
    from sim.scenario.control_plane import timer_problem

    timers: list[tuple[str, float]] = []
    if spec.cluster is not None:
        refresh = spec.cluster.router_options.refresh_s
        if refresh > 0:
            timers.append(("cluster.router_options.refresh_s", refresh))
        for i, group in enumerate(spec.cluster.instances):
            if group.autoscale is not None:
                timers.append((f"cluster.instances[{i}].autoscale.interval_s",
                               group.autoscale.interval_s))
    if spec.disaggregation is not None:
        pools = (("prefill", spec.disaggregation.prefill), ("decode", spec.disaggregation.decode))
        for role, pool in pools:
            if pool.autoscale is not None:
                timers.append((f"disaggregation.{role}.autoscale.interval_s",
                               pool.autoscale.interval_s))
    for path, period in timers:
        problem = timer_problem(period, span_s)
        if problem is not None:
            raise ScenarioError(problem, file=file, path=path)

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
        if resolved.workload_plan.tier_names is None:  # a trace's tier column: known only now
            try:
                check_tiers(spec, list(workload.tier_names))
            except ValueError as exc:
                raise ScenarioError(str(exc), file=scenario.file, path="slo.tiers") from None
        shape = workload.shape
        if spec.metrics.window_s is not None and shape.first_s == shape.first_s:  # not NaN
            try:  # the timeline's windows, early
                check_windows(shape.first_s, shape.last_s, spec.metrics.window_s)
            except ScenarioError as exc:
                raise exc.with_file(scenario.file) from None
        if shape.first_s == shape.first_s:
            check_timers(spec, shape.last_s - shape.first_s, scenario.file)
        if not tables and workload.closed_loop and spec.metrics.cooldown_s:
            raise ScenarioError(
                "a streamed run of closed-loop sessions learns its last arrival only at the end, "
                "so it cannot leave out a cooldown; set it to 0 or keep the tables",
                file=scenario.file,
                path="metrics.cooldown_s",
            )
        if progress:
            progress(f"{resolved.variant}: {workload.num_requests} requests")
        variants[resolved.variant] = run_workload(resolved, workload, progress, tables=tables)
    return Results(scenario_name=scenario.name, variants=variants)


class _Watcher:
    """Reports progress from a thread every `PROGRESS_WALL_S` wall-clock seconds (see above)."""

    def __init__(
        self, clock: Callable[[], float], log: RequestLog, total: int, name: str,
        progress: ProgressFn,
    ) -> None:  # fmt: skip
        self.clock, self.log, self.total, self.name = clock, log, total, name
        self.progress = progress
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="batchsim-progress", daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(PROGRESS_WALL_S):
            done = self.log.num_done  # finished or rejected: an int the run only increments
            self.progress(
                f"{self.name}: {self.clock():.1f} s simulated, {done}/{self.total} requests done"
            )

    def __enter__(self) -> _Watcher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


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
    spec = resolved.spec
    env = simpy.Environment()
    routing_rng = np.random.default_rng([spec.seed, 1])  # its own stream: routers only
    stream: StreamSummary | None = None
    records = None
    total = workload.num_requests
    if tables:
        log = RequestLog(total)
    else:

        def take_requests(log: RequestLog) -> None:
            assert stream is not None
            stream.add_requests(requests_table(source.window, log, spec.metrics.tpot))

        def make_records(index: int) -> tuple[StepLog, ItlLog]:
            def take_steps(steps: StepLog) -> None:
                assert stream is not None
                stream.add_steps(steps.instance, pd.DataFrame(steps.columns(), copy=False))

            def take_gaps(itl: ItlLog) -> None:
                assert stream is not None
                stream.add_itl(*itl.arrays())

            rows = streamed_rows(resolved)
            return (
                StepLog(index, on_full=take_steps, capacity=rows),
                ItlLog(on_full=take_gaps, capacity=rows),
            )

        log = RequestLog(total, on_full=take_requests)
        records = make_records
    cluster = build_cluster(
        env, resolved, routing_rng, log, records, requests=workload.arrays, num_requests=total
    )
    context = _context(resolved, cluster)
    if not tables:
        num_links = cluster.link.num_links if cluster.link is not None else 0
        shape = workload.shape
        last = shape.last_s if shape.all_known else math.inf
        stream = StreamSummary(
            context, shape.first_s, last, shape.last_s, num_links, window_s=spec.metrics.window_s
        )
    pulled = pulls_arrivals(cluster, workload)
    source = Source(
        env, workload, cluster.dispatch, push=not pulled, frontend_s=spec.engine.frontend_s,
        release=not tables,
    )  # fmt: skip
    if pulled:
        cluster.instances[0].feed = source.pulled()
    if workload.closed_loop:

        def follow(instance: Instance) -> None:  # a finished turn sends the session's next
            instance.on_finish = source.turn_finished

        cluster.each_instance(follow)
        log.on_rejected = source.turn_rejected  # and so does a refused one
    if progress is not None:

        def clock() -> float:  # an instance running ahead of SimPy knows the later time
            return max(env.now, *(instance.now for instance in cluster.instances))

        with _Watcher(clock, log, total, resolved.variant, progress):
            env.run()
    else:
        env.run()
    if log.num_done != total:  # the loop only stops when the queues drain
        missing = total - log.num_done
        raise AssertionError(f"{missing} requests never finished in {resolved.variant}")
    counters: dict[str, float] = {**workload.notes}
    if stream is not None:
        return _streamed_result(resolved, cluster, log, stream, context, counters)
    return tables_result(
        resolved, cluster, requests_table(source.window, log, spec.metrics.tpot), counters
    )


def _fleet_tables(
    resolved: ResolvedScenario, cluster: Cluster, context: SummaryContext
) -> tuple[pd.DataFrame, pd.DataFrame, SummaryContext]:
    """The instances table, the fleet's events and the summary's context (an autoscaled
    fleet's lifetimes in both)."""
    instances = pd.DataFrame([dataclasses.asdict(i) for i in cluster.info])
    events = pd.DataFrame()
    if cluster.fleet is not None:  # the fleet changed during the run: its lifetimes and events
        lives = cluster.fleet.lifetimes()
        instances = pd.concat([instances, lives], axis=1)
        events = cluster.fleet.events()
        context = _context(resolved, cluster, lives)
    return instances, events, context


def _counters(
    resolved: ResolvedScenario, cluster: Cluster, more: dict[str, float]
) -> dict[str, float]:
    counters = {**more, **_cache_counters(cluster), **_pricing_counters(cluster)}
    if resolved.spec.metrics.tpot == "per_output_token":  # the summary says which TPOT
        counters["tpot_per_output_token"] = 1.0
    return counters


def _streamed_result(
    resolved: ResolvedScenario,
    cluster: Cluster,
    log: RequestLog,
    stream: StreamSummary,
    context: SummaryContext,
    more: dict[str, float],
) -> VariantResult:
    """A streamed run's result: the summary folded as it went, no tables."""
    instances, events, context = _fleet_tables(resolved, cluster, context)
    if cluster.fleet is not None:
        stream.use_context(context)
    log.hand_over()
    for inst in cluster.instances:
        inst.steps.hand_over(force=True)
        inst.itl.hand_over(force=True)
    return VariantResult(
        name=resolved.variant,
        requests=pd.DataFrame(),
        steps=pd.DataFrame(),
        itl=pd.DataFrame(),
        context=context,
        scenario=resolved.spec.model_dump(mode="json"),
        instances=instances,
        streamed=stream,
        counters=_counters(resolved, cluster, more),
        fleet_events=events,
    )


def tables_result(
    resolved: ResolvedScenario,
    cluster: Cluster,
    requests: pd.DataFrame,
    more: dict[str, float],
) -> VariantResult:
    """A finished run's result with its tables: the requests table (`requests_table`), and the
    instances' step and gap records; `more` counters for the summary (a workload's notes)."""
    instances, events, context = _fleet_tables(resolved, cluster, _context(resolved, cluster))
    counters = _counters(resolved, cluster, more)
    steps = steps_table([inst.steps for inst in cluster.instances])
    itl_parts = [inst.itl.arrays() for inst in cluster.instances] or [ItlLog().arrays()]
    for inst in cluster.instances:
        inst.itl.drop()  # the runs' rows, expanded into the table now
    if len(itl_parts) == 1:  # no copy: the gap table is the largest one
        gaps, counts, tokens = itl_parts[0]
    else:
        gaps = np.concatenate([g for g, _, _ in itl_parts])
        counts = np.concatenate([c for _, c, _ in itl_parts])
        tokens = np.concatenate([t for _, _, t in itl_parts])
    del itl_parts
    # the gap table in ascending order of gap: its percentiles then need no sort of their own,
    # at the moment the summary holds every table (`sim.metrics.percentiles`)
    order = np.argsort(gaps)
    gaps = gaps[order]
    counts = counts[order]
    tokens = tokens[order]
    del order
    return VariantResult(
        name=resolved.variant,
        requests=requests,
        steps=steps,
        itl=pd.DataFrame({"gap_s": gaps, "count": counts, "tokens": tokens}, copy=False),
        context=context,
        scenario=resolved.spec.model_dump(mode="json"),
        instances=instances,
        counters=counters,
        fleet_events=events,
    )


def _pricing_counters(cluster: Cluster) -> dict[str, float]:
    """Steps priced outside a table profile's measurements (extrapolated by its analytic form),
    and the host seconds of CPU overhead the pricing added; no keys when neither applies."""
    out: dict[str, float] = {}
    pricings = [i.pricing() for i in cluster.instances]
    tabled = [p for p in pricings if getattr(p.cost, "has_tables", False)]
    if tabled:
        out["profile_extrapolated_steps"] = float(sum(p.num_extrapolated_steps for p in tabled))
    cpu = sum(p.cpu_overhead_s for p in pricings)
    if cpu:
        out["cpu_overhead_s"] = cpu
    return out


def _cache_counters(cluster: Cluster) -> dict[str, float]:
    """Prefix-cache lookups of the instances that cache, and the KV tiers' traffic (no keys
    without caching: `sim.metrics.tiers`)."""
    return cache_counters([i.pool for i in cluster.instances])


def _context(
    resolved: ResolvedScenario, cluster: Cluster, lives: pd.DataFrame | None = None
) -> SummaryContext:
    """What the summary needs; `lives` the lifetimes of an autoscaled fleet's instances."""
    spec = resolved.spec
    if lives is not None:  # instances launched during the run: each bills its own group's GPUs
        figures = {g.name: g.figures for g in resolved.groups}
        # an instance's DRAM and NVMe tiers are rented with it, for its lifetime
        own = tiers_cost_per_hour(spec.kv_tiers, 1) - tiers_cost_per_hour(spec.kv_tiers, 0)
        fleet = tuple(_fleet(figures[i.group], own) for i in cluster.info)
        lifetimes = tuple(zip(lives["launch_s"], lives["retire_s"], strict=True))
        memory = tiers_cost_per_hour(spec.kv_tiers, 0)  # the shared store, for the whole run
    else:
        # one entry per engine: a pipelined instance's virtual engines each bill a stage's GPUs
        fleet = tuple(
            _fleet(group.figures)
            for group in resolved.groups
            for _ in range(group.count * group.figures.engines)
        )
        lifetimes = ()
        memory = tiers_cost_per_hour(spec.kv_tiers, len(cluster.instances))
    model = resolved.model_figures
    first = cluster.reference()
    return SummaryContext(
        slo_ttft_s=spec.slo.ttft_s,
        slo_tpot_s=spec.slo.tpot_s,
        slo_tiers=tuple((t, *spec.slo.targets(t)) for t in spec.slo.tiers),
        warmup_s=spec.metrics.warmup_s,
        cooldown_s=spec.metrics.cooldown_s,
        flops_per_token=model.flops_per_token,
        weight_bytes=model.weight_bytes,
        kv_bytes_per_token=first.kv_bytes_per_token,
        peak_flops=first.peak_flops,
        hbm_bandwidth_bytes_per_s=first.hbm_bandwidth_bytes_per_s,
        kv_blocks_total=first.kv_blocks_total,
        block_size=first.block_size,
        num_instances=len(cluster.instances),
        instances=tuple(
            (
                i.kv_blocks_total,
                i.peak_flops,
                i.hbm_bandwidth_bytes_per_s,
                i.kv_bytes_per_token,
                i.block_size,
            )
            for i in cluster.info
        ),
        num_links=cluster.link.num_links if cluster.link is not None else 0,
        memory_usd_per_hour=memory,
        fleet=fleet,
        lifetimes=lifetimes,
        speculative=any(
            s is not None and s.active
            for s in (g.policy.speculative for g in resolved.groups)
        ),
    )


def _fleet(
    figures: InstanceFigures, rent_usd_per_hour: float = 0.0
) -> tuple[int, float, float, float]:
    """(GPUs, dollars per GPU-hour, TDP and idle watts) of one engine, in engine order: an
    instance's, or one stage's for each virtual engine of a pipelined instance;
    `rent_usd_per_hour` is what else the instance rents (its KV tiers), spread over its GPUs."""
    gpus = figures.engine_gpus
    return gpus, figures.usd_per_gpu_hour + rent_usd_per_hour / gpus, figures.tdp_w, figures.idle_w


# a streamed run's records held at once, shared by the instances (each hands its step rows and
# gaps over when it holds its share): memory stays flat in the fleet's size as in its requests
STREAMED_ROWS = 1 << 18
MIN_STREAMED_ROWS, MAX_STREAMED_ROWS = 1 << 10, 1 << 16


def streamed_rows(resolved: ResolvedScenario) -> int:
    """Step rows (and gap entries) each instance of a streamed run holds before handing them
    over: `STREAMED_ROWS` over the most instances the fleet can hold (an autoscaled group's
    `max`), between `MIN_STREAMED_ROWS` and `MAX_STREAMED_ROWS` (the records' own default)."""
    most = sum(
        max(g.count, g.autoscale.max if g.autoscale is not None else 0) for g in resolved.groups
    )
    return min(MAX_STREAMED_ROWS, max(MIN_STREAMED_ROWS, STREAMED_ROWS // max(1, most)))


def pulls_arrivals(cluster: Cluster, workload: Workload) -> bool:
    """Whether the lone instance pulls its arrivals itself (`sim.core.arrivals.ArrivalFeed`): no
    SimPy event per arrival or run; the same schedule as arrivals pushed by the source."""
    return cluster.direct and workload.sessions is None


def steps_table(logs: list[StepLog]) -> pd.DataFrame:
    """Every instance's step groups, ordered by start time (then instance); none (a fleet that
    never launched an instance) is an empty table."""
    parts = [log.columns() for log in logs] or [StepLog(0).columns()]
    if len(parts) == 1:
        columns = parts[0]
    else:
        columns = {name: np.concatenate([p[name] for p in parts]) for name in STEP_COLUMNS}
    steps = pd.DataFrame(columns, copy=False)
    if len(logs) > 1:
        steps = steps.sort_values(["start_s", "instance"], kind="stable", ignore_index=True)
    return steps


def requests_table(
    window: ChunkWindow, log: RequestLog, tpot: str = "after_first"
) -> pd.DataFrame:
    """One row per request the log holds (all of them, in id order, unless streamed): the
    workload's columns (from `window`, which a streamed run lets drop the chunks taken) and the
    run's outcomes; `tpot` is `metrics.tpot`, the definition the tpot_s column follows."""
    ids, f, n = log.block()
    work = window.take(ids)
    reasons = np.asarray(log.reasons, dtype=object)[n["reject_code"]]
    df = pd.DataFrame(
        {
            "id": ids,
            "instance": n["instance"],
            "arrival_s": f["arrival_s"],
            "num_prompt_tokens": work["num_prompt_tokens"],
            "max_output_tokens": work["max_output_tokens"],
            "num_output_tokens": n["num_output_tokens"],
            "first_scheduled_s": f["first_scheduled_s"],
            "first_token_s": f["first_token_s"],
            "finish_s": f["finish_s"],
            "max_itl_s": f["max_itl_s"],
            "num_preemptions": n["num_preemptions"],
            "num_recomputed_tokens": n["num_recomputed_tokens"],
            "num_swaps": n["num_swaps"],
            "num_cached_tokens": n["num_cached_tokens"],
            "swapped_bytes": n["swapped_bytes"],
            "tier": work["tier"],
            "predicted_output_tokens": work["predicted_output_tokens"],
            "rejected": n["reject_code"] > 0,
            "reject_reason": reasons,
            "decode_instance": n["decode_instance"],
            "handoff_s": f["handoff_s"],
            "transfer_start_s": f["transfer_start_s"],
            "transfer_end_s": f["transfer_end_s"],
            "num_spec_steps": n["num_spec_steps"],
            "num_spec_proposed": n["num_spec_proposed"],
            "num_spec_accepted": n["num_spec_accepted"],
        },
        copy=False,
    )
    for name in ("source_id", "session"):  # a trace's own request ids; session labels
        if name in work:
            df[name] = work[name]
    df["queue_s"] = df["first_scheduled_s"] - df["arrival_s"]
    df["ttft_s"] = df["first_token_s"] - df["arrival_s"]
    df["e2e_s"] = df["finish_s"] - df["arrival_s"]
    outputs = df["num_output_tokens"]
    if tpot == "per_output_token":  # the decode time over every output token
        per = outputs.where(outputs >= 1).astype(float)
    else:  # over the tokens after the first: each one's share of the time since the first
        per = (outputs - 1).where(outputs >= 2).astype(float)
    df["tpot_s"] = (df["finish_s"] - df["first_token_s"]) / per
    df["transfer_queue_s"] = df["transfer_start_s"] - df["handoff_s"]
    df["transfer_s"] = df["transfer_end_s"] - df["transfer_start_s"]
    return df
