"""Agents' traces (sim/workload/weka_trace.py, sim/workload/agent_traces.py) and their writers
(sim/io/agent_export.py).

Small files are read into exact arrays: the calls, their waits, the graph's edges and gates, and
which calls share which content. A tiny weka trace runs: its join waits for the slowest
subagent, and `num_clients` lanes start a trace when the one before it in the lane has ended.
Drawn agents' tasks and rollouts are written and read back as the same calls, waits, edges
within each task, and the same pattern of shared prompt blocks (hypothesis draws the agents'
task shapes). Broken files are refused through the CLI with exit code 2, naming file and line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fuzz_corpus import Case, Sparse
from fuzz_corpus_agent_traces import agent_trace_cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scenario_factory import UNIT, scenario

from sim import load_scenario_dict, simulate
from sim.cli.main import main
from sim.io.agent_export import to_rollouts, to_weka
from sim.workload.generate import generate_requests
from sim.workload.spec import WorkloadSpec


def fixed(n: int) -> dict[str, Any]:
    return {"dist": "fixed", "value": n}


def call(prompt: int, out: int, ids: list[int], think: float | None = None, **extra: Any) -> Any:
    record = {"t": 0.0, "type": "n", "in": prompt, "out": out, "hash_ids": ids, **extra}
    if think is not None:
        record["think_time"] = think
    return record


def subagent(*calls: Any, kind: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"t": 0.0, "type": "subagent", "requests": list(calls)}
    if kind is not None:
        out["subagent_type"] = kind
    return out


# Trace "a": a parent call, a fan-out of two subagents (Explore: two calls; an untyped one), the
# join; trace "b": two parent calls. Hash id 1 is each trace's own.
TRACE_A = {
    "id": "a", "block_size": 64, "hash_id_scope": "local",
    "requests": [
        call(100, 4, [1, 2]),
        subagent(call(70, 3, [1, 5], 0.0), call(140, 2, [1, 5, 6], 0.5), kind="Explore"),
        subagent(call(64, 8, [1])),
        call(200, 0, [1, 2, 3, 4], 0.25),
    ],
}  # fmt: skip
TRACE_B = {"id": "b", "block_size": 64, "requests": [call(10, 4, [1]), call(20, 4, [1], 1.0)]}


def read(path: Path, fmt: str, **trace: Any) -> Any:
    spec = WorkloadSpec.model_validate({"trace": {"path": str(path), "format": fmt, **trace}})
    return generate_requests(spec, np.random.default_rng(1), Path())


def write_lines(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def successors(r: Any) -> list[list[int]]:
    s = r.sessions
    return [
        s.successors[s.successor_offsets[i] : s.successor_offsets[i + 1]].tolist()
        for i in range(len(s.needs))
    ]


def contents(r: Any) -> list[list[int]]:
    return [r.content.of(i).tolist() for i in range(len(r.prompt_tokens))]


def test_a_weka_file_is_read_as_its_graph(tmp_path: Path) -> None:
    r = read(write_lines(tmp_path / "t.jsonl", [TRACE_A, TRACE_B]), "weka")
    # ids: the traces' first calls (known at 0), then the rest in file order
    assert r.arrival_s[:2].tolist() == [0.0, 0.0] and np.isnan(r.arrival_s[2:]).all()
    assert r.source_id.tolist() == ["a/0", "b/0", "a/1/0", "a/1/1", "a/2/0", "a/3", "b/1"]
    assert r.prompt_tokens.tolist() == [100, 10, 70, 140, 64, 200, 20]
    assert r.output_tokens.tolist() == [4, 4, 3, 2, 8, 1, 4]  # a zero answer: one token
    assert r.class_names == ("agent", "Explore", "subagent")
    assert r.class_index.tolist() == [0, 0, 1, 1, 2, 0, 0]
    s = r.sessions
    assert s.session.tolist() == [0, 1, 0, 0, 0, 0, 1]
    assert s.think_s.tolist() == [0.0, 0.0, 0.0, 0.5, 0.0, 0.25, 1.0]
    # the fork to both subagents, their chains, the join after both (and nothing else)
    assert successors(r) == [[2, 4], [6], [3], [5], [5], [], []]
    assert s.needs.tolist() == [0, 0, 1, 1, 1, 2, 1]
    assert s.wave is None
    # one id per 64-token block; trace a's ids 1..6 are 0..5, trace b's 1 is its own (6)
    assert contents(r) == [[0, 1], [6], [0, 4], [0, 4, 5], [0], [0, 1, 2, 3], [6]]
    assert r.content.unit == 64 and r.content.tokens.tolist() == [100, 10, 70, 140, 64, 200, 20]


def test_json_files_folders_and_jsonl_read_alike(tmp_path: Path) -> None:
    lines = read(write_lines(tmp_path / "t.jsonl", [TRACE_A, TRACE_B]), "weka")
    (tmp_path / "both.json").write_text(json.dumps([TRACE_A, TRACE_B], indent=2))
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "1.json").write_text(json.dumps(TRACE_A))
    (folder / "2.json").write_text(json.dumps(TRACE_B))
    (folder / "notes.txt").write_text("not a trace")
    for r in (read(tmp_path / "both.json", "weka"), read(folder, "weka")):
        assert r.prompt_tokens.tolist() == lines.prompt_tokens.tolist()
        assert successors(r) == successors(lines) and contents(r) == contents(lines)
    first = read(folder, "weka", max_rows=1)
    assert first.prompt_tokens.tolist() == [100, 70, 140, 64, 200]


def test_global_ids_are_shared_and_ids_past_the_prompt_dropped(tmp_path: Path) -> None:
    shared = [
        {"id": "a", "block_size": 16, "hash_id_scope": "global",
         "requests": [call(20, 1, [7, 8, 9, 10])]},  # 2 blocks of 16: ids 9, 10 dropped
        {"id": "b", "block_size": 16, "hash_id_scope": "global", "requests": [call(33, 1, [7])]},
    ]  # fmt: skip
    r = read(write_lines(tmp_path / "g.jsonl", shared), "weka")
    assert contents(r) == [[7, 8], [7]]
    assert r.content.tokens.tolist() == [20, 16]  # b's one id covers 16 of its 33 tokens


def test_leading_and_background_subagents(tmp_path: Path) -> None:
    trace = {
        "id": "x", "block_size": 64,
        "requests": [subagent(call(5, 1, [])), call(6, 1, [], 2.0), subagent(call(7, 1, [], 3.0))],
    }  # fmt: skip
    r = read(write_lines(tmp_path / "t.jsonl", [trace]), "weka")
    # the leading subagent starts the task (its wait is not waited), the parent call joins it,
    # the last subagent runs after it with nothing waiting for it; no ids: no content
    assert r.prompt_tokens.tolist() == [5, 6, 7]
    assert successors(r) == [[1], [2], []]
    assert r.sessions.think_s.tolist() == [0.0, 2.0, 3.0]
    assert r.content is None


def test_num_clients_lanes_start_a_trace_when_the_one_before_ended(tmp_path: Path) -> None:
    traces = [
        {**TRACE_B, "id": "b0"},
        {**TRACE_B, "id": "b1"},
        {"id": "c", "block_size": 64, "requests": [call(30, 2, [1]), subagent(call(40, 2, [2]))]},
        {**TRACE_B, "id": "b3"},
    ]
    r = read(write_lines(tmp_path / "t.jsonl", traces), "weka", num_clients=2)
    assert r.arrival_s[:2].tolist() == [0.0, 0.0] and np.isnan(r.arrival_s[2:]).all()
    assert r.source_id.tolist() == ["b0/0", "b1/0", "b0/1", "b1/1", "c/0", "c/1/0", "b3/0",
                                    "b3/1"]  # fmt: skip
    # lane 0: gate 8 opens when trace 0 ended and starts trace 2; lane 1: gate 9 opens when
    # trace 1 ended and starts trace 3; nothing waits for trace 2's background subagent
    assert successors(r) == [[2], [3], [8], [9], [5], [], [7], [], [4], [6]]
    assert r.sessions.needs.tolist() == [0, 0, 1, 1, 1, 1, 1, 1, 1, 1]


def run(workload: dict[str, Any], base: Path) -> Any:
    raw = scenario(
        workload=workload,
        policy={"name": "continuous", "max_num_seqs": 64, "block_size": 16,
                "prefix_caching": True},
        profile=UNIT,
    )  # fmt: skip
    return simulate(load_scenario_dict(raw, base_dir=base))["default"]


def test_a_run_joins_after_the_slowest_subagent(tmp_path: Path) -> None:
    trace = {
        "id": "j", "block_size": 64,
        "requests": [
            call(100, 4, [1, 2]),
            subagent(call(110, 2, [1, 3])),  # A: 2 s
            subagent(call(120, 3, [1, 4]), call(130, 3, [1, 4, 5], 0.5)),  # B: 3 s, 0.5, 3 s
            call(150, 2, [1, 2, 6], 0.25),
            subagent(call(160, 1, [1, 7], 1.0)),  # in the background
        ],
    }  # fmt: skip
    (tmp_path / "j.jsonl").write_text(json.dumps(trace) + "\n")
    res = run({"trace": {"path": "j.jsonl", "format": "weka"}}, tmp_path)
    req = res.requests.set_index("id").sort_index()
    arrival, finish = req["arrival_s"], req["finish_s"]
    # every step lasts 1 s: a call of k output tokens ends k s after it arrives
    assert (arrival.tolist(), finish.tolist()) == (
        [0.0, 4.0, 4.0, 7.5, 10.75, 13.75],
        [4.0, 6.0, 7.0, 10.5, 12.75, 14.75],
    )
    assert arrival[4] == max(finish[1], finish[3]) + 0.25  # after B, the slowest
    assert req["agent"].tolist() == ["agent", "subagent", "subagent", "subagent", "agent",
                                     "subagent"]  # fmt: skip
    assert req["session"].tolist() == [0] * 6


def test_lanes_run_one_trace_after_the_other(tmp_path: Path) -> None:
    one = {"block_size": 64, "requests": [call(20, 3, [1]), subagent(call(30, 5, [2]))]}
    traces = [{**one, "id": str(i)} for i in range(3)]
    write_lines(tmp_path / "l.jsonl", traces)
    res = run({"trace": {"path": "l.jsonl", "format": "weka", "num_clients": 2}}, tmp_path)
    req = res.requests.set_index("id").sort_index()
    by_task = req.groupby("session")
    # trace 2 starts when trace 0's background subagent (its last call) has ended
    assert by_task["arrival_s"].min().tolist() == [0.0, 0.0, 8.0]
    assert by_task["finish_s"].max().tolist() == [8.0, 8.0, 16.0]


ROLLOUTS = [
    {"group": 1, "stream": 1, "prompt_len": 999, "out_lens": [5, 6], "obs_lens": [7],
     "tool_times": [0.5], "reward": 1.0},
    {"group": 0, "stream": 0, "prompt_len": 40, "out_lens": [3, 4, 0], "obs_lens": [10, 20, 30],
     "tool_times": [1.0, 2.0]},
    {"group": 1, "prompt_len": 32, "out_lens": [2], "obs_lens": []},
]  # fmt: skip


def test_a_rollout_file_is_read_as_its_graph(tmp_path: Path) -> None:
    r = read(write_lines(tmp_path / "r.jsonl", ROLLOUTS), "rollouts")
    # groups and streams sorted; every first turn at 0, first
    assert r.source_id.tolist() == ["0/0/0", "1/0/0", "1/1/0", "0/0/1", "0/0/2", "1/1/1"]
    assert r.arrival_s[:3].tolist() == [0.0] * 3 and np.isnan(r.arrival_s[3:]).all()
    # turn k: the group's prompt (its first stream's) and the answers and observations before
    assert r.prompt_tokens.tolist() == [40, 32, 32, 40 + 3 + 10, 53 + 4 + 20, 32 + 5 + 7]
    assert r.output_tokens.tolist() == [3, 2, 5, 4, 1, 6]
    s = r.sessions
    assert s.session.tolist() == [0, 1, 2, 0, 0, 2]
    assert s.think_s.tolist() == [0.0, 0.0, 0.0, 1.0, 2.0, 0.5]
    assert successors(r) == [[3], [], [5], [4], [], []]
    assert r.class_names == ("rollout",)
    # group 1's streams share its prompt's 2 whole units and nothing more; a later turn views
    # its stream's ids further
    ids = contents(r)
    assert ids[1][:2] == ids[2][:2] and ids[1][2] != ids[2][2]
    assert not set(ids[0]) & set(ids[1])
    assert ids[5][: len(ids[2])] == ids[2] and ids[4][: len(ids[3])] == ids[3]


def test_rollout_groups_run_n_at_a_time(tmp_path: Path) -> None:
    r = read(write_lines(tmp_path / "r.jsonl", ROLLOUTS), "rollouts", num_clients=1)
    assert r.source_id.tolist() == ["0/0/0", "0/0/1", "0/0/2", "1/0/0", "1/1/0", "1/1/1"]
    assert r.arrival_s[0] == 0.0 and np.isnan(r.arrival_s[1:]).all()
    # gate 6: group 0's last call ended -> group 1's first turns
    assert successors(r) == [[1], [2], [6], [], [5], [], [3, 4]]
    assert r.sessions.think_s.tolist() == [0.0, 1.0, 2.0, 0.0, 0.0, 0.5, 0.0]
    assert read(tmp_path / "r.jsonl", "rollouts", max_rows=1).source_id.tolist() == [
        "0/0/0", "0/0/1", "0/0/2"]  # fmt: skip


# --- round trips ------------------------------------------------------------------------------


def drawn(workload: dict[str, Any]) -> Any:
    spec = WorkloadSpec.model_validate(workload)
    return generate_requests(spec, np.random.default_rng(3), Path())


def predecessors(r: Any) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in range(len(r.sessions.needs))]
    for a, succ in enumerate(successors(r)):
        for b in succ:
            out[b].append(a)
    return out


def tasks(r: Any, unit_blocks: int | None) -> list[list[tuple[Any, ...]]]:
    """Per task, per call in id order: prompt, answer, wait, the task's calls it waits for (by
    position), and each prompt block's label in order of first use in the task (blocks of
    `unit_blocks` units, the content's ids: None: the call's own ids)."""
    s, preds = r.sessions, predecessors(r)
    out = []
    for task in np.unique(s.session):
        ids = np.flatnonzero(s.session == task).tolist()
        where = {c: k for k, c in enumerate(ids)}
        labels: dict[Any, int] = {}
        rows = []
        for c in ids:
            mine = r.content.of(c).tolist()
            if unit_blocks is None:
                keys: list[Any] = mine
            else:
                units = -(-int(r.prompt_tokens[c]) // r.content.unit)
                count = -(-units // unit_blocks)
                keys = [tuple(mine[: min((b + 1) * unit_blocks, units)]) for b in range(count)]
            waits_for = sorted(where[p] for p in preds[c] if p in where)
            rows.append((int(r.prompt_tokens[c]), int(r.output_tokens[c]),
                         float(r.sessions.think_s[c]), waits_for,
                         [labels.setdefault(k, len(labels)) for k in keys]))  # fmt: skip
        out.append(rows)
    return out


def agent_type(**changes: Any) -> dict[str, Any]:
    t: dict[str, Any] = {
        "name": "coder", "system_tokens": 40, "task_tokens": {"dist": "uniform", "low": 1,
                                                              "high": 90},
        "turns": {"dist": "uniform", "low": 1, "high": 4}, "tool_result_tokens": fixed(70),
        "output_tokens": {"dist": "uniform", "low": 1, "high": 30},
        "tool_time": {"dist": "exponential", "mean_s": 0.5},
        "subagents": {
            "probability": 0.7, "count": {"dist": "uniform", "low": 1, "high": 3},
            "turns": {"dist": "uniform", "low": 1, "high": 3}, "task_tokens": fixed(20),
            "tool_result_tokens": fixed(30), "output_tokens": fixed(9),
            "tool_time": {"dist": "fixed", "value_s": 0.25}, "result_tokens": fixed(15),
        },
    }  # fmt: skip
    t.update(changes)
    return t


def round_trip_weka(r: Any, tmp_path: Path, **trace: Any) -> tuple[Any, list[str]]:
    text, notes = to_weka(r)
    (tmp_path / "w.jsonl").write_text(text)
    return read(tmp_path / "w.jsonl", "weka", **trace), notes


def test_agents_round_trip_through_weka(tmp_path: Path) -> None:
    r = drawn({"agents": {"arrival": {"process": "poisson", "rate": 1.0}, "num_tasks": 6,
                          "types": [agent_type()]}})  # fmt: skip
    back, notes = round_trip_weka(r, tmp_path)
    assert back.sessions.wave is None and len(back) == len(r)
    assert tasks(back, 1) == tasks(r, 4)  # 64-token blocks: 4 units of 16, 1 id of 64
    assert np.unique(r.class_index[r.sessions.session == 0]).tolist() == [0]
    assert any("start times" in n for n in notes) and any("shared across" in n for n in notes)
    first = json.loads((tmp_path / "w.jsonl").read_text().splitlines()[0])
    assert first["block_size"] == 64 and first["hash_id_scope"] == "local"
    kinds = {rec["type"] for line in (tmp_path / "w.jsonl").read_text().splitlines()
             for rec in json.loads(line)["requests"]}  # fmt: skip
    assert kinds == {"n", "subagent"}


def test_concurrent_agents_round_trip_with_num_clients(tmp_path: Path) -> None:
    r = drawn({"agents": {"concurrency": 2, "num_tasks": 5, "types": [agent_type()]}})
    back, notes = round_trip_weka(r, tmp_path, num_clients=2)
    assert tasks(back, 1) == tasks(r, 4)
    assert any("trace.num_clients: 2" in n for n in notes)
    # task t + 2 starts after task t's last call: a direct edge drawn, a gate read back
    drawn_preds, read_preds = predecessors(r), predecessors(back)
    for t in range(3):
        first = int(np.flatnonzero(r.sessions.session == t + 2)[0])
        last = int(np.flatnonzero(r.sessions.session == t)[-1])
        assert drawn_preds[first] == [last]
        first_back = int(np.flatnonzero(back.sessions.session == t + 2)[0])
        (gate,) = read_preds[first_back]
        assert gate >= len(back)
        assert [int(back.sessions.session[c]) for c in read_preds[gate]] == [t]


shapes = st.fixed_dictionaries({
    "system_tokens": st.sampled_from([0, 16, 40]),
    "turns": st.integers(1, 4),
    "probability": st.sampled_from([0.0, 0.5, 1.0]),
    "count": st.integers(1, 3),
    "sub_turns": st.integers(1, 3),
    "output": st.integers(1, 70),
})  # fmt: skip


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=shapes)
def test_random_agents_round_trip_through_weka(shape: dict[str, Any], tmp_path: Path) -> None:
    t = agent_type(
        system_tokens=shape["system_tokens"],
        turns={"dist": "uniform", "low": 1, "high": shape["turns"]},
        output_tokens={"dist": "uniform", "low": 1, "high": shape["output"]},
    )
    t["subagents"].update(
        probability=shape["probability"],
        count=fixed(shape["count"]),
        turns={"dist": "uniform", "low": 1, "high": shape["sub_turns"]},
    )
    r = drawn({"agents": {"arrival": {"process": "poisson", "rate": 2.0}, "num_tasks": 3,
                          "types": [t]}})  # fmt: skip
    back, _ = round_trip_weka(r, tmp_path)
    assert tasks(back, 1) == tasks(r, 4)
    again, _ = round_trip_weka(back, tmp_path)  # a weka trace read back writes the same file
    assert tasks(again, 1) == tasks(back, 1)


def rollouts(**changes: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "num_waves": 2, "groups_per_wave": 2, "group_size": 3, "system_tokens": 32,
        "prompt_tokens": {"dist": "uniform", "low": 20, "high": 90},
        "turns": {"dist": "uniform", "low": 1, "high": 4},
        "output_tokens": {"dist": "uniform", "low": 0 + 1, "high": 40},
        "observation_tokens": {"dist": "uniform", "low": 1, "high": 50},
        "env_time": {"dist": "exponential", "mean_s": 0.5},
        "train_time": {"dist": "fixed", "value_s": 10.0},
    }  # fmt: skip
    out.update(changes)
    return {"rollouts": out}


def test_rollouts_round_trip_through_their_trace(tmp_path: Path) -> None:
    r = drawn(rollouts())
    text, notes = to_rollouts(r)
    rows = [json.loads(line) for line in text.splitlines()]
    assert [(row["group"], row["stream"]) for row in rows] == [(g, s) for g in range(4)
                                                               for s in range(3)]  # fmt: skip
    assert all(len(row["obs_lens"]) == len(row["out_lens"]) == len(row["tool_times"])
               for row in rows)  # fmt: skip
    assert any("trace.num_clients: 2" in n for n in notes)
    (tmp_path / "r.jsonl").write_text(text)
    back = read(tmp_path / "r.jsonl", "rollouts", num_clients=2)
    assert len(back) == len(r)
    # calls, waits and edges within each trajectory; every first turn waits for nothing of
    # its own trajectory (a wave's gate drawn, a lane's gate read back)
    assert [[row[:4] for row in task] for task in tasks(back, None)] == [
        [row[:4] for row in task] for task in tasks(r, None)]  # fmt: skip
    # the content each group's trajectories share (units of 16 tokens), group by group
    for g in range(4):
        mine = [c for c in range(len(r)) if r.sessions.session[c] // 3 == g]
        theirs = [c for c in range(len(back)) if back.sessions.session[c] // 3 == g]
        assert pattern(r, mine) == pattern(back, theirs)


def pattern(r: Any, calls: list[int]) -> list[list[int]]:
    """The calls' content ids as labels in order of first use, calls in (task, id) order."""
    labels: dict[int, int] = {}
    order = sorted(calls, key=lambda c: (int(r.sessions.session[c]), c))
    return [[labels.setdefault(i, len(labels)) for i in r.content.of(c).tolist()] for c in order]


