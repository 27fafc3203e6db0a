"""Probes for the capacity search: one variant of a scenario simulated at a given rate and seed.

The scenario is read and overridden once; each probe sets the rate and the seed on a copy of the
mapping, validates it like any scenario, and simulates only the variant asked for (the others
would be thrown away). Metric names come from summarizing empty tables, so that an SLO can be
checked against them before any simulation runs.
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from sim.errors import ScenarioError
from sim.metrics.context import SummaryContext
from sim.metrics.summary import summarize
from sim.scenario.load import ScenarioSet, load_scenario_dict, set_path, source_of
from sim.simulate import simulate

Source = ScenarioSet | Mapping[str, Any] | str | os.PathLike[str]


@functools.cache
def metric_names() -> frozenset[str]:
    """Every summary metric name (all NaN or zero on empty tables, but all present)."""
    ctx = SummaryContext(None, None, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1, 1)
    empty = pd.DataFrame()
    return frozenset(summarize(empty, empty, empty, ctx))


class Prober:
    def __init__(self, scenario: Source, overrides: Sequence[str], rate_key: str) -> None:
        raw, self.file, self.base_dir = source_of(scenario, tuple(overrides))
        self.raw = raw
        self.rate_path = rate_key.split(".")
        loaded = self._load(raw)
        rates = set()
        for resolved in loaded.variants:
            arrival = resolved.spec.workload.arrival
            if arrival is None:
                raise ScenarioError(
                    f"capacity search varies {rate_key}: variant {resolved.variant!r} replays a "
                    "trace, which has no arrival rate",
                    file=self.file,
                )
            if not isinstance(arrival.rate, (int, float)):
                raise ScenarioError(
                    f"capacity search varies {rate_key}: variant {resolved.variant!r} has a rate "
                    "profile; search its level with workload.arrival.scale instead",
                    file=self.file,
                )
            rates.add(float(arrival.rate))
        # variants may differ in rate; the search starts from the base's (or the first) rate
        base_rate = raw.get("workload", {}).get("arrival", {}).get("rate")
        self.start_rate = float(base_rate if base_rate is not None else min(rates))
        self.seed = loaded.variants[0].spec.seed
        self.variants = [v.variant for v in loaded.variants]
        self.num_gpus = {
            v.variant: sum(group.count for _, _, group in v.spec.groups()) for v in loaded.variants
        }

    def _load(self, raw: dict[str, Any]) -> ScenarioSet:
        return load_scenario_dict(raw, file=self.file, base_dir=self.base_dir)

    def run(self, variant: str, rate: float, seed: int) -> dict[str, float]:
        raw = copy.deepcopy(self.raw)
        set_path(raw, self.rate_path, rate)
        # a variant that sets its own rate must follow the search too
        for override in (raw.get("variants") or {}).values():
            _replace_if_set(override, self.rate_path, rate)
        return self.run_raw(variant, raw, seed)

    def run_raw(self, variant: str, raw: dict[str, Any], seed: int) -> dict[str, float]:
        """Summary of one variant of an edited scenario mapping, at `seed`."""
        raw = copy.deepcopy(raw)
        set_path(raw, ["seed"], seed)
        for override in (raw.get("variants") or {}).values():
            _replace_if_set(override, ["seed"], seed)
        loaded = self._load(raw)
        chosen = [v for v in loaded.variants if v.variant == variant]
        results = simulate(ScenarioSet(name=loaded.name, variants=chosen, file=self.file))
        return results[variant].summary()


def _replace_if_set(node: Any, path: list[str], value: Any) -> None:
    for key in path[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict) and path[-1] in node:
        node[path[-1]] = value
