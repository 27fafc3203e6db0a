"""The fuzz corpus: broken agents' traces (`workload.trace.format: weka` and `rollouts`, read by
sim/workload/weka_trace.py and sim/workload/agent_traces.py), trace options a task graph has no
use for, and exports the two formats refuse.

Each broken file is a good first line and a broken second one (or a broken first one where the
break is in the first), and its case expects the file, the line and the gist of the reason.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from fuzz_corpus import BASE, RUN, Case, Sparse, dump, edited

CALL: dict[str, Any] = {"t": 0.0, "type": "n", "in": 100, "out": 4, "hash_ids": [1, 2]}
SUBAGENT: dict[str, Any] = {
    "t": 1.0, "type": "subagent", "agent_id": "agent_001", "subagent_type": "Explore",
    "requests": [{**CALL, "hash_ids": [1, 7], "think_time": 0.0}],
}  # fmt: skip
WEKA: dict[str, Any] = {
    "id": "a", "block_size": 64, "hash_id_scope": "local",
    "requests": [CALL, SUBAGENT, {**CALL, "in": 200, "hash_ids": [1, 2, 3, 4],
                                  "think_time": 0.5}],
}  # fmt: skip
ROLLOUT: dict[str, Any] = {
    "group": 0, "stream": 0, "prompt_len": 40, "out_lens": [3, 4], "obs_lens": [10, 20],
    "tool_times": [1.0],
}  # fmt: skip


def weka(**changes: Any) -> dict[str, Any]:
    """The good trace with top-level keys changed (None: removed), id "b"."""
    out = {**copy.deepcopy(WEKA), "id": "b", **changes}
    return {k: v for k, v in out.items() if v is not None}


def call(**changes: Any) -> dict[str, Any]:
    out = {**CALL, **changes}
    return {k: v for k, v in out.items() if v is not None}


def with_call(record: Any) -> dict[str, Any]:
    """The good trace whose second record is `record`."""
    t = weka()
    t["requests"][1] = record
    return t


def with_inner(record: Any) -> dict[str, Any]:
    """The good trace whose subagent's call is `record`."""
    t = weka()
    t["requests"][1]["requests"] = [record]
    return t


def rollout(**changes: Any) -> dict[str, Any]:
    out = {**ROLLOUT, "stream": 1, **changes}
    return {k: v for k, v in out.items() if v is not None}


def line(value: Any) -> bytes:
    return value if isinstance(value, bytes) else json.dumps(value).encode()


def scenario(fmt: str, name: str, **trace: Any) -> bytes:
    return dump(edited("workload", {"trace": {"path": name, "format": fmt, **trace}}))


def file_case(case_id: str, fmt: str, body: bytes | Sparse, *expect: str,
              name: str = "t.jsonl") -> Case:  # fmt: skip
    return Case(case_id, RUN, (name, *expect), {"s.yaml": scenario(fmt, name), name: body})


def second_line(case_id: str, fmt: str, bad: Any, *expect: str) -> Case:
    first = json.dumps(WEKA if fmt == "weka" else ROLLOUT).encode()
    return file_case(case_id, fmt, first + b"\n" + line(bad) + b"\n", "line 2", *expect)


