"""The fuzz corpus, part 5: measured runs and vLLM logs, read through `batchsim measured`.

Each case is a broken file of one reader (vLLM OTLP spans, `vllm bench serve` results, GuideLLM
reports, AIPerf exports, batchsim tables, vLLM startup logs) or a bad command line; the one
error line must name the file and the record (line, span, request, row) at fault.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from fuzz_corpus import Case, Sparse

T0_NS = 1769021450278127360
T0 = T0_NS / 1e9


def _span(**attrs: Any) -> dict[str, Any]:
    values = {
        "gen_ai.latency.time_to_first_token": {"doubleValue": 0.25},
        "gen_ai.latency.e2e": {"doubleValue": 3.5},
        "gen_ai.usage.prompt_tokens": {"intValue": "1527"},
        "gen_ai.usage.completion_tokens": {"intValue": "500"},
        "gen_ai.request.id": {"stringValue": "cmpl-1"},
    }
    start = attrs.pop("start", str(T0_NS))
    for key, value in attrs.items():
        full = f"gen_ai.{key.replace('__', '.')}"
        if value is None:
            values.pop(full)
        else:
            values[full] = value
    return {
        "traceId": "23", "spanId": "66d6", "name": "llm_request", "kind": 2,
        "startTimeUnixNano": start, "endTimeUnixNano": str(T0_NS + 3_500_000_000),
        "attributes": [{"key": k, "value": v} for k, v in values.items()], "status": {},
    }  # fmt: skip


def _otlp(*spans: dict[str, Any]) -> bytes:
    scope = {"scope": {"name": "vllm.llm_engine"}, "spans": list(spans)}
    return json.dumps({"resourceSpans": [{"resource": {}, "scopeSpans": [scope]}]}).encode()


def _case(kind: str, name: str, fmt: str | None, content: bytes, *expect: str) -> Case:
    fname = {"otlp": "t.json", "bench": "b.json", "guide": "g.json", "aiperf": "p.jsonl"}[kind]
    argv = ("measured", fname, *(("--format", fmt) if fmt else ()))
    return Case(f"measured-{kind}-{name}", argv, (fname, *expect), {fname: content})


def otlp_cases() -> list[Case]:
    good = _otlp(_span())
    bad = {
        "ttft-negative": (_span(latency__time_to_first_token={"doubleValue": -1}), "negative"),
        "ttft-nan": (_span(latency__time_to_first_token={"doubleValue": float("nan")}), "finite"),
        "e2e-inf": (_span(latency__e2e={"doubleValue": float("inf")}), "finite"),
        "e2e-missing": (_span(latency__e2e=None), "no gen_ai.latency.e2e"),
        "e2e-string": (_span(latency__e2e={"stringValue": "fast"}), "not a number"),
        "e2e-bool": (_span(latency__e2e={"boolValue": True}), "not a number"),
        "ttft-over-e2e": (_span(latency__e2e={"doubleValue": 0.1}), "exceeds"),
        "prompt-zero": (_span(usage__prompt_tokens={"intValue": "0"}), "below 1"),
        "prompt-huge": (_span(usage__prompt_tokens={"intValue": "1e99"}), "above"),
        "output-fraction": (_span(usage__completion_tokens={"doubleValue": 2.5}), "integer"),
        "output-missing": (_span(usage__completion_tokens=None), "no gen_ai.usage"),
        "start-seconds": (_span(start=str(int(T0))), "another clock or unit"),
        "start-garbage": (_span(start="yesterday"), "not a number"),
        "latency-month": (_span(latency__e2e={"doubleValue": 1e8}), "above"),
    }
    cases = [
        _case("otlp", name, "vllm_otlp", good + b"\n" + _otlp(span), "line 2, span 66d6", why)
        for name, (span, why) in bad.items()
    ]
    far = _span(start=str(T0_NS + 40 * 365 * 86400 * 10**9))
    return [
        *cases,
        _case("otlp", "decades-apart", None, good + b"\n" + _otlp(far), "different clocks"),
        _case("otlp", "not-json", "vllm_otlp", good + b"\n{nope\n", "line 2", "not JSON"),
        _case("otlp", "truncated", None, good + b"\n" + good[:-9], "line 2", "truncated"),
        _case("otlp", "no-spans", None, _otlp(), "no completed request"),
        _case("otlp", "guidellm-file", "vllm_otlp", b'{"benchmarks": []}', "GuideLLM"),
        _case("otlp", "list-line", "vllm_otlp", b"[1, 2]\n", "line 1", "not a JSON object"),
        _case("otlp", "spans-not-list", None, b'{"resourceSpans": 5}', "line 1", "not a JSON list"),
        # the same span exported twice: counted twice before, now refused by id
        _case("otlp", "exported-twice", None, good + b"\n" + good, "cmpl-1", "more than once"),
    ]


BENCH: dict[str, Any] = {
    "date": "20260121-105000", "backend": "vllm", "model_id": "m", "request_rate": 2.0,
    "input_lens": [100, 200], "output_lens": [3, 2], "ttfts": [0.5, 0.25],
    "itls": [[0.1, 0.2], [0.3]], "errors": ["", ""], "start_times": [10.0, 11.0],
}  # fmt: skip


def _bench(**changes: Any) -> bytes:
    out = copy.deepcopy(BENCH)
    out.update(changes)
    return json.dumps({k: v for k, v in out.items() if v is not None}).encode()


def bench_cases() -> list[Case]:
    bad = {
        "ttft-negative": ({"ttfts": [0.5, -0.25]}, "request 1", "negative"),
        "ttft-inf": ({"ttfts": [0.5, float("inf")]}, "request 1", "finite"),
        "input-zero": ({"input_lens": [100, 0]}, "request 1", "below 1"),
        "input-huge": ({"input_lens": [100, 10**12]}, "request 1", "above"),
        "output-negative": ({"output_lens": [3, -2]}, "request 1", "below 0"),
        "itl-nan": ({"itls": [[0.1, float("nan")], [0.3]]}, "request 0", "finite"),
        "itl-not-list": ({"itls": [5, [0.3]]}, "request 0", "not a JSON list"),
        "short-list": ({"output_lens": [3]}, "output_lens", "1 entries for 2"),
        "start-mixed": ({"start_times": [10.0, 1e10]}, "request", "different clocks"),
        "start-inf": ({"start_times": [10.0, float("inf")]}, "request 1", "finite"),
        "all-failed": ({"errors": ["x", "y"]}, "no completed request"),
        "no-detail": ({"input_lens": None, "ttfts": None}, "--save-detailed"),
        "rate-negative": ({"start_times": None, "request_rate": -1}, "request_rate", "positive"),
    }
    cases = [
        _case("bench", name, "vllm_bench", _bench(**changes), *why)
        for name, (changes, *why) in bad.items()
    ]
    return [
        *cases,
        _case("bench", "truncated", "vllm_bench", _bench()[:-20], "line 1", "truncated"),
        Case("measured-bench-index", ("measured", "b.json", "--benchmark", "4"),
             ("b.json", "benchmark 4 asked for"), {"b.json": _bench()}),
    ]  # fmt: skip


def _guide(request: dict[str, Any] | None = None, benches: Any = None) -> bytes:
    good = {"request_id": "r", "prompt_tokens": 10, "output_tokens": 5,
            "request_start_time": T0, "request_end_time": T0 + 2,
            "info": {"timings": {"first_token_iteration": T0 + 0.5}}}  # fmt: skip
    if benches is None:
        requests = [good, {**good, **(request or {})}]
        benches = [{"requests": {"successful": requests, "errored": [], "incomplete": []}}]
    return json.dumps({"benchmarks": benches}).encode()


def guidellm_cases() -> list[Case]:
    at = "benchmarks[0].requests.successful[1]"
    bad = {
        "start-ms": ({"request_start_time": T0 * 1000}, at, "another clock or unit"),
        "end-before-start": ({"request_end_time": T0 - 5}, at, "before the request's start"),
        "no-end": ({"request_end_time": None}, at, "no end time"),
        "prompt-zero": ({"prompt_tokens": 0}, at, "below 1"),
        "output-text": ({"output_tokens": "many"}, at, "not a number"),
        "output-nan": ({"output_tokens": float("nan")}, at, "finite"),
    }
    cases = [_case("guide", n, "guidellm", _guide(r), *why) for n, (r, *why) in bad.items()]
    return [
        *cases,
        _case("guide", "no-benchmarks", None, _guide(benches=[]), "no benchmark"),
        _case("guide", "requests-missing", None, _guide(benches=[{}]), "benchmarks[0]"),
        _case("guide", "aiperf-file", "guidellm", b'{"metadata": {}, "metrics": {}}', "AIPerf"),
        _case("guide", "not-json", "guidellm", b"{'benchmarks': []}", "line 1", "not JSON"),
        Case("measured-guide-index", ("measured", "g.json", "--benchmark", "9"),
             ("g.json", "benchmark 9 asked for"), {"g.json": _guide()}),
    ]  # fmt: skip


def _aiperf(metrics: dict[str, Any] | None = None, **meta: Any) -> bytes:
    good_metrics = {
        "input_sequence_length": {"value": 550, "unit": "tokens"},
        "time_to_first_token": {"value": 250.0, "unit": "ms"},
        "request_latency": {"value": 1250.0, "unit": "ms"},
        "output_sequence_length": {"value": 9, "unit": "tokens"},
    }
    good = {"metadata": {"request_start_ns": T0_NS, "benchmark_phase": "profiling"},
            "metrics": good_metrics, "error": None}  # fmt: skip
    other = copy.deepcopy(good)
    other["metrics"].update(metrics or {})
    other["metadata"].update(meta)
    return (json.dumps(good) + "\n" + json.dumps(other) + "\n").encode()


def aiperf_cases() -> list[Case]:
    bad = {
        "unit": ({"request_latency": {"value": 5, "unit": "fortnights"}}, {}, "not a time unit"),
        "no-latency": ({"request_latency": None}, {}, "no request_latency"),
        "isl-huge": ({"input_sequence_length": {"value": 1e12, "unit": "tokens"}}, {}, "above"),
        "isl-bytes": ({"input_sequence_length": {"value": 5, "unit": "bytes"}}, {}, "not tokens"),
        "ttft-nan": ({"time_to_first_token": {"value": float("nan"), "unit": "ms"}}, {}, "finite"),
        "metric-bare": ({"request_latency": 5}, {}, "not {value, unit}"),
        "start-us": ({}, {"request_start_ns": T0_NS // 1000}, "another clock or unit"),
        "start-missing": ({}, {"request_start_ns": None}, "no metadata.request_start_ns"),
    }
    cases = [
        _case("aiperf", name, "aiperf", _aiperf(m, **meta), "line 2", why)
        for name, (m, meta, why) in bad.items()
    ]
    cancelled = _aiperf(was_cancelled=True).split(b"\n")[1]
    return [
        *cases,
        _case("aiperf", "all-cancelled", None, cancelled, "no completed request"),
        _case("aiperf", "otlp-file", "aiperf", _otlp(_span()), "line 1", "OpenTelemetry"),
    ]


def batchsim_cases() -> list[Case]:
    header = b"id,arrival_s,num_prompt_tokens,num_output_tokens,ttft_s,e2e_s,variant\n"
    good = b"0,0.0,10,3,0.1,0.5,a\n"
    rows = {
        "prompt-zero": (b"1,0.5,0,3,0.1,0.5,a\n", "row 2", "outside"),
        "arrival-text": (b"1,soon,10,3,0.1,0.5,a\n", "row 2", "finite"),
        "ttft-late": (b"1,0.5,10,3,0.9,0.5,a\n", "row 2", "exceeds"),
        "e2e-negative": (b"1,0.5,10,3,0.1,-0.5,a\n", "row 2", "outside"),
        "output-huge": (b"1,0.5,10,1e12,0.1,0.5,a\n", "row 2", "outside"),
    }
    cases = [
        Case(f"measured-table-{name}", ("measured", "requests.csv"), ("requests.csv", *why),
             {"requests.csv": header + good + row})
        for name, (row, *why) in rows.items()
    ]  # fmt: skip
    no_column = {"requests.csv": b"id,arrival_s\n0,0.0\n"}
    return [
        *cases,
        Case("measured-table-column", ("measured", "requests.csv"),
             ("requests.csv", "no num_prompt_tokens column"), no_column),
        Case("measured-table-variant", ("measured", "requests.csv", "--variant", "zz"),
             ("requests.csv", "no variant 'zz'"), {"requests.csv": header + good}),
        Case("measured-table-empty-folder", ("measured", "res"),
             ("res", "no requests.parquet or requests.csv"), {"res": None}),
        Case("measured-table-parquet", ("measured", "requests.parquet"),
             ("requests.parquet", "not a readable requests table"),
             {"requests.parquet": b"PAR1 not really"}),
    ]  # fmt: skip


INIT = b"INFO core.py: Initializing a V1 LLM engine (v0.11.0) with config: model='m', "


def log_cases() -> list[Case]:
    start = b"2026-01-21 10:49:03,749 INFO vllm.entrypoints.openai.api_server: vLLM API server version 0.11.0\n"  # noqa: E501

    def log(name: str, content: bytes, *expect: str) -> Case:
        argv = ("measured", "--vllm-log", "v.log")
        return Case(f"measured-log-{name}", argv, ("v.log", *expect), {"v.log": content})

    return [
        log("no-start", b"INFO vllm.platforms: detected platform cuda\n", "no engine start"),
        log("empty", b"", "no engine start"),
        log("blocks-huge", start + b"num_gpu_blocks is: 99999999999\n", "line 2", "out of range"),
        log("args-broken", start + b"non-default args: {'model': x}\n", "line 2", "dict literal"),
        log("utilization", start + b"non-default args: {'gpu_memory_utilization': 2.0}\n",
            "line 2", "(0, 1]"),
        log("binary", b"\xff\xfe\x00garbage", "UTF-8"),
        log("blocks-zero", start + b"num_gpu_blocks is: 0\n", "line 2", "GPU blocks", "range"),
        log("seqs-text", start + b"non-default args: {'max_num_seqs': 'many'}\n", "line 2",
            "max_num_seqs", "whole number"),
        log("seqs-zero", start + b"non-default args: {'max_num_seqs': 0}\n", "line 2",
            "max_num_seqs", "range"),
        log("seqs-float", start + b"non-default args: {'max_num_seqs': 2.5}\n", "line 2",
            "max_num_seqs"),
        log("capture-bad", start + INIT + b'compilation_config={"cudagraph_capture_sizes": '
            b'[-8, 0, 1e12]}\n', "line 2", "cudagraph_capture_sizes"),
        log("capture-not-list", start + INIT + b'compilation_config={"cudagraph_capture_sizes": '
            b'"all"}\n', "line 2", "cudagraph_capture_sizes"),
        log("tp-text", start + INIT + b"tensor_parallel_size=two, dtype=torch.float16\n",
            "line 2", "tensor_parallel_size", "whole number"),
    ]  # fmt: skip


def command_cases() -> list[Case]:
    otlp = {"t.json": _otlp(_span())}
    return [
        Case("measured-cli-nothing", ("measured",), ("measured", "either"), {}),
        Case("measured-cli-both", ("measured", "t.json", "--vllm-log", "t.json"),
             ("measured", "either"), otlp),
        Case("measured-cli-missing", ("measured", "nope.json"), ("nope.json", "not found"), {}),
        Case("measured-cli-folder", ("measured", "d", "--format", "vllm_otlp"),
             ("d", "is a folder"), {"d": None}),
        Case("measured-cli-unknown", ("measured", "x.json"), ("x.json", "vllm_otlp", "aiperf"),
             {"x.json": b'{"hello": 1}'}),
        Case("measured-cli-benchmark", ("measured", "t.json", "--benchmark", "-1"),
             ("--benchmark",), otlp),
        Case("measured-cli-format", ("measured", "t.json", "--format", "csv"), ("--format",), otlp),
        Case("measured-cli-otlp-index", ("measured", "t.json", "--benchmark", "1"),
             ("t.json", "--benchmark does not apply"), otlp),
        Case("measured-cli-variant", ("measured", "t.json", "--variant", "a"),
             ("t.json", "batchsim results only"), otlp),
    ]  # fmt: skip


def sparse_cases() -> list[Case]:
    """Files of 3 GiB (sparse: no disk) in each format: refused by their size before a byte is
    parsed."""
    heads = {
        "vllm_otlp": b'{"resourceSpans": []}\n',
        "aiperf": b'{"metadata": {}, "metrics": {}}\n',
        "vllm_bench": b'{"input_lens": [1]',
        "guidellm": b'{"benchmarks": [',
    }
    return [
        Case(f"measured-sparse-{fmt}", ("measured", "big.json", "--format", fmt),
             ("big.json", "at most 2048 MiB"), {"big.json": Sparse(3 * 2**30, head)})
        for fmt, head in heads.items()
    ]  # fmt: skip


def measured_cases() -> list[Case]:
    return [
        *sparse_cases(),
        *otlp_cases(),
        *bench_cases(),
        *guidellm_cases(),
        *aiperf_cases(),
        *batchsim_cases(),
        *log_cases(),
        *command_cases(),
    ]
