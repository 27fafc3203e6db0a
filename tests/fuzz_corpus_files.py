"""The fuzz corpus, part 2: bad files a scenario refers to (step-cost profiles and traces).

Each case is the valid base scenario pointing at one broken file; the error must name that
file (not only the scenario) and the key (profile) or the line (trace).
"""

from __future__ import annotations

import math
from typing import Any

from fuzz_corpus import BASE, Case, Sparse, bomb, dump, edited, scenario_case

PROFILE: dict[str, Any] = {
    "schema_version": 1,
    "name": "fuzz-profile",
    "source": "measured",
    "model_form": "extended",
    "coefficients": {"t_mem_s": 0.01, "t_flop_s_per_token": 1e-5, "t_kv_s_per_token": 1e-8},
    "provenance": {"device": "test"},
}
WITH_PROFILE = dump(edited("profile", "p.yaml"))


def _profile(**coefficients: Any) -> bytes:
    return dump({**PROFILE, "coefficients": {**PROFILE["coefficients"], **coefficients}})


def _profile_case(case_id: str, content: bytes | None, *expect: str) -> Case:
    return Case(
        case_id,
        ("run", "s.yaml", "-q", "--no-plots"),
        ("p.yaml", *expect),
        {"s.yaml": WITH_PROFILE, "p.yaml": content},
    )


def profile_cases() -> list[Case]:
    key = "coefficients.t_mem_s"
    cases = [
        _profile_case(f"profile-t_mem-{label}", _profile(t_mem_s=value), key)
        for label, value in (
            ("inf", math.inf),
            ("nan", math.nan),
            ("neg", -1.0),
            ("str", "x"),
            ("bool", True),
            ("huge", 1e9),
            ("list", [1]),
        )
    ]
    no_flop = {**PROFILE, "coefficients": {"t_mem_s": 0.01}}
    cases += [
        _profile_case(
            "profile-flop-inf",
            _profile(t_flop_s_per_token=math.inf),
            "coefficients.t_flop_s_per_token",
            "finite",
        ),
        _profile_case("profile-missing-flop", dump(no_flop), "t_flop_s_per_token", "missing"),
        _profile_case("profile-unknown-key", _profile(t_memory=1), "coefficients.t_memory"),
        _profile_case("profile-schema-2", dump({**PROFILE, "schema_version": 2}), "schema_version"),
        _profile_case(
            "profile-two-regime",
            dump({**PROFILE, "model_form": "two_regime"}),
            "coefficients.ridge_tokens",
        ),
        _profile_case("profile-latin1", b"name: caf\xe9\n", "not UTF-8", "line 1"),
        _profile_case("profile-bad-yaml", b"coefficients: {t_mem_s: 1\n", "p.yaml:2:"),
        _profile_case("profile-dup-key", dump(PROFILE) + b"name: again\n", "duplicate key"),
        _profile_case(
            "profile-bomb-provenance", bomb({**PROFILE, "provenance": "__BOMB__"}), "alias bomb"
        ),
        _profile_case(
            "profile-deep", b"provenance: " + b"[" * 500 + b"]" * 500 + b"\n", "nested deeper"
        ),
        _profile_case("profile-list", b"- 1\n", "mapping"),
        _profile_case("profile-folder", None, "is a folder"),
        Case(
            "profile-missing",
            ("run", "s.yaml", "-q"),
            ("s.yaml", "profile", "not found"),
            {"s.yaml": WITH_PROFILE},
        ),
        scenario_case(
            "profile-inline-inf",
            dump(
                edited("profile", {"coefficients": {"t_mem_s": math.inf, "t_flop_s_per_token": 0}})
            ),
            "profile.coefficients.t_mem_s",
        ),
        scenario_case("profile-inline-str", dump(edited("profile", 5)), "profile"),
    ]
    return cases


CSV_HEADER = b"arrival_s,prompt_tokens,output_tokens\n"
AZURE_HEADER = b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
GOOD_ROWS = b"0.0,10,5\n0.5,20,3\n"


def _trace_case(case_id: str, content: bytes | Sparse | None, fmt: str, *expect: str) -> Case:
    workload = {"trace": {"path": "t.csv", "format": fmt}}
    raw = {**BASE, "workload": workload}
    return Case(
        case_id,
        ("run", "s.yaml", "-q", "--no-plots"),
        ("t.csv", *expect),
        {"s.yaml": dump(raw), "t.csv": content},
    )


