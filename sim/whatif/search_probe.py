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

Over a band on the GPU step time (`search --robust X`, `Question.band`), every candidate fleet is
judged at nominal and at both ends of the band (`Question.scales`: every step's GPU time times
1, 1 + X/100 and 1 - X/100, as `batchsim run --band X` reruns a scenario,
`engine.pricing.gpu_time_scale` times the scale the scenario already has): `Prober.judge(counts,
seed, scale)` is one candidate under one transform of the scenario (`Prober.transform`, by
default `at_scale`). The fleet search then gives two answers from the same probes: the fewest
units meeting the SLOs at nominal, and, searched from there, the fewest meeting them at every
point of the band (`band` in its result). A unit is also probed at the band's slow end (a
`Task` with `scale`), which bounds the band's fleets as the nominal probe bounds the nominal ones.

Both run in worker processes (or Ray tasks): everything they need travels in a `Task`, and they
return plain JSON-ready data (`run_task`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.scenario.load import ScenarioSet, load_scenario_dict
from sim.scenario.overrides import set_path
from sim.simulate import simulate
from sim.whatif.capacity import SLO
from sim.whatif.capacity_instances import fewest
from sim.whatif.error_bars import SCALE_PATH, nominal_scale
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
    band: float | None = None  # half-width in percent of the band on GPU step time (None: none)

    @property
    def scales(self) -> tuple[float, ...]:
        """The GPU-time scales every candidate is judged at: nominal, then (over a band) the
        slow end and the fast end."""
        return (1.0,) if self.band is None else (1.0, *band_ends(self.band))


def band_ends(percent: float) -> tuple[float, float]:
    """(slow end, fast end) of a band of +/- `percent` on the GPU step time: 1.1 and 0.9 exactly
    as typed for a 10 % band."""
    return (100 + percent) / 100, (100 - percent) / 100


@dataclass(frozen=True)
class Task:
    id: str
    phase: str  # "unit": one unit's capacity; "fleet": the fewest units at the rate
    config: Config
    question: Question
    start: int = 1  # fleet: the estimate of the units needed, where the search starts
    scale: float = 1.0  # unit: the GPU-time scale it is probed at (a band's slow end)
    band_start: int = 1  # fleet over a band: the estimate of the units the band needs


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


def at_scale(raw: dict[str, Any], scale: float, file: str, base_dir: Path) -> ScenarioSet:
    """The scenario `raw` with every step's GPU time times `scale`, on top of the scale it
    already has (`engine.pricing`'s, an engine preset's or its profile's:
    `sim.whatif.error_bars.nominal_scale`), loaded; `scale` 1 loads it as it is."""
    loaded = load_scenario_dict(raw, file=file, base_dir=base_dir)
    if scale == 1.0:
        return loaded
    edited = copy.deepcopy(raw)
    set_path(edited, list(SCALE_PATH), nominal_scale(loaded.variants[0]) * scale)
    return load_scenario_dict(edited, file=file, base_dir=base_dir)


# a candidate's scenario mapping, the transform's parameter, its file and folder -> the scenario
Transform = Callable[[dict[str, Any], float, str, Path], ScenarioSet]


class Prober:
    """Summaries of probes of one configuration, counted, and the verdicts of its candidates
    (a fleet size, a seed, a scale), each judged once."""

    def __init__(self, question: Question, config: Config, transform: Transform = at_scale) -> None:
        self.question, self.config, self.transform = question, config, transform
        self.probes = 0
        self.requests = 0
        self.verdicts: dict[tuple[Counts, int, float], bool] = {}
        self.summaries: dict[tuple[Counts, int, float], dict[str, float]] = {}

    def probe(
        self, counts: Counts, rate: float, seed: int, scale: float = 1.0
    ) -> tuple[dict[str, float], bool]:
        """The probe's summary, and whether it meets every SLO (`meets`)."""
        q = self.question
        raw = scenario_of(q, self.config, counts, rate, seed)
        loaded = self.transform(raw, scale, q.file, Path(q.base_dir))
        result = simulate(loaded, tables=False)[loaded.variants[0].variant]
        summary = result.summary()
        bounds = result.streamed.inexact_percentiles() if result.streamed is not None else {}
        self.probes += 1
        self.requests += int(summary["num_requests"])
        return summary, meets(q.slos, summary, bounds)

    def judge(self, counts: Counts, seed: int, scale: float = 1.0) -> bool:
        """Whether the fleet `counts` meets every SLO at the whole rate on `seed` with the
        scenario transformed by `scale` (probed once, then remembered)."""
        key = (counts, seed, scale)
        if key not in self.verdicts:
            summary, self.verdicts[key] = self.probe(counts, self.question.rate_rps, seed, scale)
            self.summaries[key] = summary
        return self.verdicts[key]

    def passes(self, units: int, seeds: list[int], scales: tuple[float, ...]) -> bool:
        """Whether `units` units meet every SLO on every seed at every scale (nominal first,
        each seed's scales before the next seed: the first failure ends it)."""
        counts = unit_counts(self.config, units)
        return all(self.judge(counts, seed, scale) for seed in seeds for scale in scales)


def completed_rps(summary: dict[str, float], engines: int) -> float:
    """Requests/s a run completed over its whole span (first arrival to last step): for an
    overloaded unit, the most it can complete, whatever the SLOs. The span is the one
    `busy_fraction` divides by (`busy_s / (engines * busy_fraction)`, over every engine: an
    instance of pp pipeline stages is pp of them)."""
    busy, fraction = summary.get("busy_s", math.nan), summary.get("busy_fraction", math.nan)
    if not (busy > 0 and fraction > 0):
        return math.nan
    return float(summary["num_finished"]) / (busy / (engines * fraction))


def unit_probe(question: Question, config: Config, scale: float = 1.0) -> dict[str, Any]:
    """One unit at the whole rate on the first seed (at GPU-time `scale`): whether it meets the
    SLOs, and the requests/s it completed (`completed_rps`), which bounds what any fleet of it
    needs (at that scale)."""
    prober = Prober(question, config)
    summary, passes = prober.probe(unit_counts(config), question.rate_rps, question.seeds[0], scale)
    return {
        "passes": passes,
        "completed_rps": _json_ready({"x": completed_rps(summary, config.unit_engines)})["x"],
        "probes": prober.probes,
        "requests": prober.requests,
    }


def _json_ready(summary: dict[str, float]) -> dict[str, float | None]:
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in summary.items()}


