"""The fuzz corpus: agents' tasks (`workload.agents`) and RL rollouts (`workload.rollouts`):
bad values of every key (the agent type's and its subagents' keys included), the combinations
each kind refuses, and workloads too big for any machine.

Each case names the scenario file and the key at fault (the `workload` or `workload.agents`
section for a combination), with the gist of the reason. A case that reads a missing or broken
length file names that file instead, as every empirical length does.
"""

from __future__ import annotations

import copy
from typing import Any

from fuzz_corpus import ALL, BAD, BASE, RUN, Case, dump, scenario_case

FIXED_1 = {"dist": "fixed", "value": 1}
HUGE_TOKENS = 2**31 - 1
UNIFORM = {"dist": "uniform", "low": 10, "high": 100}
SUBAGENTS: dict[str, Any] = {
    "probability": 0.5,
    "count": {"dist": "fixed", "value": 2},
    "turns": {"dist": "fixed", "value": 2},
    "task_tokens": {"dist": "fixed", "value": 10},
    "tool_result_tokens": {"dist": "fixed", "value": 10},
    "output_tokens": {"dist": "fixed", "value": 5},
    "tool_time": {"dist": "fixed", "value_s": 0.1},
    "result_tokens": {"dist": "fixed", "value": 8},
}
AGENT_TYPE: dict[str, Any] = {
    "name": "coder",
    "system_tokens": 64,
    "task_tokens": {"dist": "uniform", "low": 10, "high": 40},
    "turns": {"dist": "uniform", "low": 2, "high": 4},
    "tool_result_tokens": {"dist": "fixed", "value": 20},
    "output_tokens": {"dist": "uniform", "low": 1, "high": 20},
    "tool_time": {"dist": "fixed", "value_s": 0.5},
    "subagents": SUBAGENTS,
}
AGENTS_BASE = copy.deepcopy(BASE)
AGENTS_BASE["workload"] = {
    "agents": {
        "arrival": {"process": "poisson", "rate": 2.0},
        "num_tasks": 5,
        "types": [AGENT_TYPE],
    }
}
ROLLOUTS_BASE = copy.deepcopy(BASE)
ROLLOUTS_BASE["workload"] = {
    "rollouts": {
        "num_waves": 2,
        "groups_per_wave": 2,
        "group_size": 2,
        "system_tokens": 32,
        "prompt_tokens": {"dist": "uniform", "low": 10, "high": 50},
        "turns": {"dist": "uniform", "low": 1, "high": 3},
        "output_tokens": {"dist": "fixed", "value": 10},
        "observation_tokens": {"dist": "fixed", "value": 10},
        "env_time": {"dist": "fixed", "value_s": 0.2},
        "train_time": {"dist": "fixed", "value_s": 1.0},
    }
}
TYPE = "workload.agents.types.0"
SUB = f"{TYPE}.subagents"
ROLL = "workload.rollouts"

# key path -> which BAD values to try (each is reported at its own path)
AGENT_KEYS: dict[str, tuple[str, ...]] = {
    "workload.agents": ALL,
    "workload.agents.arrival": ALL,
    "workload.agents.arrival.rate": ALL,
    "workload.agents.concurrency": ALL,
    "workload.agents.num_tasks": ALL,
    "workload.agents.types": ALL,
    TYPE: ALL,
    f"{TYPE}.name": ("neg", "bool", "list", "map", "inf", "nan"),
    f"{TYPE}.weight": ALL,
    f"{TYPE}.system_tokens": ALL,
    f"{TYPE}.task_tokens": ALL,
    f"{TYPE}.task_tokens.low": ALL,
    f"{TYPE}.turns": ALL,
    f"{TYPE}.turns.high": ALL,
    f"{TYPE}.tool_result_tokens": ALL,
    f"{TYPE}.tool_result_tokens.value": ALL,
    f"{TYPE}.output_tokens": ALL,
    f"{TYPE}.output_tokens.high": ALL,
    f"{TYPE}.tool_time": ALL,
    f"{TYPE}.tool_time.value_s": ALL,
    SUB: ALL,
    **{f"{SUB}.{key}": ALL for key in SUBAGENTS},
    f"{SUB}.count.value": ALL,
    f"{SUB}.tool_time.value_s": ALL,
}
ROLLOUT_KEYS: dict[str, tuple[str, ...]] = {
    ROLL: ALL,
    **{f"{ROLL}.{key}": ALL for key in ROLLOUTS_BASE["workload"]["rollouts"]},
    f"{ROLL}.prompt_tokens.low": ALL,
    f"{ROLL}.turns.high": ALL,
    f"{ROLL}.output_tokens.value": ALL,
    f"{ROLL}.observation_tokens.value": ALL,
    f"{ROLL}.env_time.value_s": ALL,
    f"{ROLL}.train_time.value_s": ALL,
}


