"""The batch limits and KV memory an engine sets where a scenario leaves them unset.

Read from each engine's source:

- vLLM (`EngineArgs._set_default_args`, vllm/engine/arg_utils.py; the same code in the release
  wheels 0.11.0 to 0.15.1) gives an OpenAI API server (`vllm serve`) on a GPU of at least 70 GiB
  that is not an A100 (H100, H200, B200, MI300X, MI355X) `max_num_batched_tokens` 8192 and
  `max_num_seqs` 1024, and any other GPU (A100, L40S, A10G) 2048 and 256; `max_num_seqs` is
  then at most `max_num_batched_tokens`. V1 always chunks prompts (a `chunked` policy); a
  `continuous` policy takes the seat limit alone. Its KV memory is the catalog's:
  `gpu_memory_utilization` 0.9 of the GPU, less the weights and the activations of a profiling
  run (`activation_reserve_bytes`).
- SGLang (python/sglang/srt/server_args.py `_handle_gpu_memory_settings`,
  managers/tp_worker.py, model_executor/model_runner.py; wheel 0.5.6) sizes by the GPU's memory
  in MiB: `chunked_prefill_size` 2048 under 35 GiB, 4096 under 60, 8192 under 160, else 16384;
  `cuda_graph_max_bs` 24/32/256 under 35/60/160 GiB at TP under 4 (80/160/512 at TP 4 or
  more), else 512. `mem_fraction_static` (weights and KV over the GPU's memory) is
  (memory - reserved) / memory with reserved = 512 + 1.5 max(chunk, 2048) + 2 cuda_graph_max_bs
  + 1024 TP x PP / 8 MiB (+ 3 cuda_graph_max_bs x DP with DP attention, and 1.5 more past 300),
  at least 10 GiB on a GPU over 60 GiB. `max_running_requests` is min(KV tokens / 2, the request
  pool), the pool min(max(KV tokens / context length x 512, 2048), 4096). A prefill batch holds
  up to `max_prefill_tokens` 16384 (a `continuous` policy's budget); a `chunked` policy's budget
  is the chunk.
- TensorRT-LLM (`trtllm-serve`, tensorrt_llm/commands/serve.py `get_llm_args`; `BuildConfig`
  in tensorrt_llm/builder.py) passes `max_batch_size` 2048 and `max_num_tokens` 8192 (a step's
  tokens: a `chunked` policy's budget, a `continuous` policy's prefill batch) and a KV cache of
  `free_gpu_memory_fraction` 0.9 of the memory left once the weights are loaded and a profiling
  run has taken its activations: per GPU 0.9 (memory - weights - activations), held here as the
  `gpu_memory_utilization` that leaves the same KV with no reserve beside it.
- ATOM: the schema's defaults (its own are not modelled).
- Data-parallel attention (`hardware.data_parallel` > 1): each rank schedules its own requests
  and chunks its own prompts, the ranks' steps run together. vLLM (an engine core per rank)
  and TensorRT-LLM (attention DP) give every rank the limits above, so the instance's are `dp`
  times them; SGLang divides `chunked_prefill_size` over the ranks (server_args.py
  `_handle_data_parallelism`). A `chunked` policy's `long_prefill_token_threshold` is a rank's
  share of the step's tokens: a step holds a chunk of a prompt on every rank, not a few whole
  prompts on a few ranks.

Applied as the engine loop is (sim/scenario/engine_loop.py): under the counted-events step model
(the default `profile`, or `events`), which models the engine as it runs, to the fields a
scenario leaves unset. Under `roofline` or a profile of one's own the schema's defaults (2048
tokens, 256 sequences, 0.9 of the memory less 1 GiB per GPU) stand.
"""

from __future__ import annotations

from typing import Any

from sim.costs.catalog import (
    GiB,
    HardwareSpec,
    ModelSpec,
    kv_capacity_tokens,
    stored_weight_bytes,
)

MiB = 2**20
LARGE_GPU_BYTES = 70 * GiB
# (max_num_batched_tokens, max_num_seqs) of `vllm serve`: on a large GPU, on any other
VLLM_LARGE = (8192, 1024)
VLLM_OTHER = (2048, 256)
SGLANG_MAX_PREFILL_TOKENS = 16384
# SGLang by GPU memory (MiB, below): chunked_prefill_size, cuda_graph_max_bs at TP < 4 and >= 4
SGLANG_SIZES = ((35 * 1024, 2048, 24, 80), (60 * 1024, 4096, 32, 160),
                (160 * 1024, 8192, 256, 512))  # fmt: skip
SGLANG_LARGEST = (16384, 512, 512)
# trtllm-serve's (max_num_tokens, max_batch_size) and its KV share of the free memory
TRTLLM_LIMITS = (8192, 2048)
TRTLLM_FREE_FRACTION = 0.9


def vllm_limits(hw: HardwareSpec) -> tuple[int, int]:
    """`vllm serve`'s (max_num_batched_tokens, max_num_seqs) on `hw`'s GPU."""
    large = hw.memory_bytes >= LARGE_GPU_BYTES and "a100" not in hw.name.lower()
    return VLLM_LARGE if large else VLLM_OTHER


