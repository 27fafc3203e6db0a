"""Measured-run fixtures: vLLM OpenTelemetry spans and their export, and the start of a
vLLM server log."""

from __future__ import annotations

import json
from typing import Any

T0 = 1769021450_278127360  # ns since the epoch (2026-01-21)


def span(
    start_ns: int,
    *,
    ttft: Any = 0.25,
    e2e: Any = 3.5,
    prompt: Any = "1527",
    output: Any = "500",
    rid: str = "cmpl-a-0",
    name: str = "llm_request",
    queue: float | None = 2e-5,
    status: dict[str, Any] | None = None,
    drop: str | None = None,
) -> dict[str, Any]:
    attrs: list[dict[str, Any]] = [
        {"key": "gen_ai.latency.time_to_first_token", "value": {"doubleValue": ttft}},
        {"key": "gen_ai.latency.e2e", "value": {"doubleValue": e2e}},
        {"key": "gen_ai.usage.prompt_tokens", "value": {"intValue": prompt}},
        {"key": "gen_ai.usage.completion_tokens", "value": {"intValue": output}},
        {"key": "gen_ai.request.id", "value": {"stringValue": rid}},
        {"key": "gen_ai.request.max_tokens", "value": {"intValue": "500"}},
    ]
    if queue is not None:
        attrs.append({"key": "gen_ai.latency.time_in_queue", "value": {"doubleValue": queue}})
    attrs = [a for a in attrs if a["key"] != drop]
    end = start_ns + int(float(e2e) * 1e9) if isinstance(e2e, int | float) else start_ns
    return {
        "traceId": "2301",
        "spanId": f"s{rid}",
        "flags": 256,
        "name": name,
        "kind": 2,
        "startTimeUnixNano": str(start_ns),
        "endTimeUnixNano": str(end),
        "attributes": attrs,
        "status": status or {},
    }


def export(*spans: dict[str, Any]) -> str:
    return json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {
                        "attributes": [
                            {"key": "service.name", "value": {"stringValue": "vllm-exp1"}}
                        ]
                    },
                    "scopeSpans": [{"scope": {"name": "vllm.llm_engine"}, "spans": list(spans)}],
                }
            ]
        }
    )


SIZES = [512, *range(504, 7, -8), 4, 2, 1]


COMPILATION = (
    '{"level":3,"use_cudagraph":true,"cudagraph_capture_sizes":['
    + ",".join(map(str, SIZES))
    + '],"max_capture_size":512,"local_cache_dir":null}'
)


def start(version: str = "0.11.0", max_model_len: int = 4096, eager: bool = False) -> list[str]:
    ts = "2026-01-21 10:49:03,749 INFO"
    return [
        f"{ts} vllm.entrypoints.openai.api_server: vLLM API server version {version}",
        f"{ts} vllm.entrypoints.utils: non-default args: {{'model_tag': '/m/llama', 'model': "
        f"'/m/llama', 'max_model_len': {max_model_len}, 'served_model_name': ['meta-llama/L'], "
        "'max_num_batched_tokens': 4096, 'max_num_seqs': 256, 'gpu_memory_utilization': 0.85}",
        f"{ts} vllm.config.scheduler: Chunked prefill is enabled with max_num_batched_tokens=4096.",
        f"(EngineCore_DP0 pid=231) {ts} vllm.v1.engine.core: Initializing a V1 LLM engine "
        f"(v{version}) with config: model='/m/llama', speculative_config=None, "
        "tokenizer='/m/llama', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
        "trust_remote_code=False, dtype=torch.float16, max_seq_len="
        f"{max_model_len}, download_dir=None, load_format=auto, tensor_parallel_size=2, "
        "pipeline_parallel_size=1, data_parallel_size=1, disable_custom_all_reduce=False, "
        f"quantization=None, enforce_eager={eager}, kv_cache_dtype=auto, device_config=cuda, "
        "structured_outputs_config=StructuredOutputsConfig(backend='auto', "
        "disable_fallback=False), observability_config=ObservabilityConfig("
        "show_hidden_metrics_for_version=None, otlp_traces_endpoint='http://otel:4318/v1/traces',"
        " collect_detailed_traces=None), seed=0, served_model_name=meta-llama/L, "
        "enable_prefix_caching=True, chunked_prefill_enabled=True, pooler_config=None, "
        f"compilation_config={COMPILATION}",
        f"\x1b[1;36m(EngineCore_DP0 pid=231)\x1b[0;0m {ts} vllm.v1.worker.gpu_worker: "
        "Available KV cache memory: 58.12 GiB",
        f"(EngineCore_DP0 pid=231) {ts} vllm.v1.core.kv_cache_utils: GPU KV cache size: "
        "119,008 tokens",
        f"{ts} vllm.v1.core.kv_cache_utils: Maximum concurrency for 4,096 tokens per request: "
        "29.05x",
        f"(APIServer pid=1) {ts} vllm.v1.metrics.loggers: Engine 000: vllm cache_config_info "
        "with initialization after num_gpu_blocks is: 7438",
    ]
