"""Which tool wrote a measured file, from its first JSON value: used to pick a reader when the
user names no format, and to say "this looks like GuideLLM's report" when a reader is handed
another tool's file.
"""

from __future__ import annotations

from typing import Any

TOOL_NAMES = {
    "vllm_otlp": "vLLM's OpenTelemetry spans (OTLP JSON)",
    "vllm_bench": "a `vllm bench serve` result",
    "guidellm": "a GuideLLM benchmarks report",
    "aiperf": "an AIPerf profile_export.jsonl",
    "batchsim": "a batchsim requests table",
}


def looks_like(obj: Any) -> str | None:
    """The format whose files start with a JSON value like `obj`, or None."""
    if not isinstance(obj, dict):
        return None
    if "resourceSpans" in obj:
        return "vllm_otlp"
    if "benchmarks" in obj and isinstance(obj["benchmarks"], list):
        return "guidellm"
    if "metadata" in obj and ("metrics" in obj or "error" in obj):
        return "aiperf"
    if "input_lens" in obj or ("ttfts" in obj and "duration" in obj) or "completed" in obj:
        return "vllm_bench"
    return None


def wrong_tool(obj: Any, expected: str) -> str:
    """The reason a file of another kind is refused by the `expected` reader."""
    other = looks_like(obj)
    if other is not None and other != expected:
        return f"not {TOOL_NAMES[expected]}: it looks like {TOOL_NAMES[other]} (format {other})"
    return f"not {TOOL_NAMES[expected]}"
