"""Sizes and numbers are checked before anything is built: the memory of every workload kind is
estimated from its spec (and checked again from real counts where a file decides them), integers
from trace files are bounded before they become int64, engine knobs have ranges, and step costs
that are physically impossible are refused."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel, ValidationError
from scenario_factory import scenario

from sim import ScenarioError, load_scenario_dict, simulate
from sim.cli.run_report import rejection_check
from sim.core.plan import StepFeatures
from sim.costs.knobs import PricingSpec
from sim.costs.profile import Profile
from sim.costs.table_model import TableCostModel
from sim.workload import budget, generate_requests
from sim.workload.budget import expected_content_units, expected_requests, memory_problem
from sim.workload.mooncake import read_mooncake
from sim.workload.spec import WorkloadSpec
from sim.workload.traces import read_trace

GIB = 2**30
UNIFORM = {"dist": "uniform", "low": 10, "high": 100}
POISSON = {"process": "poisson", "rate": 2.0}


@pytest.fixture
def machine_16gib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(budget, "physical_memory_bytes", lambda: 16 * GIB)


def sessions(**changes: Any) -> dict[str, Any]:
    spec = {
        "arrival": POISSON,
        "num_sessions": 4,
        "turns": {"dist": "fixed", "value": 3},
        "first_prompt": UNIFORM,
        "user_tokens": UNIFORM,
        "output_tokens": UNIFORM,
        "think_time": {"dist": "fixed", "value_s": 1.0},
    }
    return {**spec, **changes}


SYSTEM_PROMPT_2_31 = {"num_prefixes": 1, "length": {"dist": "fixed", "value": 2**31 - 1}}
CLIENTS = {"num_clients": 4, "prompt_tokens": UNIFORM, "output_tokens": UNIFORM}
FIXED_8 = {"dist": "fixed", "value": 8}
NO_WAIT = {"dist": "fixed", "value_s": 0.0}
AGENT = {"name": "a", "system_tokens": 0, "task_tokens": FIXED_8, "turns": FIXED_8,
         "tool_result_tokens": FIXED_8, "output_tokens": FIXED_8, "tool_time": NO_WAIT}


def agents(**changes: Any) -> dict[str, Any]:
    return {"arrival": POISSON, "num_tasks": 100, "types": [AGENT], **changes}


def rollouts(**changes: Any) -> dict[str, Any]:
    return {"num_waves": 2, "groups_per_wave": 4, "group_size": 4, "prompt_tokens": FIXED_8,
            "turns": FIXED_8, "output_tokens": FIXED_8, "observation_tokens": FIXED_8,
            **changes}  # fmt: skip
SYNTHETIC = {"arrival": POISSON, "prompt_tokens": UNIFORM, "output_tokens": UNIFORM}
MIX = [{"name": "a", "weight": 1.0, "prompt_tokens": UNIFORM, "output_tokens": UNIFORM}]

# Per workload kind (each field of WorkloadSpec holding a model: a generator or a part of one),
# a workload of that kind too big for a 16 GiB machine (and the key blamed), and a small one.
# A kind added to WorkloadSpec without a row here fails the walk below: add its estimate to
# sim.workload.budget and its row here.
HUGE: dict[str, tuple[dict[str, Any], str, dict[str, Any]]] = {
    "arrival": (
        {"num_requests": 10**9, **SYNTHETIC}, "workload.num_requests",
        {"num_requests": 100, **SYNTHETIC},
    ),
    "prompt_tokens": (
        {"duration_s": 1e9, **SYNTHETIC}, "workload.duration_s",
        {"duration_s": 10.0, **SYNTHETIC},
    ),
    "output_tokens": (
        {"num_requests": 10**9, "duration_s": 1e9, **SYNTHETIC}, "workload.num_requests",
        {"num_requests": 10**9, "duration_s": 10.0, **SYNTHETIC},
    ),
    "mix": (
        {"num_requests": 10**9, "arrival": POISSON, "mix": MIX}, "workload.num_requests",
        {"num_requests": 100, "arrival": POISSON, "mix": MIX},
    ),
    # the issue's cases: 10^8 sessions, 2^31 turns, a 2^31-token system prompt
    "sessions": (
        {"sessions": sessions(num_sessions=10**8)}, "workload.sessions.num_sessions",
        {"sessions": sessions(num_sessions=1000)},
    ),
    "shared_prefix": (
        {"num_requests": 100, **SYNTHETIC, "shared_prefix": SYSTEM_PROMPT_2_31},
        "workload.shared_prefix.length",
        {"num_requests": 100, **SYNTHETIC,
         "shared_prefix": {**SYSTEM_PROMPT_2_31, "length": UNIFORM}},
    ),
    "clients": (
        {"clients": {**CLIENTS, "requests_per_client": 10**8}},
        "workload.clients.requests_per_client",
        {"clients": {**CLIENTS, "requests_per_client": 10}},
    ),
    "agents": (
        {"agents": agents(num_tasks=10**8)}, "workload.agents.num_tasks",
        {"agents": agents()},
    ),
    "rollouts": (
        {"rollouts": rollouts(num_waves=10**6, groups_per_wave=100, group_size=100)},
        "workload.rollouts.num_waves",
        {"rollouts": rollouts()},
    ),
    # traces are bounded by their file: the spec has no size, the file's counts are checked
    # where they are built (test_a_trace_whose_prompts_make_too_many_content_ids...)
    "trace": ({"trace": {"path": "t.csv"}}, "", {"trace": {"path": "t.csv"}}),
}  # fmt: skip
EXTRA_HUGE: list[tuple[dict[str, Any], str]] = [
    ({"sessions": sessions(num_sessions=10, turns={"dist": "fixed", "value": 2**31 - 1})},
     "workload.sessions.turns"),
    ({"duration_s": 1e9, "sessions": {**sessions(), "num_sessions": None}},
     "workload.duration_s"),
    ({"sessions": sessions(num_sessions=10), "shared_prefix": SYSTEM_PROMPT_2_31},
     "workload.shared_prefix.length"),
    ({"num_requests": 100, "clients": CLIENTS, "shared_prefix": SYSTEM_PROMPT_2_31},
     "workload.shared_prefix.length"),
    ({"num_requests": 100, "arrival": POISSON, "mix": MIX, "shared_prefix": SYSTEM_PROMPT_2_31},
     "workload.shared_prefix.length"),
    ({"agents": agents(types=[{**AGENT, "system_tokens": 2**31 - 1}])}, "workload.agents.types"),
    ({"agents": agents(types=[{**AGENT, "turns": {"dist": "fixed", "value": 10**7}}])},
     "workload.agents.types"),
    ({"rollouts": rollouts(system_tokens=2**31 - 1)}, "workload.rollouts.num_waves"),
]  # fmt: skip


def test_agent_and_rollout_estimates_are_exact_on_fixed_lengths() -> None:
    spec = WorkloadSpec.model_validate({"agents": agents()})
    assert expected_requests(spec) == (800.0, "workload.agents.num_tasks")  # 100 tasks x 8
    # one context a task: 8 task tokens + 8 answers of 8 + 7 tool results of 8 = 128 tokens
    # (8 units) and a unit more per call for its partial last unit
    assert expected_content_units(spec) == (100 * (128 / 16 + 8), "workload.agents.types")
    spec = WorkloadSpec.model_validate({"rollouts": rollouts()})
    assert expected_requests(spec) == (2 * 4 * 4 * 8, "workload.rollouts.num_waves")


def _model_fields(model: type[BaseModel]) -> set[str]:
    """Fields of `model` that hold a model (or a list or union of them)."""
    out = set()
    for name, info in model.model_fields.items():
        stack = [info.annotation]
        while stack:
            tp = stack.pop()
            if isinstance(tp, type) and issubclass(tp, BaseModel):
                out.add(name)
            stack.extend(typing.get_args(tp))
    return out


def test_every_workload_kind_has_its_memory_estimated(machine_16gib: None) -> None:
    kinds = _model_fields(WorkloadSpec)
    assert kinds == set(HUGE), "a workload kind without a memory estimate: see HUGE"
    for kind, (huge, key, small) in HUGE.items():
        big, fine = WorkloadSpec.model_validate(huge), WorkloadSpec.model_validate(small)
        if kind == "trace":
            assert expected_requests(big) is None and expected_content_units(big) is None
            continue
        problem = memory_problem([big])
        assert problem is not None and problem[0] == key, kind
        assert "16.0 GiB" in problem[1], kind
        assert memory_problem([fine]) is None, kind
    for huge_spec, key in EXTRA_HUGE:
        problem = memory_problem([WorkloadSpec.model_validate(huge_spec)])
        assert problem is not None and problem[0] == key, huge_spec


def test_session_and_prefix_estimates_are_exact_on_fixed_lengths() -> None:
    fixed = {"dist": "fixed", "value": 32}
    spec = WorkloadSpec.model_validate(
        {"sessions": sessions(num_sessions=10, turns={"dist": "fixed", "value": 3},
                              first_prompt=fixed, user_tokens=fixed, output_tokens=fixed)}
    )  # fmt: skip
    assert expected_requests(spec) == (30.0, "workload.sessions.num_sessions")
    # turn k holds 32 + 64 k prompt tokens and its 32-token answer: 64, 128, 192 tokens
    units = expected_content_units(spec)
    assert units is not None and units[0] == pytest.approx(10 * ((64 + 128 + 192) / 16 + 3))
    arrays = generate_requests(spec, np.random.default_rng(0), Path("."))
    assert arrays.content is not None
    assert len(arrays.content.ids) == 10 * (64 + 128 + 192) // 16
    prefixed = WorkloadSpec.model_validate(
        {"num_requests": 50, "arrival": POISSON, "prompt_tokens": fixed,
         "output_tokens": fixed, "shared_prefix": {"num_prefixes": 1, "length": fixed}}
    )  # fmt: skip
    assert expected_content_units(prefixed) == (50 * (64 / 16 + 1), "workload.shared_prefix.length")


def test_the_guard_refuses_the_issue_cases_at_load(machine_16gib: None) -> None:
    for workload, key in (
        ({"sessions": sessions(num_sessions=10**8)}, "workload.sessions.num_sessions"),
        ({"sessions": sessions(num_sessions=10, turns={"dist": "fixed", "value": 2**31 - 1})},
         "workload.sessions.turns"),
        ({"num_requests": 10, **SYNTHETIC, "shared_prefix": SYSTEM_PROMPT_2_31},
         "workload.shared_prefix.length"),
    ):  # fmt: skip
        raw = scenario(name="big", seed=0, workload=workload, profile=None)
        with pytest.raises(ScenarioError) as info:
            load_scenario_dict(raw)
        assert info.value.path == key
        assert "memory" in info.value.reason


def test_a_trace_whose_prompts_make_too_many_content_ids_is_refused_before_building_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "t.csv").write_text(
        "arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i},160000,1\n" for i in range(4))
    )
    spec = WorkloadSpec.model_validate({"trace": {"path": "t.csv", "prefix_tokens": 16}})
    # 4 prompts of 160,000 tokens: 40,000 ids, 1.6 MB to build
    monkeypatch.setattr(budget, "physical_memory_bytes", lambda: 1_000_000)
    with pytest.raises(ScenarioError) as info:
        generate_requests(spec, np.random.default_rng(0), tmp_path)
    assert info.value.path == "workload" and "40000 content ids" in info.value.reason
    monkeypatch.setattr(budget, "physical_memory_bytes", lambda: 2_000_000)
    arrays = generate_requests(spec, np.random.default_rng(0), tmp_path)
    assert arrays.content is not None and len(arrays.content.ids) == 40_000


def test_session_turns_drawn_from_a_file_are_checked_once_drawn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,100000,1\n")
    turns = {"dist": "empirical", "path": "t.csv", "column": "prompt"}
    spec = WorkloadSpec.model_validate({"sessions": sessions(num_sessions=100, turns=turns)})
    # the spec's estimate counts an empirical length as 1: 100 requests fit in 1 MB
    monkeypatch.setattr(budget, "physical_memory_bytes", lambda: 1_000_000)
    assert memory_problem([spec]) is None
    with pytest.raises(ScenarioError) as info:  # 10^7 turns, drawn: refused before the loop
        generate_requests(spec, np.random.default_rng(0), tmp_path)
    assert info.value.path == "workload.sessions.turns"
    assert "10000000 requests" in info.value.reason


# --- integers from trace files ------------------------------------------------------------


def _mooncake(tmp_path: Path, **row: Any) -> Path:
    line = {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2], **row}
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(line) + "\n")
    return path


@pytest.mark.parametrize(
    ("row", "gist"),
    [
        ({"output_length": 10**30}, "output_length 100000000000...(31 characters) is above"),
        ({"output_length": 1e30}, "output_length 1e+30 is above 2147483647"),
        ({"input_length": 2**31}, "input_length 2147483648 is above 2147483647"),
        ({"hash_ids": [1, 2**70]}, "hash id 1180591620717411303424 is outside 0..2^63-1"),
        ({"hash_ids": [-1, 2]}, "hash id -1 is outside"),
        ({"timestamp": 10**30}, "timestamp 100000000000...(31 characters) is not a finite"),
    ],
)
def test_mooncake_integers_are_bounded_before_int64(
    tmp_path: Path, row: dict[str, Any], gist: str
) -> None:
    with pytest.raises(ScenarioError) as info:
        read_mooncake(_mooncake(tmp_path, **row))
    assert info.value.path == "line 1" and gist in info.value.reason


def test_mooncake_limits_themselves_are_accepted(tmp_path: Path) -> None:
    # the largest output length and hash id and the latest timestamp (a prompt at the length
    # limit would need its 4 million block ids written out: the output's bound is the same rule)
    limit = 2**31 - 1
    path = _mooncake(tmp_path, output_length=limit, hash_ids=[0, 2**63 - 1], timestamp=1e15)
    data = read_mooncake(path)
    assert data.output_tokens.tolist() == [limit] and int(data.hash_ids.max()) == 2**63 - 1


def test_csv_token_counts_are_bounded(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,2147483647,1\n1,10,2147483648\n")
    with pytest.raises(ScenarioError) as info:
        read_trace(path, "csv")
    assert info.value.path == "line 3"
    assert info.value.reason == "output_tokens '2147483648' is above 2147483647"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,2147483647,1\n1e300,10,1\n")
    with pytest.raises(ScenarioError) as info:
        read_trace(path, "csv")
    assert info.value.path == "line 3" and "unparsable arrival_s" in info.value.reason


# --- engine knobs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pricing", "key"),
    [
        ({"cuda_graph_capture_sizes": [8, 10**9]}, "cuda_graph_capture_sizes"),
        ({"pad_tokens_to": 65_537}, "pad_tokens_to"),
        ({"cpu_overhead": {"per_step_s": 1e308}}, "per_step_s"),
        ({"cpu_overhead": {"per_seq_s": 1.5}}, "per_seq_s"),
    ],
)
def test_engine_knobs_have_ranges(pricing: dict[str, Any], key: str) -> None:
    with pytest.raises(ValidationError) as info:
        PricingSpec.model_validate(pricing)
    assert key in str(info.value)


def test_engine_knob_limits_are_accepted() -> None:
    spec = PricingSpec.model_validate(
        {"cuda_graph_capture_sizes": [1, 65_536], "pad_tokens_to": 65_536,
         "cpu_overhead": {"per_step_s": 10.0, "per_seq_s": 1.0}}
    )  # fmt: skip
    assert spec.capture_sizes() == (1, 65_536)


# --- physically impossible step costs ---------------------------------------------------------

COEFFS = {"t_mem_s": 0.01, "t_flop_s_per_token": 1e-5}


def decode(b: int, ctx: int) -> StepFeatures:
    """b decodes, each with ctx cached tokens before the step (as tests/test_table_profile)."""
    return StepFeatures(b, b, 0, b, b * (ctx + 1), 0, 0, b, 0, ())


def _profile(**changes: Any) -> dict[str, Any]:
    table = {
        "linear": {"tokens": [0, 1, 512], "seconds": [0.0, 0.01, 0.02]},
        "decode_attention": {"batch": [1, 8], "context": [0, 1024],
                             "seconds": [[1e-5, 2e-5], [2e-5, 4e-5]]},
    }  # fmt: skip
    profile = {"schema_version": 1, "name": "t", "source": "inline", "model_form": "table",
               "coefficients": COEFFS, "table": table}  # fmt: skip
    for key, value in changes.items():
        node: Any = profile
        *parents, last = key.split(".")
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[int(last) if isinstance(node, list) else last] = value
    return profile


def test_a_table_profile_with_negative_or_zero_step_cells_is_refused() -> None:
    Profile.model_validate(_profile())  # a 0 at 0 tokens is no step: allowed
    # an attention time measured as a step's time minus a fitted linear part may be a little
    # negative: the step at that grid point still takes time (0.02 s - 0.005 s)
    Profile.model_validate(_profile(**{"table.decode_attention.seconds.1.1": -0.005}))
    for key, value, gist in (
        ("table.decode_attention.seconds.1.1", -0.99,
         "the cell at batch 8, context 1024 is -0.99 s, so a step there would take"),
        ("table.decode_attention.seconds.0.0", float("inf"), "finite"),
        ("table.linear.seconds.1", 0.0, "0 at 1 tokens"),
        ("table.linear.seconds.2", -1.0, ">= 0"),
    ):
        with pytest.raises(ValidationError) as info:
            Profile.model_validate(_profile(**{key: value}))
        assert gist in str(info.value), key


def test_a_table_step_priced_at_no_time_between_grid_points_is_refused() -> None:
    # linear dips to 0.1 ms at 4 tokens between 10 ms at 1 and 8: the grid points of the
    # decode table (-5 ms) pass the load check, batch 4 would be priced at -4.9 ms
    profile = Profile.model_validate(_profile(**{
        "table.linear": {"tokens": [1, 4, 8], "seconds": [0.01, 1e-4, 0.01]},
        "table.decode_attention.seconds": [[-0.005, -0.005], [-0.005, -0.005]],
    }))  # fmt: skip
    model = TableCostModel(profile)
    assert model.price(decode(8, 100), 8, 8)[0] == pytest.approx(0.005)
    with pytest.raises(ScenarioError) as info:
        model.price(decode(4, 100), 4, 4)
    assert info.value.path == "profile.table" and "a step must take time" in info.value.reason


@pytest.mark.parametrize(
    ("form", "coefficients", "accepted"),
    [
        ("extended", {"t_mem_s": 0.0, "t_flop_s_per_token": 0.0, "t_kv_s_per_token": 1e-8}, False),
        ("extended", {"t_mem_s": 0.0, "t_flop_s_per_token": 1e-5}, True),
        ("seed", {"t_mem_s": 0.01, "t_flop_s_per_token": 0.0}, True),
        ("split", {"t_mem_s": 0.0, "t_flop_s_per_token": 1e-5, "t_decode_s_per_token": 0.0},
         False),
        ("split", {"t_mem_s": 0.0, "t_flop_s_per_token": 0.0, "t_decode_s_per_token": 0.0,
                   "t_seq_s_per_seq": 1e-6}, True),
        ("two_regime", {"t_mem_s": 0.0, "t_flop_s_per_token": 0.0, "ridge_tokens": 64,
                        "t_flop_high_s_per_token": 1e-5}, False),
    ],
)  # fmt: skip
def test_every_priced_step_takes_time(
    form: str, coefficients: dict[str, float], accepted: bool
) -> None:
    raw = {"schema_version": 1, "name": "t", "source": "inline", "model_form": form,
           "coefficients": coefficients}  # fmt: skip
    if accepted:
        Profile.model_validate(raw)
        return
    with pytest.raises(ValidationError) as info:
        Profile.model_validate(raw)
    assert "takes no time" in str(info.value)


# --- a run with nothing left ----------------------------------------------------------------


def test_long_prompts_drop_that_drops_everything_is_refused(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,5000,1\n1,4096,1\n")
    raw = scenario(
        name="drop",
        seed=0,
        workload={"trace": {"path": str(tmp_path / "t.csv"), "long_prompts": "drop"}},
        profile=None,
    )
    for tables in (True, False):
        results = simulate(load_scenario_dict(raw), tables=tables)
        with pytest.raises(ScenarioError) as info:
            rejection_check(results, "s.yaml")
        assert info.value.path == "workload.trace.long_prompts"
        assert "dropped every one of its 2 requests" in info.value.reason
        assert "max_model_len 4096" in info.value.reason
    raw["workload"]["trace"]["long_prompts"] = "clip"
    assert rejection_check(simulate(load_scenario_dict(raw)), "s.yaml") == []


def test_variants_that_replay_one_workload_are_counted_once(machine_16gib: None) -> None:
    """A streamed run keeps one set of requests per distinct (seed, workload): 60 million
    requests fit in 16 GiB once (about 6 GB), not three times with three seeds."""
    spec = WorkloadSpec.model_validate(
        {"num_requests": 60_000_000, "arrival": POISSON, "prompt_tokens": UNIFORM,
         "output_tokens": UNIFORM}
    )  # fmt: skip
    assert memory_problem([spec]) is None
    assert memory_problem([spec] * 3, seeds=[7, 7, 7]) is None
    problem = memory_problem([spec] * 3, seeds=[7, 8, 9])
    assert problem is not None and "3 variants" in problem[1]
    assert memory_problem([spec] * 3) is not None  # without seeds: every variant counts
    # tables are each variant's own, whatever the workload
    assert memory_problem([spec] * 3, seeds=[7, 7, 7], tables=True) is not None
