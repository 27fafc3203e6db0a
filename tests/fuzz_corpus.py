"""The fuzz corpus, part 1: the case type, the valid base scenario, and bad scenario files.

A `Case` is a command line, the files it needs (written into an empty folder that is also the
working folder) and the substrings its one line of stderr must hold: the file at fault and the
key or line, plus the gist of the reason. Every case must exit with code 2. The corpus is built
from tables (bad values per key, broken YAML texts) so that a new field or a new check adds
cases by adding a row.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

import yaml
from scenario_factory import continuous, poisson, scenario, static, uniform

RUN = ("run", "s.yaml", "-q", "--no-plots")


@dataclass(frozen=True)
class Sparse:
    """A file of `size` bytes that takes no disk: `head`, then zeros (a hole)."""

    size: int
    head: bytes = b""


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    expect: tuple[str, ...]
    files: dict[str, bytes | Sparse | None] = field(default_factory=dict)  # None: a folder


BASE: dict[str, Any] = scenario(
    name="fuzz",
    workload=poisson(20, 5.0, uniform(10, 100), uniform(1, 20)),
    profile="roofline",
    policy=continuous(max_num_seqs=8, max_num_batched_tokens=512),
    slo={"ttft_s": 1.0, "tpot_s": 0.1},
    metrics={"warmup_s": 0.5},
    variants={"a": {}, "b": {"policy": static(max_batch_size=4)}},
)


# libyaml's emitter where PyYAML has it: the same text as the pure-Python one, ten times faster
# (the corpus dumps thousands of scenarios while the suite is collected)
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def dump(raw: Any) -> bytes:
    return yaml.dump(raw, Dumper=DUMPER, sort_keys=False, allow_unicode=True).encode()


def edited(path: str, value: Any, raw: dict[str, Any] | None = None) -> dict[str, Any]:
    """A copy of `raw` (default BASE) with the dotted `path` set to `value`."""
    out = copy.deepcopy(BASE if raw is None else raw)
    node = out
    *parents, last = path.split(".")
    for key in parents:
        node = node[key]
    node[last] = value
    return out


def scenario_case(case_id: str, content: bytes, *expect: str, **files: bytes | None) -> Case:
    return Case(case_id, RUN, ("s.yaml", *expect), {"s.yaml": content, **files})


# Values no key of BASE below accepts (each key lists the ones that apply).
BAD = {
    "neg": -1,
    "str": "abc",
    "bool": True,
    "list": [1, 2],
    "map": {"x": 1},
    "inf": math.inf,
    "nan": math.nan,
}
# key path -> (where the error is reported, which BAD values to try)
ALL = tuple(BAD)
SCHEMA_KEYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "name": ("name", ("neg", "bool", "list", "map", "inf", "nan")),
    "seed": ("seed", ALL),
    "workload.num_requests": ("workload.num_requests", ALL),
    "workload.duration_s": ("workload.duration_s", ALL),
    "workload.arrival.rate": ("workload.arrival.rate", ALL),
    "workload.prompt_tokens.low": ("workload.prompt_tokens.low", ALL),
    "workload.output_tokens.high": ("workload.output_tokens.high", ALL),
    "model": ("model", ALL),
    "hardware": ("hardware", ALL),
    "policy.max_num_seqs": ("policy.max_num_seqs", ALL),
    "policy.max_num_batched_tokens": ("policy.max_num_batched_tokens", ALL),
    "policy.block_size": ("policy.block_size", ALL),
    "policy.watermark": ("policy.watermark", ALL),
    "policy.num_gpu_blocks": ("policy.num_gpu_blocks", ALL),
    "policy.prefix_caching": ("policy.prefix_caching", ("neg", "str", "list", "map", "nan")),
    "policy.mode": ("policy.mode", ALL),
    "slo.ttft_s": ("slo.ttft_s", ALL),
    "metrics.warmup_s": ("metrics.warmup_s", ALL),
    "metrics.tpot": ("metrics.tpot", ALL),
    "metrics.window_s": ("metrics.window_s", ALL),
    "variants.b.policy.max_batch_size": ("variants.b.policy.max_batch_size", ALL),
}


def schema_cases() -> list[Case]:
    cases = [
        scenario_case(f"schema-{path}-{label}", dump(edited(path, BAD[label])), where)
        for path, (where, labels) in SCHEMA_KEYS.items()
        for label in labels
    ]
    cases += [
        scenario_case(
            f"schema-policy.long_prefill_token_threshold-{label}",
            dump(edited("policy", {"name": "chunked", "long_prefill_token_threshold": BAD[label]})),
            "policy.long_prefill_token_threshold",
        )
        for label in ALL
    ]
    policy = copy.deepcopy(BASE)
    del policy["policy"]["name"]
    cases += [
        scenario_case("schema-policy-no-name", dump(policy), "policy: missing `name`", "static"),
        scenario_case(
            "schema-policy-bad-name",
            dump(edited("policy.name", "dynamic")),
            "policy: unknown name 'dynamic'",
        ),
        scenario_case(
            "schema-unknown-key",
            dump(edited("policy.max_num_seq", 4)),
            "policy.max_num_seq: unknown key (did you mean max_num_seqs?)",
        ),
        scenario_case(
            "schema-missing-workload",
            dump({k: v for k, v in BASE.items() if k != "workload"}),
            "workload",
        ),
        scenario_case("schema-variants-list", dump(edited("variants", [1, 2])), "variants"),
        # engine: {name, version} (the events profile's host terms, sim/costs/step_events.py)
        scenario_case(
            "schema-engine-bad-name", dump(edited("engine", {"name": "tgi"})), "engine.name", "vllm"
        ),
        scenario_case(
            "schema-engine-name-number", dump(edited("engine", {"name": 3})), "engine.name"
        ),
        scenario_case(
            "schema-engine-version-empty", dump(edited("engine", {"version": ""})), "engine.version"
        ),
        scenario_case(
            "schema-engine-version-long",
            dump(edited("engine", {"version": "v" * 65})),
            "engine.version",
        ),
        scenario_case(
            "schema-engine-version-map",
            dump(edited("engine", {"version": {"a": 1}})),
            "engine.version",
        ),
        scenario_case(
            "schema-profile-events-typo", dump(edited("profile", "event")), "profile", "event"
        ),
        scenario_case("schema-variant-scalar", dump(edited("variants.b", 3)), "variants.b"),
        scenario_case("schema-name-dot", dump(edited("name", ".")), "name", "'.'"),
        scenario_case("schema-name-dotdot", dump(edited("name", "..")), "name", "'..'"),
        scenario_case("schema-name-slash", dump(edited("name", "a/b")), "name", "separator"),
        scenario_case("schema-name-empty", dump(edited("name", "")), "name", "empty"),
        scenario_case("schema-name-long", dump(edited("name", "x" * 300)), "name", "at most"),
        scenario_case("schema-name-hidden", dump(edited("name", ".hidden")), "name"),
        scenario_case(
            "schema-two-problems",
            dump(edited("slo", {"ttft_s": -1, "tpot_s": "x"})),
            "2 problems",
            "slo.ttft_s",
            "slo.tpot_s",
        ),
        scenario_case(
            "schema-model-too-big", dump(edited("model", "llama-3-70b")), "model", "does not fit"
        ),
        scenario_case(
            "schema-trace-and-arrival",
            dump(edited("workload.trace", {"path": "t.csv"})),
            "workload",
        ),
    ]
    return cases


# speculative decoding: the keys of `policy.speculative`, on a base that speculates
SPECULATIVE: dict[str, Any] = {
    "method": "ngram",
    "num_speculative_tokens": 2,
    "acceptance": {"rate": 0.7},
}
SPEC_BASE = edited("policy.speculative", SPECULATIVE)
SPEC_KEYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "policy.speculative": ("policy.speculative", ALL),
    "policy.speculative.method": ("policy.speculative.method", ALL),
    "policy.speculative.num_speculative_tokens": ("policy.speculative.num_speculative_tokens", ALL),
    "policy.speculative.acceptance": ("policy.speculative.acceptance", ALL),
    "policy.speculative.acceptance.rate": ("policy.speculative.acceptance", ALL),
    "policy.speculative.ngram_s": ("policy.speculative.ngram_s", ALL),
    "policy.speculative.disable_by_batch_size": ("policy.speculative.disable_by_batch_size", ALL),
    "policy.speculative.min_acceptance_rate": ("policy.speculative.min_acceptance_rate", ALL),
    "policy.speculative.acceptance_window": ("policy.speculative.acceptance_window", ALL),
}
DRAFT = {"method": "draft", "num_speculative_tokens": 2, "acceptance": {"rate": 0.7}}


def speculative_cases() -> list[Case]:
    """Bad `policy.speculative` values, and combinations that cannot be run."""
    cases = [
        scenario_case(f"schema-{path}-{label}", dump(edited(path, BAD[label], SPEC_BASE)), where)
        for path, (where, labels) in SPEC_KEYS.items()
        for label in labels
    ]

    def spec(**fields: Any) -> bytes:
        return dump(edited("policy.speculative", fields))

    return [
        *cases,
        scenario_case(
            "spec-draft-without-model", spec(**DRAFT), "policy.speculative", "needs draft_model"
        ),
        scenario_case(
            "spec-field-of-another-method",
            spec(**SPECULATIVE, head_fraction=0.1),
            "policy.speculative",
            "head_fraction is for method heads",
        ),
        scenario_case(
            "spec-rate-and-distribution",
            spec(
                **{
                    **SPECULATIVE,
                    "acceptance": {"rate": 0.7, "distribution": {"dist": "beta", "mean": 0.5}},
                }
            ),
            "policy.speculative.acceptance",
            "either rate or distribution",
        ),
        scenario_case(
            "spec-beta-without-mean",
            spec(**{**SPECULATIVE, "acceptance": {"distribution": {"dist": "beta"}}}),
            "policy.speculative.acceptance.distribution",
            "needs mean",
        ),
        scenario_case(
            "spec-uniform-reversed",
            spec(
                **{
                    **SPECULATIVE,
                    "acceptance": {"distribution": {"dist": "uniform", "low": 0.9, "high": 0.1}},
                }
            ),
            "policy.speculative.acceptance.distribution",
            "must not exceed",
        ),
        scenario_case(
            "spec-rate-list-over-one",
            spec(**{**SPECULATIVE, "acceptance": {"rate": [0.9, 1.5]}}),
            "policy.speculative.acceptance",
            "not a probability",
        ),
        scenario_case(
            "spec-unknown-tier",
            spec(**{**SPECULATIVE, "acceptance": {"rate": 0.7, "tiers": {"vip": {"rate": 1}}}}),
            "policy.speculative.acceptance.tiers",
            "'vip'",
        ),
        scenario_case(
            "spec-unknown-draft",
            spec(**DRAFT, draft_model="llama-9"),
            "policy.speculative.draft_model",
            "unknown model 'llama-9'",
        ),
        scenario_case(
            "spec-draft-too-big",
            spec(**DRAFT, draft_model="llama-2-70b"),
            "policy.speculative.draft_model",
            "leaves no room for KV",
        ),
        scenario_case(
            "spec-draft-profile-missing",
            spec(**DRAFT, draft_model="llama-2-7b", draft_profile="nope.yaml"),
            "policy.speculative.draft_profile",
            "not found",
        ),
        scenario_case(
            "spec-draft-profile-bad",
            spec(**DRAFT, draft_model="llama-2-7b", draft_profile={"coefficients": {"x": 1}}),
            "policy.speculative.draft_profile",
        ),
        scenario_case(
            "spec-on-static",
            dump(edited("variants.b.policy.speculative", SPECULATIVE)),
            "variants.b.policy.speculative",
            "unknown key",
        ),
    ]


def _nested(depth: int) -> bytes:
    return ("[" * depth + "]" * depth).encode()


def bomb(raw: dict[str, Any]) -> bytes:
    """`raw` as YAML with its "__BOMB__" value an alias that expands to 9^8 values."""
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    pairs = zip("abcdefg", "bcdefgh", strict=True)
    lines += [f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in pairs]
    text = "\n".join(lines) + "\n"
    return text.encode() + dump(raw).replace(b"__BOMB__", b"*h")


def yaml_cases() -> list[Case]:
    good = dump(BASE)
    return [
        scenario_case("yaml-latin1", b"# caf\xe9\n" + good, "line 1", "not UTF-8", "0xe9"),
        scenario_case("yaml-binary", bytes(range(256)) * 4, "not UTF-8"),
        scenario_case("yaml-utf16", good.decode().encode("utf-16"), "not UTF-8"),
        scenario_case("yaml-nul", good + b"x: \x00\n", "#x0000"),
        scenario_case("yaml-unclosed", b"name: [fuzz\nseed: 1\n", "s.yaml:2:"),
        scenario_case("yaml-tab", b"workload:\n\tnum_requests: 3\n", "s.yaml:2:1:"),
        scenario_case("yaml-dup-top", good + b"policy: {name: static}\n", "duplicate key 'policy'"),
        scenario_case(
            "yaml-dup-flow",
            good.replace(b"max_num_seqs: 8", b"max_num_seqs: 8\n  max_num_seqs: 9"),
            "duplicate key 'max_num_seqs'",
        ),
        scenario_case("yaml-deep-lists", _nested(10_000), "nested deeper"),
        scenario_case(
            "yaml-deep-maps", b"".join(b"  " * i + b"k:\n" for i in range(200)), "nested deeper"
        ),
        scenario_case(
            "yaml-bomb-description", bomb(edited("description", "__BOMB__")), "alias bomb"
        ),
        scenario_case(
            "yaml-bomb-provenance",
            bomb(
                edited(
                    "profile",
                    {
                        "coefficients": {"t_mem_s": 0.01, "t_flop_s_per_token": 1e-5},
                        "provenance": "__BOMB__",
                    },
                )
            ),
            "alias bomb",
        ),
        scenario_case("yaml-recursive-alias", good + b"extra: &r [1, *r]\n", "refers to itself"),
        scenario_case("yaml-undefined-alias", good + b"extra: *nowhere\n", "undefined alias"),
        scenario_case("yaml-two-documents", good + b"---\nname: x\n", "another document"),
        scenario_case("yaml-empty", b"", "must be a YAML mapping"),
        scenario_case("yaml-comments-only", b"# nothing\n", "must be a YAML mapping"),
        scenario_case("yaml-list", b"- name: fuzz\n", "must be a YAML mapping"),
        scenario_case("yaml-scalar", b"fuzz\n", "must be a YAML mapping"),
        scenario_case("yaml-python-tag", b"name: !!python/object:os.system x\n", "s.yaml:1:"),
        scenario_case("yaml-bad-merge", b"a: &a 5\nb:\n  <<: *a\n", "s.yaml:1:4:", "merging"),
        scenario_case(
            "yaml-unhashable-key", b"? [1, 2]\n: 3\n", "s.yaml:1:3:", "key must be a string"
        ),
        scenario_case("yaml-bad-indent", b"name: fuzz\n  seed: 1\n", "s.yaml:2:"),
        Case("file-folder", ("run", "d", "-q"), ("d", "is a folder"), {"d": None}),
        Case("file-missing", ("run", "nope.yaml", "-q"), ("nope.yaml", "not found"), {}),
        Case("file-device", ("run", "/dev/null", "-q"), ("/dev/null", "not a regular file"), {}),
        Case(
            "validate-latin1",
            ("validate", "s.yaml"),
            ("s.yaml", "not UTF-8"),
            {"s.yaml": b"name: caf\xe9\n"},
        ),
    ]


def runtime_cases() -> list[Case]:
    """Scenarios that validate but cannot be run: refused with the reason, nothing written."""
    one_block = edited("policy", {"name": "continuous", "num_gpu_blocks": 1})
    too_long = edited("workload.prompt_tokens", {"dist": "fixed", "value": 5000})
    duration = edited("workload", {**BASE["workload"], "duration_s": 1e15})
    del duration["workload"]["num_requests"]
    return [
        scenario_case(
            "run-all-rejected-kv",
            dump(one_block),
            "variant 'a'",
            "every one of its 20 requests was rejected",
            "KV pool",
        ),
        scenario_case("run-all-rejected-len", dump(too_long), "longer than max_model_len"),
        scenario_case(
            "schema-block-size-huge",
            dump(edited("policy", {"name": "continuous", "block_size": 1_000_000_000})),
            "policy.block_size",
            "8192",
        ),
        scenario_case(
            "schema-metrics.window_s-zero",
            dump(edited("metrics.window_s", 0)),
            "metrics.window_s",
            "> 0",
        ),
        scenario_case(
            "schema-metrics.window_s-over-a-day",
            dump(edited("metrics.window_s", 86401)),
            "metrics.window_s",
            "86400",
        ),
        # found once the arrivals are drawn: more windows than a timeline may have
        scenario_case(
            "run-window-too-short",
            dump(edited("metrics.window_s", 1e-6)),
            "metrics.window_s",
            "more than 200,000 windows",
        ),
        scenario_case(
            "run-10e12-requests",
            dump(edited("workload.num_requests", 10**12)),
            "workload.num_requests",
            "estimated",
        ),
        scenario_case("run-endless-duration", dump(duration), "workload.duration_s", "estimated"),
        scenario_case(
            "run-inf-duration",
            dump(edited("workload.duration_s", math.inf)),
            "workload.duration_s",
            "finite",
        ),
        scenario_case(
            "run-tokens-over-int32",
            dump(edited("workload.prompt_tokens.high", 2**40)),
            "workload.prompt_tokens.high",
        ),
        scenario_case(
            "run-gamma-cv",
            dump(edited("workload.arrival", {"process": "gamma", "rate": 1.0, "cv": 1e-9})),
            "workload.arrival.cv",
        ),
    ]
