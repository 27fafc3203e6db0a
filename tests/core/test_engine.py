"""The step loop on tiny traces: same-time ordering, idling, timers and coalesced runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from scenario_factory import run, unit_trace

from sim.core.recorder import StepTimes
from sim.core.step_times import steps_before

CONT = {"name": "continuous", "max_num_seqs": 8, "max_num_batched_tokens": 64}


def test_arrival_at_a_step_boundary_joins_the_step_starting_then(tmp_path: Path) -> None:
    # r0 prefills in [0, 1); r1 arrives exactly at 1.0 and is prefilled (prefill-first) at 1.0
    res = run(unit_trace(tmp_path, [(0.0, 4, 3), (1.0, 4, 2)], CONT))
    req = res.requests.set_index("id")
    assert req.loc[1, "first_scheduled_s"] == 1.0
    assert req.loc[1, "first_token_s"] == 2.0
    # r0 stalled during r1's prefill: tokens at 1, 3, 4
    assert req.loc[0, "first_token_s"] == 1.0 and req.loc[0, "finish_s"] == 4.0
    assert req.loc[0, "max_itl_s"] == 2.0


def test_arrival_just_after_a_boundary_waits_for_the_next(tmp_path: Path) -> None:
    res = run(unit_trace(tmp_path, [(0.0, 4, 3), (1.25, 4, 2)], CONT))
    req = res.requests.set_index("id")
    assert req.loc[1, "first_scheduled_s"] == 2.0
    assert req.loc[1, "queue_s"] == 0.75


def test_decode_run_is_cut_at_the_first_boundary_after_an_arrival(tmp_path: Path) -> None:
    res = run(unit_trace(tmp_path, [(0.0, 1, 10), (3.5, 1, 1)], CONT))
    steps = res.steps
    req = res.requests.set_index("id")
    assert req.loc[1, "first_scheduled_s"] == 4.0
    # prefill [0,1), decode run [1,4) cut for the arrival, prefill [4,5), decode run to the end
    assert steps["start_s"].tolist() == [0.0, 1.0, 4.0, 5.0]
    assert steps["num_steps"].tolist() == [1, 3, 1, 6]
    assert req.loc[0, "finish_s"] == 11.0


def test_idle_instance_sleeps_until_the_next_arrival(tmp_path: Path) -> None:
    res = run(unit_trace(tmp_path, [(0.0, 4, 1), (10.0, 4, 1)], CONT))
    steps = res.steps
    assert steps["start_s"].tolist() == [0.0, 10.0]
    assert res.summary()["busy_fraction"] == pytest.approx(2 / 11)


def test_static_max_wait_timer_starts_a_partial_batch(tmp_path: Path) -> None:
    policy = {"name": "static", "max_batch_size": 4, "max_wait_s": 2.5}
    res = run(unit_trace(tmp_path, [(0.0, 4, 1), (1.0, 4, 1), (6.0, 4, 1)], policy))
    req = res.requests.set_index("id")
    assert req["first_scheduled_s"].tolist() == [2.5, 2.5, 8.5]


def test_static_batch_of_four_starts_when_the_fourth_arrives(tmp_path: Path) -> None:
    policy = {"name": "static", "max_batch_size": 4, "max_wait_s": 100.0}
    rows = [(0.0, 4, 2), (1.0, 4, 2), (2.0, 4, 2), (3.0, 4, 2)]
    res = run(unit_trace(tmp_path, rows, policy))
    assert res.requests["first_scheduled_s"].tolist() == [3.0] * 4


def test_simultaneous_arrivals_are_queued_in_id_order(tmp_path: Path) -> None:
    policy = {"name": "continuous", "max_num_seqs": 1, "max_num_batched_tokens": 64}
    res = run(unit_trace(tmp_path, [(0.0, 2, 1), (0.0, 2, 1), (0.0, 2, 1)], policy))
    assert res.requests["first_scheduled_s"].tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("d0, inc", [(1.0, 0.0), (0.3, 0.1), (0.01, 0.0007)])
def test_steps_before_finds_the_first_boundary_at_or_after(d0: float, inc: float) -> None:
    times = StepTimes(2.0, d0, inc)
    for target in [2.0001, 2.3, 3.0, times.end(5), times.end(5) + 1e-12, 50.0, 1e9]:
        j = steps_before(times, 100, target)
        expected = next((k for k in range(1, 101) if times.end(k) >= target), 100)
        assert j == expected, target
