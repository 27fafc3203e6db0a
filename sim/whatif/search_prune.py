"""What one probe of one unit tells a deployment search before it sizes any fleet.

Each configuration's unit (one instance, or one xPyD group) is probed once at the whole rate
(`search_probe.unit_probe`). If it fails the SLOs, the requests/s it completed bound what its
fleets can do: n units complete about n times as much at most (each instance is limited by its
own saturation), so a fleet that serves the rate needs at least

    units_at_least = ceil(rate / (completed_rps * (1 + MARGIN)))

units (one when the unit met the SLOs, or completed everything it was offered). `MARGIN` is
the allowance for finite probes: within a short run a fleet can fall behind without failing its
latency SLOs (the backlog waits in the running batches, not in the queue), so a fleet that
passes may complete less than the rate. With 50 % the bound held for every configuration of the
spaces the tests and the benchmark compare with the exhaustive search (the tightest case, 300
requests arriving in 7.5 s, needed 46 %); longer probes leave it loose.

From that bound:

* cannot meet the SLOs: it needs more units than `max_instances` allows;
* dominated (branch and bound, `Bounds`): fleets are sized in order of their lower bound (the
  objective at `units_at_least` units: dollars per hour, the rent of a tier option of the space
  included, or for energy the idle power of that many units), the lowest alone first, then
  `WAVE` at a time; once a fleet is found, every configuration whose bound already exceeds it
  is set aside: its single-unit capacity is worse than what a cheaper configuration achieved.
  Bounds equal to the best are sized (ties).

The order and the waves depend on the configurations only, never on the backend or the number
of workers, so the same configurations are sized and pruned whatever runs them.

Nothing here assumes that more GPUs serve more: the bound compares a configuration's fleets
with one unit of the same configuration only (a fleet is whole units of identical instances,
each behind its router), so it holds for any degree, and the price of a unit counts every GPU
of it (`Config.unit_gpus`: tensor x data x pipeline parallel per instance, each P/D pool at its
own parallelism). Data and expert parallelism live inside an instance: its ranks share one step,
and fleets still grow by whole instances. So do pipeline stages: an instance of pp stages runs as
pp virtual engines (`sim.costs.pipeline`), each with its own batch and 1/pp of the KV, priced as
if its stages were free when it reaches them, so n units are n times the engines of one, each
saturating as one unit's do; what one unit completed is measured over all its engines
(`search_probe.completed_rps`), and a fleet still grows by whole instances of every GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.costs.catalog import HardwareSpec
from sim.scenario.kv_tiers import KVTiersSpec, tiers_cost_per_hour
from sim.whatif.search_space import Config

MARGIN = 0.5
WAVE = 8


@dataclass(frozen=True)
class Unit:
    config: Config
    completed_rps: float  # what one unit completed at the whole rate (NaN: nothing measured)
    passes: bool  # one unit met the SLOs at the whole rate (on the first seed)
    units_at_least: int  # the fewest units any fleet that serves the rate can have


def unit_figures(config: Config) -> tuple[float, float, float]:
    """(dollars per hour, TDP watts, idle watts) of one unit of `config`."""
    figures = HardwareSpec.model_validate(config.hardware).economics
    gpus = config.unit_gpus
    return gpus * figures.usd_per_gpu_hour, gpus * figures.tdp_w, gpus * figures.idle_w


def units_at_least(rate: float, completed: float, passes: bool) -> int:
    if passes or not completed > 0:
        return 1
    return max(1, math.ceil(rate / (completed * (1 + MARGIN)) - 1e-9))


def lower_bound(unit: Unit, objective: str) -> float:
    """The least any fleet of this configuration can cost (dollars per hour, with the rent of
    the tiers of the space's tier option on that many instances), or draw (watts)."""
    figures = unit_figures(unit.config)
    if objective != "cost":
        return unit.units_at_least * figures[2]
    gpus = unit.units_at_least * figures[0]
    tiers = unit.config.kv_tiers
    if tiers is None:
        return gpus
    spec = KVTiersSpec.model_validate(tiers)
    return gpus + tiers_cost_per_hour(spec, unit.units_at_least * unit.config.unit_size)


def cannot_meet(units: list[Unit], limit: dict[str, int]) -> dict[str, tuple[str, str]]:
    """config id -> (status, note) for the configurations that need more units than allowed."""
    return {
        u.config.id: (
            "cannot meet the SLOs",
            f"one unit completed {u.completed_rps:.4g} req/s, so a fleet needs at least "
            f"{u.units_at_least} units; at most {limit[u.config.id]} fit in max_instances",
        )
        for u in units
        if u.units_at_least > limit[u.config.id]
    }


class Bounds:
    """Branch and bound over the configurations left: `next_wave` gives the next to size (the
    lowest bound alone first, then `WAVE` at a time), `found` records a fleet and sets aside
    every configuration whose bound exceeds the best so far."""

    def __init__(self, units: list[Unit], objective: str) -> None:
        self.objective = objective
        self.left = sorted(units, key=lambda u: (lower_bound(u, objective), u.config.label))
        self.best, self.best_label = math.inf, ""
        self.pruned: dict[str, tuple[str, str]] = {}
        self.waves = 0

    def next_wave(self) -> list[Unit]:
        size = 1 if self.waves == 0 else WAVE
        wave, self.left = self.left[:size], self.left[size:]
        self.waves += 1
        return wave

    def found(self, label: str, value: float) -> None:
        if value < self.best:
            self.best, self.best_label = value, label
        keep = []
        for u in self.left:
            bound = lower_bound(u, self.objective)
            if bound > self.best:
                what = (f"${bound:.4g}/h" if self.objective == "cost"
                        else f"{bound:.4g} W idle")  # fmt: skip
                best = (f"${self.best:.4g}/h" if self.objective == "cost"
                        else f"{self.best:.4g} W")  # fmt: skip
                self.pruned[u.config.id] = (
                    "dominated",
                    f"one unit completed {u.completed_rps:.4g} req/s: at least "
                    f"{u.units_at_least} units, {what}, more than {self.best_label} ({best})",
                )
            else:
                keep.append(u)
        self.left = keep