def sglang_sizes(hw: HardwareSpec) -> tuple[int, int]:
    """SGLang's (chunked_prefill_size, cuda_graph_max_bs) on `hw`."""
    mib = hw.memory_bytes / MiB
    for below, chunk, small_tp, large_tp in SGLANG_SIZES:
        if mib < below:
            return chunk, small_tp if hw.tensor_parallel < 4 else large_tp
    return SGLANG_LARGEST[0], SGLANG_LARGEST[1 if hw.tensor_parallel < 4 else 2]


def sglang_memory_fraction(hw: HardwareSpec) -> float:
    """SGLang's `mem_fraction_static` on `hw` (no speculation)."""
    mib = hw.memory_bytes / MiB
    chunk, graph_bs = sglang_sizes(hw)
    reserved = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2
    reserved += hw.tensor_parallel * hw.pipeline_parallel / 8 * 1024
    if hw.data_parallel > 1:  # DP attention pads its graphs per rank
        reserved += graph_bs * hw.data_parallel * 3
        if graph_bs > 300:
            reserved += graph_bs * hw.data_parallel * 1.5
    if mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mib - reserved) / mib, 3)


def trtllm_memory_fraction(hw: HardwareSpec, model: ModelSpec) -> float:
    """The `gpu_memory_utilization` that leaves TensorRT-LLM's KV cache with no reserve:
    0.9 of each GPU's memory less its weights and `hw`'s activation reserve, plus the weights."""
    weights = stored_weight_bytes(model, hw) / hw.num_gpus
    free = hw.memory_bytes - weights - hw.activation_reserve_bytes
    used = TRTLLM_FREE_FRACTION * max(free, 0.0) + weights
    return round(min(used / hw.memory_bytes, 1.0), 4)


def engine_memory(
    hw: HardwareSpec, engine: str | None, counted: bool, model: ModelSpec | None = None
) -> HardwareSpec:
    """`hw` with the KV memory fields it leaves unset taken from the engine (SGLang's memory
    fraction holds the activations and graphs, TensorRT-LLM's is a share of what they leave
    (`model`'s weights): no reserve beside either)."""
    if not counted or engine not in ("sglang", "trt-llm"):
        return hw
    given = hw.model_fields_set
    update: dict[str, Any] = {}
    if "gpu_memory_utilization" not in given:
        if engine == "sglang":
            update["gpu_memory_utilization"] = sglang_memory_fraction(hw)
        elif model is not None:
            update["gpu_memory_utilization"] = trtllm_memory_fraction(hw, model)
    if update and "activation_reserve_bytes" not in given:
        update["activation_reserve_bytes"] = 0
    return hw.model_copy(update=update) if update else hw


def engine_limits(
    policy: Any, engine: str | None, hw: HardwareSpec, counted: bool, model: ModelSpec
) -> Any:
    """`policy` with the limits it leaves unset taken from the engine's defaults on `hw` (see
    the module's text; `hw` with the engine's memory already, `engine_memory`); the same object
    when none applies. Raises ValueError when a limit the scenario gives contradicts a default
    (more seats than the default token budget)."""
    engine = engine or "vllm"
    if not counted or engine not in ("vllm", "sglang", "trt-llm"):
        return policy
    if policy.name not in ("chunked", "continuous"):
        return policy
    if engine == "vllm":
        budget, seqs = vllm_limits(hw)
    elif engine == "trt-llm":
        budget, seqs = TRTLLM_LIMITS
    else:
        chunk, _ = sglang_sizes(hw)
        budget = chunk if policy.name == "chunked" else SGLANG_MAX_PREFILL_TOKENS
        tokens = max(kv_capacity_tokens(model, hw), 0)
        pool = min(max(int(tokens / model.max_model_len * 512), 2048), 4096)
        seqs = max(min(tokens // 2, pool), 1)
    dp = hw.data_parallel
    if dp > 1 and engine != "sglang":  # a scheduler per rank, each with the engine's limits
        budget, seqs = budget * dp, seqs * dp
    given = policy.model_fields_set
    update: dict[str, int] = {}
    budgeted = policy.name == "chunked" or engine in ("sglang", "trt-llm")
    if budgeted and "max_num_batched_tokens" not in given:
        update["max_num_batched_tokens"] = budget
    if dp > 1 and policy.name == "chunked" and "long_prefill_token_threshold" not in given:
        # each rank chunks its own prompts: a rank's share of the step's tokens
        per_step = update.get("max_num_batched_tokens", policy.max_num_batched_tokens)
        update["long_prefill_token_threshold"] = max(per_step // dp, 1)
    if "max_num_seqs" not in given:
        # vLLM: at most the token budget; a chunked step holds every running request's decode
        per_step = update.get("max_num_batched_tokens", policy.max_num_batched_tokens)
        bounded = per_step is not None and (engine == "vllm" or policy.name == "chunked")
        update["max_num_seqs"] = min(seqs, per_step) if bounded else seqs
    if all(getattr(policy, key) == value for key, value in update.items()):
        return policy
    return type(policy).model_validate({**policy.model_dump(exclude_unset=True), **update})