# --- the CLI ----------------------------------------------------------------------------------


def test_export_writes_agents_as_weka_and_rollouts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    agents = {"agents": {"concurrency": 2, "num_tasks": 3, "types": [agent_type()]}}
    Path("a.yaml").write_text(json.dumps(scenario(workload=agents)))
    Path("r.yaml").write_text(json.dumps(scenario(workload=rollouts())))
    assert main(["export", "a.yaml", "--format", "weka", "--out", "w.jsonl"]) == 0
    assert main(["export", "r.yaml", "--format", "rollouts", "--out", "r.jsonl"]) == 0
    err = capsys.readouterr().err
    assert "note: " in err and "trace.num_clients: 2" in err
    assert len(Path("w.jsonl").read_text().splitlines()) == 3
    assert len(Path("r.jsonl").read_text().splitlines()) == 12
    # written again over its own file; csv still refuses agents' tasks
    assert main(["export", "a.yaml", "--format", "weka", "--out", "w.jsonl", "-q"]) == 0
    assert main(["export", "a.yaml", "--format", "csv", "--out", "w.csv"]) == 2
    assert "--format weka or rollouts" in capsys.readouterr().err


FILE_CASES = [c for c in agent_trace_cases() if c.id.startswith(("weka-", "rollout-trace-"))]


@pytest.mark.parametrize("case", FILE_CASES, ids=lambda c: c.id)
def test_broken_traces_are_refused_naming_file_and_line(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, content in case.files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is None:
            path.mkdir(exist_ok=True)
        elif isinstance(content, Sparse):
            with path.open("wb") as handle:
                handle.write(content.head)
                handle.truncate(content.size)
        else:
            path.write_bytes(content)
    monkeypatch.chdir(tmp_path)
    assert main(list(case.argv)) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("batchsim: error: ") and "Traceback" not in line
    assert "Error:" not in line.replace("error:", "")
    for expected in case.expect:  # the file, the line (or trace) and the reason
        assert expected in line, line
