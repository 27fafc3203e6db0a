"""Autoscaling decisions (`sim.topology.autoscaler.decide`): each rule on hand-made observations,
cooldowns, clamps, and the schema's refusals."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sim.scenario.control_plane import AutoscaleSpec, ProvisioningSpec
from sim.topology.autoscaler import Observation, decide

NEVER = -math.inf


def obs(
    serving: int, signal: float, provisioning: int = 0, now: float = 1000.0,
    last_out: float = NEVER, last_in: float = NEVER, forecast: float | None = None,
) -> Observation:  # fmt: skip
    return Observation(now, serving, provisioning, signal, last_out, last_in, forecast)


def target(**kw: object) -> AutoscaleSpec:
    base: dict[str, object] = {"signal": "running", "target": 10, "min": 1, "max": 20}
    return AutoscaleSpec.model_validate({**base, **kw})


def test_target_tracking_scales_in_proportion() -> None:
    spec = target()
    assert decide(spec, obs(4, 25.0)) == 10  # 4 * 2.5
    assert decide(spec, obs(4, 20.0)) == 8  # exactly 2x: 8, not 9
    assert decide(spec, obs(4, 21.0)) == 9  # ceil(8.4)
    assert decide(spec, obs(4, 5.0)) == 2
    assert decide(spec, obs(4, 0.0)) == 1  # clamped to min


def test_target_tracking_tolerance_holds_the_count() -> None:
    spec = target(tolerance=0.1)
    assert decide(spec, obs(4, 10.9)) == 4
    assert decide(spec, obs(4, 9.1)) == 4
    assert decide(spec, obs(4, 11.5)) == 5


def test_scale_out_keeps_instances_already_provisioning() -> None:
    # 2 serving at 1.5x the target ask for 3; 2 more already provisioning stay
    assert decide(target(), obs(2, 15.0, provisioning=2)) == 4
    # with none serving yet the active ones are the base
    assert decide(target(), obs(0, 30.0, provisioning=2)) == 6


def test_unknown_signal_changes_nothing() -> None:
    assert decide(target(), obs(3, math.nan)) == 3
    spec = target(mode="threshold", scale_out_above=5, scale_in_below=1, target=None)
    assert decide(spec, obs(3, math.nan)) == 3


def test_threshold_steps() -> None:
    spec = target(mode="threshold", target=None, scale_out_above=8, scale_in_below=2, step=2)
    assert decide(spec, obs(3, 9.0)) == 5
    assert decide(spec, obs(3, 1.0)) == 1
    assert decide(spec, obs(3, 5.0)) == 3
    assert decide(spec, obs(3, 8.0)) == 3  # strictly above


def test_max_clamps() -> None:
    assert decide(target(max=6), obs(4, 100.0)) == 6


def test_cooldowns() -> None:
    spec = target(scale_out_cooldown_s=60, scale_in_cooldown_s=300)
    assert decide(spec, obs(4, 25.0, now=100, last_out=50)) == 4  # 50 s since a scale-out
    assert decide(spec, obs(4, 25.0, now=110, last_out=50)) == 10  # 60 s: allowed
    # scale-in waits 300 s after the last change of either kind
    assert decide(spec, obs(4, 5.0, now=400, last_out=200)) == 4
    assert decide(spec, obs(4, 5.0, now=400, last_in=150)) == 4
    assert decide(spec, obs(4, 5.0, now=500, last_out=200, last_in=150)) == 2


def test_predictive_follows_the_forecast_and_the_signal() -> None:
    spec = target(mode="predictive", capacity_rps=5.0, headroom=1.2)
    # forecast 20 rps * 1.2 / 5 = 4.8 -> 5, above what the signal asks (4)
    assert decide(spec, obs(4, 10.0, forecast=20.0)) == 5
    # the signal asks for more than the forecast: the signal wins
    assert decide(spec, obs(4, 30.0, forecast=5.0)) == 12
    # a falling forecast scales in, once the cooldown allows
    assert decide(spec, obs(8, 2.0, forecast=5.0)) == 2


@settings(max_examples=200, deadline=None)
@given(
    serving=st.integers(0, 30),
    provisioning=st.integers(0, 5),
    signal=st.floats(0, 1000),
    lo=st.integers(0, 10),
    span=st.integers(0, 20),
)
def test_decision_stays_within_bounds(
    serving: int, provisioning: int, signal: float, lo: int, span: int
) -> None:
    hi = max(1, lo + span)
    spec = target(min=lo, max=hi)
    d = decide(spec, obs(serving, signal, provisioning))
    assert lo <= d <= hi
    active = serving + provisioning
    if signal > 10 * 1.1 and lo <= active <= hi:
        assert d >= active  # above the target: never fewer
    if signal < 10 * 0.9 and lo <= active <= hi:
        assert d <= active


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"min": 5, "max": 2}, "min (5) is above max (2)"),
        ({"target": None}, "mode target needs target"),
        ({"mode": "threshold", "target": None}, "needs scale_out_above and scale_in_below"),
        (
            {"mode": "threshold", "target": None, "scale_out_above": 1, "scale_in_below": 2},
            "must be below scale_out_above",
        ),
        ({"scale_out_above": 3}, "belong to mode threshold"),
        ({"mode": "predictive"}, "needs capacity_rps"),
        ({"capacity_rps": 3}, "belong to mode predictive"),
        ({"interval_s": 0}, "greater than or equal to 0.01"),
        ({"interval_s": 1e-9}, "greater than or equal to 0.01"),
    ],
)
def test_schema_refuses(fields: dict[str, object], words: str) -> None:
    with pytest.raises(ValidationError, match=words.replace("(", r"\(").replace(")", r"\)")):
        target(**fields)


def test_provisioning_delay_is_scheduling_plus_load_plus_warmup() -> None:
    p = ProvisioningSpec(scheduling_s=30, load_bandwidth_gb_per_s=2, warmup_s=60)
    assert p.delay_s(16e9) == pytest.approx(30 + 8 + 60)
