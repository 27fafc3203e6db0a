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

Over a band on the GPU step time (`search --robust X`) a unit is also probed at the band's slow
end: a fleet that meets the SLOs over the band meets them there too, so the larger of the two
bounds holds for it (`band_unit`), whatever the step time, since the argument above holds for
any step cost. `BandBounds` keeps two bests, the cheapest fleet at nominal and the cheapest over
the band, and sets a configuration aside only when both of its bounds exceed them: it can then
be neither choice. A configuration whose nominal bound alone exceeds `max_instances` cannot
meet the SLOs over the band either; one whose band bound alone does is still sized at nominal.

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


def band_unit(nominal: Unit, slow: Unit) -> Unit:
    """What bounds a configuration's fleets over a band: its unit at the band's slow end, with
    the larger of the two bounds (a fleet over the band meets the SLOs at nominal too)."""
    least = max(nominal.units_at_least, slow.units_at_least)
    return Unit(nominal.config, slow.completed_rps, slow.passes, least)


def _money(value: float, objective: str, idle: bool = False) -> str:
    if objective == "cost":
        return f"${value:.4g}/h"
    return f"{value:.4g} W idle" if idle else f"{value:.4g} W"


class Bounds:
    """Branch and bound over the configurations left: `next_wave` gives the next to size (the
    lowest bound alone first, then `WAVE` at a time), `found` records a fleet and sets aside
    every configuration whose bound exceeds the best so far."""

    def __init__(self, units: list[Unit], objective: str) -> None:
        self.objective = objective
        self.left = sorted(units, key=lambda u: (self.order(u), u.config.label))
        self.best, self.best_label = math.inf, ""
        self.pruned: dict[str, tuple[str, str]] = {}
        self.waves = 0

    def order(self, unit: Unit) -> float:
        """What the configurations are sized in order of: their lower bound."""
        return lower_bound(unit, self.objective)

    def next_wave(self) -> list[Unit]:
        size = 1 if self.waves == 0 else WAVE
        wave, self.left = self.left[:size], self.left[size:]
        self.waves += 1
        return wave

    def found(self, label: str, value: float) -> None:
        if value < self.best:
            self.best, self.best_label = value, label
        self.prune()

    def dominated(self, unit: Unit) -> str | None:
        """Why `unit`'s configuration cannot beat the best found so far (None: it may)."""
        bound = lower_bound(unit, self.objective)
        if bound <= self.best:
            return None
        return (
            f"one unit completed {unit.completed_rps:.4g} req/s: at least {unit.units_at_least} "
            f"units, {_money(bound, self.objective, idle=True)}, more than {self.best_label} "
            f"({_money(self.best, self.objective)})"
        )

    def prune(self) -> None:
        keep = []
        for u in self.left:
            why = self.dominated(u)
            if why is None:
                keep.append(u)
            else:
                self.pruned[u.config.id] = ("dominated", why)
        self.left = keep


class BandBounds(Bounds):
    """`Bounds` over a band: each configuration has its nominal unit and its band unit
    (`band_unit`); configurations are sized in order of the band's bound, and one is set aside
    when its nominal bound exceeds the cheapest nominal fleet found and its band bound the
    cheapest fleet found over the band (`found_both`)."""

    def __init__(self, units: list[Unit], band_units: list[Unit], objective: str) -> None:
        self.band = {u.config.id: u for u in band_units}
        self.band_best, self.band_best_label = math.inf, ""
        super().__init__(units, objective)

    def order(self, unit: Unit) -> float:
        return lower_bound(self.band[unit.config.id], self.objective)

    def band_start(self, unit: Unit) -> int:
        """The fewest units a fleet of `unit`'s configuration needs over the band."""
        return self.band[unit.config.id].units_at_least

    def found_both(self, label: str, value: float | None, band_value: float | None) -> None:
        """A configuration sized: its fleet's objective at nominal and over the band (None where
        it has no fleet)."""
        if band_value is not None and band_value < self.band_best:
            self.band_best, self.band_best_label = band_value, label
        if value is not None and value < self.best:
            self.best, self.best_label = value, label
        self.prune()

    def dominated(self, unit: Unit) -> str | None:
        at_nominal = super().dominated(unit)
        band = self.band[unit.config.id]
        bound = lower_bound(band, self.objective)
        if at_nominal is None or bound <= self.band_best:
            return None
        return (
            f"{at_nominal}; over the band one unit completed {band.completed_rps:.4g} req/s at "
            f"the slow end: at least {band.units_at_least} units, "
            f"{_money(bound, self.objective, idle=True)}, more than {self.band_best_label} "
            f"({_money(self.band_best, self.objective)})"
        )