WEKA_LINES: dict[str, tuple[Any, tuple[str, ...]]] = {
    "not-json": (b"{oops", ("not JSON",)),
    "not-object": ([1, 2], ("not a JSON object",)),
    "deep-nesting": (b"[" * 100_000, ("not JSON",)),
    "5000-digits": (b'{"block_size": ' + b"1" * 5000 + b"}", ("not JSON",)),
    "latin1": (b'{"id": "caf\xe9"}', ("not UTF-8",)),
    "id-number": (weka(id=5), ("id",)),
    "id-duplicate": (weka(id="a"), ("id 'a'", "line 1")),
    "no-block-size": (weka(block_size=None), ("block_size is missing",)),
    "block-size-zero": (weka(block_size=0), ("block_size", "below 1")),
    "block-size-huge": (weka(block_size=2**21), ("block_size", "above")),
    "block-size-str": (weka(block_size="64"), ("block_size", "not an integer")),
    "block-size-differs": (weka(block_size=32), ("block_size 32 differs",)),
    "scope-unknown": (weka(hash_id_scope="galactic"), ("hash_id_scope",)),
    "scope-differs": (weka(hash_id_scope="global"), ("hash_id_scope 'global' differs",)),
    "tool-tokens-negative": (weka(tool_tokens=-1), ("tool_tokens", "below 0")),
    "no-requests": (weka(requests=None), ("requests is missing",)),
    "requests-empty": (weka(requests=[]), ("requests is empty",)),
    "requests-object": (weka(requests={"a": 1}), ("requests is not a list",)),
    "record-number": (with_call(7), ("requests[1] is not a JSON object",)),
    "type-missing": (with_call(call(type=None)), ("requests[1].type is missing",)),
    "type-unknown": (with_call(call(type="x")), ("requests[1].type 'x' is unknown",)),
    "in-missing": (with_call(call(**{"in": None})), ("requests[1].in is missing",)),
    "in-zero": (with_call(call(**{"in": 0})), ("requests[1].in 0 is below 1",)),
    "in-negative": (with_call(call(**{"in": -5})), ("requests[1].in", "below 1")),
    "in-fraction": (with_call(call(**{"in": 1.5})), ("requests[1].in", "not an integer")),
    "in-string": (with_call(call(**{"in": "100"})), ("requests[1].in", "not an integer")),
    "in-bool": (with_call(call(**{"in": True})), ("requests[1].in", "not an integer")),
    "in-huge": (with_call(call(**{"in": 10**30})), ("requests[1].in", "above")),
    "out-negative": (with_call(call(out=-1)), ("requests[1].out", "below 0")),
    "out-missing": (with_call(call(out=None)), ("requests[1].out is missing",)),
    "hash-ids-object": (with_call(call(hash_ids={})), ("requests[1].hash_ids is not a list",)),
    "hash-id-string": (with_call(call(hash_ids=[1, "2"])), ("hash_ids[1]", "not an integer")),
    "hash-id-float": (with_call(call(hash_ids=[1.0])), ("hash_ids[0]", "not an integer")),
    "hash-id-2-70": (with_call(call(hash_ids=[1, 2**70])), ("hash_ids[1]", "64-bit")),
    "think-negative": (with_call(call(think_time=-1)), ("think_time", "finite")),
    "think-string": (with_call(call(think_time="1")), ("think_time", "not a number")),
    "think-huge": (with_call(call(think_time=1e10)), ("think_time", "finite")),
    "think-nan": (json.dumps(with_call(call(think_time=float("nan")))).encode(),
                  ("requests[1].think_time", "finite")),
    "think-inf": (json.dumps(with_call(call(think_time=float("inf")))).encode(),
                  ("requests[1].think_time", "finite")),
    "t-string": (with_call(call(t="soon")), ("requests[1].t", "not a number")),
    "api-time-inf": (json.dumps(with_call(call(api_time=float("inf")))).encode(),
                     ("requests[1].api_time", "finite")),
    "sub-no-requests": (with_call({**SUBAGENT, "requests": None}),
                        ("requests[1].requests is not a list",)),
    "sub-requests-missing": (with_call({k: v for k, v in SUBAGENT.items() if k != "requests"}),
                             ("requests[1].requests is missing",)),
    "sub-empty": (with_call({**SUBAGENT, "requests": []}), ("requests[1].requests is empty",)),
    "sub-type-number": (with_call({**SUBAGENT, "subagent_type": 3}), ("subagent_type",)),
    "sub-agent-id-number": (with_call({**SUBAGENT, "agent_id": 3}), ("agent_id",)),
    "sub-nested": (with_inner(SUBAGENT), ("requests[1].requests[0]", "subagent inside")),
    "sub-call-in-zero": (with_inner(call(**{"in": 0})), ("requests[1].requests[0].in",)),
    "sub-call-type": (with_inner(call(type="q")), ("requests[1].requests[0].type",)),
}  # fmt: skip

