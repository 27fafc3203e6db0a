"""`workload.agents`: tasks as graphs of calls (sim/workload/agents.py), drawn and run.

A small task is pinned call by call: the prompts its contexts grow to, the waits, the graph's
edges, the arrival of each call after the calls it waits for (a turn after its tool call, a
subagent at once after the fork, the join after the slowest subagent), and the prompt tokens
each call finds in the prefix cache. Hypothesis then runs random task shapes and checks that no
call is lost, that every call arrives exactly its wait after the last call it waits for, and
that each call's cache hit is as long as its content matches what ran before it, in whole
blocks, and no longer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scenario_factory import UNIT, scenario

from sim import load_scenario_dict, simulate
from sim.errors import ScenarioError
from sim.metrics.tasks import tasks_table
from sim.workload.content import UNIT_TOKENS
from sim.workload.generate import generate_requests
from sim.workload.spec import WorkloadSpec

BLOCK = 16  # the KV block: one content unit, so a hit is a whole number of units


def fixed(n: int) -> dict[str, Any]:
    return {"dist": "fixed", "value": n}


def agent_type(**changes: Any) -> dict[str, Any]:
    """One task: a 32-token system prompt, a 16-token task, 3 turns of 4 output tokens, 8-token
    tool results after 0.5 s tool calls; every turn but the last forks 2 subagents of 2 turns
    (8-token instruction, 8-token tool results after 0.25 s, 8-token results)."""
    t: dict[str, Any] = {
        "name": "coder",
        "system_tokens": 32,
        "task_tokens": fixed(16),
        "turns": fixed(3),
        "tool_result_tokens": fixed(8),
        "output_tokens": fixed(4),
        "tool_time": {"dist": "fixed", "value_s": 0.5},
        "subagents": {
            "probability": 1.0,
            "count": fixed(2),
            "turns": fixed(2),
            "task_tokens": fixed(8),
            "tool_result_tokens": fixed(8),
            "output_tokens": fixed(4),
            "tool_time": {"dist": "fixed", "value_s": 0.25},
            "result_tokens": fixed(8),
        },
    }
    t.update(changes)
    return t


def agents(num_tasks: int = 1, **changes: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "arrival": {"process": "constant", "rate": 0.01},
        "num_tasks": num_tasks,
        "types": [agent_type()],
    }
    out.update(changes)
    return {"agents": out}


def drawn(workload: dict[str, Any]) -> Any:
    spec = WorkloadSpec.model_validate(workload)
    return generate_requests(spec, np.random.default_rng(1), Path())


def run(workload: dict[str, Any], **extra: Any) -> Any:
    raw = scenario(
        workload=workload,
        policy={"name": "continuous", "max_num_seqs": 64, "block_size": BLOCK,
                "prefix_caching": True},
        profile=UNIT,
        **extra,
    )  # fmt: skip
    return simulate(load_scenario_dict(raw))["default"]


def test_one_task_is_drawn_as_its_graph() -> None:
    r = drawn(agents())
    s = r.sessions
    # ids: the first turn (known up front), then subagents A and B, the join, C and D, the join
    assert r.prompt_tokens.tolist() == [48, 60, 72, 60, 72, 68, 80, 92, 80, 92, 88]
    assert r.output_tokens.tolist() == [4] * 11
    assert s.think_s.tolist() == [0, 0, 0.25, 0, 0.25, 0, 0, 0.25, 0, 0.25, 0]
    successors = [
        s.successors[s.successor_offsets[i] : s.successor_offsets[i + 1]].tolist()
        for i in range(11)
    ]
    assert successors == [[1, 3], [2], [5], [4], [5], [6, 8], [7], [10], [9], [10], []]
    assert s.needs.tolist() == [0, 1, 1, 1, 1, 2, 1, 1, 1, 1, 2]
    assert np.isnan(r.arrival_s[1:]).all() and r.arrival_s[0] == 0.0
    # a subagent's context starts with its parent's whole units up to the fork (52 tokens: 3)
    parent, sub_a, sub_b = r.content.of(0), r.content.of(1), r.content.of(3)
    assert (sub_a[:3] == parent[:3]).all() and (sub_b[:3] == parent[:3]).all()
    assert sub_a[3] != parent[3] and sub_a[3] != sub_b[3]
    # a later turn of a context views the same ids, further
    assert (r.content.of(2)[: len(sub_a)] == sub_a).all()
    assert (r.content.of(5)[:4] == r.content.of(0)[:4]).all()


def test_one_task_runs_as_its_graph() -> None:
    res = run(agents())
    req = res.requests.set_index("id").sort_index()
    arrival, finish = req["arrival_s"], req["finish_s"]
    # every step lasts 1 s: a call of 4 output tokens takes 4 steps from its arrival
    assert finish[0] == 4.0
    assert arrival[1] == arrival[3] == 4.0  # the subagents start as the fork's answer ends
    assert finish[1] == finish[3] == 8.0
    assert arrival[2] == arrival[4] == 8.25  # after their 0.25 s tool calls
    assert arrival[5] == max(finish[2], finish[4])  # the join after the slowest subagent
    assert arrival[10] == max(finish[7], finish[9])
    # cache hits: the whole 16-token blocks of what an earlier call left in the KV cache (its
    # prompt and answer but the last token, never fed back): A0's 63 tokens leave 3 blocks for
    # A1; the fork at 72 tokens shares 4 of the parent's, C0's 83 leave C1 5
    cached = req["num_cached_tokens"].tolist()
    assert cached == [0, 48, 48, 48, 48, 48, 64, 80, 64, 80, 64]
    task = tasks_table(res.requests).iloc[0]
    assert task["calls"] == 11 and task["start_s"] == 0.0 and task["end_s"] == finish.max()
    assert task["tool_s"] == pytest.approx(4 * 0.25)
    assert task["cached_tokens"] == sum(cached)


def test_tool_calls_wait_and_the_system_prompt_is_shared_across_tasks() -> None:
    no_forks = agent_type(subagents=None)
    res = run(agents(num_tasks=2, types=[no_forks],
                     arrival={"process": "constant", "rate": 0.01}))  # fmt: skip
    req = res.requests.set_index("id").sort_index()
    # ids 0 and 1 are the tasks' first turns; then task 0's turns 2 and 3, task 1's
    assert req["session"].tolist() == [0, 1, 0, 0, 1, 1]
    assert req.loc[2, "arrival_s"] == req.loc[0, "finish_s"] + 0.5
    assert req.loc[3, "arrival_s"] == req.loc[2, "finish_s"] + 0.5
    assert req.loc[2, "num_prompt_tokens"] == 48 + 4 + 8
    # the second task finds the type's 32-token system prompt cached, nothing of task 0's own
    assert req.loc[1, "num_cached_tokens"] == 32
    assert req.loc[2, "num_cached_tokens"] == 48  # its own first turn: 52 tokens, 3 blocks


def test_concurrent_agents_start_their_next_task_when_the_last_one_ends() -> None:
    no_forks = agent_type(subagents=None, turns=fixed(2))
    res = run({"agents": {"concurrency": 2, "num_tasks": 5, "types": [no_forks]}})
    req = res.requests
    tasks = tasks_table(req).set_index("task")
    assert len(tasks) == 5 and (req.groupby("session").size() == 2).all()
    assert tasks.loc[0, "start_s"] == tasks.loc[1, "start_s"] == 0.0
    for task in (2, 3, 4):  # agent task % 2 runs them back to back
        assert tasks.loc[task, "start_s"] == tasks.loc[task - 2, "end_s"]


@pytest.mark.parametrize(
    ("agents_section", "message"),
    [
        ({"num_tasks": 3, "types": [agent_type()]}, "either 'arrival'"),
        ({"concurrency": 2, "types": [agent_type()]}, "num_tasks"),
        ({"concurrency": 2, "num_tasks": 3, "arrival": {"process": "poisson", "rate": 1.0},
          "types": [agent_type()]}, "either 'arrival'"),
        ({"concurrency": 2, "num_tasks": 3, "types": [agent_type(), agent_type()]}, "unique"),
    ],
)
def test_bad_agents_sections_are_refused(agents_section: dict[str, Any], message: str) -> None:
    raw = scenario(workload={"agents": agents_section})
    with pytest.raises(ScenarioError, match=message):
        load_scenario_dict(raw)


def test_agents_do_not_mix_with_other_workload_kinds() -> None:
    workload = agents()
    workload["shared_prefix"] = {"num_prefixes": 1, "length": fixed(8)}
    with pytest.raises(ScenarioError, match="cannot be combined with shared_prefix"):
        load_scenario_dict(scenario(workload=workload))
    workload = {**agents(), "num_requests": 10}
    with pytest.raises(ScenarioError, match="not a request count"):
        load_scenario_dict(scenario(workload=workload))


lengths = st.integers(1, 40)


@st.composite
def task_shapes(draw: Any) -> dict[str, Any]:
    sub = None
    if draw(st.booleans()):
        sub = {
            "probability": draw(st.sampled_from([0.0, 0.5, 1.0])),
            "count": fixed(draw(st.integers(1, 3))),
            "turns": fixed(draw(st.integers(1, 3))),
            "task_tokens": fixed(draw(lengths)),
            "tool_result_tokens": fixed(draw(lengths)),
            "output_tokens": {"dist": "uniform", "low": 1, "high": draw(lengths)},
            "tool_time": {"dist": "exponential", "mean_s": 0.3},
            "result_tokens": fixed(draw(lengths)),
        }
    return {
        "name": "a",
        "system_tokens": draw(st.sampled_from([0, 5, 32, 40])),
        "task_tokens": {"dist": "uniform", "low": 1, "high": draw(lengths)},
        "turns": {"dist": "uniform", "low": 1, "high": draw(st.integers(1, 5))},
        "tool_result_tokens": {"dist": "uniform", "low": 1, "high": draw(lengths)},
        "output_tokens": {"dist": "uniform", "low": 1, "high": draw(lengths)},
        "tool_time": {"dist": "uniform", "low_s": 0.0, "high_s": 0.5},
        "subagents": sub,
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=task_shapes(), tasks=st.integers(1, 6), closed=st.booleans())
def test_random_tasks_lose_no_call_and_reuse_exactly_what_matches(
    shape: dict[str, Any], tasks: int, closed: bool
) -> None:
    section: dict[str, Any] = {"num_tasks": tasks, "types": [shape]}
    if closed:
        section["concurrency"] = 2
    else:
        section["arrival"] = {"process": "poisson", "rate": 5.0}
    workload = {"agents": section}
    r = drawn(workload)
    res = run(workload)
    req = res.requests.set_index("id").sort_index()
    assert len(req) == len(r.prompt_tokens)  # no call lost
    assert req["finish_s"].notna().all() and not req["rejected"].any()
    s = r.sessions
    arrival, finish = req["arrival_s"].to_numpy(), req["finish_s"].to_numpy()
    for i in range(len(req)):  # each call arrives its wait after the last call it waits for
        preds = [p for p in range(len(req)) if i in
                 s.successors[s.successor_offsets[p]:s.successor_offsets[p + 1]]]  # fmt: skip
        if preds:
            assert arrival[i] == max(finish[p] for p in preds) + s.think_s[i]
    # a hit is whole blocks, never the whole prompt, and no longer than the call's content
    # matches a call that arrived before it (KV is ample: nothing is evicted)
    cached = req["num_cached_tokens"].to_numpy()
    assert (cached % BLOCK == 0).all() and (cached < req["num_prompt_tokens"]).all()
    order = np.argsort(arrival, kind="stable")
    for k, i in enumerate(order):
        mine = r.content.of(i)
        best = 0
        for j in order[:k]:
            theirs = r.content.of(j)[: int(r.content.tokens[j]) // UNIT_TOKENS]
            n = min(len(mine), len(theirs))
            same = np.flatnonzero(mine[:n] != theirs[:n])
            best = max(best, int(same[0]) if len(same) else n)
        assert cached[i] <= best * UNIT_TOKENS
        # a call of its own task that ended before it arrived left its KV (all but its last
        # token) in the cache: as far as it matches, it is found
        preds = [p for p in order[:k] if finish[p] <= arrival[i]]
        for p in preds:
            if r.sessions.session[p] == r.sessions.session[i]:
                theirs = r.content.of(p)[: (int(r.content.tokens[p]) - 1) // UNIT_TOKENS]
                n = min(len(mine), len(theirs))
                same = np.flatnonzero(mine[:n] != theirs[:n])
                match = int(same[0]) if len(same) else n
                most = (int(req["num_prompt_tokens"][i]) - 1) // BLOCK * BLOCK
                assert cached[i] >= min(match * UNIT_TOKENS, most)
