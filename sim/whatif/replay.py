"""Replay a measured run of a real engine through a scenario and compare (`batchsim replay`).

The measured requests become the scenario's workload with their exact arrivals, prompt and
output lengths (`workload.trace` with the run's format; a shared prompt prefix, which no trace
carries, comes from the caller), and the engine's own configuration, when its startup log is
given, pins what a user knows before the run:

- `max_num_seqs`, `max_num_batched_tokens`, the block size and `num_gpu_blocks` (KV capacity
  as the engine had it): the same `policy` fields;
- chunked prefill on or off: `policy.name` chunked, or continuous with prefills first;
- prefix caching: `policy.prefix_caching`;
- `max_model_len`, the dtype and KV-cache dtype: `model.max_model_len`, `weight_dtype`,
  `kv_dtype`; the tensor parallel size: `hardware.tensor_parallel`;
- the CUDA-graph capture sizes (none when eager): `engine.pricing.cuda_graph_capture_sizes`;
- the engine and its version (`engine.name: vllm`, `engine.version`), which decide its loop:
  vLLM schedules asynchronously by default from 0.14 (sim/scenario/engine_loop.py).

The model is the catalog model the log names (its path's last part, e.g. `Llama-2-7b-hf` is
`llama-2-7b`) unless the caller names one; the GPU is never in the log, so it comes from the
scenario or the caller. Every variant of the scenario is replayed on the same requests, and
each is compared with the measurement (`sim.metrics.compare`).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sim.costs.catalog import MODELS
from sim.errors import ScenarioError
from sim.measured import EngineConfig, MeasuredRun
from sim.metrics.compare import Comparison, compare
from sim.metrics.results import Results
from sim.scenario.load import ScenarioSet, load_scenario_dict
from sim.simulate import simulate

_DTYPES = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16", "fp8": "fp8", "float8": "fp8"}
_KV_DTYPES = {"fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "float16": "fp16",
              "bfloat16": "bf16"}


@dataclass(frozen=True)
class ReplayResult:
    """A replay: the simulation of every variant, the measured run, and their comparisons."""

    results: Results
    run: MeasuredRun
    comparisons: dict[str, Comparison]
    scenario: ScenarioSet
    engine_notes: list[str] = field(default_factory=list)
    # how the run is replayed (closed-loop clients or its arrivals), and what the summary's
    # metrics window leaves of it: one line each, "" when there is nothing to say
    load_note: str = ""
    window_note: str = ""

    @property
    def clients(self) -> int | None:
        """The closed-loop clients that sent the replayed requests (None: the run's arrivals)."""
        trace = self.scenario.variants[0].spec.workload.trace
        return trace.num_clients if trace is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "measured": {
                "file": self.run.source,
                "format": self.run.format,
                "requests": len(self.run),
                "span_s": float(self.run.arrival_s[-1]) if len(self.run) else 0.0,
                "meta": _plain(self.run.meta),
            },
            "engine_from_log": self.engine_notes,
            "scenario": self.scenario.name,
            "replayed_by_clients": self.clients,
            "load_note": self.load_note,
            "window_note": self.window_note,
            "variants": {name: c.to_dict() for name, c in self.comparisons.items()},
        }


def _plain(value: Any) -> Any:
    """A JSON-ready copy of a meta mapping (numbers, strings, lists, mappings)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def catalog_model(name: str) -> str | None:
    """The catalog model a served model's name or path means (None: not in the catalog)."""
    last = name.rstrip("/").rsplit("/", 1)[-1].lower()
    last = re.sub(r"^(meta-)", "", last)
    last = re.sub(r"-(hf|instruct|chat|chat-hf|instruct-hf)$", "", last)
    last = re.sub(r"^deepseek-r1(-0528)?$", "deepseek-v3", last)  # R1: V3's architecture
    last = re.sub(r"^deepseek-v3(-0324|-base)?$", "deepseek-v3", last)
    # the exact name first, then the same architecture under an older name
    candidates = [last, last.replace("llama-3.1", "llama-3").replace("llama-3.3", "llama-3")]
    candidates += [c.replace("-instruct", "") for c in candidates]
    for candidate in candidates:
        if candidate in MODELS:
            return candidate
    return None


