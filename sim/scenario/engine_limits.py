"""The batch limits an engine sets where a scenario leaves them unset: vLLM's server defaults.

vLLM (`EngineArgs._set_default_args`, vllm/engine/arg_utils.py; the same code in the release
wheels 0.11.0 to 0.15.1) gives an OpenAI API server (`vllm serve`) on a GPU of at least 70 GiB
that is not an A100 (H100, H200, B200, MI300X, MI355X) `max_num_batched_tokens` 8192 and
`max_num_seqs` 1024, and any other GPU (A100, L40S, A10G) 2048 and 256; `max_num_seqs` is then
at most `max_num_batched_tokens`. V1 always chunks prompts (a `chunked` policy); a `continuous`
policy here takes the seat limit alone (its token budget is the schema's).

Applied as the engine loop is (sim/scenario/engine_loop.py): under the counted-events step model
(the default `profile`, or `events`), which models the engine as it runs, to a `chunked` or
`continuous` policy's fields the scenario leaves unset, with `engine.name` vllm or unset. Under
`roofline` or a profile of one's own the schema's defaults (2048 tokens, 256 sequences) stand, as
they do for SGLang, TensorRT-LLM and ATOM (their own defaults are not modelled).
"""

from __future__ import annotations

from typing import Any

from sim.costs.catalog import GiB, HardwareSpec

LARGE_GPU_BYTES = 70 * GiB
# (max_num_batched_tokens, max_num_seqs) of `vllm serve`: on a large GPU, on any other
VLLM_LARGE = (8192, 1024)
VLLM_OTHER = (2048, 256)


def vllm_limits(hw: HardwareSpec) -> tuple[int, int]:
    """`vllm serve`'s (max_num_batched_tokens, max_num_seqs) on `hw`'s GPU."""
    large = hw.memory_bytes >= LARGE_GPU_BYTES and "a100" not in hw.name.lower()
    return VLLM_LARGE if large else VLLM_OTHER


def engine_limits(policy: Any, engine: str | None, hw: HardwareSpec, counted: bool) -> Any:
    """`policy` with the limits it leaves unset taken from the engine's defaults on `hw` (see
    the module's text); the same object when none applies. Raises ValueError when a limit the
    scenario gives contradicts a default (more seats than vLLM's default token budget)."""
    if not counted or (engine or "vllm") != "vllm" or policy.name not in ("chunked", "continuous"):
        return policy
    budget, seqs = vllm_limits(hw)
    given = policy.model_fields_set
    update: dict[str, int] = {}
    if policy.name == "chunked" and "max_num_batched_tokens" not in given:
        update["max_num_batched_tokens"] = budget
    if "max_num_seqs" not in given:
        tokens = update.get("max_num_batched_tokens", policy.max_num_batched_tokens)
        update["max_num_seqs"] = seqs if tokens is None else min(seqs, tokens)
    if all(getattr(policy, key) == value for key, value in update.items()):
        return policy
    return type(policy).model_validate({**policy.model_dump(exclude_unset=True), **update})