ROLLOUT_LINES: dict[str, tuple[Any, tuple[str, ...]]] = {
    "not-json": (b"{oops", ("not JSON",)),
    "not-object": ([1], ("not a JSON object",)),
    "group-missing": (rollout(group=None), ("group is missing",)),
    "group-bool": (rollout(group=True), ("group True",)),
    "group-float": (rollout(group=0.5), ("group 0.5",)),
    "group-kind": (rollout(group="g"), ("group 'g'", "line 1")),
    "stream-negative": (rollout(stream=-1), ("stream -1 is below 0",)),
    "stream-string": (rollout(stream="1"), ("stream", "not an integer")),
    "stream-twice": (rollout(stream=0), ("stream 0 is also on line 1",)),
    "prompt-negative": (rollout(prompt_len=-3), ("prompt_len", "below 0")),
    "prompt-huge": (rollout(prompt_len=2**31), ("prompt_len", "above")),
    "out-missing": (rollout(out_lens=None), ("out_lens is missing",)),
    "out-empty": (rollout(out_lens=[]), ("out_lens is empty",)),
    "out-number": (rollout(out_lens=5), ("out_lens is not a list",)),
    "out-negative": (rollout(out_lens=[3, -4]), ("out_lens[1]", "below 0")),
    "out-fraction": (rollout(out_lens=[3.5, 4]), ("out_lens[0]", "not an integer")),
    "obs-missing": (rollout(obs_lens=None), ("obs_lens is missing",)),
    "obs-too-long": (rollout(obs_lens=[1, 2, 3]), ("obs_lens has 3 entries for 2 turns",)),
    "obs-negative": (rollout(obs_lens=[-1]), ("obs_lens[0]", "below 0")),
    "tool-too-long": (rollout(tool_times=[1, 2, 3]), ("tool_times has 3 entries",)),
    "tool-negative": (rollout(tool_times=[-0.5]), ("tool_times[0]", "finite")),
    "tool-string": (rollout(tool_times=["1"]), ("tool_times[0]", "not a number")),
    "tool-nan": (json.dumps(rollout(tool_times=[float("nan")])).encode(),
                 ("tool_times[0]", "finite")),
    "context-too-long": (rollout(group=1, stream=0, prompt_len=300_000_000),
                         ("grows to", "beyond")),
    "first-prompt-missing": (rollout(group=1, stream=0, prompt_len=None),
                             ("first stream has no prompt_len",)),
}  # fmt: skip