def _set(raw: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `raw` with the dotted `path` (a number indexes a list) set to `value`."""
    out = copy.deepcopy(raw)
    node: Any = out
    *parents, last = path.split(".")
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return out


def _agents(**changes: Any) -> dict[str, Any]:
    """AGENTS_BASE with `workload.agents` keys set (None: left out)."""
    out = copy.deepcopy(AGENTS_BASE)
    section = out["workload"]["agents"]
    for key, value in changes.items():
        section.pop(key, None)
        if value is not None:
            section[key] = value
    return out


def _workload(raw: dict[str, Any], **changes: Any) -> bytes:
    """`raw` with `workload` keys set, as a scenario file."""
    out = copy.deepcopy(raw)
    out["workload"].update(changes)
    return dump(out)


_LENGTHS = ("task_tokens", "tool_result_tokens", "output_tokens")


def _small_type(**changes: Any) -> dict[str, Any]:
    """An agent type of one-token lengths and no subagents (requests, not content ids, are
    what a count of its tasks makes big)."""
    t = {**AGENT_TYPE, "system_tokens": 0, **{k: FIXED_1 for k in _LENGTHS}, **changes}
    del t["subagents"]
    return t


def _fixed(value: int) -> dict[str, Any]:
    return {"dist": "fixed", "value": value}


def _with_system(tokens: int) -> dict[str, Any]:
    """The base agent type, without subagents, with a system prompt of `tokens`."""
    t = {**AGENT_TYPE, "system_tokens": tokens}
    del t["subagents"]
    return t


def _fan_out() -> dict[str, Any]:
    return {**SUBAGENTS, "probability": 1.0, "count": _fixed(1000), "turns": _fixed(1_000_000)}


_SESSIONS = {
    "arrival": {"process": "poisson", "rate": 1.0},
    "num_sessions": 2,
    "turns": {"dist": "fixed", "value": 2},
    "first_prompt": UNIFORM,
    "user_tokens": UNIFORM,
    "output_tokens": UNIFORM,
    "think_time": {"dist": "fixed", "value_s": 1.0},
}
# workload keys an agents or rollouts workload cannot take -> a value each
OTHER_KINDS: dict[str, Any] = {
    "sessions": _SESSIONS,
    "clients": {"num_clients": 2, "prompt_tokens": UNIFORM, "output_tokens": UNIFORM},
    "shared_prefix": {"num_prefixes": 2, "length": UNIFORM},
    "arrival": {"process": "poisson", "rate": 1.0},
    "prompt_tokens": UNIFORM,
    "output_tokens": UNIFORM,
    "mix": [{"name": "a", "weight": 1, "prompt_tokens": UNIFORM, "output_tokens": UNIFORM}],
}


def _table_cases() -> list[Case]:
    cases = [
        scenario_case(f"agents-{path}-{label}", dump(_set(AGENTS_BASE, path, BAD[label])), path)
        for path, labels in AGENT_KEYS.items()
        for label in labels
    ]
    cases += [
        scenario_case(f"rollouts-{path}-{label}", dump(_set(ROLLOUTS_BASE, path, BAD[label])), path)
        for path, labels in ROLLOUT_KEYS.items()
        for label in labels
    ]
    return cases


def _agent_value_cases() -> list[Case]:
    closed = _agents(arrival=None, concurrency=3)
    explicit: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
        "unknown-key": (
            _agents(concurency=3),
            ("workload.agents.concurency", "did you mean concurrency?"),
        ),
        "type-unknown-key": (
            _set(AGENTS_BASE, f"{TYPE}.turn", UNIFORM),
            (f"{TYPE}.turn", "did you mean turns?"),
        ),
        "subagents-unknown-key": (
            _set(AGENTS_BASE, f"{SUB}.probabilty", 0.1),
            (f"{SUB}.probabilty", "did you mean probability?"),
        ),
        "types-empty": (_agents(types=[]), ("workload.agents.types", "at least 1")),
        "types-missing": (_agents(types=None), ("workload.agents.types", "required")),
        "type-no-turns": (
            _agents(types=[{k: v for k, v in AGENT_TYPE.items() if k != "turns"}]),
            (f"{TYPE}.turns", "required"),
        ),
        "name-empty": (_set(AGENTS_BASE, f"{TYPE}.name", ""), (f"{TYPE}.name", "empty")),
        "weight-zero": (_set(AGENTS_BASE, f"{TYPE}.weight", 0), (f"{TYPE}.weight", "> 0")),
        "weight-too-big": (
            _set(AGENTS_BASE, f"{TYPE}.weight", 2e9),
            (f"{TYPE}.weight", "<= 1e+09"),
        ),
        "system-tokens-too-big": (
            _set(AGENTS_BASE, f"{TYPE}.system_tokens", 2**31),
            (f"{TYPE}.system_tokens", "<= 2147483647"),
        ),
        "turns-zero": (
            _set(AGENTS_BASE, f"{TYPE}.turns", {"dist": "fixed", "value": 0}),
            (f"{TYPE}.turns.value", ">= 1"),
        ),
        "turns-reversed": (
            _set(AGENTS_BASE, f"{TYPE}.turns", {"dist": "uniform", "low": 5, "high": 2}),
            (f"{TYPE}.turns", "low (5) must be <= high (2)"),
        ),
        "tool-time-negative": (
            _set(AGENTS_BASE, f"{TYPE}.tool_time", {"dist": "fixed", "value_s": -1}),
            (f"{TYPE}.tool_time.value_s", ">= 0"),
        ),
        "tool-time-reversed": (
            _set(AGENTS_BASE, f"{TYPE}.tool_time", {"dist": "uniform", "low_s": 2, "high_s": 1}),
            (f"{TYPE}.tool_time", "low_s"),
        ),
        "tool-time-unknown-dist": (
            _set(AGENTS_BASE, f"{TYPE}.tool_time", {"dist": "lognormal", "median": 1}),
            (f"{TYPE}.tool_time",),
        ),
        "probability-over-1": (
            _set(AGENTS_BASE, f"{SUB}.probability", 1.5),
            (f"{SUB}.probability", "<= 1"),
        ),
        "count-zero": (
            _set(AGENTS_BASE, f"{SUB}.count", {"dist": "fixed", "value": 0}),
            (f"{SUB}.count.value", ">= 1"),
        ),
        "subagent-turns-reversed": (
            _set(AGENTS_BASE, f"{SUB}.turns", {"dist": "uniform", "low": 3, "high": 1}),
            (f"{SUB}.turns", "low (3) must be <= high (1)"),
        ),
        "subagent-no-result": (
            _set(AGENTS_BASE, SUB, {k: v for k, v in SUBAGENTS.items() if k != "result_tokens"}),
            (SUB, "result_tokens"),
        ),
        "arrival-rate-zero": (
            _agents(arrival={"process": "poisson", "rate": 0}),
            ("workload.agents.arrival.rate", "> 0"),
        ),
        "concurrency-zero": (
            _agents(arrival=None, concurrency=0),
            ("workload.agents.concurrency", ">= 1"),
        ),
        "concurrency-too-big": (
            _agents(arrival=None, concurrency=1_000_001),
            ("workload.agents.concurrency", "<= 1000000"),
        ),
        "concurrency-str": (
            _set(closed, "workload.agents.concurrency", "many"),
            ("workload.agents.concurrency", "integer"),
        ),
        "num-tasks-zero": (_agents(num_tasks=0), ("workload.agents.num_tasks", ">= 1")),
        "num-tasks-too-big": (
            _agents(num_tasks=100_000_001),
            ("workload.agents.num_tasks", "<= 100000000"),
        ),
    }
    return [
        scenario_case(f"agents-{name}", dump(raw), *expect)
        for name, (raw, expect) in explicit.items()
    ]


def _agent_combination_cases() -> list[Case]:
    ramp_to_zero = {"shape": "ramp", "from_rate": 1.0, "to_rate": 0.0, "over_s": 5.0}
    closed = _agents(arrival=None, concurrency=3)
    explicit: dict[str, tuple[bytes, tuple[str, ...]]] = {
        f"with-{key}": (
            _workload(AGENTS_BASE, **{key: value}),
            ("workload", f"'agents' cannot be combined with {key}"),
        )
        for key, value in OTHER_KINDS.items()
    }
    explicit |= {
        "with-num-requests": (
            _workload(AGENTS_BASE, num_requests=10),
            ("workload", "'agents.num_tasks' tasks, not a request count"),
        ),
        "with-trace": (
            _workload(AGENTS_BASE, trace={"path": "t.csv"}),
            ("workload", "'trace' cannot be combined with agents"),
        ),
        "arrival-and-concurrency": (
            dump(_agents(concurrency=3)),
            ("workload.agents", "give either 'arrival'"),
        ),
        "neither-arrival-nor-concurrency": (
            dump(_agents(arrival=None)),
            ("workload.agents", "give either 'arrival'"),
        ),
        "concurrency-no-num-tasks": (
            dump(_agents(arrival=None, concurrency=3, num_tasks=None)),
            ("workload.agents", "'num_tasks'"),
        ),
        "concurrency-with-duration": (
            _workload(closed, duration_s=10),
            ("workload", "leave out 'duration_s'"),
        ),
        "arrival-no-count": (
            dump(_agents(num_tasks=None)),
            ("workload", "'agents.num_tasks' and/or 'duration_s'"),
        ),
        "profile-ends-no-duration": (
            dump(_agents(arrival={"process": "profile", "rate": ramp_to_zero})),
            ("workload.duration_s", "workload.agents.arrival falls to 0"),
        ),
        "duplicate-names": (
            dump(_agents(types=[AGENT_TYPE, {**AGENT_TYPE, "weight": 2}])),
            ("workload.agents", "names must be unique: coder"),
        ),
        "duplicate-names-closed": (
            dump(_agents(arrival=None, concurrency=2, types=[AGENT_TYPE] * 3)),
            ("workload.agents", "names must be unique: coder"),
        ),
    }
    return [
        scenario_case(f"agents-{name}", content, *expect)
        for name, (content, expect) in explicit.items()
    ]


def _agent_size_cases() -> list[Case]:
    closed = {"arrival": None, "concurrency": 1000}
    by_rate = _agents(
        arrival={"process": "poisson", "rate": 1e6}, num_tasks=None, types=[_small_type()]
    )
    explicit: dict[str, tuple[bytes, tuple[str, ...]]] = {
        # 10^8 tasks of 10^5 one-token turns: 10^13 requests
        "too-big-tasks": (
            dump(_agents(num_tasks=100_000_000, types=[_small_type(turns=_fixed(100_000))])),
            ("workload.agents.num_tasks", "memory", "lower agents.num_tasks"),
        ),
        "too-big-tasks-closed": (
            dump(
                _agents(**closed, num_tasks=100_000_000, types=[_small_type(turns=_fixed(100_000))])
            ),
            ("workload.agents.num_tasks", "memory"),
        ),
        # a million tasks of 2^31 turns: the turns, not the task count, make it big
        "too-big-turns": (
            dump(_agents(num_tasks=1_000_000, types=[_small_type(turns=_fixed(HUGE_TOKENS))])),
            ("workload.agents.types", "memory"),
        ),
        # about 10^15 tasks in 10^9 s at 10^6 a second
        "too-big-duration": (
            _workload(by_rate, duration_s=1e9),
            ("workload.duration_s", "memory"),
        ),
        # 10^8 tasks that each hold a 2^31-token system prompt: the content ids
        "too-big-system-prompt": (
            dump(_agents(num_tasks=100_000_000, types=[_with_system(HUGE_TOKENS)])),
            ("workload.agents.types", "content ids"),
        ),
        # a thousand subagents at each of a million turns, each of a million turns
        "too-big-subagents": (
            dump(_set(_set(AGENTS_BASE, f"{TYPE}.turns", _fixed(1_000_000)), SUB, _fan_out())),
            ("workload.agents.types", "memory"),
        ),
        # one task whose context is past what one context's ids can tell apart (2^28 tokens)
        "context-too-long": (
            dump(_agents(num_tasks=1, types=[_with_system(2**29)])),
            ("workload.agents.types", "context"),
        ),
        # every call is longer than the model's context
        "prompts-over-model": (
            dump(_set(AGENTS_BASE, f"{TYPE}.system_tokens", 1_000_000)),
            ("longer than max_model_len",),
        ),
    }
    cases = [
        scenario_case(f"agents-{name}", content, *expect)
        for name, (content, expect) in explicit.items()
    ]
    empirical = _set(
        AGENTS_BASE, f"{TYPE}.turns", {"dist": "empirical", "path": "t.csv", "column": "output"}
    )
    header = b"arrival_s,prompt_tokens,output_tokens\n"
    cases += [
        Case("agents-empirical-missing", RUN, ("t.csv", "not found"), {"s.yaml": dump(empirical)}),
        Case(
            "agents-empirical-bad-line",
            RUN,
            ("t.csv", "line 2"),
            {"s.yaml": dump(empirical), "t.csv": header + b"0,10,x\n"},
        ),
    ]
    return cases


def _rollout(**changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(ROLLOUTS_BASE)
    out["workload"]["rollouts"].update(changes)
    return out


def _rollout_cases() -> list[Case]:
    no_turns = copy.deepcopy(ROLLOUTS_BASE)
    del no_turns["workload"]["rollouts"]["turns"]
    tiny: dict[str, Any] = {"group_size": 100_000, "system_tokens": 0}
    tiny |= {k: FIXED_1 for k in ("prompt_tokens", "turns", "output_tokens", "observation_tokens")}
    explicit: dict[str, tuple[bytes, tuple[str, ...]]] = {
        f"with-{key}": (
            _workload(ROLLOUTS_BASE, **{key: value}),
            ("workload", f"'rollouts' cannot be combined with {key}"),
        )
        for key, value in OTHER_KINDS.items()
    }
    explicit |= {
        "with-num-requests": (
            _workload(ROLLOUTS_BASE, num_requests=10),
            ("workload", "'rollouts' cannot be combined with num_requests"),
        ),
        "with-duration": (
            _workload(ROLLOUTS_BASE, duration_s=10),
            ("workload", "'rollouts' cannot be combined with duration_s"),
        ),
        "with-agents": (
            _workload(ROLLOUTS_BASE, agents=AGENTS_BASE["workload"]["agents"]),
            ("workload", "'rollouts' cannot be combined with agents"),
        ),
        "with-trace": (
            _workload(ROLLOUTS_BASE, trace={"path": "t.csv"}),
            ("workload", "'trace' cannot be combined with rollouts"),
        ),
        "unknown-key": (
            dump(_rollout(waves=3)),
            (f"{ROLL}.waves", "did you mean num_waves?"),
        ),
        "no-turns": (dump(no_turns), (f"{ROLL}.turns", "required")),
        "num-waves-zero": (dump(_rollout(num_waves=0)), (f"{ROLL}.num_waves", ">= 1")),
        "num-waves-too-big": (
            dump(_rollout(num_waves=1_000_001)),
            (f"{ROLL}.num_waves", "<= 1000000"),
        ),
        "groups-per-wave-too-big": (
            dump(_rollout(groups_per_wave=1_000_001)),
            (f"{ROLL}.groups_per_wave", "<= 1000000"),
        ),
        "group-size-zero": (dump(_rollout(group_size=0)), (f"{ROLL}.group_size", ">= 1")),
        "group-size-too-big": (
            dump(_rollout(group_size=100_001)),
            (f"{ROLL}.group_size", "<= 100000"),
        ),
        "system-tokens-too-big": (
            dump(_rollout(system_tokens=2**31)),
            (f"{ROLL}.system_tokens", "<= 2147483647"),
        ),
        "turns-zero": (dump(_rollout(turns=_fixed(0))), (f"{ROLL}.turns.value", ">= 1")),
        "env-time-reversed": (
            dump(_rollout(env_time={"dist": "uniform", "low_s": 2, "high_s": 1})),
            (f"{ROLL}.env_time", "low_s"),
        ),
        "train-time-negative": (
            dump(_rollout(train_time={"dist": "fixed", "value_s": -1})),
            (f"{ROLL}.train_time.value_s", ">= 0"),
        ),
        # 10^17 trajectories of one-token turns
        "too-big": (
            dump(_rollout(num_waves=1_000_000, groups_per_wave=1_000_000, **tiny)),
            (f"{ROLL}.num_waves", "memory", "lower rollouts.num_waves"),
        ),
        # 2 x 10^6 trajectories of 2^31 turns: the turns, not the trajectories, make it big
        "too-big-turns": (
            dump(_rollout(groups_per_wave=1_000_000, turns=_fixed(HUGE_TOKENS))),
            (f"{ROLL}.turns", "memory"),
        ),
        # 2 x 10^6 trajectories that each hold a 2^31-token prefix: the content ids
        "too-big-system-prompt": (
            dump(_rollout(num_waves=1000, groups_per_wave=1000, system_tokens=HUGE_TOKENS)),
            (f"{ROLL}.num_waves", "content ids"),
        ),
        # one trajectory whose context is past what one context's ids can tell apart
        "context-too-long": (
            dump(_rollout(num_waves=1, groups_per_wave=1, group_size=1, system_tokens=2**29)),
            (ROLL, "context"),
        ),
    }
    return [
        scenario_case(f"rollouts-{name}", content, *expect)
        for name, (content, expect) in explicit.items()
    ]


def agent_cases() -> list[Case]:
    return [
        *_table_cases(),
        *_agent_value_cases(),
        *_agent_combination_cases(),
        *_agent_size_cases(),
        *_rollout_cases(),
    ]
