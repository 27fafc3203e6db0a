"""The work of a deployment search on one configuration: what one unit serves, and the fewest
units (or prefill and decode instances) that serve the whole rate.

A probe is one streamed simulation (`simulate(..., tables=False)`: only the summary is needed) of
the base scenario with the configuration's GPU, degree and policy, a fleet of given size, the
offered rate and a seed. The rate is the workload's arrival rate, or for a trace its `rate_scale`
times the own rate of the window that seed replays (`Question.windows`: a trace replays the same
requests whatever the seed, so each seed replays its own stretch of the trace, and a fleet
confirmed on every seed holds on several windows of it). A probe passes when every SLO holds.

A *unit* is one instance (colocated) or one P/D group of x prefill and y decode instances (xPyD).

* Unit capacity (`unit_capacity`): a bracket on the largest rate one unit serves, on the first
  seed (it only estimates and prunes: fleets are confirmed on every seed), with the bisection of
  `sim.whatif.capacity` (`RateSearch`). It asks first whether one unit serves the whole rate
  (then the search stops there). Otherwise that overloaded probe measured what one unit can
  complete, which bounds what it serves under any SLO: the next probe is at 90 % of it, then the
  rate is halved until a probe passes (no lower than the rate over the most units the fleet may
  have: below that no fleet within `max_instances` would do), raised by `STEP_UP` until one
  fails, and the bracket bisected to the tolerance.
* Fleet (`fleet_search`): the fewest units meeting the SLOs at the whole rate, with
  `sim.whatif.capacity_instances.fewest` galloping from the estimate `ceil(rate / capacity)`,
  confirmed on every seed. For xPyD a fleet of k units has kx prefill and ky decode instances:
  the search over (prefill, decode) pairs runs along each ratio of the space, so list the ratios
  worth trying (1p1d, 1p2d, 2p1d, ...); keeping fleets whole multiples of a unit is also what
  lets one unit's capacity stand for its fleets when pruning (`sim.whatif.search_prune`).

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
from sim.whatif.capacity import SLO, RateSearch
from sim.whatif.capacity_instances import fewest
from sim.whatif.search_space import Config

Counts = tuple[int, int]  # (instances, 0) colocated; (prefill, decode) for P/D
STEP_UP = 1.25  # the factor by which a unit's bracket grows above a passing rate


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
    tolerance: float
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


def _pool(base: dict[str, Any], role: str, count: int, router: str) -> dict[str, Any]:
    own = base.get(role)
    return {
        "router": own.get("router", router) if isinstance(own, dict) else router,
        "count": count,
    }


def scenario_of(
    question: Question, config: Config, counts: Counts, rate: float, seed: int
) -> dict[str, Any]:
    """The base scenario with this configuration, fleet, rate and seed (a mapping to load)."""
    raw = copy.deepcopy(question.raw)
    raw["seed"] = seed
    raw["hardware"] = copy.deepcopy(config.hardware)
    raw["policy"] = copy.deepcopy(config.policy)
    cluster = raw.pop("cluster", None) or {}
    pd = raw.pop("disaggregation", None) or {}
    if config.prefill:
        raw["disaggregation"] = {
            "prefill": _pool(pd, "prefill", counts[0], "least_outstanding_requests"),
            "decode": _pool(pd, "decode", counts[1], "least_kv"),
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


class Prober:
    """Summaries of probes of one configuration, counted (a `RateProber` for its one unit)."""

    def __init__(self, question: Question, config: Config) -> None:
        self.question, self.config = question, config
        self.num_gpus = {"unit": config.unit_gpus}
        self.probes = 0
        self.requests = 0
        self.last: dict[str, float] = {}

    def summary(self, counts: Counts, rate: float, seed: int) -> dict[str, float]:
        q = self.question
        raw = scenario_of(q, self.config, counts, rate, seed)
        loaded = load_scenario_dict(raw, file=q.file, base_dir=Path(q.base_dir))
        summary = simulate(loaded, tables=False)[loaded.variants[0].variant].summary()
        self.probes += 1
        self.requests += int(summary["num_requests"])
        self.last = summary
        return summary

    def run(self, variant: str, rate: float, seed: int) -> dict[str, float]:
        return self.summary(unit_counts(self.config), rate, seed)


def unit_capacity(question: Question, config: Config) -> dict[str, Any]:
    """One unit's capacity on the first seed: `capacity_rps` passes (0: none tried did),
    `failing_rps` fails (None: none tried did, one unit serves the whole rate)."""
    prober = Prober(question, config)
    search = RateSearch(prober, "unit", question.slos, list(question.seeds[:1]))
    target = question.rate_rps
    floor = target / max_units(question, config)
    lo, hi = 0.0, target
    if search.passes(target, confirm=False):
        lo, hi = target, math.inf
    else:
        # what one overloaded unit completed bounds what it serves under any SLO: start below it
        served = prober.last.get("requests_per_s", math.nan)
        rate = max(min(0.9 * served, target / 2) if served > 0 else target / 2, floor)
        while True:  # down by halves until a rate passes, no lower than the floor
            if search.passes(rate, confirm=False):
                lo = rate
                break
            hi = rate
            if rate <= floor:
                break
            rate = max(rate / 2, floor)
        while lo > 0 and lo * STEP_UP < hi:  # then up in small steps until one fails
            if not search.passes(lo * STEP_UP, confirm=False):
                hi = lo * STEP_UP
                break
            lo *= STEP_UP
        if lo > 0:
            found = search.refine(lo, hi, question.tolerance)
            lo, hi = found.capacity_rps, found.failing_rps
    return {
        "capacity_rps": lo,
        "failing_rps": None if math.isinf(hi) else hi,
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
                summary = prober.summary(counts, question.rate_rps, seed)
                memo[counts, seed] = all(slo.met(summary) for slo in question.slos)
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
        return unit_capacity(task.question, task.config)
    return fleet_search(task.question, task.config, task.start)
