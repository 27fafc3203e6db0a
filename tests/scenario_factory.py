"""The one way tests build and run scenarios.

A scenario is built as the plain mapping a YAML file would hold and loaded with
`load_scenario_dict`, so a test exercises the same path as `batchsim run`. `scenario(...)` fills
every key a test does not care about; the named presets below are the shapes most tests share:

- workloads: `poisson(...)` (a synthetic open-loop workload; token counts are `fixed(n)`,
  `uniform(lo, hi)` or `lognormal(median, ...)`, a bare int meaning `fixed`), `trace(...)` (rows
  written to a CSV trace in the test's folder);
- step costs: `LINEAR` (an inline linear profile, the default: every step's time is easy to
  compute by hand), `UNIT` (every step lasts exactly 1 s) or `profile=None` (the model and GPU's
  own pricing);
- `unit_trace(...)`: rows of a trace on the unit profile, for exact step-by-step schedules;
- `tiny_scenario(...)`: a one-layer model on a GPU whose KV pool holds a chosen number of tokens;
- policies: `continuous(...)`, `chunked(...)`, `static(...)`.

`run(raw)` simulates a single-variant scenario and returns its `VariantResult`; `run_all(raw)`
returns the whole `Results` (every variant).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from sim.metrics.results import Results, VariantResult
from sim.scenario.load import load_scenario_dict
from sim.simulate import simulate

Mapping = dict[str, Any]

# step time = t_mem + t_flop * tokens + t_kv * context + t_attn * prefill attention term
COEFFS: dict[str, float] = {
    "t_mem_s": 0.01,
    "t_flop_s_per_token": 1e-5,
    "t_kv_s_per_token": 1e-7,
    "t_attn_s_per_token2": 1e-9,
}
LINEAR: Mapping = {"coefficients": COEFFS}
# every step lasts exactly one second, whatever it computes
UNIT: Mapping = {"coefficients": {"t_mem_s": 1.0, "t_flop_s_per_token": 0.0}}
_DEFAULT = object()


# --- token-count distributions and workloads ----------------------------------------------


def fixed(value: int) -> Mapping:
    return {"dist": "fixed", "value": value}


def uniform(low: int, high: int) -> Mapping:
    return {"dist": "uniform", "low": low, "high": high}


def lognormal(median: float, sigma: float = 0.8, max: int | None = None) -> Mapping:
    dist: Mapping = {"dist": "lognormal", "median": median, "sigma": sigma}
    if max is not None:
        dist["max"] = max
    return dist


def _tokens(value: int | Mapping) -> Mapping:
    return fixed(value) if isinstance(value, int) else dict(value)


def poisson(
    num_requests: int = 100,
    rate: float = 5.0,
    prompt: int | Mapping = 100,
    output: int | Mapping = 10,
    **extra: Any,
) -> Mapping:
    """A synthetic workload: `num_requests` Poisson arrivals at `rate` per second; `extra` adds
    workload keys (`classes`, `prefix`, ...)."""
    return {
        "num_requests": num_requests,
        "arrival": {"process": "poisson", "rate": rate},
        "prompt_tokens": _tokens(prompt),
        "output_tokens": _tokens(output),
        **copy.deepcopy(extra),
    }


def trace_file(tmp_path: Path, rows: list[tuple[float, int, int]], name: str = "t.csv") -> Path:
    """Rows (arrival s, prompt tokens, output tokens) written as a CSV trace under `tmp_path`."""
    path = tmp_path / name
    lines = ["arrival_s,prompt_tokens,output_tokens"]
    lines += [f"{a},{p},{o}" for a, p, o in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def trace(tmp_path: Path, rows: list[tuple[float, int, int]], name: str = "t.csv") -> Mapping:
    """A workload replaying `rows` (written to `tmp_path / name`)."""
    return {"trace": {"path": str(trace_file(tmp_path, rows, name)), "format": "csv"}}


# --- policies ------------------------------------------------------------------------------


def continuous(**options: Any) -> Mapping:
    return {"name": "continuous", **options}


def chunked(**options: Any) -> Mapping:
    return {"name": "chunked", **options}


def static(**options: Any) -> Mapping:
    return {"name": "static", **options}


# --- scenarios -----------------------------------------------------------------------------


def scenario(
    *,
    policy: Mapping | None = None,
    workload: Mapping | None = None,
    model: str | Mapping = "llama-2-7b",
    hardware: str | Mapping = "a100-80g",
    profile: Any = _DEFAULT,
    coefficients: dict[str, float] | None = None,
    seed: int = 1,
    name: str = "t",
    **extra: Any,
) -> Mapping:
    """A raw scenario mapping. Defaults: 100 Poisson arrivals at 5/s of 100 prompt and 10
    output tokens, Llama-2-7B on an A100, continuous batching, the `LINEAR` profile (or these
    `coefficients`; `profile=None` prices steps from the model and GPU). `extra` adds top-level
    keys (`engine`, `cluster`, `variants`, `metrics`, ...)."""
    raw: Mapping = {
        "name": name,
        "seed": seed,
        "workload": workload if workload is not None else poisson(),
        "model": model,
        "hardware": hardware,
        "policy": policy if policy is not None else continuous(),
    }
    if coefficients is not None:
        raw["profile"] = {"coefficients": dict(coefficients)}
    elif profile is _DEFAULT:
        raw["profile"] = LINEAR
    elif profile is not None:
        raw["profile"] = profile
    raw.update(extra)
    return copy.deepcopy(raw)


def unit_trace(
    tmp_path: Path, rows: list[tuple[float, int, int]], policy: Mapping, **extra: Any
) -> Mapping:
    """`rows` replayed on the `UNIT` profile: every step lasts 1 s, so a schedule can be
    written out by hand."""
    extra.setdefault("profile", UNIT)
    return scenario(policy=policy, workload=trace(tmp_path, rows), **extra)


# --- a tiny model and a GPU whose KV pool holds a chosen number of tokens ------------------

TINY_WEIGHT_BYTES = 1000  # num_parameters 1000 at dtype_bytes 1
TINY_KV_BYTES_PER_TOKEN = 2  # 2 * 1 layer * 1 kv head * head_dim 1 * 1 byte


def tiny_model(max_model_len: int = 100_000) -> Mapping:
    return {
        "name": "tiny",
        "num_parameters": 1000,
        "num_layers": 1,
        "hidden_size": 1,
        "num_attention_heads": 1,
        "num_kv_heads": 1,
        "head_dim": 1,
        "dtype_bytes": 1.0,
        "max_model_len": max_model_len,
    }


def tiny_hardware(kv_tokens: int) -> Mapping:
    """A GPU whose KV pool holds exactly `kv_tokens` tokens of `tiny_model`."""
    return {
        "name": "tiny-gpu",
        "memory_bytes": TINY_WEIGHT_BYTES + TINY_KV_BYTES_PER_TOKEN * kv_tokens,
        "hbm_bandwidth_bytes_per_s": 1e12,
        "peak_flops": 1e14,
        "activation_reserve_bytes": 0,
        "gpu_memory_utilization": 1.0,
    }


def tiny_scenario(
    policy: Mapping, kv_tokens: int, *, coalesce: bool = True, **extra: Any
) -> Mapping:
    """`tiny_model` on `tiny_hardware(kv_tokens)`; `coalesce` sets
    `engine.coalesce_decode_steps`."""
    return scenario(
        policy=policy,
        model=tiny_model(),
        hardware=tiny_hardware(kv_tokens),
        engine={"coalesce_decode_steps": coalesce},
        **extra,
    )


# --- running -------------------------------------------------------------------------------


def run_all(raw: Mapping, base_dir: Path | None = None) -> Results:
    """Simulate every variant of `raw` (relative paths resolve against `base_dir`)."""
    return simulate(load_scenario_dict(raw, base_dir=base_dir))


def run(raw: Mapping, base_dir: Path | None = None) -> VariantResult:
    """Simulate a single-variant scenario and return that variant's result."""
    results = run_all(raw, base_dir)
    (name,) = results.variants
    return results[name]
