"""The engine on the wall clock gives the record `run` gives for the same arrivals, at any
speed; an aborted request leaves and frees its KV."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers_cluster import arrays_of
from helpers_serve import live_run
from scenario_factory import chunked, continuous, scenario, static

from sim.scenario.load import load_scenario_dict
from sim.serve.live import LiveEngine
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


def test_a_session_sticky_fleet_keeps_a_clients_session_on_one_instance() -> None:
    # an agent's calls carry its task in the body's `user`: they stay where the first went
    fleet = {"router": "session_sticky", "instances": [{"count": 3}]}
    labels = ["task-a", "task-b", "task-a", "", "task-c", "task-b", "task-a", ""]
    table = live_run(scenario(profile=None, cluster=fleet), ARRIVALS, sessions=labels)
    where = {label: set(table.loc[[i for i, x in enumerate(labels) if x == label], "instance"])
             for label in set(labels) if label}  # fmt: skip
    assert all(len(instances) == 1 for instances in where.values())
    assert len(set().union(*where.values())) > 1  # different tasks spread over the fleet


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


@pytest.mark.parametrize("policy", [continuous(max_num_seqs=2), static(max_batch_size=2)],
                         ids=["full-batch", "static"])  # fmt: skip
def test_an_abort_cuts_a_run_no_arrival_could_cut(policy: dict) -> None:
    """A full batch (or a static one) runs its decodes as one run that no arrival changes;
    an abort does change it: the aborted request leaves at the next step boundary, long before
    its output is done, and the other finishes whole."""
    raw = scenario(policy=policy, profile=None)
    table = live_run(raw, [(0.0, 100, 400), (0.0, 100, 400)], aborts={0: 0.5})
    aborted, done = table.iloc[0], table.iloc[1]
    assert aborted["reject_reason"] == "aborted by its client"
    assert 0 < aborted["num_output_tokens"] < 200
    assert aborted["finish_s"] < 0.6
    assert not done["rejected"] and done["num_output_tokens"] == 400


def test_a_request_id_that_is_not_utf8_is_kept_escaped_past_a_block_of_the_log() -> None:
    """An id the results cannot hold as UTF-8 (a lone surrogate, as a header's invalid bytes
    decode) is escaped: the table of the block it lands in (built every `LOG_BLOCK` requests,
    while the engine runs) and the results hold it."""
    from helpers_serve import Clock

    from sim.serve.live import LOG_BLOCK

    clock = Clock()
    engine = LiveEngine(load_scenario_dict(scenario(profile=None)).variants[0], clock=clock)
    engine.submit(10, 1, lambda: None, source_id="bad-\udcff")
    for _ in range(LOG_BLOCK):
        clock.t += 0.001
        engine.advance()
        engine.submit(10, 1, lambda: None)
    table = engine.close("t").variants[engine.resolved.variant].requests
    assert len(table) == LOG_BLOCK + 1
    assert table["source_id"].iloc[0] == "bad-\\udcff"


def test_requests_the_simulation_can_no_longer_move_still_leave_at_the_close() -> None:
    """A fault inside the simulation (here: the policy's planning fails once) stops an
    instance's process with requests inside; the close still gives every request its row,
    those stranded aborted."""
    from helpers_serve import Clock

    clock = Clock()
    engine = LiveEngine(load_scenario_dict(scenario(profile=None)).variants[0], clock=clock)
    core = engine.cluster.instances[0].engine
    real = core.plan
    calls = []

    def fails_once():  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("a fault")
        return real()

    core.plan = fails_once
    for _ in range(5):
        engine.submit(100, 50, lambda: None)
    with pytest.raises(RuntimeError):
        for _ in range(1000):
            clock.t += 0.01
            engine.advance()
    table = engine.close("t").variants[engine.resolved.variant].requests
    assert sorted(table["id"]) == [0, 1, 2, 3, 4]
    assert (table["reject_reason"] == "aborted by its client").sum() >= 1