def _answer(prober: Prober, units: int, scales: tuple[float, ...]) -> dict[str, Any]:
    """A fleet search's answer of `units` units (0: none): its counts, whether it was confirmed
    on further seeds, and the summary of the first seed's probe at each scale."""
    config, seeds = prober.config, prober.question.seeds
    counts = unit_counts(config, units)
    summaries = [prober.summaries[counts, seeds[0], s] if units else None for s in scales]
    return {
        "found": bool(units),
        "units": units,
        "instances": sum(counts) if units else 0,
        "prefill": counts[0] if units and config.prefill else 0,
        "decode": counts[1] if units and config.prefill else 0,
        "confirmed": bool(units) and len(seeds) > 1,
        "summary": _json_ready(summaries[0]) if summaries[0] is not None else None,
        "ends": [_json_ready(s) if s is not None else None for s in summaries[1:]],
    }


def fleet_search(
    question: Question, config: Config, start: int, band_start: int = 1
) -> dict[str, Any]:
    """The fewest units meeting every SLO at the rate on every seed; the summary of the first
    seed's probe at the answer. Over a band (`question.band`), also the fewest meeting them at
    every scale of it (`band`, searched from the nominal answer or `band_start`, whichever is
    more, with the summaries of its first seed's probes at nominal and at each end)."""
    prober = Prober(question, config)
    seeds = list(question.seeds)
    limit = max_units(question, config)
    units = fewest(lambda k, seed_list: prober.passes(k, seed_list, (1.0,)), seeds, start, limit)
    nominal = _answer(prober, units, (1.0,))
    del nominal["ends"]
    band: dict[str, Any] | None = None
    if question.band is not None:
        robust, begin = 0, max(units, band_start)
        if units and begin <= limit:
            robust = fewest(
                lambda k, seed_list: prober.passes(k, seed_list, question.scales),
                seeds,
                begin,
                limit,
            )
        band = _answer(prober, robust, question.scales)
    summary = nominal.pop("summary")  # the keys in the order of a result without a band
    return {
        **nominal,
        "probes": prober.probes,
        "requests": prober.requests,
        "summary": summary,
        **({"band": band} if band is not None else {}),
    }


def run_task(task: Task) -> dict[str, Any]:
    """A worker's entry point (module level, so that it pickles by reference)."""
    if task.phase == "unit":
        return unit_probe(task.question, task.config, task.scale)
    return fleet_search(task.question, task.config, task.start, task.band_start)
