"""The fuzz corpus, audit part: YAML's surprises in every YAML input, and the commands the
other parts hold fewest cases for.

Every YAML input (scenario, `--set` value, profile file, search space, engine preset, replay
options file) is read by `sim.inputs.strict_yaml`: a plain key is the text typed and a key that
is not a string is refused naming its line; `yes`, `on`, `010`, `1_000`, `1:30` stay strings
that the schema reads as the type its field wants. So `1:30` or `on` where a number belongs is
a one-line error quoting what was typed, in whichever file it is. The rest are cases for
`validate`, `regress`, `catalog`, `calibrate` and `report`, which had two to four each.
"""

from __future__ import annotations

import copy
from typing import Any

from fuzz_corpus import BASE, RUN, Case, dump, edited, scenario_case
from fuzz_corpus_files import PROFILE, WITH_PROFILE
from fuzz_corpus_replay import GOOD, REPLAY
from fuzz_corpus_search import SCENARIO, SEARCH, SPACE

# (label, YAML text of a value where a number belongs, what the error must quote)
NOT_NUMBERS = (
    ("sexagesimal", "1:30", "'1:30'"),
    ("yaml11-bool", "on", "'on'"),
    ("yaml11-yes", "yes", "'yes'"),
    ("binary", "0b11", "'0b11'"),
    ("date", "2024-01-01", "'2024-01-01'"),
)
# (label, a YAML line whose key is not a string, what the error must say)
BAD_KEYS = (
    ("key-list", "[1, 2]: 3", "a key must be a string, not a list"),
    ("key-map", "{a: 1}: 3", "a key must be a string, not a mapping"),
    ("key-int-tag", "!!int 5: 3", "not a value tagged !!int"),
    ("key-null-tag", "!!null '': 3", "not a value tagged !!null"),
)


def _text(raw: Any, line: str = "", **replace: str) -> bytes:
    """`raw` dumped, with each `key: placeholder` value swapped for raw YAML text, plus `line`."""
    text = dump(raw).decode()
    for placeholder, value in replace.items():
        text = text.replace(f"'{placeholder}'", value).replace(placeholder, value)
    return (text + (line + "\n" if line else "")).encode()


def scenario_yaml_cases() -> list[Case]:
    cases = []
    for label, value, quoted in NOT_NUMBERS:
        content = _text(edited("workload.num_requests", "NUMBER"), NUMBER=value)
        cases.append(
            scenario_case(f"yaml-audit-scenario-{label}", content, "workload.num_requests", quoted)
        )
        cases.append(
            Case(
                f"yaml-audit-validate-{label}",
                ("validate", "s.yaml"),
                ("s.yaml", "metrics.warmup_s", quoted),
                {"s.yaml": _text(edited("metrics.warmup_s", "NUMBER"), NUMBER=value)},
            )
        )
        cases.append(
            Case(
                f"yaml-audit-set-{label}",
                (*RUN, "--set", f"policy.max_num_seqs={value}"),
                ("s.yaml", "policy.max_num_seqs", quoted),
                {"s.yaml": dump(BASE)},
            )
        )
    for label, line, reason in BAD_KEYS:
        cases.append(scenario_case(f"yaml-audit-scenario-{label}", _text(BASE, line), reason))
        # inside a variant: the line of the key is named, not the variant's
        variant = dump(BASE).decode().replace("  a: {}\n", f"  a:\n    {line}\n")
        cases.append(
            scenario_case(f"yaml-audit-variant-{label}", variant.encode(), "s.yaml:", reason)
        )
    # `on:` and `'on':` are the same key now, so giving both is a duplicate
    twice = dump(BASE).decode().replace("  a: {}\n", "  'on': {}\n  on: {}\n")
    cases.append(scenario_case("yaml-audit-variant-on-twice", twice.encode(), "duplicate key 'on'"))
    return cases


def _profile_text(line: str = "", **replace: str) -> bytes:
    raw = copy.deepcopy(PROFILE)
    if replace:
        raw["coefficients"]["t_mem_s"] = "NUMBER"
    return _text(raw, line, **replace)


def other_yaml_cases() -> list[Case]:
    """The YAML inputs other than scenarios: profile file, search space, engine preset, replay
    options file."""
    cases = []
    for label, value, quoted in NOT_NUMBERS:
        cases.append(
            Case(
                f"yaml-audit-profile-{label}",
                RUN,
                ("p.yaml", "coefficients.t_mem_s", quoted),
                {"s.yaml": WITH_PROFILE, "p.yaml": _profile_text(NUMBER=value)},
            )
        )
        space = _text({**SPACE, "max_instances": "NUMBER"}, NUMBER=value)
        cases.append(
            Case(
                f"yaml-audit-space-{label}",
                SEARCH,
                ("space.yaml", "max_instances", quoted),
                {"s.yaml": dump(SCENARIO), "space.yaml": space},
            )
        )
        preset = _text(
            {"schema_version": 1, "kind": "engine_preset", "name": "p",
             "engine": {"frontend_s": "NUMBER"}},
            NUMBER=value,
        )  # fmt: skip
        cases.append(
            Case(
                f"yaml-audit-preset-{label}",
                RUN,
                ("p.yaml", "engine.frontend_s", quoted),
                {"s.yaml": dump(edited("engine", {"preset": "p.yaml"})), "p.yaml": preset},
            )
        )
        cases.append(
            Case(
                f"yaml-audit-options-{label}",
                (*REPLAY, "--options", "o.yaml"),
                ("o.yaml", "prefix_tokens", quoted),
                {**GOOD, "o.yaml": f"prefix_tokens: {value}\n".encode()},
            )
        )
    for label, line, reason in BAD_KEYS:
        cases += [
            Case(
                f"yaml-audit-profile-{label}",
                RUN,
                ("p.yaml:", reason),
                {"s.yaml": WITH_PROFILE, "p.yaml": _profile_text(line)},
            ),
            Case(
                f"yaml-audit-space-{label}",
                SEARCH,
                ("space.yaml:", reason),
                {"s.yaml": dump(SCENARIO), "space.yaml": _text(SPACE, line)},
            ),
            Case(
                f"yaml-audit-options-{label}",
                (*REPLAY, "--options", "o.yaml"),
                ("o.yaml:1:", reason),
                {**GOOD, "o.yaml": f"{line}\n".encode()},
            ),
        ]
    return cases


