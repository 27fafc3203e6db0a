"""The cheapest autoscaling policy that meets the SLOs over a whole time-varying workload, and
what it saves against the cheapest fixed fleet sized for the peak.

    batchsim search day.yaml --autoscale space.yaml --slo ttft_p99=2 --slo tpot_p99=0.1

Every candidate of the space (`sim.whatif.autoscale_space`: an instance type with an autoscaling
policy) replays the scenario's whole workload (a rate profile over a day, or a trace) on seeds
`seed, seed + 1, ..., seed + seeds - 1` (the scenario's variants are set aside: the search
varies the fleet itself); it meets the SLOs when every SLO holds on every seed.
Its cost is the rent integrated over its instances' lifetimes, as dollars per day
(`fleet_usd_per_day`, sim/metrics/fleet.py), averaged over the seeds.

The baseline is the fixed fleet each instance type needs for the same workload: the fewest
instances that meet the SLOs on every seed, found by doubling from one and then bisecting (the
SLOs are taken to hold for every larger fleet once they hold for one), bounded by
`static_limit`. The saving is `1 - autoscaled $/day / fixed $/day`, both over the same
workload, the fixed fleet renting every instance for the whole run.

`verify` re-runs the chosen policy on seeds the search never saw (after the ones it used) and
says whether it meets the SLOs on each: a choice that only passes the seeds it was picked on
shows here. Beside the means, the answer carries its spread over the seeds (cost, and the
saving seed by seed against the fixed fleet on the same draws) and each SLO's margin on its
worst seed (`Outcome.margin`): a thin margin is what fails on the next seed.

Runs are streamed (no tables) and run on the sweep backends (`sim.whatif.sweep_backends`): in
`workers` local processes, or on Ray (`backend="ray"`, a local Ray or the cluster at `address`),
with the same answer on each. Runs that do not wait on each other go out together: the first
batch holds every candidate's runs and each instance type's first fixed-fleet probe; after it,
each round holds the next probe of every instance type still searching (a probe's count depends
on the one before it of its own type only).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from sim.errors import ScenarioError
from sim.scenario.load import ScenarioSet, load_scenario_dict, source_of
from sim.simulate import simulate
from sim.whatif.autoscale_space import AutoscaleSpace, Candidate, candidates
from sim.whatif.capacity import SLO
from sim.whatif.sweep_backends import check_ray, local_pool, ray_session, run_local, run_ray

REPLACED = ("hardware", "cluster", "disaggregation")
REPORTED = (
    "fleet_usd_per_day", "fleet_usd_per_hour", "mean_instances", "peak_instances",
    "instance_hours", "fleet_kwh", "slo_attainment", "ttft_p99_s", "tpot_p99_s", "e2e_p99_s",
)  # fmt: skip
STATIC_LIMIT = 256

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Task:
    key: str  # candidate id, or "static:<gpu>:<n>"
    seed: int
    doc: dict[str, Any]
    base_dir: str


def run_task(task: Task) -> dict[str, float]:
    """One streamed run's summary (in a worker process)."""
    loaded = load_scenario_dict(task.doc, file=f"<{task.key}>", base_dir=Path(task.base_dir))
    result = simulate(loaded, tables=False)
    variant = next(iter(result.variants.values()))
    out = {k: float(v) for k, v in variant.summary().items() if isinstance(v, (int, float))}
    if "fleet_usd_per_day" not in out:  # a fixed fleet rents every instance all day
        out["fleet_usd_per_day"] = out["fleet_usd_per_hour"] * 24
        count = float(task.doc["cluster"]["instances"][0]["count"])
        out["mean_instances"] = out["peak_instances"] = count
    return out


@dataclass
class Outcome:
    key: str
    gpu: str
    kind: str  # "autoscaled" or "fixed"
    instances: int  # the fixed fleet's count; an autoscaled policy's start
    summaries: list[dict[str, float]] = field(default_factory=list)

    def met(self, slos: Sequence[SLO]) -> bool:
        return bool(self.summaries) and all(s.met(x) for x in self.summaries for s in slos)

    def mean(self, metric: str) -> float:
        values = [x.get(metric, math.nan) for x in self.summaries]
        return sum(values) / len(values) if values else math.nan

    def worst(self, slo: SLO) -> float:
        values = [x[slo.metric] for x in self.summaries]
        return min(values) if slo.at_least else max(values)

    def spread(self, metric: str) -> tuple[float, float]:
        """The least and the most of a metric over the seeds."""
        values = [x.get(metric, math.nan) for x in self.summaries]
        return (min(values), max(values)) if values else (math.nan, math.nan)

    def margin(self, slo: SLO) -> float:
        """How far its worst seed stays inside the SLO, as a fraction of the limit (negative:
        the SLO fails)."""
        worst = self.worst(slo)
        gap = worst - slo.limit if slo.at_least else slo.limit - worst
        return gap / abs(slo.limit) if slo.limit else math.copysign(math.inf, gap)


