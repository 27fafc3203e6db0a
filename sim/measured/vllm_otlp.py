"""Reader of vLLM's OpenTelemetry request spans, as an OTLP JSON file exporter writes them.

One JSON export per line, `{"resourceSpans": [{"resource": ..., "scopeSpans": [{"scope": ...,
"spans": [...]}]}]}`, any number of spans per line. vLLM (`--otlp-traces-endpoint`) emits one span
named `llm_request` per finished request: `startTimeUnixNano` is the request's arrival at the
engine (nanoseconds as a string of digits), and the attributes, each `{"key": ..., "value":
{"doubleValue" | "intValue" (a string) | "stringValue": ...}}`, carry the latencies in seconds
(`gen_ai.latency.time_to_first_token`, `.e2e`, `.time_in_queue`, `.time_in_model_prefill`,
`.time_in_model_decode`) and the token counts (`gen_ai.usage.prompt_tokens`,
`.completion_tokens`, `gen_ai.request.max_tokens`) and id (`gen_ai.request.id`).

Spans of other names are skipped (counted in meta); a span whose status is an error is left out
and counted in `num_failed`. A span without TTFT, E2E or the two token counts is an error naming
the line and span id.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from sim.errors import ScenarioError
from sim.measured.detect import wrong_tool
from sim.measured.run import MeasuredRun, assemble
from sim.measured.values import (
    json_file_lines,
    latency,
    listing,
    mapping,
    tokens,
    ttft_within_e2e,
    unix_seconds,
)

SPAN_NAME = "llm_request"
TTFT, E2E, QUEUE = (
    "gen_ai.latency.time_to_first_token",
    "gen_ai.latency.e2e",
    "gen_ai.latency.time_in_queue",
)
PREFILL, DECODE = "gen_ai.latency.time_in_model_prefill", "gen_ai.latency.time_in_model_decode"
PROMPT, COMPLETION = "gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens"
REQUEST_ID, MAX_TOKENS = "gen_ai.request.id", "gen_ai.request.max_tokens"
_VALUE_KINDS = ("doubleValue", "intValue", "stringValue", "boolValue")


def _attributes(raw: Any, *, file: str, at: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in listing(raw if raw is not None else [], "attributes", file=file, at=at):
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise ScenarioError("an attribute is not {key, value}", file=file, path=at)
        value = item.get("value")
        if isinstance(value, dict):
            kind = next((k for k in _VALUE_KINDS if k in value), None)
            out[item["key"]] = None if kind is None else value[kind]
    return out


def _spans(path: Path, file: str) -> Any:
    """(line number, resource attributes, scope name, span) of every span in the file."""
    for number, export in json_file_lines(path, "OTLP trace file"):
        at = f"line {number}"
        if "resourceSpans" not in export:
            raise ScenarioError(wrong_tool(export, "vllm_otlp"), file=file, path=at)
        for resource_spans in listing(export["resourceSpans"], "resourceSpans", file=file, at=at):
            resource_spans = mapping(resource_spans, "a resourceSpans item", file=file, at=at)
            resource = mapping(resource_spans.get("resource") or {}, "resource", file=file, at=at)
            res_attrs = _attributes(resource.get("attributes"), file=file, at=at)
            for scope_spans in listing(
                resource_spans.get("scopeSpans") or [], "scopeSpans", file=file, at=at
            ):
                scope_spans = mapping(scope_spans, "a scopeSpans item", file=file, at=at)
                scope = (scope_spans.get("scope") or {}).get("name")
                for span in listing(scope_spans.get("spans") or [], "spans", file=file, at=at):
                    yield number, res_attrs, scope, mapping(span, "a span", file=file, at=at)


def _start_s(value: Any, *, file: str, at: str) -> float:
    # nanoseconds as a string of digits: parsed as an int (exact), bounded, then scaled
    if isinstance(value, str) and value.isdigit() and len(value) <= 20:
        return unix_seconds(int(value), "startTimeUnixNano", file=file, at=at, scale=1e-9)
    return unix_seconds(value, "startTimeUnixNano", file=file, at=at, scale=1e-9)


def read_vllm_otlp(path: Path) -> MeasuredRun:
    """The `llm_request` spans of an OTLP JSON-lines file (see the module docstring)."""
    file = str(path)
    rows: dict[str, list[Any]] = {k: [] for k in ("arrival", "prompt", "output", "ttft", "e2e")}
    ids: list[str] = []
    records: list[str] = []
    queue: list[float] = []
    services: set[str] = set()
    scopes: set[str] = set()
    skipped = failed = 0
    for number, res_attrs, scope, span in _spans(path, file):
        if span.get("name") != SPAN_NAME:
            skipped += 1
            continue
        at = f"line {number}, span {span.get('spanId', '?')}"
        status = span.get("status") or {}
        if isinstance(status, dict) and status.get("code") in (2, "STATUS_CODE_ERROR"):
            failed += 1
            continue
        attrs = _attributes(span.get("attributes"), file=file, at=at)
        for key in (TTFT, E2E, PROMPT, COMPLETION):
            if attrs.get(key) is None:
                raise ScenarioError(f"span has no {key}", file=file, path=at)
        ttft = latency(attrs[TTFT], TTFT, file=file, at=at)
        e2e = latency(attrs[E2E], E2E, file=file, at=at)
        ttft_within_e2e(ttft, e2e, file=file, at=at)
        rows["arrival"].append(_start_s(span.get("startTimeUnixNano"), file=file, at=at))
        rows["prompt"].append(tokens(attrs[PROMPT], PROMPT, file=file, at=at))
        rows["output"].append(tokens(attrs[COMPLETION], COMPLETION, file=file, at=at))
        rows["ttft"].append(ttft)
        rows["e2e"].append(e2e)
        queued = attrs.get(QUEUE)
        queue.append(math.nan if queued is None else latency(queued, QUEUE, file=file, at=at))
        request_id = attrs.get(REQUEST_ID)
        ids.append(str(request_id) if request_id is not None else str(len(ids)))
        records.append(at)
        if isinstance(res_attrs.get("service.name"), str):
            services.add(res_attrs["service.name"])
        if isinstance(scope, str):
            scopes.add(scope)
    meta: dict[str, Any] = {
        "tool": "vllm (OpenTelemetry)",
        "service_name": sorted(services),
        "scope": sorted(scopes),
        "other_spans_skipped": skipped,
    }
    return assemble(
        source=file,
        fmt="vllm_otlp",
        arrival=rows["arrival"],
        prompt_tokens=rows["prompt"],
        output_tokens=rows["output"],
        ttft_s=rows["ttft"],
        e2e_s=rows["e2e"],
        request_id=ids,
        records=records,
        unix_clock=True,
        meta=meta,
        num_failed=failed,
        queue_s=None if all(math.isnan(q) for q in queue) else queue,
    )