def engine_overrides(
    config: EngineConfig, base_model: Any, model: str | None, file: str
) -> tuple[dict[str, Any], list[str]]:
    """The scenario fields the engine's log pins, and a line per field saying where it came from."""
    notes: list[str] = []
    policy: dict[str, Any] = {}
    if config.chunked_prefill is not None:
        policy["name"] = "chunked" if config.chunked_prefill else "continuous"
        if not config.chunked_prefill:
            policy["mode"] = "prefill_first"
    for key in ("max_num_seqs", "max_num_batched_tokens", "block_size", "num_gpu_blocks"):
        value = getattr(config, key)
        if value is not None:
            policy[key] = int(value)
    if config.prefix_caching is not None:
        policy["prefix_caching"] = bool(config.prefix_caching)
    out: dict[str, Any] = {"policy": policy} if policy else {}
    chosen = model
    if chosen is None:
        named = config.served_model_name or config.model
        if named is None:
            chosen = None
        else:
            chosen = catalog_model(named)
            if chosen is None:
                raise ScenarioError(
                    f"model {named!r} is not in the catalog; name the catalog model with --model "
                    f"(one of {', '.join(sorted(MODELS))})",
                    file=file,
                )
    if chosen is not None:
        spec: dict[str, Any] = {"name": chosen}
        if isinstance(base_model, dict) and base_model.get("name") == chosen:
            spec = {**base_model, "name": chosen}
        if config.max_model_len is not None:
            spec["max_model_len"] = int(config.max_model_len)
        if config.dtype is not None:
            dtype = _DTYPES.get(config.dtype.replace("torch.", "").lower())
            if dtype is not None and not config.quantization:
                spec["weight_dtype"] = dtype
                spec.setdefault("kv_dtype", dtype)
        kv = (config.kv_cache_dtype or "auto").lower()
        if kv in _KV_DTYPES:
            spec["kv_dtype"] = _KV_DTYPES[kv]
        out["model"] = spec
    if config.tensor_parallel_size is not None and config.tensor_parallel_size > 1:
        out["hardware_tensor_parallel"] = int(config.tensor_parallel_size)
    if config.enforce_eager:
        out["capture_sizes"] = None
    elif config.cuda_graph_capture_sizes:
        out["capture_sizes"] = sorted(int(s) for s in config.cuda_graph_capture_sizes)
    for key, value in sorted({**policy, "model": chosen}.items()):
        if value is not None:
            notes.append(f"{key} = {value}")
    if config.version:
        notes.insert(0, f"vLLM {config.version}")
        out["version"] = config.version
    return out, notes


