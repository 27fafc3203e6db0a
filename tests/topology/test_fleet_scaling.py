"""Autoscaled fleets end to end (`sim.topology.scaling`): lifetimes, billing, provisioning delay,
draining, scale to zero, P/D pools, and that a fleet that cannot change runs exactly as a fixed
one."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from helpers_sim import uses_stand_ins
from scenario_factory import chunked, lognormal, scenario

from sim.errors import ScenarioError
from sim.scenario.load import load_scenario_dict
from sim.simulate import simulate

PROVISIONING = {"scheduling_s": 5.0, "load_bandwidth_gb_per_s": 4.0, "warmup_s": 10.0}


def fleet_scenario(
    autoscale: dict[str, Any] | None, count: int = 1, **workload: Any
) -> dict[str, Any]:
    group: dict[str, Any] = {"count": count}
    if autoscale is not None:
        group["autoscale"] = {"provisioning": PROVISIONING, **autoscale}
    arrival = workload.pop(
        "arrival",
        {"process": "profile", "rate": {"shape": "ramp", "from_rate": 1, "to_rate": 14,
                                        "over_s": 240}},
    )  # fmt: skip
    return scenario(
        name="fleet",
        seed=3,
        workload={
            "duration_s": workload.pop("duration_s", 420),
            "arrival": arrival,
            "prompt_tokens": lognormal(400, 0.5, max=2048),
            "output_tokens": lognormal(120, 0.5, max=512),
        },
        model="llama-3-8b",
        hardware="h100-sxm",
        policy=chunked(max_num_seqs=64, max_num_batched_tokens=2048),
        profile=None,
        slo={"ttft_s": 1.0, "tpot_s": 0.05},
        cluster={"router": "least_outstanding_tokens", "instances": [group]},
    )


RUNNING = {
    "signal": "running", "target": 12, "min": 1, "max": 6, "interval_s": 5,
    "scale_out_cooldown_s": 10, "scale_in_cooldown_s": 30,
}  # fmt: skip


def run(doc: dict[str, Any], tables: bool = True) -> Any:
    return next(iter(simulate(doc, tables=tables).variants.values()))


@pytest.fixture(scope="module")
def ramp() -> Any:
    return run(fleet_scenario(RUNNING))


def resolved() -> Any:
    return load_scenario_dict(fleet_scenario(RUNNING)).variants[0].spec


def weight_bytes() -> float:
    return float(resolved().model.weight_bytes)


def test_the_fleet_grows_with_the_ramp_and_every_request_finishes(ramp: Any) -> None:
    events = ramp.fleet_events
    launches = events[events["event"] == "launch"]
    assert len(launches) >= 2
    req = ramp.requests
    assert not req["rejected"].any()
    assert req["finish_s"].notna().all()
    assert ramp.summary()["peak_instances"] >= 2


def test_provisioning_delay_is_exact(ramp: Any) -> None:
    inst = ramp.instances
    launched = inst[inst["launch_s"] > 0]
    delay = PROVISIONING["scheduling_s"] + weight_bytes() / 4e9 + PROVISIONING["warmup_s"]
    ready = launched.dropna(subset=["ready_s"])
    assert len(ready) >= 2
    np.testing.assert_allclose(ready["ready_s"] - ready["launch_s"], delay, rtol=1e-12)


def test_instances_serve_only_between_ready_and_drain(ramp: Any) -> None:
    inst = ramp.instances.set_index("index")
    req = ramp.requests
    steps = ramp.steps
    for index, row in inst.iterrows():
        mine = req[req["instance"] == index]
        assert (mine["arrival_s"] >= row["ready_s"]).all()
        if not math.isnan(row["drain_s"]):
            assert (mine["arrival_s"] <= row["drain_s"]).all()
        own = steps[steps["instance"] == index]
        if len(own):
            assert own["start_s"].min() >= row["ready_s"]
            if not math.isnan(row["retire_s"]):
                # billed until its last step ends, never before
                assert row["retire_s"] == pytest.approx(max(own["end_s"].max(), row["drain_s"]))


def test_integrated_cost_is_the_sum_of_lifetimes_times_price(ramp: Any) -> None:
    inst = ramp.instances
    price = resolved().hardware.economics.usd_per_gpu_hour
    end = max(ramp.steps["end_s"].max(), inst["retire_s"].max())
    life = inst["retire_s"].fillna(end) - inst["launch_s"]
    summary = ramp.summary()
    assert summary["fleet_usd"] == pytest.approx(float((life * price / 3600).sum()), rel=1e-12)
    assert summary["instance_hours"] == pytest.approx(float(life.sum()) / 3600, rel=1e-12)
    assert summary["fleet_usd_per_hour"] == pytest.approx(summary["fleet_usd"] / (end / 3600))


def test_events_agree_with_lifetimes(ramp: Any) -> None:
    events = ramp.fleet_events
    inst = ramp.instances.set_index("index")
    for kind, column in (("launch", "launch_s"), ("ready", "ready_s"), ("drain", "drain_s")):
        rows = events[events["event"] == kind].set_index("instance")["time_s"]
        np.testing.assert_allclose(rows.sort_index(), inst.loc[rows.index, column].sort_index())
    # every instance launched during the run has its launch event; each retirement comes after
    # its drain
    retired = events[events["event"] == "retire"].set_index("instance")["time_s"]
    assert (retired >= inst.loc[retired.index, "drain_s"]).all()
    serving = events["serving"] + events["provisioning"] + events["draining"]
    assert (serving <= RUNNING["max"] + len(inst)).all()


def test_a_fleet_that_cannot_change_runs_as_a_fixed_one() -> None:
    """Pinned to its count, an autoscaled group serves the same schedule as a fixed one, record
    for record: the controller reads queues without applying the steps in flight, so its reads
    split no run (the fixed fleet's own path is untouched: the regression baselines check it)."""
    fixed = run(fleet_scenario(None, count=2, duration_s=200))
    pinned = run(fleet_scenario({**RUNNING, "min": 2, "max": 2}, count=2, duration_s=200))
    assert len(pinned.fleet_events) == 0
    cols = [c for c in fixed.requests.columns]
    pd.testing.assert_frame_equal(fixed.requests[cols], pinned.requests[cols])
    pd.testing.assert_frame_equal(fixed.steps, pinned.steps)
    # same rent: two instances over the run, from 0 rather than the first arrival
    s, p = fixed.summary(), pinned.summary()
    assert p["instance_hours"] == pytest.approx(2 * p["fleet_usd"] / p["fleet_usd_per_hour"])
    # (energy differs: idle watts count over the lifetimes, from 0)
    for key in ("ttft_p90_s", "tpot_p90_s", "e2e_p90_s", "output_tokens_per_s",
                "kv_utilization_mean"):  # fmt: skip
        assert p[key] == s[key], key


def test_streamed_run_bills_the_same(ramp: Any) -> None:
    streamed = run(fleet_scenario(RUNNING), tables=False)
    a, b = ramp.summary(), streamed.summary()
    for key in ("fleet_usd", "instance_hours", "peak_instances", "fleet_kwh"):
        assert b[key] == pytest.approx(a[key], rel=1e-12), key
    pd.testing.assert_frame_equal(ramp.fleet_events, streamed.fleet_events)


def test_deterministic() -> None:
    a = run(fleet_scenario(RUNNING, duration_s=200))
    b = run(fleet_scenario(RUNNING, duration_s=200))
    pd.testing.assert_frame_equal(a.fleet_events, b.fleet_events)


def test_scale_to_zero_and_back() -> None:
    quiet = {
        "process": "profile",
        "rate": {"shape": "piecewise", "points": [[0, 3], [60, 3], [60.001, 0], [400, 0],
                                                  [400.001, 3], [460, 3], [460.001, 0]]},
    }  # fmt: skip
    spec = {**RUNNING, "min": 0, "scale_in_cooldown_s": 20, "target": 4}
    result = run(fleet_scenario(spec, arrival=quiet, duration_s=460))
    events = result.fleet_events
    req = result.requests
    assert req["finish_s"].notna().all() and not req["rejected"].any()
    # it drained to zero in the quiet spell, then an arrival launched one
    zero = events[(events["serving"] == 0) & (events["provisioning"] == 0)]
    assert len(zero)
    late = events[(events["event"] == "launch") & (events["time_s"] >= 400)]
    assert len(late) >= 1
    first_late = float(late["time_s"].min())
    delay = PROVISIONING["scheduling_s"] + weight_bytes() / 4e9 + PROVISIONING["warmup_s"]
    waited = req[(req["arrival_s"] >= first_late) & (req["arrival_s"] < first_late + 1)]
    assert len(waited)
    # requests held at the gateway wait out the cold start
    assert (waited["ttft_s"] >= first_late + delay - waited["arrival_s"] - 1e-9).all()


def test_disaggregated_pools_scale_separately() -> None:
    doc = fleet_scenario(None, duration_s=240)
    del doc["cluster"]
    auto = {"provisioning": PROVISIONING, **RUNNING, "max": 4}
    doc["disaggregation"] = {
        "prefill": {"count": 1, "autoscale": {**auto, "signal": "queue_length", "target": 2}},
        "decode": {"count": 1, "autoscale": auto},
    }
    result = run(doc)
    req = result.requests
    assert req["finish_s"].notna().all() and not req["rejected"].any()
    events = result.fleet_events
    assert set(events["group"]) <= {"prefill", "decode"}
    inst = result.instances.set_index("index")
    launched_decode = inst[(inst["role"] == "decode") & (inst["launch_s"] > 0)]
    for index, row in launched_decode.iterrows():
        landed = req[req["decode_instance"] == index]
        assert (landed["transfer_start_s"] >= row["ready_s"]).all()


def test_a_prefill_pool_scaled_on_ttft_sees_its_arrivals() -> None:
    """The ttft signal of a P/D prefill pool reads the requests given to it: under the ramp it
    observes a number at every tick and scales out (before, P/D arrivals never reached the
    signal, which stayed NaN and never asked for an instance)."""
    doc = fleet_scenario(None, duration_s=240)
    del doc["cluster"]
    ttft = {"provisioning": PROVISIONING, **RUNNING, "signal": "ttft", "target": 0.01,
            "window_s": 20, "max": 4}  # fmt: skip
    doc["disaggregation"] = {
        "prefill": {"count": 1, "autoscale": ttft},
        "decode": {"count": 2},
    }
    result = run(doc)
    events = result.fleet_events
    prefill = events[events["group"] == "prefill"]
    decisions = prefill[prefill["event"] == "launch"]
    assert len(decisions) >= 1
    assert decisions["signal"].notna().all()
    assert result.requests["finish_s"].notna().all()


def test_predictive_needs_a_stated_rate(tmp_path: Any) -> None:
    doc = fleet_scenario({**RUNNING, "mode": "predictive", "capacity_rps": 5})
    doc["workload"] = {"trace": {"path": "t.csv"}}
    with pytest.raises(ScenarioError, match="forecasts from the workload's stated rate"):
        simulate(copy.deepcopy(doc))


def test_predictive_runs_ahead_of_the_ramp() -> None:
    reactive = run(fleet_scenario(RUNNING))
    spec = {**RUNNING, "mode": "predictive", "capacity_rps": 3.0, "headroom": 1.2}
    predictive = run(fleet_scenario(spec))
    first = lambda r: float(r.fleet_events.query("event == 'launch'")["time_s"].min())  # noqa: E731
    assert first(predictive) <= first(reactive)


class _Busy:
    """An instance as the fleet's scale-in sees it: its outstanding tokens, never idle."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens

    def outstanding_tokens(self) -> int:
        return self.tokens

    def holds_requests(self) -> bool:
        return True


class _Topology:
    """A topology as the fleet sees it: launching appends a fresh `_Busy` instance."""

    def __init__(self, instances: list[Any]) -> None:
        self.instances = instances
        self.readied = 0

    def launch(self, number: int) -> Any:
        instance = _Busy(0)
        instance.index = len(self.instances)  # type: ignore[attr-defined]
        self.instances.append(instance)
        return instance

    def ready(self) -> None:
        self.readied += 1

    def num_held(self) -> int:
        return 0


@uses_stand_ins
@pytest.mark.parametrize(
    ("work", "n", "drained"),
    [
        ([50, 10, 30], 1, [1]),  # the least outstanding work drains
        ([50, 10, 30], 2, [1, 2]),  # then the next least
        ([5, 5, 9], 1, [1]),  # a tie: the newer instance
        ([0, 40, 0, 7], 3, [2, 0, 3]),
    ],
)
def test_scale_in_drains_the_instances_with_the_least_outstanding_work(
    work: list[int], n: int, drained: list[int]
) -> None:
    """The choice a user pays for: draining the busiest instance instead would hold the most
    work on a draining node (every fleet invariant still holds, so only this pins it)."""
    import simpy

    from sim.topology.scaling import Fleet, GroupPlan

    plan = GroupPlan(0, "g", None, 0.0)
    fleet = Fleet(simpy.Environment(), [plan], _Topology([_Busy(w) for w in work]),
                  [0] * len(work), None, 0)  # type: ignore[arg-type]
    fleet._remove(plan, n, math.nan, len(work) - n)
    assert [row[3] for row in fleet.rows if row[2] == "drain"] == drained
    assert list(fleet.candidates()) == sorted(set(range(len(work))) - set(drained))


@uses_stand_ins
def test_scale_in_cancels_the_newest_provisioning_instances_before_draining_any() -> None:
    """Which instances a scale-in removes first: those still provisioning, the newest first
    (the least sunk cost, and they would serve last), then the least busy serving ones. Every
    fleet invariant holds whichever order it takes, so only this pins it."""
    import simpy

    from sim.topology.scaling import Fleet, GroupPlan

    plan = GroupPlan(0, "g", None, 30.0)
    fleet = Fleet(simpy.Environment(), [plan], _Topology([_Busy(20), _Busy(3)]),
                  [0, 0], None, 0)  # type: ignore[arg-type]
    fleet._launch(plan, 3, math.nan, 5)  # instances 2, 3, 4 provision
    fleet._remove(plan, 2, math.nan, 3)
    events = lambda kind: [row[3] for row in fleet.rows if row[2] == kind]  # noqa: E731
    assert events("cancel") == [4, 3]  # the newest first
    assert events("drain") == []
    fleet._remove(plan, 2, math.nan, 1)  # the last one provisioning, then the least busy
    assert events("cancel") == [4, 3, 2]
    assert events("drain") == [1]
    assert list(fleet.candidates()) == [0]
