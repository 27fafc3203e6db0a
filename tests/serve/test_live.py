"""The engine on the wall clock gives the record `run` gives for the same arrivals, at any
speed; an aborted request leaves and frees its KV."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers_cluster import arrays_of
from helpers_serve import live_run
from scenario_factory import chunked, continuous, scenario

from sim.scenario.load import load_scenario_dict
from sim.simulate import run_variant

ARRIVALS = [(0.0, 100, 10), (0.013, 400, 30), (0.013, 50, 5), (0.2, 900, 40), (0.21, 64, 64),
            (0.5, 2000, 8), (0.9, 30, 100), (0.95, 700, 12)]  # fmt: skip
COLUMNS = ["arrival_s", "first_scheduled_s", "first_token_s", "finish_s", "num_output_tokens",
           "num_preemptions", "instance"]  # fmt: skip


def offline(raw: dict) -> pd.DataFrame:
    """`run` of the same arrivals."""
    t, p, o = (list(c) for c in zip(*ARRIVALS, strict=True))
    return run_variant(load_scenario_dict(raw).variants[0], arrays_of(t, p, o)).requests


@pytest.mark.parametrize("policy", [continuous(), chunked()], ids=["continuous", "chunked"])
def test_live_record_is_the_offline_run_of_its_arrivals(policy: dict) -> None:
    raw = scenario(policy=policy, profile=None)
    live = live_run(raw, ARRIVALS)
    expected = offline(raw)
    pd.testing.assert_frame_equal(
        live[COLUMNS], expected[COLUMNS], check_exact=False, rtol=1e-12
    )


def test_speed_does_not_change_the_record() -> None:
    raw = scenario(profile=None)
    one = live_run(raw, ARRIVALS, speed=1.0)
    ten = live_run(raw, ARRIVALS, speed=10.0)
    pd.testing.assert_frame_equal(one[COLUMNS], ten[COLUMNS], check_exact=False, rtol=1e-12)


def test_a_fleet_behind_one_endpoint_routes_as_run_does() -> None:
    fleet = {"router": "least_outstanding_requests", "instances": [{"count": 3}]}
    raw = scenario(profile=None, cluster=fleet)
    live = live_run(raw, ARRIVALS)
    expected = offline(raw)
    pd.testing.assert_frame_equal(
        live[COLUMNS], expected[COLUMNS], check_exact=False, rtol=1e-12
    )


def test_aborted_requests_leave_at_a_boundary_and_free_their_blocks() -> None:
    raw = scenario(profile=None)
    table = live_run(raw, ARRIVALS, aborts={1: 0.05, 6: 0.9})  # running, and still queued
    aborted = table[table["reject_reason"] == "aborted by its client"]
    assert aborted["id"].tolist() == [1, 6]
    running = aborted.iloc[0]
    assert 0 < running["num_output_tokens"] < 30 and running["finish_s"] >= 0.05
    assert aborted.iloc[1]["num_output_tokens"] == 0
    done = table[~table["rejected"]]
    assert len(done) == len(ARRIVALS) - 2
    assert (done["num_output_tokens"] == [o for i, (_, _, o) in enumerate(ARRIVALS)
                                          if i not in (1, 6)]).all()  # fmt: skip
    assert np.isfinite(done["finish_s"]).all()