def replay_raw(
    base: dict[str, Any],
    run_path: Path,
    *,
    fmt: str | None = None,
    benchmark: int | None = None,
    prefix_tokens: int = 0,
    prefix_groups: int = 1,
    engine: EngineConfig | None = None,
    model: str | None = None,
    hardware: str | None = None,
    log_file: str = "",
    drop_duplicates: bool = False,
    clients: int | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The scenario mapping that replays the run at `run_path` through `base` (by `clients`
    closed-loop clients when given, else at the run's own arrivals)."""
    raw = copy.deepcopy(base)
    trace: dict[str, Any] = {
        "path": str(run_path.resolve()),
        "format": fmt or "measured",
        "keep_origin": True,
    }
    if drop_duplicates:
        trace["drop_duplicates"] = True
    if clients is not None:
        trace["num_clients"] = clients
    if benchmark is not None:
        trace["benchmark"] = benchmark
    if prefix_tokens:
        trace["prefix_tokens"] = prefix_tokens
        trace["prefix_groups"] = prefix_groups
    raw["workload"] = {"trace": trace}
    raw.setdefault("metrics", {})
    notes: list[str] = []
    if hardware is not None:
        hw = raw.get("hardware")
        raw["hardware"] = {**hw, "name": hardware} if isinstance(hw, dict) else hardware
    if model is not None and engine is None:
        raw["model"] = model
    if engine is not None:
        fields, notes = engine_overrides(engine, raw.get("model"), model, log_file)
        if "policy" in fields:
            policy = raw.get("policy") or {}
            if policy.get("name") != fields["policy"].get("name", policy.get("name")):
                policy = {}  # another policy: the base's limits of the old one do not carry
            raw["policy"] = {**policy, **fields["policy"]}
        if "model" in fields:
            raw["model"] = fields["model"]
        if "hardware_tensor_parallel" in fields:
            hw = raw.get("hardware")
            name = hw.get("name") if isinstance(hw, dict) else hw
            rest = hw if isinstance(hw, dict) else {}
            raw["hardware"] = {**rest, "name": name, "tensor_parallel": fields[
                "hardware_tensor_parallel"]}
        if "capture_sizes" in fields:
            engine_raw = raw.get("engine") or {}
            pricing = dict(engine_raw.get("pricing") or {})
            pricing["cuda_graph_capture_sizes"] = fields["capture_sizes"]
            raw["engine"] = {**engine_raw, "pricing": pricing}
        if "version" in fields:  # the scenario's own engine and version win
            engine_raw = raw.get("engine") or {}
            if engine_raw.get("name", "vllm") == "vllm":
                raw["engine"] = {"name": "vllm", "version": fields["version"], **engine_raw}
    return raw, notes


def window_note(scenario: ScenarioSet, run: MeasuredRun) -> str:
    """One line when a variant's metrics window (`metrics.warmup_s`, `cooldown_s`) leaves no
    request of the run measured, so that its summary would be empty ("" otherwise)."""
    span = float(run.arrival_s[-1]) if len(run) else 0.0
    for variant in scenario.variants:
        metrics = variant.spec.metrics
        low, high = metrics.warmup_s, span - metrics.cooldown_s
        if metrics.warmup_s + metrics.cooldown_s and not (
                (run.arrival_s >= low) & (run.arrival_s <= high)).any():  # fmt: skip
            return (
                f"metrics.warmup_s ({metrics.warmup_s:g} s) and metrics.cooldown_s "
                f"({metrics.cooldown_s:g} s) cover the run's whole {span:.3g} s of arrivals: "
                "the summary measures none of its requests (the comparison takes them all); "
                "--set metrics.warmup_s=0 --set metrics.cooldown_s=0 measures every one"
            )
    return ""


def replay(
    scenario: ScenarioSet,
    run: MeasuredRun,
    engine_notes: list[str] | None = None,
    progress: Any = None,
    load_note: str = "",
) -> ReplayResult:
    """Simulate every variant of `scenario` (whose workload replays `run`) and compare."""
    results = simulate(scenario, progress=progress)
    comparisons = {}
    for name, variant in results.variants.items():
        if variant.num_requests != len(run):
            raise ScenarioError(
                f"the replay of variant {name!r} has {variant.num_requests} requests, the run "
                f"{len(run)}: keep the whole run (no num_requests, duration_s or window caps)",
                file=run.source,
            )
        itl = None
        if run.itl_s is not None and len(variant.itl):  # pooled gaps as (gap_s, count) rows
            gaps = variant.itl
            itl = np.repeat(gaps["gap_s"].to_numpy(float), gaps["count"].to_numpy(np.int64))
        comparisons[name] = compare(run, variant.requests, itl)
    return ReplayResult(results, run, comparisons, scenario, list(engine_notes or []),
                        load_note, window_note(scenario, run))


def load_replay(
    raw: dict[str, Any], file: str, base_dir: Path, overrides: list[str] | tuple[str, ...] = ()
) -> ScenarioSet:
    return load_scenario_dict(raw, file=file, base_dir=base_dir, overrides=overrides)