@dataclass
class AutoscaleSearch:
    """What the search found (see the module docstring)."""

    slos: list[SLO]
    outcomes: list[Outcome]  # every autoscaled candidate
    fixed: dict[str, Outcome]  # per instance type: the smallest fixed fleet meeting the SLOs
    probes: list[Outcome]  # every fixed fleet tried
    chosen: Outcome | None
    chosen_autoscale: dict[str, Any] | None
    verified: list[dict[str, float]] = field(default_factory=list)
    verify_seeds: list[int] = field(default_factory=list)

    @property
    def baseline(self) -> Outcome | None:
        """The cheapest fixed fleet meeting the SLOs over every instance type."""
        met = [o for o in self.fixed.values() if o.met(self.slos)]
        return min(met, key=lambda o: o.mean("fleet_usd_per_day")) if met else None

    @property
    def saving(self) -> float:
        base = self.baseline
        if self.chosen is None or base is None:
            return math.nan
        return 1 - self.chosen.mean("fleet_usd_per_day") / base.mean("fleet_usd_per_day")

    @property
    def saving_spread(self) -> tuple[float, float]:
        """The least and the most saving over the seeds, each seed's policy against the same
        seed's fixed fleet (the draws that favour one favour the other)."""
        base = self.baseline
        if self.chosen is None or base is None:
            return math.nan, math.nan
        metric = "fleet_usd_per_day"
        pairs = zip(self.chosen.summaries, base.summaries, strict=True)
        savings = [1 - a[metric] / b[metric] for a, b in pairs]
        return min(savings), max(savings)

    @property
    def verified_met(self) -> bool | None:
        if not self.verified:
            return None
        return all(s.met(x) for x in self.verified for s in self.slos)

    def table(self) -> pd.DataFrame:
        rows = []
        for o in [*self.outcomes, *self.probes]:
            row: dict[str, Any] = {
                "candidate": o.key,
                "kind": o.kind,
                "gpu": o.gpu,
                "instances": o.instances,
                "slo_met": o.met(self.slos),
            }
            row.update({m: o.mean(m) for m in REPORTED})
            for slo in self.slos:
                row[f"worst_{slo.metric}"] = o.worst(slo)
            rows.append(row)
        frame = pd.DataFrame(rows)
        order = frame.sort_values(
            ["slo_met", "fleet_usd_per_day"], ascending=[False, True], kind="stable"
        )
        return order.reset_index(drop=True)


def _doc(raw: Mapping[str, Any], group: dict[str, Any], router: str, seed: int) -> dict[str, Any]:
    doc = {k: copy.deepcopy(v) for k, v in raw.items() if k not in REPLACED and k != "variants"}
    doc["hardware"] = group["hardware"]
    doc["cluster"] = {"router": router, "instances": [group]}
    doc["seed"] = seed
    return doc


def _base(scenario: ScenarioSet | Mapping[str, Any] | str, overrides: Sequence[str]) -> tuple[
    dict[str, Any], str, str, int, str
]:  # fmt: skip
    """The scenario's raw mapping (its variants set aside: the search varies the fleet
    itself), file label, base folder, seed and instance type."""
    raw, file, base_dir = source_of(scenario, list(overrides))
    raw.pop("variants", None)
    loaded = load_scenario_dict(raw, file=file, base_dir=Path(base_dir))
    spec = loaded.variants[0].spec
    return raw, file, str(base_dir), spec.seed, spec.hardware.name


def autoscale_search(
    scenario: ScenarioSet | Mapping[str, Any] | str,
    space: AutoscaleSpace,
    slos: Sequence[SLO],
    *,
    seeds: int = 1,
    verify: int = 0,
    workers: int = 1,
    backend: str = "local",
    address: str | None = None,
    overrides: Sequence[str] = (),
    static_limit: int = STATIC_LIMIT,
    progress: Progress | None = None,
) -> AutoscaleSearch:
    """Search the space (see the module docstring); nothing is written."""
    if not slos:
        raise ScenarioError("give at least one SLO (--slo METRIC=VALUE)")
    if backend not in ("local", "ray"):
        raise ScenarioError(f"backend {backend!r}: expected local or ray")
    if backend == "ray":
        check_ray(address)
    raw, file, base_dir, seed0, default_gpu = _base(scenario, overrides)
    cands = candidates(space, default_gpu)
    say = progress or (lambda _: None)

    # every candidate's scenario is checked before anything runs (one line on a bad one)
    for c in cands:
        doc = _doc(raw, _auto_group(c), space.router, seed0)
        load_scenario_dict(doc, file=file, base_dir=Path(base_dir))
    # one Ray start, or one pool of local workers, for every batch of the search
    session = ray_session(address, workers) if backend == "ray" else local_pool(workers)
    with session:
        return _search(raw, base_dir, seed0, cands, space, slos, seeds, verify, static_limit,
                       _runner(backend, workers, address, say))  # fmt: skip


Runner = Callable[[list["Task"]], dict[tuple[str, int], dict[str, float]]]