CATALOG = ("catalog", "--model", "llama-2-7b", "--hardware", "a100-80g")
CALIBRATE = ("calibrate", "--model", "llama-2-7b", "--device", "cpu", "--out", "o")


def command_cases() -> list[Case]:
    """Commands with few cases elsewhere."""
    good = {"s.yaml": dump(BASE)}
    return [
        Case("validate-audit-missing", ("validate", "nope.yaml"), ("nope.yaml", "not found"), {}),
        Case("validate-audit-folder", ("validate", "d"), ("d", "is a folder"), {"d": None}),
        Case(
            "validate-audit-set-unknown-variant",
            ("validate", "s.yaml", "--set", "variants.zz.seed=1"),
            ("variants.zz",),
            good,
        ),
        Case(
            "validate-audit-bad-value",
            ("validate", "s.yaml"),
            ("s.yaml", "policy.max_num_seqs"),
            {"s.yaml": dump(edited("policy.max_num_seqs", -1))},
        ),
        Case(
            "regress-audit-scenarios-missing",
            ("regress", "--scenarios", "nope", "--baselines", "b"),
            ("nope",),
            {},
        ),
        Case(
            "regress-audit-bad-scenario",
            ("regress", "--scenarios", "ci", "--baselines", "b"),
            ("x.yaml", "policy.max_num_seqs"),
            {"ci/x.yaml": dump(edited("policy.max_num_seqs", 0)), "b/x.json": b'{"variants": {}}'},
        ),
        Case(
            "catalog-audit-model-unknown",
            ("catalog", "--model", "nope", "--hardware", "a100-80g"),
            ("nope",),
            {},
        ),
        Case(
            "catalog-audit-hardware-unknown",
            ("catalog", "--model", "llama-2-7b", "--hardware", "nope"),
            ("nope",),
            {},
        ),
        *[
            Case(f"catalog-audit-tp-{label}", (*CATALOG, "--tensor-parallel", v), ("--tensor",), {})
            for label, v in (("zero", "0"), ("negative", "-2"), ("text", "x"), ("huge", "1e9"))
        ],
        Case(
            "catalog-audit-block-size-zero",
            (*CATALOG, "--block-size", "0"),
            ("--block-size",),
            {},
        ),
        Case(
            "report-audit-not-results",
            ("report", "d"),
            ("d",),
            {"d/notes.txt": b"not a results folder\n"},
        ),
        Case("report-audit-missing", ("report", "nope"), ("nope",), {}),
        # flags checked before torch is looked for, so these hold with or without it
        *[
            Case(f"calibrate-audit-{label}", (*CALIBRATE, flag, value), (flag,), {})
            for label, flag, value in (
                ("repeats-zero", "--repeats", "0"),
                ("repeats-text", "--repeats", "x"),
                ("layers-negative", "--layers", "-1"),
                ("layers-float", "--layers", "1.5"),
                ("dtype", "--dtype", "fp64"),
                ("grid", "--grid", "huge"),
            )
        ],
    ]


def key_cases() -> list[Case]:
    """Errors inside a variant, a cluster group or an inline profile name the key written."""
    groups = {"instances": [{"count": 1}, {"count": -1}]}
    return [
        scenario_case(
            "schema-audit-variant-cluster-group",
            dump(edited("variants.b", {"cluster": groups})),
            "s.yaml: variants.b.cluster.instances.1.count: must be >= 0",
        ),
        scenario_case(
            "schema-audit-variant-engine-preset",
            dump(edited("variants.b", {"engine": {"preset": "nope"}})),
            "s.yaml: variants.b.engine.preset: no engine preset 'nope'",
        ),
        scenario_case(
            "schema-audit-variant-disaggregation",
            dump(edited("variants.a", {"disaggregation": {"prefill": {"count": -1}}})),
            "s.yaml: variants.a.disaggregation.prefill.count: must be >= 0",
        ),
        scenario_case(
            "schema-audit-decode-pool-slo-headroom",
            dump(edited("disaggregation", {"prefill": {"count": 1},
                                           "decode": {"count": 1, "router": "slo_headroom"}})),
            "decode.router: slo_headroom ranks instances by the TTFT they predict",
        ),
        # several problems name their own keys: no second `profile:` in front of them
        scenario_case(
            "schema-audit-inline-profile-problems",
            dump(edited("profile", {"coefficients": {"t_mem_s": -1}, "colour": 1})),
            "s.yaml: 3 problems: profile.",
        ),
        scenario_case(
            "schema-audit-variant-inline-profile-problems",
            dump(edited("variants.b", {"profile": {"coefficients": {"t_mem_s": -1}, "x": 1}})),
            "s.yaml: 3 problems: variants.b.profile.",
        ),
        scenario_case(
            "schema-audit-group-inline-profile-problems",
            dump(edited("cluster", {"instances": [{"profile": {"coefficients": 1, "x": 1}}]})),
            "s.yaml: 2 problems: cluster.instances.0.profile.",
        ),
    ]


def audit_cases() -> list[Case]:
    return [*scenario_yaml_cases(), *other_yaml_cases(), *command_cases(), *key_cases()]
