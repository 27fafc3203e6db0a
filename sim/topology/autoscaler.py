"""Autoscaling decisions: how many instances a group should have, from what the fleet observed.

`decide` is a pure function of an `Observation` (the group's counts, its signal, the cooldown
clocks, the forecast rate) and the group's `AutoscaleSpec`; it returns the desired number of
active instances (serving plus provisioning; draining ones are on their way out and do not
count). The fleet (`sim.topology.scaling`) applies the decision: it launches, cancels and drains
instances and keeps the clocks. The rules are those of sim/scenario/control_plane.py:

* target tracking: `ceil(base * signal / target)`, `base` the serving instances (the active ones
  while none serves yet), left at the active count while the ratio is within the tolerance; a
  scale-out never cancels an instance already provisioning, a scale-in never adds one;
* threshold (step scaling): `step` more above `scale_out_above`, `step` fewer below
  `scale_in_below`;
* predictive: `ceil(forecast * headroom / capacity_rps)` with the forecast taken `lead_s` ahead,
  and at least what target tracking asks for now.

A change is held back by its cooldown (scale-out after the last scale-out; scale-in after the
last change of either kind), and the result is clamped to `[min, max]`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.scenario.control_plane import AutoscaleSpec


@dataclass(frozen=True, slots=True)
class Observation:
    now_s: float
    serving: int  # ready and taking requests
    provisioning: int  # launched, not yet ready
    signal: float  # the group's signal now (NaN: unknown, e.g. nothing served yet)
    last_scale_out_s: float  # -inf: never
    last_scale_in_s: float
    forecast_rps: float | None = None  # the rate lead_s ahead (predictive mode)

    @property
    def active(self) -> int:
        return self.serving + self.provisioning


def _tracking(spec: AutoscaleSpec, obs: Observation) -> int:
    assert spec.target is not None  # the schema requires it for these modes
    active = obs.active
    if math.isnan(obs.signal):
        return active
    ratio = obs.signal / spec.target
    if abs(ratio - 1.0) <= spec.tolerance:
        return active
    base = obs.serving if obs.serving > 0 else active
    wanted = math.ceil(base * ratio - 1e-9)  # a ratio of exactly 2.0 asks for 2x, not 2x + 1
    if ratio > 1.0:
        return max(wanted, active)
    return min(wanted, active)


def _raw(spec: AutoscaleSpec, obs: Observation) -> int:
    if spec.mode == "threshold":
        assert spec.scale_out_above is not None and spec.scale_in_below is not None
        if math.isnan(obs.signal):
            return obs.active
        if obs.signal > spec.scale_out_above:
            return obs.active + spec.step
        if obs.signal < spec.scale_in_below:
            return obs.active - spec.step
        return obs.active
    reactive = _tracking(spec, obs)
    if spec.mode == "predictive":
        assert spec.capacity_rps is not None
        rate = obs.forecast_rps if obs.forecast_rps is not None else 0.0
        return max(reactive, math.ceil(rate * spec.headroom / spec.capacity_rps - 1e-9))
    return reactive


def decide(spec: AutoscaleSpec, obs: Observation) -> int:
    """The desired number of active instances (see the module docstring)."""
    desired = min(max(_raw(spec, obs), spec.min), spec.max)
    active = obs.active
    if desired > active and obs.now_s - obs.last_scale_out_s < spec.scale_out_cooldown_s:
        return max(min(active, spec.max), spec.min)
    last_change = max(obs.last_scale_out_s, obs.last_scale_in_s)
    if desired < active and obs.now_s - last_change < spec.scale_in_cooldown_s:
        return max(min(active, spec.max), spec.min)
    return desired