def trace_cases() -> list[Case]:
    csv = CSV_HEADER + GOOD_ROWS
    stamp = b"2023-11-16 18:15:46.6805900"
    azure = AZURE_HEADER + stamp + b",10,5\n"
    bad_rows = {
        "negative-tokens": b"1.0,-3,5\n",
        "text-tokens": b"1.0,ten,5\n",
        "fraction-tokens": b"1.0,12.5,5\n",
        "zero-prompt": b"1.0,0,5\n",
        "nan-arrival": b"nan,10,5\n",
        "inf-arrival": b"inf,10,5\n",
        "out-of-order": b"0.1,10,5\n",
        "huge-tokens": b"1.0,1e30,5\n",
    }
    cases = [
        _trace_case(f"trace-{label}", csv + row, "csv", "line 4") for label, row in bad_rows.items()
    ]
    azure_rows = {
        "mixed-tz": stamp + b"+01:00,10,5\n",
        "year-1": b"0001-01-01 00:00:00,10,5\n",
        "year-9999": b"9999-12-31 00:00:00,10,5\n",
        "unparsable": b"yesterday,10,5\n",
        "out-of-order": b"2023-11-16 18:15:40,10,5\n",
    }
    reasons = {
        "mixed-tz": "mixed timezones",
        "year-1": "outside the supported years",
        "year-9999": "outside the supported years",
        "unparsable": "unparsable",
        "out-of-order": "out of order",
    }
    cases += [
        _trace_case(f"azure-{label}", azure + row, "azure", "line 3", reasons[label])
        for label, row in azure_rows.items()
    ]
    cases += [
        _trace_case(
            "trace-missing-column",
            b"arrival_s,prompt_tokens\n0,1\n",
            "csv",
            "line 1",
            "missing column",
        ),
        _trace_case(
            "trace-extra-column",
            CSV_HEADER.strip() + b",x\n0,1,1,1\n",
            "csv",
            "line 1",
            "unexpected column",
        ),
        _trace_case("trace-azure-header", csv, "azure", "line 1"),
        _trace_case("trace-empty", b"", "csv", "empty"),
        _trace_case("trace-header-only", CSV_HEADER, "csv", "no rows"),
        _trace_case("trace-ragged", csv + b"1,2,3,4\n", "csv", "line 4", "4 fields"),
        _trace_case("trace-latin1", csv + b"1.0,10,5 # caf\xe9\n", "csv", "line 4", "not UTF-8"),
        _trace_case("trace-folder", None, "csv", "is a folder"),
        Case(
            "trace-missing",
            ("run", "s.yaml", "-q"),
            ("t.csv", "not found"),
            {"s.yaml": dump({**BASE, "workload": {"trace": {"path": "t.csv"}}})},
        ),
        Case(
            "trace-window-empty",
            ("run", "s.yaml", "-q"),
            ("s.yaml", "workload.trace"),
            {
                "s.yaml": dump({**BASE, "workload": {"trace": {"path": "t.csv", "start_s": 99}}}),
                "t.csv": csv,
            },
        ),
    ]

    def columns_case(case_id: str, trace: dict[str, Any], body: bytes, *expect: str) -> Case:
        workload = {"trace": {"path": "t.csv", **trace}}
        return Case(
            case_id,
            ("run", "s.yaml", "-q"),
            expect,
            {"s.yaml": dump({**BASE, "workload": workload}), "t.csv": body},
        )

    with_ids = CSV_HEADER.strip() + b",req\n0,10,5,a\n1,10,5,\n"
    cases += [
        columns_case("trace-id-column-absent", {"id_column": "req"}, csv, "t.csv", "req"),
        columns_case("trace-id-empty", {"id_column": "req"}, with_ids, "t.csv", "line 3"),
        columns_case(
            "trace-session-is-id", {"id_column": "req", "session_column": "req"}, with_ids,
            "s.yaml", "different columns",
        ),
        columns_case(
            "trace-mooncake-session-column", {"format": "mooncake", "session_column": "c"},
            b'{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}\n',
            "s.yaml", "workload.trace.session_column",
        ),
        columns_case(
            "trace-keep-origin-str", {"keep_origin": "maybe"}, csv, "s.yaml", "keep_origin"
        ),
        columns_case(
            "trace-drop-duplicates-str", {"drop_duplicates": "maybe"}, csv, "s.yaml",
            "drop_duplicates",
        ),
    ]  # fmt: skip
    empirical = edited(
        "workload.prompt_tokens", {"dist": "empirical", "path": "t.csv", "column": "prompt"}
    )
    cases.append(
        Case(
            "trace-empirical-bad",
            ("run", "s.yaml", "-q"),
            ("t.csv", "line 2"),
            {"s.yaml": dump(empirical), "t.csv": CSV_HEADER + b"0,x,1\n"},
        )
    )
    # a 3 GiB trace (sparse: no disk) is refused by its size before a byte is read
    big = Sparse(3 * 2**30, CSV_HEADER + GOOD_ROWS)
    cases += [
        _trace_case("trace-sparse-3gib-csv", big, "csv", "3072.0 MiB", "at most 2048 MiB"),
        _trace_case("trace-sparse-3gib-mooncake", big, "mooncake", "at most 2048 MiB"),
    ]
    return cases
