"""The fuzz corpus: the front door of the newer command surfaces.

- `calibrate-engine --points`: the per-point table's folder beside the preset (a folder of that
  name batchsim did not write, a file, a folder of another kind, a folder where the table
  goes), points of one output token, points measured on another model, and work bombs (too
  many points, requests or decode steps, a file too large);
- closed-loop clients and sessions whose every request is longer than the model's context
  (each is rejected, and a run where all are rejected is refused as an open-loop one is);
- measured runs (OTLP spans, AIPerf records) with one line too long to be a record, read
  directly, replayed and named by a scenario's trace;
- `regress` baselines of the wrong shape or type, NaN and infinite values, with and without
  `--update`;
- engine fields batchsim sets from a preset (`preset_scope`, `preset_profile`) written in a
  scenario, its variants or `--set`;
- `benchmark` and `drop_duplicates` on a trace that is not a measured run's file;
- `catalog`: block sizes and parallel degrees past their bounds.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

from fuzz_corpus import BASE, RUN, Case, Sparse, dump, edited, scenario_case
from fuzz_corpus_bounds import SESSIONS_BASE
from fuzz_corpus_clients import CLIENTS_BASE
from fuzz_corpus_measured import _otlp, _span
from fuzz_corpus_replay import ONE, POINTS_GOOD, POINTS_HEAD

HUGE = 10**30
POINTS = ("calibrate-engine", "--points", "pts.csv", "--scenario", "one.yaml", "-q")
POINTS_FILES: dict[str, bytes | Sparse | None] = {"one.yaml": dump(ONE), "pts.csv": POINTS_GOOD}


def _points(case_id: str, *args: str, expect: tuple[str, ...], **files: bytes | Sparse | None
            ) -> Case:  # fmt: skip
    argv = (*POINTS, *args) if "--out" in args else (*POINTS, *args, "--out", "p.yaml")
    return Case(f"front-points-{case_id}", argv, expect, {**POINTS_FILES, **files})


def table_folder_cases() -> list[Case]:
    """The per-point table goes to `<preset stem>.points/`, a folder batchsim marks: any other
    folder, file or link of that name is left alone, and the fit never starts."""
    marked = b'{"batchsim": "points"}\n'
    cases = []
    for stem in ("p", "in", "my"):
        out = f"{stem}.yaml"
        folder = f"{stem}.points"
        cases += [
            _points(f"{stem}-table-folder-foreign", "--out", out,
                    expect=(folder, "not a batchsim points folder"),
                    **{f"{folder}/mine.csv": b"keep me\n"}),
            _points(f"{stem}-table-folder-is-file", "--out", out, expect=(folder, "is a file"),
                    **{folder: b"conc,isl\n"}),
            _points(f"{stem}-table-folder-a-sweep", "--out", out,
                    expect=(folder, "is a batchsim sweep folder"),
                    **{f"{folder}/.batchsim": b'{"batchsim": "sweep"}\n',
                       f"{folder}/sweep.csv": b"a\n1\n"}),
            _points(f"{stem}-table-is-folder", "--out", out,
                    expect=(f"{folder}/points.csv", "not a file"),
                    **{f"{folder}/.batchsim": marked, f"{folder}/points.csv": None}),
        ]  # fmt: skip
    return cases


def _bench(outputs: list[int], model: str | None = "m", concurrency: int | None = 2) -> bytes:
    n = len(outputs)
    return json.dumps({
        "backend": "vllm", "model_id": model, "max_concurrency": concurrency, "duration": 2.0,
        "input_lens": [100] * n, "output_lens": outputs, "ttfts": [0.1] * n,
        "itls": [[0.05] * (o - 1) for o in outputs], "errors": [""] * n,
    }).encode()  # fmt: skip


# models a points file names, none of them the scenario's llama-2-7b: (text, catalog name)
OTHER_MODELS = {
    "inferencex": ("Llama-3.3-70B-Instruct (nvidia/Llama-3.3-70B-Instruct-FP8)", "llama-3.3-70b"),
    "r1-path": ("DeepSeek-R1-0528 (deepseek-ai/DeepSeek-R1-0528)", "deepseek-v3"),
    "hf-id": ("Qwen/Qwen3-32B", "qwen3-32b"),
    "gpt-oss": ("gpt-oss-120b (/mnt/models/gpt-oss-120b)", "gpt-oss-120b"),
}


def points_cases() -> list[Case]:
    head = POINTS_HEAD.rstrip(b"\n")
    many = POINTS_HEAD + b"".join(b"%d,100,10,500,0.01\n" % (1 + i % 8) for i in range(2001))
    requests = b"conc,isl,osl,num_requests,total_tput_tok_s,tpot_mean_s\n"
    cases = [
        _points("osl-one", expect=("pts.csv", "line 2", "osl", "2 tokens"),
                **{"pts.csv": POINTS_HEAD + b"1,100,1,500,0.01\n"}),
        _points("osl-one-later", expect=("pts.csv", "line 3", "osl", "2 tokens"),
                **{"pts.csv": POINTS_GOOD.replace(b"4,100,10,", b"4,100,1,")}),
        _points("bench-mean-output-one", "--points", "b.json", expect=("b.json", "2 tokens"),
                **{"b.json": _bench([1, 1, 2])}),
        _points("too-many-points", expect=("pts.csv", "line 2002", "more than 2,000 points"),
                **{"pts.csv": many}),
        _points("requests-bomb", expect=("pts.csv", "requests", "at most 500,000"),
                **{"pts.csv": requests + b"1,100,10,1000000,500,0.01\n"}),
        _points("requests-bomb-summed", expect=("pts.csv", "requests", "at most 500,000"),
                **{"pts.csv": requests + b"1,100,10,300000,500,0.01\n2,100,10,300000,500,0.01\n"}),
        _points("steps-bomb", expect=("pts.csv", "decode steps", "at most 50,000,000"),
                **{"pts.csv": requests + b"1,100,10000000,10,500,0.01\n"}),
        _points("steps-bomb-two-files", "--points", "q.csv",
                expect=("q.csv", "decode steps", "at most 50,000,000"),
                **{"pts.csv": requests + b"1,100,4000000,10,500,0.01\n",
                   "q.csv": requests + b"1,100,4000000,10,500,0.01\n"}),
        _points("huge-file", expect=("pts.csv", "at most 64 MiB"),
                **{"pts.csv": Sparse(200 * 2**20, POINTS_GOOD)}),
        _points("over-the-context", expect=("pts.csv line 2", "max_model_len"),
                **{"pts.csv": POINTS_HEAD + b"1,3000,3000,500,0.01\n"}),
    ]  # fmt: skip
    for name, (text, catalog) in OTHER_MODELS.items():
        csv = head + b",model\n" + b"1,100,10,500,0.01,%s\n" % text.encode()
        cases += [
            _points(f"model-{name}", expect=("pts.csv line 2", catalog, "llama-2-7b"),
                    **{"pts.csv": csv}),
            _points(f"bench-model-{name}", "--points", "b.json",
                    expect=("b.json", catalog, "llama-2-7b"),
                    **{"b.json": _bench([3, 4], model=text)}),
        ]  # fmt: skip
    return cases


OVER = {"dist": "fixed", "value": 5000}  # prompt tokens over Llama-2-7B's 4096
NEAR = {"dist": "fixed", "value": 4000}  # a prompt that fits, with an output that does not
LONG_OUTPUT = {"dist": "fixed", "value": 500}


def closed_loop_cases() -> list[Case]:
    """Every request over the context: each is rejected (before, the loop waited forever for
    a finish and the run ended in an assertion), and a run with nothing served is refused."""
    chunked = {"name": "chunked", "max_num_seqs": 8, "max_num_batched_tokens": 512}
    variants: dict[str, tuple[dict[str, Any], str, dict[str, Any]]] = {
        "clients-prompt": (CLIENTS_BASE, "clients", {"prompt_tokens": OVER}),
        "clients-prompt-output": (
            CLIENTS_BASE, "clients", {"prompt_tokens": NEAR, "output_tokens": LONG_OUTPUT}),
        "sessions-first-prompt": (SESSIONS_BASE, "sessions", {"first_prompt": OVER}),
        "sessions-prompt-output": (
            SESSIONS_BASE, "sessions", {"first_prompt": NEAR, "output_tokens": LONG_OUTPUT}),
    }  # fmt: skip
    cases = []
    for name, (base, key, change) in variants.items():
        for policy_name, policy in (("continuous", None), ("chunked", chunked)):
            raw = copy.deepcopy(base)
            raw["workload"][key].update(change)
            raw.pop("variants")
            if policy is not None:
                raw["policy"] = policy
            for stream in (False, True):
                argv = (*RUN, "--stream") if stream else RUN
                case_id = f"front-closed-loop-{name}-{policy_name}" + ("-stream" if stream else "")
                cases.append(Case(case_id, argv, ("s.yaml", "rejected", "max_model_len"),
                                  {"s.yaml": dump(raw)}))  # fmt: skip
    return cases


LINE = 64 * 2**20
HUGE_LINE = b'{"resourceSpans": [{"scopeSpans": [{"spans": ["'


def long_line_cases() -> list[Case]:
    """One line longer than any record (a file joined without newlines, or garbage): refused
    by its length after reading 64 MiB of it, not read whole (it took gigabytes before)."""
    good = _otlp(_span()) + b"\n"
    files = {
        "first": (Sparse(LINE + 2**20, HUGE_LINE), "line 1"),
        "second": (Sparse(LINE + good.__len__() + 2**20, good + HUGE_LINE), "line 2"),
        "gigabyte": (Sparse(2**30, HUGE_LINE), "line 1"),
    }
    cases = []
    for name, (content, line) in files.items():
        for fmt in (None, "vllm_otlp"):
            argv = ("measured", "t.json", *(("--format", fmt) if fmt else ()))
            cases.append(Case(f"front-long-line-{name}-{fmt or 'detected'}", argv,
                              ("t.json", line, "longer than 64 MiB"), {"t.json": content}))
        cases.append(Case(f"front-long-line-{name}-replay",
                          ("replay", "t.json", "--scenario", "s.yaml", "-q", "--no-plots"),
                          ("t.json", line, "longer than 64 MiB"),
                          {"t.json": content, "s.yaml": dump(BASE)}))
        trace = edited("workload", {"trace": {"path": "t.json", "format": "vllm_otlp"}})
        cases.append(Case(f"front-long-line-{name}-trace", RUN,
                          ("t.json", line, "longer than 64 MiB"),
                          {"t.json": content, "s.yaml": dump(trace)}))  # fmt: skip
    aiperf = Sparse(LINE + 2**20, b'{"metadata": {"x": "')
    cases.append(Case("front-long-line-aiperf", ("measured", "p.jsonl", "--format", "aiperf"),
                      ("p.jsonl", "line 1", "longer than 64 MiB"), {"p.jsonl": aiperf}))
    return cases


CI = dump({**edited("workload.num_requests", 5), "variants": {"a": {}}})
# baseline documents of the wrong shape: (JSON text, where the line points)
BASELINES = {
    "list": (b"[1, 2]", ("must be a mapping",)),
    "null": (b"null", ("must be a mapping",)),
    "number": (b"5", ("must be a mapping",)),
    "empty": (b"{}", ("variants", "missing")),
    "variants-list": (b'{"variants": [1]}', ("variants", "mapping")),
    "variants-null": (b'{"variants": null}', ("variants",)),
    "variant-number": (b'{"variants": {"a": 5}}', ("variants.a", "mapping")),
    "metric-nan": (b'{"variants": {"a": {"ttft_mean_s": NaN}}}', ("variants.a.ttft_mean_s",)),
    "metric-inf": (b'{"variants": {"a": {"ttft_mean_s": Infinity}}}', ("variants.a.ttft_mean_s",)),
    "metric-text": (b'{"variants": {"a": {"num_requests": "5"}}}', ("variants.a.num_requests",)),
    "metric-bool": (b'{"variants": {"a": {"num_requests": true}}}', ("variants.a.num_requests",)),
    "metric-list": (b'{"variants": {"a": {"num_requests": [5]}}}', ("variants.a.num_requests",)),
    "tolerances-number": (b'{"tolerances": 5, "variants": {}}', ("tolerances",)),
    "tolerance-negative": (b'{"tolerances": {"x": -1}, "variants": {}}', ("tolerances.x",)),
    "tolerance-nan": (b'{"tolerances": {"x": NaN}, "variants": {}}', ("tolerances.x",)),
    "tolerance-text": (b'{"tolerances": {"x": "1e-6"}, "variants": {}}', ("tolerances.x",)),
    "unknown-key": (b'{"variants": {}, "colour": 1}', ("colour",)),
    "scenario-number": (b'{"scenario": 5, "variants": {}}', ("scenario",)),
    "not-json": (b'{"variants": {', ("unreadable",)),
}


def regress_cases() -> list[Case]:
    cases = []
    for name, (content, expect) in BASELINES.items():
        for update in (False, True):
            argv = ("regress", "--scenarios", "sc", "--baselines", "bl",
                    *(("--update",) if update else ()))  # fmt: skip
            cases.append(Case(f"front-regress-{name}" + ("-update" if update else ""), argv,
                              ("bl/ci.json", *expect), {"sc/ci.yaml": CI, "bl/ci.json": content}))
    cases.append(Case("front-regress-baseline-folder",
                      ("regress", "--scenarios", "sc", "--baselines", "bl"),
                      ("bl/ci.json", "folder"), {"sc/ci.yaml": CI, "bl/ci.json": None}))
    return cases


def preset_key_cases() -> list[Case]:
    """`engine.preset_scope` and `engine.preset_profile` are what batchsim sets from a preset;
    a scenario's own was ignored (or quietly dropped the scenario's GPU-time scale)."""
    values = {"preset_scope": ("all", "engine terms only"), "preset_profile": ("roofline", "x")}
    cases = []
    for key, options in values.items():
        for i, value in enumerate(options):
            for preset in (None, "vllm-0.11_h100-sxm"):
                engine = {key: value, **({"preset": preset} if preset else {})}
                label = f"{key}-{i}-{'preset' if preset else 'alone'}"
                cases.append(scenario_case(f"front-engine-{label}", dump(edited("engine", engine)),
                                           f"engine.{key}", "set by batchsim"))  # fmt: skip
            variant = edited("variants.b", {"engine": {key: value}})
            cases.append(scenario_case(f"front-engine-{key}-{i}-variant", dump(variant),
                                       f"variants.b.engine.{key}", "set by batchsim"))
            argv = (*RUN, "--set", f"engine.{key}={value}")
            cases.append(Case(f"front-engine-{key}-{i}-set", argv, ("s.yaml", f"engine.{key}"),
                              {"s.yaml": dump(BASE)}))
    return cases


TRACE_ROWS = b"arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,20,5\n"


def trace_key_cases() -> list[Case]:
    """`benchmark` and `drop_duplicates` pick among a measured run's benchmarks and ids; on a
    trace of another format they were ignored."""
    cases = []
    for fmt in ("csv", "azure", "mooncake"):
        for key, value in (("benchmark", 0), ("benchmark", 3), ("drop_duplicates", True)):
            trace = {"path": "t.csv", "format": fmt, key: value}
            cases.append(scenario_case(f"front-trace-{fmt}-{key}-{value}",
                                       dump(edited("workload", {"trace": trace})),
                                       f"workload.trace.{key}", "measured run",
                                       **{"t.csv": TRACE_ROWS}))  # fmt: skip
    return cases


def catalog_cases() -> list[Case]:
    pair = ("--model", "llama-2-7b", "--hardware", "a100-80g")
    moe = ("--model", "deepseek-v3", "--hardware", "h200")
    flags = {
        "block-size": ("--block-size", ("0", "-1", "8193", "100000000", "1e8", str(HUGE))),
        "tensor-parallel": ("--tensor-parallel", ("0", "1025", str(HUGE), "2.5")),
        "data-parallel": ("--data-parallel", ("0", "1025", str(HUGE))),
        "pipeline-parallel": ("--pipeline-parallel", ("0", "65", str(HUGE))),
    }
    cases = []
    for name, (flag, values) in flags.items():
        for value in values:
            for with_pair, extra in (("alone", ()), ("pair", pair)):
                cases.append(Case(f"front-catalog-{name}-{value[:12]}-{with_pair}",
                                  ("catalog", *extra, flag, value), (flag,)))  # fmt: skip
    cases += [
        Case("front-catalog-expert-parallel-over",
             ("catalog", *moe, "--tensor-parallel", "8", "--data-parallel", "200",
              "--expert-parallel"), ("--expert-parallel", "1024")),
        Case("front-catalog-memory-nan", ("catalog", *pair, "--gpu-memory-utilization", "nan"),
             ("--gpu-memory-utilization",)),
    ]  # fmt: skip
    for key in ("tensor_parallel", "data_parallel", "expert_parallel", "pipeline_parallel"):
        for label, value in (("e30", HUGE), ("2e63", 2**63), ("float", 1e30), ("inf", math.inf)):
            hardware = {"name": "h200", key: value}
            raw = edited("hardware", hardware, edited("model", "deepseek-v3"))
            cases.append(scenario_case(f"front-hardware-{key}-{label}", dump(raw),
                                       f"hardware.{key}"))  # fmt: skip
    return cases


def front_door_cases() -> list[Case]:
    return [
        *table_folder_cases(),
        *points_cases(),
        *closed_loop_cases(),
        *long_line_cases(),
        *regress_cases(),
        *preset_key_cases(),
        *trace_key_cases(),
        *catalog_cases(),
    ]
