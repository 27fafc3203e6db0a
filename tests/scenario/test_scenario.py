"""Scenario loading: strict validation with file, key path and reason; variants; overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from scenario_factory import continuous, poisson, scenario, uniform

from sim import ScenarioError, load_scenario, load_scenario_dict, simulate
from sim.scenario.load import merge

BASE: dict[str, Any] = scenario(
    name="s",
    seed=3,
    workload=poisson(50, 2.0, uniform(10, 100), uniform(1, 50)),
    policy=continuous(max_num_seqs=16),
    profile=None,
)


def write(tmp_path: Path, raw: dict[str, Any]) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def error_of(tmp_path: Path, raw: dict[str, Any], overrides: tuple[str, ...] = ()) -> str:
    path = write(tmp_path, raw)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path, overrides)
    message = info.value.message()
    assert message.startswith(str(path)), message
    return message


def test_defaults_are_filled_and_the_roofline_profile_resolves() -> None:
    scenario = load_scenario_dict(BASE)
    (variant,) = scenario.variants
    assert variant.variant == "default"
    assert variant.spec.policy.name == "continuous"
    assert variant.spec.policy.block_size == 16  # type: ignore[union-attr]
    assert variant.profile.source == "roofline"
    assert variant.spec.hardware.gpu_memory_utilization == 0.9


@pytest.mark.parametrize(
    "edit, expected",
    [
        ({"policy": {"name": "continuous", "max_num_sqs": 4}}, "policy.max_num_sqs: unknown key"),
        (
            {"policy": {"name": "continuous", "max_num_seqs": 0}},
            "policy.max_num_seqs: must be > 0 (got 0)",
        ),
        (
            {"policy": {"name": "dynamic"}},
            "policy: unknown name 'dynamic'; one of static, continuous, chunked",
        ),
        ({"policy": {"max_num_seqs": 4}}, "policy: missing `name`; one of static, continuous"),
        ({"model": "llama-9"}, "unknown model 'llama-9'"),
        ({"seed": "abc"}, "seed: "),
        ({"slo": {"ttft_s": -1}}, "slo.ttft_s: must be > 0 (got -1)"),
        ({"bogus": 1}, "bogus: unknown key"),
        ({"model": "llama-3-70b"}, "model: "),
        ({"profile": "missing.yaml"}, "profile file not found"),
        ({"profile": "."}, "is a folder; expected a profile file"),
        ({"profile": {"coefficients": {"t_mem_s": -1, "t_flop_s_per_token": 0}}}, "t_mem_s"),
    ],
)
def test_bad_input_names_file_key_and_reason(
    tmp_path: Path, edit: dict[str, Any], expected: str
) -> None:
    assert expected in error_of(tmp_path, {**BASE, **edit})


def test_missing_section_is_reported() -> None:
    raw = {k: v for k, v in BASE.items() if k != "workload"}
    with pytest.raises(ScenarioError, match="workload: required key is missing"):
        load_scenario_dict(raw)


def test_not_yaml_and_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(ScenarioError, match=r"bad.yaml:2:1: expected ',' or '\]'"):
        load_scenario(path)
    path.write_text("- a list\n")
    with pytest.raises(ScenarioError, match="must be a YAML mapping"):
        load_scenario(path)


def test_set_overrides_any_field_and_rejects_bad_paths(tmp_path: Path) -> None:
    path = write(tmp_path, BASE)
    scenario = load_scenario(path, ["policy.max_num_seqs=4", "workload.arrival.rate=0.5"])
    spec = scenario.variants[0].spec
    assert spec.policy.max_num_seqs == 4  # type: ignore[union-attr]
    assert spec.workload.arrival.rate == 0.5  # type: ignore[union-attr]
    with pytest.raises(ScenarioError, match=r"expected KEY\.PATH=VALUE"):
        load_scenario(path, ["policy.max_num_seqs"])
    with pytest.raises(ScenarioError, match="seed is not a mapping"):
        load_scenario(path, ["seed.x=1"])
    assert "policy.max_num_seqs: must be an integer (got 'many')" in error_of(
        tmp_path, BASE, ("policy.max_num_seqs=many",)
    )


def test_variants_merge_and_a_new_policy_name_replaces_the_mapping() -> None:
    raw = {
        **BASE,
        "variants": {
            "small": {"policy": {"max_num_seqs": 2}},
            "static": {"policy": {"name": "static", "max_batch_size": 4}},
        },
    }
    scenario = load_scenario_dict(raw)
    small, static = scenario.variants
    assert small.spec.policy.max_num_seqs == 2  # type: ignore[union-attr]
    assert small.spec.policy.name == "continuous"
    assert static.spec.policy.name == "static"
    assert static.spec.policy.max_batch_size == 4  # type: ignore[union-attr]


def test_variant_errors_point_into_the_variant(tmp_path: Path) -> None:
    raw = {**BASE, "variants": {"v": {"policy": {"max_num_seqs": -3}}}}
    assert "variants.v.policy.max_num_seqs: must be > 0 (got -3)" in error_of(tmp_path, raw)
    raw = {**BASE, "variants": {"v": {"policy": {"name": "static", "max_num_seqs": 3}}}}
    assert "variants.v.policy.max_num_seqs: unknown key" in error_of(tmp_path, raw)


def test_variants_run_on_the_same_requests() -> None:
    raw = {**BASE, "variants": {"a": {}, "b": {"policy": {"mode": "mixed"}}}}
    results = simulate(load_scenario_dict(raw))
    a, b = results["a"].requests, results["b"].requests
    for column in ("arrival_s", "num_prompt_tokens", "max_output_tokens"):
        assert a[column].tolist() == b[column].tolist()
    assert set(results.summary().index) == {"a", "b"}
    assert set(results.requests["variant"]) == {"a", "b"}


def test_merge_rule() -> None:
    base = {"p": {"name": "x", "a": 1, "b": {"c": 2}}, "k": 1}
    assert merge(base, {"p": {"b": {"d": 3}}}) == {
        "p": {"name": "x", "a": 1, "b": {"c": 2, "d": 3}},
        "k": 1,
    }
    assert merge(base, {"p": {"name": "y"}}) == {"p": {"name": "y"}, "k": 1}
    assert base["p"]["b"] == {"c": 2}  # inputs are not mutated


def test_relative_trace_paths_resolve_against_the_scenario_folder(tmp_path: Path) -> None:
    (tmp_path / "trace.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,5,2\n1,5,2\n")
    raw = {**BASE, "workload": {"trace": {"path": "trace.csv", "format": "csv"}}}
    sub = tmp_path / "elsewhere"
    sub.mkdir()
    path = write(tmp_path, raw)
    results = simulate(path)
    assert len(results["default"].requests) == 2


def test_trace_errors_carry_the_trace_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "trace.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,5,2\n1,-5,2\n")
    raw = {**BASE, "workload": {"trace": {"path": "trace.csv", "format": "csv"}}}
    with pytest.raises(ScenarioError, match=r"trace.csv: line 3"):
        simulate(write(tmp_path, raw))
