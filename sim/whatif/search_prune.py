"""Which configurations a deployment search need not size, once each unit's capacity is known.

After the first phase every configuration has a bracket on what one unit serves (`Unit`, on the
first seed): `capacity_rps` passed, `failing_rps` failed (infinite when one unit served the whole
rate). Three rules set configurations aside before, or while, the fleets are sized:

* cannot meet the SLOs: one unit meets them at no rate down to the rate over the most units the
  fleet may have, so no fleet within `max_instances` is expected to;
* dominated (`prune`): another configuration's unit costs no more (objective "cost": dollars per
  hour; "energy": both its TDP and its idle power are no higher) and serves more, with the
  brackets apart (`failing_rps` of this one <= `capacity_rps` of the other, so noise cannot
  swap them);
* bounded (`bound`, objective "cost"): the configuration with the cheapest estimated fleet
  (`ceil(rate / capacity)` units) is sized first, on every seed; every configuration whose single
  unit already costs more than that confirmed fleet is set aside, since no fleet of it can be
  cheaper (a fleet has at least one unit). This rule is exact.

The dominated rule is the assumption the question itself makes: the order of two
configurations' single-unit capacities carries over to their fleets (fleets are whole numbers of
units, so equal units scale alike; load-aware routing helps both). It is checked by comparing the
pruned search with the exhaustive one on small spaces (tests/test_search.py); `exhaustive=True`
(`--exhaustive`) switches every rule off. Ties are never pruned: a configuration is set aside
only for one strictly better on capacity or on cost.
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


def first_to_size(units: list[Unit], objective: str) -> Unit | None:
    """The configuration whose estimated fleet costs (or draws at full power) the least."""
    column = 0 if objective == "cost" else 1
    feasible = [u for u in units if u.capacity_rps > 0]
    return min(
        feasible,
        key=lambda u: (u.estimate * unit_figures(u.config)[column], u.config.label),
        default=None,
    )


def prune(units: list[Unit], objective: str, floor_rps: float) -> dict[str, tuple[str, str]]:
    """config id -> (status, note) for the configurations that cannot meet the SLOs, or that
    another dominates."""
    figures = {u.config.id: unit_figures(u.config) for u in units}
    key = {i: (f[0],) if objective == "cost" else (f[1], f[2]) for i, f in figures.items()}
    feasible = sorted(
        (u for u in units if u.capacity_rps > 0),
        key=lambda u: (key[u.config.id], -u.capacity_rps, u.config.label),
    )
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
    return out


def bound(units: list[Unit], fleet_usd_per_hour: float, label: str) -> dict[str, tuple[str, str]]:
    """config id -> (status, note) for every configuration whose one unit costs more than a
    fleet known to serve the rate (`label`'s, confirmed on every seed)."""
    out: dict[str, tuple[str, str]] = {}
    for u in units:
        own = unit_figures(u.config)[0]
        if own > fleet_usd_per_hour:
            out[u.config.id] = (
                "bounded",
                f"one unit costs ${own:.4g}/h, more than the fleet of {label} "
                f"(${fleet_usd_per_hour:.4g}/h)",
            )
    return out
