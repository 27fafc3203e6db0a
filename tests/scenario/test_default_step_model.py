"""The default step model: a scenario without `profile` is priced by counted events with fitted
unit costs for its model, GPU, layout and engine, and runs its engine's loop as the engine does
(asynchronous scheduling where that engine and version schedule so by default); `roofline`
stays, the teaching form, with a synchronous loop. The provenance says which priced the run."""

from __future__ import annotations

from typing import Any

import pytest
from scenario_factory import poisson, scenario

from sim.costs.profile import is_counted
from sim.scenario.engine_loop import async_by_default, turned_off_by
from sim.scenario.load import load_scenario_dict


def resolved(**over: Any) -> Any:
    raw = scenario(workload=poisson(20, 2.0, 200, 20), model="llama-3-8b",
                   hardware="h100-sxm", profile=None, **over)  # fmt: skip
    (variant,) = load_scenario_dict(raw).variants
    return variant


def test_no_profile_key_is_counted_events_and_says_so() -> None:
    variant = resolved()
    assert is_counted(variant.profile)
    assert variant.profile.name == "events-vllm-llama-3-8b-h100-sxm"
    assert "the default" in variant.profile.provenance["step_model"]
    units = variant.profile.provenance["unit_costs"]
    assert units["host_s@vllm"]["source"] == "fitted"
    # the newest vLLM schedules asynchronously: the resolved scenario says so
    assert variant.spec.engine.async_scheduling is True


def test_events_named_is_the_same_model_and_says_it_was_named() -> None:
    raw = scenario(workload=poisson(20, 2.0, 200, 20), model="llama-3-8b",
                   hardware="h100-sxm", profile="events")  # fmt: skip
    (variant,) = load_scenario_dict(raw).variants
    default = resolved()
    assert variant.profile.coefficients == default.profile.coefficients
    assert "profile: events" in variant.profile.provenance["step_model"]


def test_roofline_is_the_teaching_form_with_a_synchronous_loop() -> None:
    raw = scenario(workload=poisson(20, 2.0, 200, 20), model="llama-3-8b",
                   hardware="h100-sxm", profile="roofline")  # fmt: skip
    (variant,) = load_scenario_dict(raw).variants
    assert not is_counted(variant.profile)
    assert variant.profile.name.startswith("roofline-")
    assert variant.spec.engine.async_scheduling is False
    raw["engine"] = {"async_scheduling": True}  # a scenario's own choice wins
    (variant,) = load_scenario_dict(raw).variants
    assert variant.spec.engine.async_scheduling is True


@pytest.mark.parametrize(
    ("name", "version", "expected"),
    [
        ("vllm", "0.11.0", False),
        ("vllm", "0.13.0", False),
        ("vllm", "0.14.0", True),
        ("vllm", "v0.15.1", True),
        ("vllm", None, True),
        (None, "0.10.2", False),
        ("sglang", "0.5.6", True),
        ("trt-llm", "1.2.0rc2", True),
        ("atom", None, False),
        ("vllm", "nightly", True),
    ],
)
def test_each_engines_default_by_version(name: str | None, version: str | None,
                                         expected: bool) -> None:  # fmt: skip
    assert async_by_default(name, version) is expected


def test_an_engine_version_in_the_scenario_sets_the_loop() -> None:
    old = resolved(engine={"name": "vllm", "version": "0.13.0"})
    assert old.spec.engine.async_scheduling is False
    assert resolved(engine={"name": "sglang"}).spec.engine.async_scheduling is True


def test_what_turns_the_default_off() -> None:
    assert turned_off_by("vllm", None, "ngram", 1) is not None
    assert turned_off_by("vllm", None, "draft", 1) is not None
    assert turned_off_by("vllm", None, "mtp", 1) is None  # EAGLE/MTP keep it
    assert turned_off_by("vllm", "0.14.0", None, 2) is not None
    assert turned_off_by("vllm", "0.15.1", None, 2) is None
    assert turned_off_by("sglang", None, "mtp", 1) is not None
    assert turned_off_by("trt-llm", None, None, 1) is None
