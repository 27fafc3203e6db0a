"""The engine loop a scenario's engine runs: whether it schedules asynchronously.

Each engine's default, at the version a scenario names (`engine.version`; unset: the newest),
read from its source (vLLM's release wheels 0.11.0-0.15.1, SGLang's 0.5.6 and 0.5.23,
TensorRT-LLM's main at 0004396720):

- vLLM V1: async scheduling (`SchedulerConfig.async_scheduling`, vllm/config/scheduler.py) runs
  a batch queue of two in `EngineCore.step_with_batch_queue` (vllm/v1/engine/core.py): step k+1
  is scheduled and launched as soon as step k is, and the loop then blocks on step k's output.
  Its default is False in 0.11-0.13 and None from 0.14.0, which `VllmConfig.__post_init__`
  (vllm/config/vllm.py) turns on, except with speculative decoding other than EAGLE or MTP
  (here: `draft` and `ngram`) and, in 0.14 only, pipeline parallelism.
- SGLang: the overlap scheduler (`Scheduler.event_loop_overlap`,
  python/sglang/srt/managers/scheduler.py) runs unless `--disable-overlap-schedule`
  (`disable_overlap_schedule: bool = False`); server_args.py turns it off with speculative
  decoding and pipeline parallelism.
- TensorRT-LLM (PyTorch backend): `PyExecutor._executor_loop_overlap`
  (tensorrt_llm/_torch/pyexecutor/py_executor.py) runs unless `disable_overlap_scheduler`
  (default False, tensorrt_llm/llmapi/llm_args.py).
- ATOM: no overlap is documented; taken as synchronous.

In each overlapped loop the first token still leaves at the end of the prompt's step: the loop
launches the next step, then waits on the prompt's and emits it.

`engine.async_scheduling` set in a scenario wins. Unset, it takes the engine's default under the
counted-events step model (the default `profile`, or `events`), which models the engine as it
runs; under `roofline` (the teaching form) or a profile of one's own (whose fitted terms may
already hold the loop) it is off. `sim/core/lookahead.py` applies it.
"""

from __future__ import annotations

import re

from sim.scenario.schema import EngineSpec

# engine -> the first version that schedules asynchronously by default ("0": every version;
# None: none)
ASYNC_SINCE: dict[str, str | None] = {
    "vllm": "0.14",
    "sglang": "0",
    "trt-llm": "0",
    "atom": None,
}


def _release(version: str) -> tuple[int, ...] | None:
    """The leading numbers of a version string (`v0.15.1rc2` -> (0, 15, 1)), or None."""
    found = re.match(r"v?(\d+(?:\.\d+)*)", version.strip())
    return tuple(int(x) for x in found.group(1).split(".")) if found else None


def async_by_default(name: str | None, version: str | None) -> bool:
    """Whether engine `name` (None: vLLM) at `version` (None: the newest) schedules
    asynchronously by default."""
    since = ASYNC_SINCE[name or "vllm"]
    if since is None:
        return False
    release = _release(version) if version is not None else None
    if release is None:
        return True  # the newest release, or a version string with no release numbers
    return release >= _release(since)  # type: ignore[operator]


def turned_off_by(
    name: str | None, version: str | None, speculative: str | None, pipeline: int
) -> str | None:
    """Why the engine's default turns asynchronous scheduling off for this deployment, if it
    does (`speculative`: the proposal method, `pipeline`: the pipeline-parallel degree)."""
    name = name or "vllm"
    if name == "vllm":
        if speculative in ("draft", "ngram"):
            return "vLLM schedules synchronously with speculative decoding other than EAGLE/MTP"
        release = _release(version) if version is not None else None
        if pipeline > 1 and release is not None and release[:2] == (0, 14):
            return "vLLM 0.14 schedules synchronously with pipeline parallelism"
    if name == "sglang" and (speculative is not None or pipeline > 1):
        return "SGLang turns its overlap scheduler off with speculative decoding or pipelines"
    return None


def resolve_engine_loop(
    engine: EngineSpec,
    counted: bool,
    speculative: str | None = None,
    pipeline: int = 1,
) -> EngineSpec:
    """`engine` with `async_scheduling` decided: the scenario's own, else the engine's default
    for this deployment under the counted-events step model (`counted`), else off."""
    if engine.async_scheduling is not None:
        return engine
    value = (
        counted
        and async_by_default(engine.name, engine.version)
        and turned_off_by(engine.name, engine.version, speculative, pipeline) is None
    )
    return engine.model_copy(update={"async_scheduling": value})
