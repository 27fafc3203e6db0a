"""`workload.rollouts`: RL rollouts in waves (sim/workload/rollouts.py), drawn and run.

A small run is pinned: the prompts a trajectory's turns grow to, the content a group's
trajectories share (their prompt) and what groups share (the global prefix), each turn after
the environment's step, and each wave after the previous wave's slowest trajectory and the
training step. The wave metrics are checked on a table worked out by hand, and hypothesis runs
random shapes: no call lost, every trajectory its turns, no wave starting early.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scenario_factory import UNIT, scenario

from sim import load_scenario_dict, simulate
from sim.errors import ScenarioError
from sim.metrics.tasks import tasks_table, wave_summary
from sim.workload.generate import generate_requests
from sim.workload.spec import WorkloadSpec


def fixed(n: int) -> dict[str, Any]:
    return {"dist": "fixed", "value": n}


def rollouts(**changes: Any) -> dict[str, Any]:
    """2 waves of 2 groups of 2 trajectories: a 32-token global prefix, 32-token prompts, 2
    turns of 4 output tokens, 8-token observations after a 0.5 s environment step, 10 s of
    training between the waves."""
    out: dict[str, Any] = {
        "num_waves": 2,
        "groups_per_wave": 2,
        "group_size": 2,
        "system_tokens": 32,
        "prompt_tokens": fixed(32),
        "turns": fixed(2),
        "output_tokens": fixed(4),
        "observation_tokens": fixed(8),
        "env_time": {"dist": "fixed", "value_s": 0.5},
        "train_time": {"dist": "fixed", "value_s": 10.0},
    }
    out.update(changes)
    return {"rollouts": out}


def drawn(workload: dict[str, Any]) -> Any:
    spec = WorkloadSpec.model_validate(workload)
    return generate_requests(spec, np.random.default_rng(1), Path())


def run(workload: dict[str, Any]) -> Any:
    raw = scenario(
        workload=workload,
        policy={"name": "continuous", "max_num_seqs": 64, "block_size": 16,
                "prefix_caching": True},
        profile=UNIT,
    )  # fmt: skip
    return simulate(load_scenario_dict(raw))["default"]


def test_rollouts_are_drawn_as_groups_in_waves() -> None:
    r = drawn(rollouts())
    # the first wave's first turns first (known: at 0), then each trajectory's later turns
    assert r.arrival_s[:4].tolist() == [0.0] * 4 and np.isnan(r.arrival_s[4:]).all()
    assert r.prompt_tokens.tolist() == [64, 64, 64, 64, 76, 76, 76, 76, 64, 76, 64, 76, 64,
                                        76, 64, 76]  # fmt: skip
    assert r.sessions.session.tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 4, 4, 5, 5, 6, 6, 7, 7]
    assert r.sessions.wave.tolist() == [0] * 8 + [1] * 8
    # one gate after the first wave: every first-wave trajectory's last turn, then 10 s
    s = r.sessions
    gate = 16
    assert s.needs[gate] == 4 and s.think_s[gate] == 10.0
    assert sorted(s.successors[s.successor_offsets[gate] : s.successor_offsets[gate + 1]]) == [
        8, 10, 12, 14]
    # a group's trajectories share the prefix and their prompt (4 units); groups, the prefix
    c = r.content
    assert (c.of(0)[:4] == c.of(1)[:4]).all() and c.of(0)[4] != c.of(1)[4]
    assert (c.of(0)[:2] == c.of(2)[:2]).all() and c.of(0)[2] != c.of(2)[2]


def test_rollouts_run_wave_by_wave() -> None:
    res = run(rollouts())
    req = res.requests.set_index("id").sort_index()
    arrival, finish = req["arrival_s"], req["finish_s"]
    for first, later in ((0, 4), (1, 5), (2, 6), (3, 7)):  # after the environment's step
        assert arrival[later] == finish[first] + 0.5
    end_of_wave = finish[req["wave"] == 0].max()
    assert (arrival[[8, 10, 12, 14]] == end_of_wave + 10.0).all()
    # the first turns of a wave start in one step: none finds another's blocks computed; a
    # later turn finds its own context (the first turn's 67 tokens: 4 blocks); the next wave's
    # groups are new prompts: only the global prefix's 2 blocks are cached
    cached = req["num_cached_tokens"]
    assert cached[[0, 1, 2, 3]].tolist() == [0, 0, 0, 0]
    assert cached[[4, 5, 6, 7]].tolist() == [64] * 4
    assert cached[[8, 10, 12, 14]].tolist() == [32] * 4
    tasks = tasks_table(res.requests)
    assert tasks["wave"].tolist() == [0] * 4 + [1] * 4
    summary = res.summary()
    assert summary["num_waves"] == 2 and summary["num_tasks"] == 8


def test_wave_metrics_from_a_table_worked_by_hand() -> None:
    tasks = pd.DataFrame(
        {
            "wave": [0, 0, 0, 1, 1],
            "start_s": [0.0, 0.0, 0.0, 20.0, 20.0],
            "end_s": [4.0, 6.0, 12.0, 25.0, 25.0],
            "duration_s": [4.0, 6.0, 12.0, 5.0, 5.0],
        }
    )
    out = wave_summary(tasks)
    assert out["num_waves"] == 2
    assert out["wave_makespan_mean_s"] == pytest.approx((12.0 + 5.0) / 2)
    assert out["wave_makespan_max_s"] == 12.0
    assert out["wave_straggler_ratio_mean"] == pytest.approx((12.0 / 6.0 + 1.0) / 2)


def test_rollouts_refuse_a_request_count_or_duration() -> None:
    for key, value in (("num_requests", 10), ("duration_s", 5.0)):
        workload = {**rollouts(), key: value}
        with pytest.raises(ScenarioError, match="cannot be combined"):
            load_scenario_dict(scenario(workload=workload))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    waves=st.integers(1, 3),
    groups=st.integers(1, 3),
    size=st.integers(1, 4),
    turns=st.integers(1, 4),
    train=st.sampled_from([0.0, 0.25, 3.0]),
)
def test_random_rollouts_lose_no_call_and_keep_the_waves(
    waves: int, groups: int, size: int, turns: int, train: float
) -> None:
    workload = rollouts(
        num_waves=waves,
        groups_per_wave=groups,
        group_size=size,
        turns={"dist": "uniform", "low": 1, "high": turns},
        output_tokens={"dist": "uniform", "low": 1, "high": 30},
        observation_tokens={"dist": "uniform", "low": 1, "high": 30},
        env_time={"dist": "exponential", "mean_s": 0.2},
        train_time={"dist": "fixed", "value_s": train},
    )
    r = drawn(workload)
    res = run(workload)
    req = res.requests
    assert len(req) == len(r.prompt_tokens) and req["finish_s"].notna().all()
    trajectories = req.groupby("session").size()
    assert len(trajectories) == waves * groups * size
    assert (np.bincount(r.sessions.session) == trajectories.sort_index().to_numpy()).all()
    for wave in range(1, waves):
        before = req.loc[req["wave"] == wave - 1, "finish_s"].max()
        assert req.loc[req["wave"] == wave, "arrival_s"].min() == before + train
