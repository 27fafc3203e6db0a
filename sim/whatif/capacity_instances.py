"""Capacity search over cluster size: the fewest instances that meet every SLO at a given rate.

The scenario keeps its arrival rate; the search varies the instance count of a colocated
cluster (`cluster.instances[0].count`; a plain scenario becomes a one-group cluster behind its
default router). More instances never hurt the SLOs, so the count is bracketed by doubling from
1 and then bisected over integers (`fewest`, which can also start from an estimate and gallop
from there: the deployment search starts from a lower bound on the count). Noise is handled as in
the rate search: the answer is confirmed with `repeats` further seeds, and raised one instance
at a time until every seed passes, so it holds for every seed tried. Disaggregated scenarios
have two pools whose ratio is itself the question; vary them with `batchsim sweep` (or let
`batchsim search` find the fewest prefill and decode instances for given ratios).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sim.errors import ScenarioError
from sim.whatif.capacity_probe import Prober, Source

MAX_INSTANCES = 4096


@dataclass
class InstanceResult:
    variant: str
    instances: int  # fewest that passed for every seed tried (0: none up to the limit did)
    rate_rps: float
    requests_per_probe: int
    probes: list[tuple[int, int, bool]] = field(default_factory=list)  # (count, seed, passed)
    note: str = ""

    def row(self) -> dict[str, float | int | str]:
        per_gpu = self.rate_rps / self.instances if self.instances else float("nan")
        return {
            "instances": self.instances,
            "rate_rps": self.rate_rps,
            "capacity_rps_per_gpu": per_gpu,
            "num_probes": len(self.probes),
            "requests_per_probe": self.requests_per_probe,
            "note": self.note,
        }


def _with_count(raw: dict[str, Any], count: int) -> None:
    """Set the instance count of the scenario's (and every variant's) cluster group."""

    def set_count(node: dict[str, Any]) -> None:
        cluster = node.get("cluster")
        if isinstance(cluster, dict) and cluster.get("instances"):
            cluster["instances"][0]["count"] = count

    if not raw.get("cluster"):
        raw["cluster"] = {"instances": [{"count": count}]}
    set_count(raw)
    for override in (raw.get("variants") or {}).values():
        if isinstance(override, dict):
            set_count(override)


def check_clusterable(prober: Prober) -> None:
    raw = prober.raw
    nodes = [raw, *[o for o in (raw.get("variants") or {}).values() if isinstance(o, dict)]]
    for node in nodes:
        if node.get("disaggregation"):
            raise ScenarioError(
                "instance search varies one colocated pool; a disaggregated scenario has two "
                "(vary disaggregation.prefill.count and decode.count with batchsim sweep)",
                file=prober.file,
            )
        groups = (node.get("cluster") or {}).get("instances") or []
        if len(groups) > 1:
            raise ScenarioError(
                "instance search varies the count of a single instance group; this cluster has "
                f"{len(groups)}",
                file=prober.file,
                path="cluster.instances",
            )


def fewest(
    passes: Callable[[int, list[int]], bool], seeds: list[int], start: int, limit: int
) -> int:
    """The fewest count in 1..limit that passes for every seed (0: none up to `limit` passes on
    the first seed), given `passes(count, seeds)` (true when every seed in the list passes).

    Counts are searched on the first seed, galloping from `start` (down by 1, 2, 4, ... while
    it passes; else up by 1, 2, 4, ..., which from 1 is doubling), then bisecting the bracket.
    The answer is then confirmed on every seed and raised one at a time until all pass."""
    first = seeds[:1]
    start = min(max(start, 1), limit)
    if passes(start, first):
        lo, hi, step = 0, start, 1  # lo: the largest count known to fail (0 serves nothing)
        while hi - step >= 1:
            if not passes(hi - step, first):
                lo = hi - step
                break
            hi, step = hi - step, step * 2
    else:
        lo, step = start, 1
        while True:
            if lo >= limit:
                return 0
            candidate = min(lo + step, limit)
            if passes(candidate, first):
                hi = candidate
                break
            lo, step = candidate, step * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if passes(mid, first) else (mid, hi)
    while not passes(hi, seeds) and hi < limit:
        hi += 1  # another seed fails: one more instance, until every seed passes
    return hi if passes(hi, seeds) else 0


def search_instances(
    scenario: Source,
    slos: Sequence[Any],
    *,
    overrides: Sequence[str] = (),
    repeats: int = 2,
    progress: Callable[[str], None] | None = None,
) -> list[InstanceResult]:
    """Fewest instances meeting every SLO (objects with `met(summary)`) at the scenario's rate."""
    prober = Prober(scenario, overrides, "workload.arrival.rate")
    check_clusterable(prober)
    seeds = [prober.seed + k for k in range(repeats + 1)]
    out = []
    for variant in prober.variants:
        result = InstanceResult(variant, 0, prober.start_rate, 0)
        cache: dict[tuple[int, int], bool] = {}

        def passes(
            count: int,
            seed_list: list[int],
            res: InstanceResult = result,
            memo: dict[tuple[int, int], bool] = cache,
            name: str = variant,
        ) -> bool:
            for seed in seed_list:
                if (count, seed) not in memo:
                    raw = copy.deepcopy(prober.raw)
                    _with_count(raw, count)
                    summary = prober.run_raw(name, raw, seed)
                    memo[count, seed] = all(slo.met(summary) for slo in slos)
                    res.probes.append((count, seed, memo[count, seed]))
                    res.requests_per_probe = max(
                        res.requests_per_probe, int(summary["num_requests"])
                    )
                if not memo[count, seed]:
                    return False
            return True

        result.instances = fewest(passes, seeds, 1, MAX_INSTANCES)
        if not result.instances:
            result.note = f"no count up to {MAX_INSTANCES} meets the SLOs"
        if progress:
            progress(f"{variant}: {result.instances} instances ({len(result.probes)} probes)")
        out.append(result)
    return out
