"""An autoscaled group with `count: 0` (and `min: 0`) starts with no instance: the first arrival
waits at the gateway and launches one at once, and its TTFT includes the provisioning delay."""

from __future__ import annotations

from typing import Any

import pytest
from scenario_factory import chunked, fixed, poisson, run, scenario

from sim.costs.catalog import MODELS

PROVISIONING = {"scheduling_s": 1.0, "load_bandwidth_gb_per_s": 4.0, "warmup_s": 2.0}
DELAY_S = 1.0 + MODELS["llama-2-7b"].weight_bytes / 4e9 + 2.0


def from_zero(count: int = 0, **options: Any) -> dict[str, Any]:
    autoscale = {
        "signal": "queue_length", "target": 4, "min": 0, "max": 3, "interval_s": 1,
        "scale_out_cooldown_s": 5, "scale_in_cooldown_s": 5, "provisioning": PROVISIONING,
        **options,
    }  # fmt: skip
    return scenario(
        seed=2,
        workload=poisson(num_requests=60, rate=3.0, prompt=fixed(200), output=fixed(20)),
        policy=chunked(max_num_batched_tokens=512),  # two and a half prompts a step
        cluster={"instances": [{"count": count, "autoscale": autoscale}]},
    )


@pytest.fixture(scope="module")
def empty_start() -> Any:
    return run(from_zero())


def test_the_first_arrival_launches_the_first_instance(empty_start: Any) -> None:
    req = empty_start.requests.sort_values("arrival_s")
    inst = empty_start.instances.sort_values("launch_s")
    first = req.iloc[0]
    assert inst.iloc[0]["launch_s"] == pytest.approx(first["arrival_s"], abs=1e-12)
    assert inst.iloc[0]["ready_s"] - inst.iloc[0]["launch_s"] == pytest.approx(DELAY_S, abs=1e-9)
    # served once ready, and not before: its TTFT holds the whole provisioning delay
    assert first["first_scheduled_s"] >= inst.iloc[0]["ready_s"] - 1e-12
    assert first["ttft_s"] > DELAY_S
    # requests arriving while it provisions wait too
    early = req[req["arrival_s"] < inst.iloc[0]["ready_s"]]
    assert len(early) > 1
    assert (early["first_scheduled_s"] >= inst.iloc[0]["ready_s"] - 1e-12).all()
    # and are released in arrival order: more than one step's prompts wait, so the first
    # arrivals take the first step (released newest first, the last would)
    assert early["first_scheduled_s"].nunique() > 1
    assert early["first_scheduled_s"].is_monotonic_increasing


def test_nothing_is_lost_and_the_fleet_is_billed_from_its_first_launch(empty_start: Any) -> None:
    s = empty_start.summary()
    assert s["num_finished"] == s["num_requests"] == 60
    assert s["num_rejected"] == 0
    # billed from launch to retirement (alive ones to the last step): nothing before the first
    # arrival, when no instance exists
    inst = empty_start.instances
    assert inst["launch_s"].min() > 0
    retire = inst["retire_s"].fillna(empty_start.steps["end_s"].max())
    assert s["instance_hours"] * 3600 == pytest.approx(float((retire - inst["launch_s"]).sum()))
    assert s["mean_instances"] < s["peak_instances"]


def test_a_group_that_starts_with_one_serves_the_first_arrival_without_waiting() -> None:
    warm = run(from_zero(count=1))
    inst = warm.instances.sort_values("index")
    assert inst.iloc[0]["launch_s"] == 0.0
    first = warm.requests.sort_values("arrival_s").iloc[0]
    assert first["ttft_s"] < DELAY_S


def test_a_streamed_empty_start_agrees_with_the_tables(empty_start: Any) -> None:
    from sim.scenario.load import load_scenario_dict
    from sim.simulate import simulate

    streamed = next(iter(simulate(load_scenario_dict(from_zero()), tables=False).variants.values()))
    tabled = empty_start.summary()
    for key in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "e2e_p90_s", "fleet_usd"):
        assert streamed.summary()[key] == pytest.approx(tabled[key], rel=1e-9), key