def _runner(backend: str, workers: int, address: str | None, say: Progress) -> Runner:
    """Runs a batch of tasks on the backend: every task's summary by (key, seed)."""

    def run_all(tasks: list[Task]) -> dict[tuple[str, int], dict[str, float]]:
        out: dict[tuple[str, int], dict[str, float]] = {}

        def done(task: Task, summary: dict[str, float]) -> None:
            out[(task.key, task.seed)] = summary
            say(f"{len(out)}/{len(tasks)} runs: {task.key} seed {task.seed}")

        if backend == "ray":
            run_ray(tasks, run_task, workers, address, done)
        else:
            run_local(tasks, run_task, workers, done)
        return out

    return run_all


def _search(
    raw: dict[str, Any], base_dir: str, seed0: int, cands: list[Candidate],
    space: AutoscaleSpace, slos: Sequence[SLO], seeds: int, verify: int, static_limit: int,
    run_all: Runner,
) -> AutoscaleSearch:  # fmt: skip
    router = space.router
    seed_list = [seed0 + k for k in range(seeds)]

    def fixed_key(gpu: str, n: int) -> str:
        return f"fixed:{gpu}:{n}"

    def fixed_tasks(gpu: str, n: int) -> list[Task]:
        group = {"hardware": gpu, "count": n}
        return [Task(fixed_key(gpu, n), s, _doc(raw, group, router, s), base_dir)
                for s in seed_list]  # fmt: skip

    # the autoscaled candidates, and with them each instance type's first fixed-fleet probe
    gpus = sorted({c.gpu for c in cands}, key=[c.gpu for c in cands].index)
    searches = {gpu: _bisect(slos, static_limit) for gpu in gpus}
    asked = {gpu: next(search) for gpu, search in searches.items()}
    tasks = [Task(c.id, s, _doc(raw, _auto_group(c), router, s), base_dir)
             for c in cands for s in seed_list]  # fmt: skip
    got = run_all(tasks + [t for gpu, n in asked.items() for t in fixed_tasks(gpu, n)])
    outcomes = [
        Outcome(c.id, c.gpu, "autoscaled", c.start, [got[(c.id, s)] for s in seed_list])
        for c in cands
    ]
    met = [o for o in outcomes if o.met(slos)]
    chosen = min(met, key=lambda o: o.mean("fleet_usd_per_day")) if met else None
    result = AutoscaleSearch(list(slos), outcomes, {}, [], chosen, None)
    # the chosen policy on seeds the search never saw: its runs join the next batch
    verifying: list[Task] = []
    if chosen is not None:
        cand = next(c for c in cands if c.id == chosen.key)
        result.chosen_autoscale = cand.autoscale
        result.verify_seeds = [seed0 + seeds + k for k in range(verify)]
        verifying = [Task(f"verify:{cand.id}", s, _doc(raw, _auto_group(cand), router, s),
                          base_dir) for s in result.verify_seeds]  # fmt: skip
    # the fixed fleets: per instance type, the fewest instances meeting the SLOs, every type's
    # next probe in one batch
    tried: dict[str, list[Outcome]] = {gpu: [] for gpu in gpus}
    found: dict[str, Outcome] = {}
    while asked:
        following: dict[str, int] = {}
        for gpu, n in asked.items():
            key = fixed_key(gpu, n)
            outcome = Outcome(key, gpu, "fixed", n, [got[(key, s)] for s in seed_list])
            tried[gpu].append(outcome)
            try:
                following[gpu] = searches[gpu].send(outcome)
            except StopIteration as stop:
                if stop.value is not None:
                    found[gpu] = stop.value
        asked = following
        if asked or verifying:
            batch = [t for gpu, n in asked.items() for t in fixed_tasks(gpu, n)]
            got = run_all(batch + verifying)
            if verifying:
                result.verified = [got[(t.key, t.seed)] for t in verifying]
                verifying = []
    result.fixed = {gpu: found[gpu] for gpu in gpus if gpu in found}
    result.probes = [o for gpu in gpus for o in tried[gpu]]
    return result


def _auto_group(c: Candidate) -> dict[str, Any]:
    return {"hardware": c.gpu, "count": c.start, "autoscale": c.autoscale}


def _bisect(slos: Sequence[SLO], limit: int) -> Generator[int, Outcome, Outcome | None]:
    """The smallest fleet meeting the SLOs, as a search that yields each count to probe and is
    sent its outcome: double from 1, then bisect; None beyond `limit`."""
    low, high = 0, 1  # low fails (0 serves nothing), high is tried next
    tried: dict[int, Outcome] = {}
    while True:
        tried[high] = yield high
        if tried[high].met(slos):
            break
        if high >= limit:
            return None
        low, high = high, min(2 * high, limit)
    while high - low > 1:
        mid = (low + high) // 2
        tried[mid] = yield mid
        if tried[mid].met(slos):
            high = mid
        else:
            low = mid
    return tried[high]


def _fewest(probe: Callable[[int], Outcome], slos: Sequence[SLO], limit: int) -> Outcome | None:
    """`_bisect` driven by one probe at a time."""
    search = _bisect(slos, limit)
    n = next(search)
    try:
        while True:
            n = search.send(probe(n))
    except StopIteration as stop:
        return stop.value
