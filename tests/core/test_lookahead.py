"""Asynchronous scheduling (sim/core/lookahead.py): step k+1 is planned when step k launches, so
a request that reaches the scheduler while a step runs joins the step after next; an idle engine,
or one whose next step would be empty, schedules it at once. Exact schedules on the unit profile
(every step lasts 1 s), both ways of delivering arrivals, and coalesced runs against single steps.
"""

from __future__ import annotations

import copy
import importlib
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from scenario_factory import UNIT, run, unit_trace

SIMULATE = importlib.import_module("sim.simulate.run")
POLICY = {"name": "continuous", "max_num_seqs": 4, "max_num_batched_tokens": 1024}


def schedule(tmp_path: Path, rows: list[tuple[float, int, int]], on: bool, **extra: Any) -> Any:
    engine = {"async_scheduling": on, **extra.pop("engine", {})}
    spec = unit_trace(tmp_path, rows, dict(POLICY), profile=copy.deepcopy(UNIT), engine=engine,
                      **extra)  # fmt: skip
    return run(spec, tmp_path).requests


def test_a_request_arriving_mid_step_joins_the_step_after_next(tmp_path: Path) -> None:
    # request 0: prompt step 0-1, then decodes 1-2, 2-3, ... (10 tokens)
    # request 1 arrives at 2.5, during step 2-3: a synchronous loop schedules it in the step
    # that starts at 3 (first token at 4); an asynchronous one had planned 3-4 at 2, so it joins
    # the step that starts at 4 (first token at 5). Its prompt step (prefill first) stalls
    # request 0 for one step either way: request 0 ends at 11
    rows = [(0.0, 8, 10), (2.5, 8, 3)]
    sync = schedule(tmp_path, rows, on=False)
    ahead = schedule(tmp_path, rows, on=True)
    assert sync["first_token_s"].tolist() == [1.0, 4.0]
    assert ahead["first_token_s"].tolist() == [1.0, 5.0]
    assert sync["finish_s"].tolist() == [11.0, 6.0]
    assert ahead["finish_s"].tolist() == [11.0, 7.0]
    # the wait is counted from the arrival: half a step (sync), one and a half (async) + prefill
    assert ahead["ttft_s"].tolist() == [1.0, 2.5]


def test_an_idle_engine_schedules_at_once(tmp_path: Path) -> None:
    rows = [(0.0, 8, 2), (5.5, 8, 2)]  # the second arrives after the first finished at 2
    for on in (False, True):
        assert schedule(tmp_path, rows, on=on)["first_token_s"].tolist() == [1.0, 6.5]


def test_a_request_whose_next_step_would_be_empty_is_not_held(tmp_path: Path) -> None:
    # request 0 finishes at the end of step 2-3 (3 tokens); request 1 arrives at 2.5: the step
    # planned for 3-4 would have had nothing to run, so none was launched without it
    rows = [(0.0, 8, 3), (2.5, 8, 2)]
    ahead = schedule(tmp_path, rows, on=True)
    assert ahead["finish_s"].tolist() == [3.0, 5.0]
    assert ahead["first_token_s"].tolist() == [1.0, 4.0]


def test_two_requests_in_one_step_both_wait_and_then_share_a_step(tmp_path: Path) -> None:
    rows = [(0.0, 8, 10), (2.2, 8, 3), (2.7, 8, 3), (3.5, 8, 3)]
    ahead = schedule(tmp_path, rows, on=True)
    # 1 and 2 reach it during 2-3: step 4-5; 3 during 3-4 (3-4 planned at 3): step 5-6
    assert ahead["first_token_s"].tolist() == [1.0, 5.0, 5.0, 6.0]


@pytest.mark.parametrize("frontend_s", [0.0, 0.37])
def test_pushed_and_pulled_arrivals_give_the_same_schedule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, frontend_s: float
) -> None:
    rows = [(0.0, 300, 12), (0.4, 80, 30), (1.3, 500, 5), (2.1, 40, 17), (9.0, 200, 9),
            (9.05, 120, 22), (20.0, 60, 3), (20.5, 60, 3)]  # fmt: skip
    pulled = schedule(tmp_path, rows, on=True, engine={"frontend_s": frontend_s})
    monkeypatch.setattr(SIMULATE, "pulls_arrivals", lambda cluster, reqs: False)
    pushed = schedule(tmp_path, rows, on=True, engine={"frontend_s": frontend_s})
    pd.testing.assert_frame_equal(pulled, pushed)
    monkeypatch.undo()
    assert not schedule(tmp_path, rows, on=False)["first_token_s"].equals(pulled["first_token_s"])


def test_coalesced_runs_give_the_same_schedule_as_single_steps(tmp_path: Path) -> None:
    rows = [(0.0, 8, 40), (2.5, 8, 30), (3.25, 16, 20), (7.75, 8, 5), (40.5, 8, 5)]
    one = schedule(tmp_path, rows, on=True)
    stepped = schedule(tmp_path, rows, on=True, engine={"coalesce_decode_steps": False})
    pd.testing.assert_frame_equal(one, stepped)


def test_a_cluster_router_counts_held_requests_as_queued(tmp_path: Path) -> None:
    # two instances under least outstanding requests: request 1 is held on instance 0 (busy
    # with request 0) and request 2, arriving in the same step, goes to instance 1 because the
    # router sees request 1 queued on instance 0
    rows = [(0.0, 8, 10), (1.0, 8, 10), (2.5, 8, 3), (2.6, 8, 3)]
    cluster = {"router": "least_outstanding_requests", "instances": [{"count": 2}]}
    out = schedule(tmp_path, rows, on=True, cluster=cluster)
    assert out["instance"].tolist() == [0, 1, 0, 1]
    # every request finishes: none is lost in the hold
    assert out["finish_s"].notna().all()



def test_a_request_at_the_very_instant_a_step_starts_came_after_its_launch(
    tmp_path: Path,
) -> None:
    # request 1 arrives at 3.0, when step 3-4 starts: a synchronous loop schedules it there
    # (first token at 4). An asynchronous engine launched 3-4 (planned at 2) and planned 4-5 at
    # 3, with the output of 2-3; what arrives at that instant, as a closed-loop client's next
    # request does, came after both: it joins 5-6 (first token at 6)
    rows = [(0.0, 8, 10), (3.0, 8, 3)]
    assert schedule(tmp_path, rows, on=False)["first_token_s"].tolist() == [1.0, 4.0]
    assert schedule(tmp_path, rows, on=True)["first_token_s"].tolist() == [1.0, 6.0]
