"""YAML means what the user typed: keys are the text typed, and a plain value is a boolean, a
number or null only where YAML 1.1 and 1.2 agree (sim/inputs/strict_yaml.py); the schema then
reads the strings as the type its field wants."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from sim import ScenarioError, load_scenario
from sim.inputs.strict_yaml import load_yaml

SCENARIO = """\
name: {name}
seed: 1
workload:
  num_requests: {num_requests}
  arrival: {{process: poisson, rate: 5.0}}
  prompt_tokens: {{dist: uniform, low: 10, high: 100}}
  output_tokens: {{dist: uniform, low: 1, high: 20}}
model: llama-2-7b
hardware: a100-80g
policy: {{name: continuous, max_num_seqs: 8, prefix_caching: {caching}}}
metrics: {{warmup_s: {warmup}}}
variants:
  on: {{}}
  off: {{policy: {{prefix_caching: {off_caching}}}}}
  yes: {{}}
  1: {{}}
  ~: {{}}
"""


def scenario_file(tmp_path: Path, **fields: str) -> Path:
    values = {
        "name": "on",
        "num_requests": "010",
        "caching": "yes",
        "off_caching": "off",
        "warmup": "0.5",
        **fields,
    }
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(**values))
    return path


def test_variant_names_and_string_values_stay_as_typed(tmp_path: Path) -> None:
    loaded = load_scenario(scenario_file(tmp_path))
    assert [v.variant for v in loaded.variants] == ["on", "off", "yes", "1", "~"]
    by_name = {v.variant: v for v in loaded.variants}
    assert loaded.name == "on"  # a value where a string is expected stays the string
    # where a boolean is expected, YAML 1.1's words still mean one
    assert by_name["on"].spec.policy.prefix_caching is True
    assert by_name["off"].spec.policy.prefix_caching is False
    # 010 is ten, as typed (YAML 1.1 read it as the octal 8)
    assert by_name["on"].spec.workload.num_requests == 10


def test_underscored_numbers_are_numbers_where_a_number_is_expected(tmp_path: Path) -> None:
    loaded = load_scenario(scenario_file(tmp_path, num_requests="1_000"))
    assert loaded.variants[0].spec.workload.num_requests == 1000


def test_sexagesimal_is_refused_where_a_number_is_expected(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario(scenario_file(tmp_path, warmup="1:30"))
    message = info.value.message()
    assert "metrics.warmup_s" in message and "'1:30'" in message, message


def test_a_yaml_word_where_a_number_is_expected_is_quoted_back(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario(scenario_file(tmp_path, num_requests="on"))
    message = info.value.message()
    assert "workload.num_requests" in message and "'on'" in message, message


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("yes", "yes"),
        ("No", "No"),
        ("ON", "ON"),
        ("off", "off"),
        ("010", "010"),
        ("1_000", "1_000"),
        ("1:30", "1:30"),
        ("1:30.5", "1:30.5"),
        ("1e3", "1e3"),
        ("0b11", "0b11"),
        ("0o17", "0o17"),
        ("2024-01-01", "2024-01-01"),
        ("=", "="),
        ("~", None),
        ("null", None),
        ("", None),
        ("true", True),
        ("FALSE", False),
        ("0", 0),
        ("-12", -12),
        ("+7", 7),
        ("0x1F", 31),
        ("1.5", 1.5),
        ("2.0e-3", 0.002),
        (".5", 0.5),
        ("-.inf", -math.inf),
        ("'on'", "on"),
        ("!!bool yes", True),  # an explicit tag is what the user typed too
    ],
)
def test_plain_values(text: str, value: object) -> None:
    got = load_yaml(f"a: {text}\n", "f.yaml")["a"]
    assert got == value and type(got) is type(value)


def test_nan_is_still_a_float() -> None:
    assert math.isnan(load_yaml("a: .nan", "f.yaml")["a"])


@pytest.mark.parametrize(
    ("text", "key"),
    [("on", "on"), ("Off", "Off"), ("yes", "yes"), ("no", "no"), ("1", "1"), ("010", "010"),
     ("1_000", "1_000"), ("1:30", "1:30"), ("~", "~"), ("null", "null"), ("true", "true"),
     ("1.5", "1.5"), ("'x'", "x")],
)  # fmt: skip
def test_a_plain_key_is_the_text_typed(text: str, key: str) -> None:
    assert load_yaml(f"{text}: 1\n", "f.yaml") == {key: 1}


@pytest.mark.parametrize(
    ("text", "where", "kind"),
    [
        ("a: 1\n!!int 5: x\n", "f.yaml:2:1", "a value tagged !!int (drop the tag)"),
        ("a: 1\n!!null '': x\n", "f.yaml:2:1", "a value tagged !!null (drop the tag)"),
        ("a: 1\n[1, 2]: x\n", "f.yaml:2:1", "a list"),
        ("a:\n  ? {b: 1}\n  : x\n", "f.yaml:2:5", "a mapping"),
    ],
)
def test_a_key_that_is_not_a_string_is_refused_naming_its_line(
    text: str, where: str, kind: str
) -> None:
    with pytest.raises(ScenarioError) as info:
        load_yaml(text, "f.yaml")
    assert info.value.message() == f"{where}: a key must be a string, not {kind}"


def test_a_quoted_key_and_the_same_plain_key_are_one_key() -> None:
    with pytest.raises(ScenarioError) as info:
        load_yaml("'on': 1\non: 2\n", "f.yaml")
    assert info.value.message() == "f.yaml:2:1: duplicate key 'on' (first given on line 1)"


def test_merge_keys_still_merge_and_the_own_keys_win() -> None:
    text = "base: &b {on: 1, k: 2}\nthere:\n  <<: *b\n  k: 3\n"
    assert load_yaml(text, "f.yaml") == {"base": {"on": 1, "k": 2}, "there": {"on": 1, "k": 3}}


def test_an_alias_key_is_the_text_of_its_anchor() -> None:
    assert load_yaml("a: &k 5\n*k : b\n", "f.yaml") == {"a": 5, "5": "b"}


@pytest.mark.parametrize(
    "value",
    ["on", "off", "yes", "No", "y", "n", "010", "1_000", "1:30", "1e3", "0x1F", "2024-01-01",
     "~", "null", "true", "=", "<<", "1.5", "-7", "", " x", "a: b", True, False, None, 0, -3,
     10**20, 1.5, 1e-7, 1e300, math.inf, -math.inf, ["on", 1], {"on": "off", "1": 2}],
)  # fmt: skip
def test_what_pyyaml_dumps_reads_back_unchanged(value: object) -> None:
    # results folders hold YAML written by yaml.safe_dump (scenario.yaml, profiles, presets)
    assert load_yaml(yaml.safe_dump({"v": value}), "f.yaml") == {"v": value}
