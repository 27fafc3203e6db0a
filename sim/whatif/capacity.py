"""Capacity search: the largest arrival rate at which every SLO holds, per variant.

SLOs are written `metric=value` and mean "metric <= value"; the metric is a summary metric name,
with or without its `_s` suffix (`ttft_p90=0.5` is `ttft_p90_s <= 0.5`). `metric>=value` is
accepted for metrics where more is better (`slo_attainment>=0.99`, `goodput_rps>=5`). A probe
(one simulation at one rate and seed) passes when every SLO holds; an undefined metric (NaN, e.g.
nothing finished in the measured window) fails it.

Search, for each variant separately, on `workload.arrival.rate`:
1. bracket: from the scenario's own rate, double while probes pass (or halve while they fail),
   giving `lo` (passes) and `hi` (fails);
2. bisect at the midpoint until `(hi - lo) / lo < tolerance`; the answer is `lo`.

Noise. Each probe simulates the scenario's workload as written (its `num_requests` or
`duration_s`), so the request count per probe is reported with the answer. The scenario's seed is
used throughout (common random numbers: with a Poisson source the arrivals only stretch with the
rate, so pass/fail is monotone in the rate for one seed). Near the boundary one seed is not
enough: a probe that passes while the bracket is narrower than 4 x tolerance (so the probe lies
within 2 x tolerance of the boundary) is repeated with `repeats` further seeds (seed+1, ...) and
passes only if every repeat passes; the final `lo` is always confirmed that way, stepping down if
a repeat fails. The answer is therefore conservative: it holds for every seed tried.

Capacity per GPU divides by the number of GPUs: one per instance, summed over the instance
groups of a cluster or of both disaggregated pools (one for a plain scenario). The other
question, the fewest instances for a given rate, is `sim.whatif.capacity_instances`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pandas as pd

from sim.errors import ScenarioError
from sim.whatif.capacity_probe import Prober, Source, metric_names

RATE_KEY = "workload.arrival.rate"
_FRACTIONS = ("attainment", "utilization", "fraction", "mfu")
MAX_DOUBLINGS = 20  # a factor of about a million either way before giving up on a bracket


@dataclass(frozen=True)
class SLO:
    metric: str
    limit: float
    at_least: bool = False  # True: metric >= limit; False: metric <= limit

    def met(self, summary: dict[str, float]) -> bool:
        value = summary[self.metric]
        if math.isnan(value):
            return False
        return value >= self.limit if self.at_least else value <= self.limit

    def __str__(self) -> str:
        return f"{self.metric} {'>=' if self.at_least else '<='} {self.limit:g}"


def parse_slo(text: str) -> SLO:
    """`ttft_p90=0.5`, `ttft_p90_s<=0.5` or `slo_attainment>=0.99`."""
    match = re.fullmatch(r"\s*([A-Za-z0-9_]+)\s*(<=|>=|=)\s*(\S+)\s*", text)
    if not match:
        raise ScenarioError(f"--slo {text!r}: expected METRIC=VALUE (or METRIC>=VALUE)")
    name, op, value_text = match.groups()
    names = metric_names()
    metric = name if name in names else f"{name}_s"
    if metric not in names:
        raise ScenarioError(f"--slo {text!r}: no summary metric {name!r} (e.g. ttft_p90, tpot_p99)")
    try:
        limit = float(value_text)
    except ValueError:
        raise ScenarioError(f"--slo {text!r}: {value_text!r} is not a number") from None
    at_least = op == ">="
    if not math.isfinite(limit):
        raise ScenarioError(f"--slo {text!r}: the limit must be a finite number")
    if limit < 0 or (limit == 0 and not at_least):
        bound = ">= 0" if at_least else "> 0 (no latency or rate is below 0)"
        raise ScenarioError(f"--slo {text!r}: the limit must be {bound}")
    if limit > 1 and any(word in metric for word in _FRACTIONS):
        raise ScenarioError(f"--slo {text!r}: {metric} is a fraction, between 0 and 1")
    return SLO(metric, limit, at_least=at_least)


@dataclass
class CapacityResult:
    variant: str
    capacity_rps: float  # largest rate that passed (0 if none did, inf if none failed)
    failing_rps: float  # smallest rate that failed (inf if none did)
    requests_per_probe: int
    num_gpus: int = 1  # one per instance, prefill and decode pools included
    probes: list[tuple[float, int, bool]] = field(default_factory=list)  # (rate, seed, passed)
    note: str = ""

    def row(self) -> dict[str, float | int | str]:
        return {
            "capacity_rps": self.capacity_rps,
            "capacity_rps_per_gpu": self.capacity_rps / self.num_gpus,
            "num_gpus": self.num_gpus,
            "failing_rps": self.failing_rps,
            "num_probes": len(self.probes),
            "requests_per_probe": self.requests_per_probe,
            "note": self.note,
        }


class _Search:
    """The bisection of one variant; `passes` caches probes by (rate, seed)."""

    def __init__(self, prober: Prober, variant: str, slos: Sequence[SLO], seeds: list[int]):
        self.prober, self.variant, self.slos, self.seeds = prober, variant, slos, seeds
        self.result = CapacityResult(variant, math.nan, math.inf, 0, prober.num_gpus[variant])
        self.confirmed: set[float] = set()
        self.cache: dict[tuple[float, int], bool] = {}

    def _probe(self, rate: float, seed: int) -> bool:
        if (rate, seed) not in self.cache:
            summary = self.prober.run(self.variant, rate, seed)
            ok = all(slo.met(summary) for slo in self.slos)
            self.cache[rate, seed] = ok
            self.result.probes.append((rate, seed, ok))
            self.result.requests_per_probe = max(
                self.result.requests_per_probe, int(summary["num_requests"])
            )
        return self.cache[rate, seed]

    def passes(self, rate: float, *, confirm: bool) -> bool:
        seeds = self.seeds if confirm else self.seeds[:1]
        ok = all(self._probe(rate, seed) for seed in seeds)  # stops at the first failure
        if ok and confirm:
            self.confirmed.add(rate)
        return ok

    def run(self, start: float, tolerance: float) -> CapacityResult:
        res = self.result
        lo, hi = (start, math.inf) if self.passes(start, confirm=False) else (0.0, start)
        for _ in range(MAX_DOUBLINGS):
            if hi == math.inf:
                lo, hi = (lo * 2, hi) if self.passes(lo * 2, confirm=False) else (lo, lo * 2)
            elif lo == 0.0:
                lo, hi = (hi / 2, hi) if self.passes(hi / 2, confirm=False) else (0.0, hi / 2)
        if lo == 0.0 or hi == math.inf:
            res.capacity_rps, res.failing_rps = lo, hi
            res.note = "no rate tried meets the SLOs" if lo == 0.0 else "no rate tried fails"
            return res
        while True:
            while (hi - lo) / lo >= tolerance:
                mid = (lo + hi) / 2
                near = (hi - lo) / lo < 4 * tolerance
                lo, hi = (mid, hi) if self.passes(mid, confirm=near) else (lo, mid)
            if lo in self.confirmed or self.passes(lo, confirm=True):
                break
            # another seed fails at lo: step down, squaring the factor, until every seed passes
            hi, step = lo, 1.0 + 2 * tolerance
            for _ in range(MAX_DOUBLINGS):
                if self.passes(hi / step, confirm=True):
                    break
                step *= step
            else:
                res.capacity_rps, res.failing_rps = 0.0, hi
                res.note = "no rate tried meets the SLOs for every seed"
                return res
            lo = hi / step
        res.capacity_rps, res.failing_rps = lo, hi
        return res


def capacity_search(
    scenario: Source,
    slos: Sequence[str | SLO],
    *,
    overrides: Sequence[str] = (),
    tolerance: float = 0.02,
    repeats: int = 2,
    instances: bool = False,
    progress: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """Capacity of every variant: one row per variant (see `CapacityResult.row`), or with
    `instances` the fewest instances at the scenario's rate (`InstanceResult.row`). The scenario
    is a YAML path, a mapping or a loaded `ScenarioSet`."""
    rows: dict[str, dict[str, float | int | str]]
    if instances:
        from sim.whatif.capacity_instances import search_instances

        parsed = parse_slos(slos, repeats)
        found = search_instances(
            scenario, parsed, overrides=overrides, repeats=repeats, progress=progress
        )
        rows = {r.variant: r.row() for r in found}
    else:
        results = search(
            scenario,
            slos,
            overrides=overrides,
            tolerance=tolerance,
            repeats=repeats,
            progress=progress,
        )
        rows = {r.variant: r.row() for r in results}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("variant")


def search(
    scenario: Source,
    slos: Sequence[str | SLO],
    *,
    overrides: Sequence[str] = (),
    tolerance: float = 0.02,
    repeats: int = 2,
    progress: Callable[[str], None] | None = None,
) -> list[CapacityResult]:
    if not 0 < tolerance < 1:
        raise ScenarioError(f"--tolerance {tolerance}: must be between 0 and 1")
    parsed = parse_slos(slos, repeats)
    prober = Prober(scenario, overrides, RATE_KEY)
    seeds = [prober.seed + k for k in range(repeats + 1)]
    out = []
    for variant in prober.variants:
        result = _Search(prober, variant, parsed, seeds).run(prober.start_rate, tolerance)
        if progress:
            progress(f"{variant}: {result.capacity_rps:.4g} req/s ({len(result.probes)} probes)")
        out.append(result)
    return out


def parse_slos(slos: Sequence[str | SLO], repeats: int) -> list[SLO]:
    if repeats < 0:
        raise ScenarioError(f"--repeats {repeats}: must be >= 0")
    parsed = [s if isinstance(s, SLO) else parse_slo(s) for s in slos]
    if not parsed:
        raise ScenarioError("give at least one --slo METRIC=VALUE")
    return parsed