def agent_trace_cases() -> list[Case]:
    cases = [
        second_line(f"weka-{label}", "weka", bad, *expect)
        for label, (bad, expect) in WEKA_LINES.items()
    ]
    cases += [
        second_line(f"rollout-trace-{label}", "rollouts", bad, *expect)
        for label, (bad, expect) in ROLLOUT_LINES.items()
    ]
    good = json.dumps(WEKA).encode()
    cases += [
        file_case("weka-empty", "weka", b"", "no traces"),
        file_case("rollout-trace-empty", "rollouts", b"\n\n", "no trajectories"),
        file_case("rollout-trace-first-line-broken", "rollouts", b"[]\n", "line 1", "not a JSON"),
        file_case("weka-json-broken", "weka", b'{\n"id": "a",\n oops}', "line 3", "not JSON",
                  name="t.json"),
        file_case("weka-json-not-object", "weka", b"7", "trace", "not a JSON object",
                  name="t.json"),
        file_case("weka-json-list", "weka", b"[" + good + b", 5]", "trace 1",
                  "not a JSON object", name="t.json"),
        file_case("weka-json-sparse-3gib", "weka", Sparse(3 * 2**30, good), "at most 2048 MiB",
                  name="t.json"),
        Case("weka-folder-empty", RUN, ("traces", "no .json"),
             {"s.yaml": scenario("weka", "traces"), "traces": None}),
        Case("weka-folder-bad-file", RUN, ("traces/b.json", "trace", "block_size"),
             {"s.yaml": scenario("weka", "traces"), "traces/a.json": good,
              "traces/b.json": json.dumps(weka(block_size=0)).encode()}),
        Case("weka-missing", RUN, ("t.jsonl", "not found"),
             {"s.yaml": scenario("weka", "t.jsonl")}),
        Case("rollout-trace-folder", RUN, ("t.jsonl", "is a folder"),
             {"s.yaml": scenario("rollouts", "t.jsonl"), "t.jsonl": None}),
    ]  # fmt: skip
    options = {"start_s": 5, "end_s": 9, "rate_scale": 2, "keep_origin": True,
               "long_prompts": "drop", "prefix_tokens": 8, "id_column": "c"}  # fmt: skip
    for fmt in ("weka", "rollouts"):
        body = json.dumps(WEKA if fmt == "weka" else ROLLOUT).encode() + b"\n"
        cases += [
            Case(f"{fmt}-trace-option-{key}", RUN,
                 ("s.yaml", f"workload.trace.{key}", "does not apply"),
                 {"s.yaml": scenario(fmt, "t.jsonl", **{key: value}), "t.jsonl": body})
            for key, value in options.items()
        ]  # fmt: skip
        capped = edited("workload", {"num_requests": 5, "trace": {"path": "t.jsonl",
                                                                  "format": fmt}})  # fmt: skip
        cases.append(Case(f"{fmt}-trace-num-requests", RUN,
                          ("s.yaml", "workload.num_requests", "does not apply"),
                          {"s.yaml": dump(capped), "t.jsonl": body}))  # fmt: skip
    empirical = edited("workload.prompt_tokens",
                       {"dist": "empirical", "path": "t.jsonl", "format": "weka",
                        "column": "prompt"})  # fmt: skip
    cases.append(Case("weka-empirical", RUN, ("s.yaml", "workload.prompt_tokens"),
                      {"s.yaml": dump(empirical)}))  # fmt: skip
    return cases + _export_cases()


AGENTS = {
    "agents": {
        "arrival": {"process": "constant", "rate": 1.0}, "num_tasks": 2,
        "types": [{"name": "coder", "system_tokens": 32,
                   "task_tokens": {"dist": "fixed", "value": 16},
                   "turns": {"dist": "fixed", "value": 2},
                   "tool_result_tokens": {"dist": "fixed", "value": 8},
                   "output_tokens": {"dist": "fixed", "value": 4},
                   "tool_time": {"dist": "fixed", "value_s": 0.5}}],
    }
}  # fmt: skip


def _export_cases() -> list[Case]:
    agents = dump(edited("workload", AGENTS))
    return [
        Case("export-weka-open-loop", ("export", "s.yaml", "--format", "weka", "--out", "w.jsonl"),
             ("s.yaml", "workload", "cannot export", "not tasks"), {"s.yaml": dump(BASE)}),
        Case("export-rollouts-open-loop",
             ("export", "s.yaml", "--format", "rollouts", "--out", "w.jsonl"),
             ("s.yaml", "workload", "not tasks"), {"s.yaml": dump(BASE)}),
        Case("export-agents-as-csv", ("export", "a.yaml", "--format", "csv", "--out", "w.csv"),
             ("a.yaml", "workload", "closed-loop", "--format weka"), {"a.yaml": agents}),
        Case("export-weka-over-csv",
             ("export", "a.yaml", "--format", "weka", "--out", "w.csv"),
             ("--out", "not a weka export"),
             {"a.yaml": agents, "w.csv": b"arrival_s,prompt_tokens,output_tokens\n"}),
    ]  # fmt: skip
