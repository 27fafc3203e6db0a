"""The work of a deployment search on one configuration: what one unit serves, and the fewest
units (or prefill and decode instances) that serve the whole rate.

A probe is one streamed simulation (`simulate(..., tables=False)`: only the summary is needed) of
the base scenario with the configuration's GPU, degree (tensor, data, expert and pipeline
parallel; a P/D layout's pools at their own where it gives them), policy and KV tiers, a fleet of
given size, the offered rate and a seed. The rate is the workload's arrival rate, or for a trace its
`rate_scale` times the own rate of the window that seed replays (`Question.windows`: a trace
replays the same requests whatever the seed, so each seed replays its own stretch of the trace,
and a fleet confirmed on every seed holds on several windows of it). A probe passes when every
SLO holds (`meets`: on the exact percentiles, which a probe of up to
`sim.metrics.streaming.EXACT_ROWS` requests keeps, else at the unfavourable end of the sketch's
bound), so a fleet found here meets its SLOs when `batchsim run` reruns it.

A *unit* is one instance (colocated) or one P/D group of x prefill and y decode instances (xPyD);
an instance is tensor x data x pipeline parallel GPUs, and runs as one engine per pipeline stage
(`sim.costs.pipeline`).

* One unit (`unit_probe`): one probe of one unit at the whole rate, on the first seed. If it
  meets the SLOs the answer may be one unit; if not, the requests/s it completed (all it was
  offered, or when overloaded the most one unit completes) bound how many units any fleet of it
  needs (`sim.whatif.search_prune`).
* Fleet (`fleet_search`): the fewest units meeting the SLOs at the whole rate, with
  `sim.whatif.capacity_instances.fewest` galloping from that lower bound, confirmed on every
  seed. For xPyD a fleet of k units has kx prefill and ky decode instances:
  the search over (prefill, decode) pairs runs along each ratio of the space, so list the ratios
  worth trying (1p1d, 1p2d, 2p1d, ...).

Both run in worker processes (or Ray tasks): everything they need travels in a `Task`, and they
return plain JSON-ready data (`run_task`).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.scenario.load import load_scenario_dict
from sim.simulate import simulate
from sim.whatif.capacity import SLO
from sim.whatif.capacity_instances import fewest
from sim.whatif.search_space import Config

Counts = tuple[int, int]  # (instances, 0) colocated; (prefill, decode) for P/D


@dataclass(frozen=True)
class Question:
    """What every configuration is asked: serve `rate_rps` of the base workload under the SLOs."""

    raw: dict[str, Any]  # the base scenario mapping (overrides applied, no variants)
    file: str
    base_dir: str
    rate_rps: float
    # a trace: (start_s, its own rate at rate_scale 1) of the window each seed replays (a
    # replayed trace is the same run whatever the seed: other seeds replay other windows);
    # empty: synthetic arrivals at the rate
    windows: tuple[tuple[float, float], ...]
    slos: tuple[SLO, ...]
    seeds: tuple[int, ...]
    max_instances: int
    router: str | None = None  # the space's colocated router (None: the scenario's)
    link: dict[str, Any] | None = None  # the space's P/D link (None: the scenario's)


@dataclass(frozen=True)
class Task:
    id: str
    phase: str  # "unit": one unit's capacity; "fleet": the fewest units at the rate
    config: Config
    question: Question
    start: int = 1  # fleet: the estimate of the units needed, where the search starts


def max_units(question: Question, config: Config) -> int:
    return question.max_instances // config.unit_size


def unit_counts(config: Config, units: int = 1) -> Counts:
    return (units * config.prefill, units * config.decode) if config.prefill else (units, 0)


def _pool(
    base: dict[str, Any], role: str, count: int, router: str, config: Config
) -> dict[str, Any]:
    """A pool of the P/D fleet: the scenario's router for it, `count` instances, and the
    hardware of the layout's pool where it has its own parallelism."""
    own = base.get(role)
    pool = {
        "router": own.get("router", router) if isinstance(own, dict) else router,
        "count": count,
    }
    hardware = config.prefill_hardware if role == "prefill" else config.decode_hardware
    return pool if hardware is None else pool | {"hardware": copy.deepcopy(hardware)}


def scenario_of(
    question: Question, config: Config, counts: Counts, rate: float, seed: int
) -> dict[str, Any]:
    """The base scenario with this configuration, fleet, rate and seed (a mapping to load)."""
    raw = copy.deepcopy(question.raw)
    raw["seed"] = seed
    raw["hardware"] = copy.deepcopy(config.base_hardware)
    raw["policy"] = copy.deepcopy(config.policy)
    if config.tiers_label is not None:  # the space's tier option replaces the scenario's own
        raw.pop("kv_tiers", None)
        if config.kv_tiers is not None:
            raw["kv_tiers"] = copy.deepcopy(config.kv_tiers)
    cluster = raw.pop("cluster", None) or {}
    pd = raw.pop("disaggregation", None) or {}
    if config.prefill:
        raw["disaggregation"] = {
            "prefill": _pool(pd, "prefill", counts[0], "least_outstanding_requests", config),
            "decode": _pool(pd, "decode", counts[1], "least_kv", config),
            "link": copy.deepcopy(question.link or pd.get("link") or {}),
        }
    else:
        router = question.router or cluster.get("router")
        raw["cluster"] = {"instances": [{"count": counts[0]}]} | (
            {"router": router} if router else {}
        )
    workload = raw["workload"]
    if question.windows:
        index = question.seeds.index(seed) if seed in question.seeds else 0
        start_s, own_rate = question.windows[index]
        workload["trace"]["start_s"] = start_s
        workload["trace"]["rate_scale"] = rate / own_rate
    else:
        workload["arrival"]["rate"] = rate
    return raw


