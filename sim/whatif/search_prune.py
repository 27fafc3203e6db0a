"""Which configurations a deployment search need not size, once each unit's capacity is known.

After the first phase every configuration has a bracket on what one unit serves (`Unit`):
`capacity_rps` passed on every seed, `failing_rps` failed on some seed (infinite when one unit
serves the whole rate). Three rules set configurations aside before the fleet search:

* cannot meet the SLOs: one unit meets them at no rate down to the rate over the most units the
  fleet may have, so no fleet within `max_instances` is expected to;
* dominated: another configuration's unit costs no more (objective "cost": dollars per hour;
  "energy": both its TDP and its idle power are no higher) and serves more, with the brackets
  apart (`failing_rps` of this one <= `capacity_rps` of the other, so noise cannot swap them);
* bounded: one unit of this configuration already costs more than the estimated fleet of
  another (`ceil(rate / capacity)` units of it; for energy, this unit's idle power against that
  fleet at full power), so no fleet of this one can be cheaper.

What the rules assume. The bounded rule relies on pooling: n units serve n times a rate at least
as well as one unit serves that rate (exact for random routing; load-aware routers only do
better), which makes `ceil(rate / capacity)` an upper bound on the units needed. The dominated
rule is the stronger assumption the question itself makes: the order of two configurations'
single-unit capacities carries over to their fleets. Both are checked by comparing the pruned
search with the exhaustive one on small spaces (tests/test_search.py); `exhaustive=True`
(`--exhaustive`) switches every rule off. Ties are never pruned: a configuration is set aside
only for one that is strictly better on capacity or on cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.costs.catalog import HardwareSpec
from sim.whatif.search_space import Config


@dataclass(frozen=True)
class Unit:
    config: Config
    capacity_rps: float  # passes on every seed (0: none tried did)
    failing_rps: float  # fails on some seed (inf: none tried did)
    estimate: int  # units needed at the rate, by capacity: ceil(rate / capacity_rps)


def unit_figures(config: Config) -> tuple[float, float, float]:
    """(dollars per hour, TDP watts, idle watts) of one unit of `config`."""
    figures = HardwareSpec.model_validate(config.hardware).economics
    gpus = config.unit_gpus
    return gpus * figures.usd_per_gpu_hour, gpus * figures.tdp_w, gpus * figures.idle_w


def estimate_units(rate: float, capacity: float, limit: int) -> int:
    if capacity <= 0:
        return limit
    return max(1, min(limit, math.ceil(rate / capacity * (1 - 1e-9))))


def prune(units: list[Unit], objective: str, floor_rps: float) -> dict[str, tuple[str, str]]:
    """config id -> (status, note) for every configuration the rules set aside."""
    figures = {u.config.id: unit_figures(u.config) for u in units}
    key = {i: (f[0],) if objective == "cost" else (f[1], f[2]) for i, f in figures.items()}
    feasible = sorted(
        (u for u in units if u.capacity_rps > 0),
        key=lambda u: (key[u.config.id], -u.capacity_rps, u.config.label),
    )

    def fleet_bound(u: Unit) -> float:  # most the estimated fleet costs (or draws)
        return u.estimate * (figures[u.config.id][0 if objective == "cost" else 1])

    best = min(feasible, key=fleet_bound, default=None)
    out: dict[str, tuple[str, str]] = {}
    for u in units:
        cid = u.config.id
        if u.capacity_rps <= 0:
            out[cid] = (
                "cannot meet the SLOs",
                f"one unit meets them at no rate down to {floor_rps:.4g} req/s (the rate over "
                "the most units allowed)",
            )
            continue
        better = next(
            (
                b
                for b in feasible
                if b is not u
                and all(x <= y for x, y in zip(key[b.config.id], key[cid], strict=True))
                and u.failing_rps <= b.capacity_rps
            ),
            None,
        )
        if better is not None:
            out[cid] = (
                "dominated",
                f"by {better.config.label}: its unit costs no more and serves "
                f"{better.capacity_rps:.4g} req/s (this one fails at {u.failing_rps:.4g})",
            )
            continue
        own = figures[cid][0] if objective == "cost" else figures[cid][2]
        if best is not None and best is not u and own > fleet_bound(best):
            what = f"${own:.4g}/h" if objective == "cost" else f"{own:.4g} W idle"
            bound = (
                f"${fleet_bound(best):.4g}/h"
                if objective == "cost"
                else f"{fleet_bound(best):.4g} W"
            )
            out[cid] = (
                "dominated",
                f"one unit ({what}) exceeds the estimated fleet of {best.config.label} "
                f"({best.estimate} units, at most {bound})",
            )
    return out
