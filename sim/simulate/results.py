"""A finished run's `VariantResult`: its tables (`tables_result`) or, streamed, the summary folded
as it went (`streamed_result`); the fleet's instances and events, the counters of the pricing
and the prefix cache, and the summary's context (`context_of`: SLOs, the fleet's GPUs, prices and
power, its KV tiers' rent)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from sim.core.recorder import ItlLog, RequestLog
from sim.costs.figures import InstanceFigures
from sim.metrics.context import SummaryContext
from sim.metrics.kv_tiers import cache_counters
from sim.metrics.results import VariantResult
from sim.metrics.streaming import StreamSummary
from sim.scenario.kv_tiers import tiers_cost_per_hour
from sim.scenario.load import ResolvedScenario
from sim.simulate.tables import steps_table
from sim.topology.cluster import Cluster


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
        context = context_of(resolved, cluster, lives)
    return instances, events, context


def _counters(
    resolved: ResolvedScenario, cluster: Cluster, more: dict[str, float]
) -> dict[str, float]:
    counters = {**more, **_cache_counters(cluster), **_pricing_counters(cluster)}
    if resolved.spec.metrics.tpot == "per_output_token":  # the summary says which TPOT
        counters["tpot_per_output_token"] = 1.0
    return counters


def streamed_result(
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
        inst.engine.steps.hand_over(force=True)
        inst.engine.itl.hand_over(force=True)
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
    instances, events, context = _fleet_tables(resolved, cluster, context_of(resolved, cluster))
    counters = _counters(resolved, cluster, more)
    steps = steps_table([inst.engine.steps for inst in cluster.instances])
    itl_parts = [inst.engine.itl.arrays() for inst in cluster.instances] or [ItlLog().arrays()]
    for inst in cluster.instances:
        inst.engine.itl.drop()  # the runs' rows, expanded into the table now
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
    pricings = [i.engine.pricing for i in cluster.instances]
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


def context_of(
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
        slo_task_s=spec.slo.task_s,
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