def meets(slos: tuple[SLO, ...], summary: dict[str, float],
          bounds: dict[str, tuple[float, float]]) -> bool:
    """Whether every SLO holds for sure: a percentile that came from a sketch (a sample too
    large to keep whole, `StreamSummary.inexact_percentiles`) is judged at the least favourable
    end of the interval its exact value lies in, so that a fleet found here meets the SLOs
    when `batchsim run` computes the exact percentiles."""
    for slo in slos:
        value = summary[slo.metric]
        if slo.metric in bounds:
            low, high = bounds[slo.metric]
            value = low if slo.at_least else high
        if not slo.met({slo.metric: value}):
            return False
    return True


class Prober:
    """Summaries of probes of one configuration, counted."""

    def __init__(self, question: Question, config: Config) -> None:
        self.question, self.config = question, config
        self.probes = 0
        self.requests = 0

    def probe(self, counts: Counts, rate: float, seed: int) -> tuple[dict[str, float], bool]:
        """The probe's summary, and whether it meets every SLO (`meets`)."""
        q = self.question
        raw = scenario_of(q, self.config, counts, rate, seed)
        loaded = load_scenario_dict(raw, file=q.file, base_dir=Path(q.base_dir))
        result = simulate(loaded, tables=False)[loaded.variants[0].variant]
        summary = result.summary()
        bounds = result.streamed.inexact_percentiles() if result.streamed is not None else {}
        self.probes += 1
        self.requests += int(summary["num_requests"])
        return summary, meets(q.slos, summary, bounds)


def completed_rps(summary: dict[str, float], engines: int) -> float:
    """Requests/s a run completed over its whole span (first arrival to last step): for an
    overloaded unit, the most it can complete, whatever the SLOs. The span is the one
    `busy_fraction` divides by (`busy_s / (engines * busy_fraction)`, over every engine: an
    instance of pp pipeline stages is pp of them)."""
    busy, fraction = summary.get("busy_s", math.nan), summary.get("busy_fraction", math.nan)
    if not (busy > 0 and fraction > 0):
        return math.nan
    return float(summary["num_finished"]) / (busy / (engines * fraction))


def unit_probe(question: Question, config: Config) -> dict[str, Any]:
    """One unit at the whole rate on the first seed: whether it meets the SLOs, and the
    requests/s it completed (`completed_rps`), which bounds what any fleet of it needs."""
    prober = Prober(question, config)
    summary, passes = prober.probe(unit_counts(config), question.rate_rps, question.seeds[0])
    return {
        "passes": passes,
        "completed_rps": _json_ready({"x": completed_rps(summary, config.unit_engines)})["x"],
        "probes": prober.probes,
        "requests": prober.requests,
    }


def _json_ready(summary: dict[str, float]) -> dict[str, float | None]:
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in summary.items()}


def fleet_search(question: Question, config: Config, start: int) -> dict[str, Any]:
    """The fewest units meeting every SLO at the rate on every seed; the summary of the first
    seed's probe at the answer."""
    prober = Prober(question, config)
    seeds = list(question.seeds)
    memo: dict[tuple[Counts, int], bool] = {}
    summaries: dict[tuple[Counts, int], dict[str, float]] = {}

    def passes(counts: Counts, seed_list: list[int]) -> bool:
        for seed in seed_list:
            if (counts, seed) not in memo:
                summary, memo[counts, seed] = prober.probe(counts, question.rate_rps, seed)
                summaries[counts, seed] = summary
            if not memo[counts, seed]:
                return False
        return True

    units = fewest(
        lambda k, seed_list: passes(unit_counts(config, k), seed_list),
        seeds,
        start,
        max_units(question, config),
    )
    counts = unit_counts(config, units)
    return {
        "found": bool(units),
        "units": units,
        "instances": sum(counts) if units else 0,
        "prefill": counts[0] if units and config.prefill else 0,
        "decode": counts[1] if units and config.prefill else 0,
        "confirmed": bool(units) and len(seeds) > 1,
        "probes": prober.probes,
        "requests": prober.requests,
        "summary": _json_ready(summaries[counts, seeds[0]]) if units else None,
    }


def run_task(task: Task) -> dict[str, Any]:
    """A worker's entry point (module level, so that it pickles by reference)."""
    if task.phase == "unit":
        return unit_probe(task.question, task.config)
    return fleet_search(task.question, task.config, task.start)
