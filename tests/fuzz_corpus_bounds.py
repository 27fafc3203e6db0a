"""The fuzz corpus: numbers out of any sane range and workloads too big for any machine.

- workloads whose memory is estimated before anything is generated, one or more per workload
  kind (sessions by count, by turns and by duration; a shared system prompt on synthetic,
  mixed and client requests; a trace whose prompts make too many content ids);
- integers from trace files beyond int64 or any context (Mooncake lengths, hash ids and
  timestamps; csv token counts and times), refused before the int64 arrays are built;
- engine pricing knobs beyond their bounds, in a scenario's `engine.pricing` and a profile's
  `pricing`;
- step costs that are physically impossible: negative or non-finite table cells, a linear
  table or coefficients that price a step at no time;
- a `long_prompts: drop` that drops every request of the trace;
- KV tiers and P/D through the shared store, out of range or combined wrongly
  (tests/fuzz_corpus_tiers.py);
- mixture-of-experts models, their parallelism and multi-token prediction
  (tests/fuzz_corpus_moe.py);
- arrival-rate profiles: each key of each shape out of range, bad points and csv files, and
  integrated rates too big for any machine (tests/fuzz_corpus_profiles.py);
- the gateway's scrape interval, KV-event lag and admission limits (tests/fuzz_corpus_control.py).

Every size is far beyond any machine's memory, so the cases hold wherever the suite runs.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

from fuzz_corpus import BASE, RUN, Case, dump, edited, scenario_case
from fuzz_corpus_control import control_cases
from fuzz_corpus_moe import moe_cases
from fuzz_corpus_profiles import rate_profile_cases
from fuzz_corpus_tiers import tier_cases

HUGE_TOKENS = 2**31 - 1
UNIFORM = {"dist": "uniform", "low": 10, "high": 100}
FIXED_1 = {"dist": "fixed", "value": 1}
SESSIONS: dict[str, Any] = {
    "arrival": {"process": "poisson", "rate": 2.0},
    "num_sessions": 4,
    "turns": {"dist": "fixed", "value": 3},
    "first_prompt": UNIFORM,
    "user_tokens": UNIFORM,
    "output_tokens": {"dist": "uniform", "low": 1, "high": 20},
    "think_time": {"dist": "fixed", "value_s": 1.0},
}
SESSIONS_BASE = copy.deepcopy(BASE)
SESSIONS_BASE["workload"] = {"sessions": SESSIONS}
HUGE_PREFIX = {"num_prefixes": 2, "length": {"dist": "fixed", "value": HUGE_TOKENS}}


def _sessions(**changes: Any) -> bytes:
    raw = copy.deepcopy(SESSIONS_BASE)
    raw["workload"]["sessions"].update(changes)
    return dump(raw)


def _memory_cases() -> list[Case]:
    mix = [{"name": "a", "weight": 1, "prompt_tokens": UNIFORM, "output_tokens": FIXED_1}]
    clients = {"num_clients": 8, "prompt_tokens": UNIFORM, "output_tokens": FIXED_1}
    by_duration = copy.deepcopy(SESSIONS_BASE)
    del by_duration["workload"]["sessions"]["num_sessions"]
    by_duration["workload"]["sessions"]["arrival"]["rate"] = 1e9
    by_duration["workload"]["duration_s"] = 1e6
    mixed = edited("workload", {"num_requests": 1_000_000, "arrival": BASE["workload"]["arrival"],
                                "mix": mix, "shared_prefix": HUGE_PREFIX})  # fmt: skip
    big_clients = edited("workload", {"num_requests": 1_000_000, "clients": clients,
                                      "shared_prefix": HUGE_PREFIX})  # fmt: skip
    # 2,000 prompts of 2^31 - 1 tokens sharing a prefix: 2.7e11 content ids, known only once
    # the file is read
    rows = b"".join(b"%d,%d,1\n" % (i, HUGE_TOKENS) for i in range(2000))
    trace = edited("workload", {"trace": {"path": "t.csv", "prefix_tokens": 16}})
    return [
        scenario_case(
            "bounds-memory-sessions-count",
            _sessions(num_sessions=100_000_000, turns={"dist": "fixed", "value": 100_000}),
            "workload.sessions", "memory",
        ),
        scenario_case(
            "bounds-memory-sessions-turns",
            _sessions(num_sessions=1000, turns={"dist": "fixed", "value": HUGE_TOKENS}),
            "workload.sessions.turns", "memory",
        ),
        scenario_case(
            "bounds-memory-sessions-lognormal-turns",
            _sessions(num_sessions=10_000_000,
                      turns={"dist": "lognormal", "median": 1e6, "sigma": 1.0}),
            "workload.sessions", "memory",
        ),
        scenario_case(
            "bounds-memory-sessions-duration", dump(by_duration), "workload.duration_s", "memory"
        ),
        scenario_case(
            "bounds-memory-sessions-prefix",
            dump(edited("workload.shared_prefix", HUGE_PREFIX, SESSIONS_BASE)),
            "workload.shared_prefix.length", "content ids",
        ),
        scenario_case(
            "bounds-memory-prefix",
            dump(edited("workload.num_requests", 1_000_000,
                        edited("workload.shared_prefix", HUGE_PREFIX))),
            "workload.shared_prefix.length", "content ids",
        ),
        scenario_case(
            "bounds-memory-prefix-mix", dump(mixed), "workload.shared_prefix.length", "memory"
        ),
        scenario_case(
            "bounds-memory-prefix-clients", dump(big_clients),
            "workload.shared_prefix.length", "memory",
        ),
        scenario_case(
            "bounds-memory-trace-prefix", dump(trace), "workload", "content ids",
            **{"t.csv": b"arrival_s,prompt_tokens,output_tokens\n" + rows},
        ),
    ]


MOONCAKE_ROW = {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}


def _mooncake_case(case_id: str, change: dict[str, Any], *expect: str, raw: bytes = b"") -> Case:
    line = raw or json.dumps({**MOONCAKE_ROW, **change}).encode()
    body = json.dumps(MOONCAKE_ROW).encode() + b"\n" + line + b"\n"
    workload = {"trace": {"path": "m.jsonl", "format": "mooncake"}}
    files = {"s.yaml": dump(edited("workload", workload)), "m.jsonl": body}
    return Case(case_id, RUN, ("m.jsonl", "line 2", *expect), files)


def _trace_integer_cases() -> list[Case]:
    cases = [
        _mooncake_case("bounds-mooncake-output-huge", {"output_length": 10**30},
                       "output_length", "above"),
        _mooncake_case("bounds-mooncake-output-float-huge", {"output_length": 1e30},
                       "output_length", "above"),
        _mooncake_case("bounds-mooncake-input-huge", {"input_length": 2**31},
                       "input_length", "above"),
        _mooncake_case("bounds-mooncake-input-400-digits", {"input_length": 10**400},
                       "input_length", "characters"),
        _mooncake_case("bounds-mooncake-hash-2-70", {"hash_ids": [1, 2**70]}, "hash id"),
        _mooncake_case("bounds-mooncake-hash-negative", {"hash_ids": [-5, 2]}, "hash id"),
        _mooncake_case("bounds-mooncake-timestamp-huge", {"timestamp": 10**30}, "timestamp"),
        _mooncake_case("bounds-mooncake-timestamp-inf", {}, "timestamp",
                       raw=b'{"timestamp": 1e400, "input_length": 1, "output_length": 1, '
                           b'"hash_ids": [1]}'),
        _mooncake_case("bounds-mooncake-output-nan", {}, "output_length",
                       raw=b'{"timestamp": 1, "input_length": 1, "output_length": NaN, '
                           b'"hash_ids": [1]}'),
    ]  # fmt: skip
    csv = edited("workload", {"trace": {"path": "t.csv"}})
    for case_id, row, expect in (
        ("prompt-huge", b"1,1e30,1", "prompt_tokens"),
        ("prompt-2-31", b"1,2147483648,1", "prompt_tokens"),
        ("output-2-40", b"1,10,1099511627776", "output_tokens"),
        ("time-huge", b"1e300,10,1", "arrival_s"),
    ):
        body = b"arrival_s,prompt_tokens,output_tokens\n0,10,1\n" + row + b"\n"
        files = {"s.yaml": dump(csv), "t.csv": body}
        cases.append(Case(f"bounds-csv-{case_id}", RUN, ("t.csv", "line 3", expect), files))
    return cases


def _knob_cases() -> list[Case]:
    knobs: list[tuple[str, dict[str, Any], str]] = [
        ("capture-1e9", {"cuda_graph_capture_sizes": [1, 10**9]}, "cuda_graph_capture_sizes"),
        ("capture-2-70", {"cuda_graph_capture_sizes": [2**70]}, "cuda_graph_capture_sizes"),
        ("pad-1e9", {"pad_tokens_to": 10**9}, "pad_tokens_to"),
        ("cpu-step-1e308", {"cpu_overhead": {"per_step_s": 1e308}}, "cpu_overhead.per_step_s"),
        ("cpu-step-1e306", {"cpu_overhead": {"per_step_s": 1e306}}, "cpu_overhead.per_step_s"),
        ("cpu-step-11", {"cpu_overhead": {"per_step_s": 11.0}}, "cpu_overhead.per_step_s"),
        ("cpu-seq-2", {"cpu_overhead": {"per_seq_s": 2.0}}, "cpu_overhead.per_seq_s"),
    ]
    cases = [
        scenario_case(f"bounds-engine-{label}", dump(edited("engine", {"pricing": pricing})),
                      f"engine.pricing.{key}")
        for label, pricing, key in knobs
    ]  # fmt: skip
    for label, pricing, key in knobs:
        profile = {**_PROFILE, "pricing": pricing}
        cases.append(
            Case(f"bounds-profile-{label}", RUN, ("p.yaml", f"pricing.{key}"),
                 {"s.yaml": dump(edited("profile", "p.yaml")), "p.yaml": dump(profile)})
        )  # fmt: skip
    return cases


_PROFILE: dict[str, Any] = {
    "schema_version": 1,
    "name": "bounds",
    "source": "measured",
    "model_form": "extended",
    "coefficients": {"t_mem_s": 0.01, "t_flop_s_per_token": 1e-5},
}
_TABLE: dict[str, Any] = {
    "linear": {"tokens": [1, 64, 512], "seconds": [0.01, 0.011, 0.02]},
    "decode_attention": {
        "batch": [1, 8], "context": [0, 1024], "seconds": [[1e-5, 2e-5], [2e-5, 4e-5]],
    },
    "prefill_attention": {
        "chunk": [16, 512], "prefix": [0, 1024], "seconds": [[1e-5, 2e-5], [3e-5, None]],
    },
}  # fmt: skip


def _table_profile(path: str, value: Any) -> bytes:
    table = copy.deepcopy(_TABLE)
    *parents, last = path.split(".")
    node = table
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return dump({**_PROFILE, "model_form": "table", "table": table})


def _impossible_cases() -> list[Case]:
    with_profile = dump(edited("profile", "p.yaml"))
    # label: (cell, value, key named, gist)
    cells = {
        "decode-negative": ("decode_attention.seconds.1.1", -0.99, "table",
                            "decode_attention.seconds: the cell at batch 8, context 1024"),
        "decode-inf": ("decode_attention.seconds.0.0", math.inf, "table.decode_attention",
                       "finite"),
        "prefill-negative": ("prefill_attention.seconds.0.1", -53.0, "table",
                             "a step must take time"),
        "prefill-nan": ("prefill_attention.seconds.1.0", math.nan, "table.prefill_attention",
                        "finite"),
        "linear-negative": ("linear.seconds.0", -0.01, "table.linear", ">= 0"),
        "linear-zero": ("linear.seconds.1", 0.0, "table.linear", "no time"),
    }  # fmt: skip
    cases = [
        Case(f"bounds-table-{label}", RUN, ("p.yaml", where, gist),
             {"s.yaml": with_profile, "p.yaml": _table_profile(path, value)})
        for label, (path, value, where, gist) in cells.items()
    ]  # fmt: skip
    zero = {"t_mem_s": 0.0, "t_flop_s_per_token": 0.0, "t_kv_s_per_token": 1e-8}
    split = {"t_mem_s": 0.0, "t_flop_s_per_token": 1e-5, "t_decode_s_per_token": 0.0}
    for label, form, coefficients in (
        ("zero", "extended", zero),
        ("zero-seed", "seed", {"t_mem_s": 0.0, "t_flop_s_per_token": 0.0}),
        ("zero-split-decode", "split", split),
    ):
        profile = {**_PROFILE, "model_form": form, "coefficients": coefficients}
        cases.append(
            Case(f"bounds-coefficients-{label}", RUN, ("p.yaml", "coefficients", "no time"),
                 {"s.yaml": with_profile, "p.yaml": dump(profile)})
        )  # fmt: skip
    inline = {**_PROFILE, "source": "inline", "coefficients": zero}
    cases.append(
        scenario_case("bounds-coefficients-inline-zero", dump(edited("profile", inline)),
                      "profile.coefficients", "no time")
    )  # fmt: skip
    # every request longer than llama-2-7b's 4,096-token context, dropped
    long_rows = b"arrival_s,prompt_tokens,output_tokens\n0,5000,10\n1,4090,10\n"
    drop = edited("workload", {"trace": {"path": "t.csv", "long_prompts": "drop"}})
    for label, argv in (("tables", RUN), ("stream", ("run", "s.yaml", "-q", "--stream"))):
        cases.append(
            Case(f"bounds-drop-all-{label}", argv,
                 ("s.yaml", "workload.trace.long_prompts", "dropped every one of its 2"),
                 {"s.yaml": dump(drop), "t.csv": long_rows})
        )  # fmt: skip
    return cases


def bounds_cases() -> list[Case]:
    return [*_memory_cases(), *_trace_integer_cases(), *_knob_cases(), *_impossible_cases(),
            *tier_cases(), *moe_cases(), *rate_profile_cases(), *control_cases()]
