"""A simulated run's summary in the file `vllm bench serve --save-result` writes.

vLLM's benchmark client (`vllm/benchmarks/serve.py`) saves one flat JSON object per run: the
run's setup (`date`, `endpoint_type`, `backend`, `label`, `model_id`, `tokenizer_id`,
`num_prompts`), its traffic (`request_rate`, "inf" when unpaced; `burstiness`, the gamma shape
of its inter-arrival times, 1 for Poisson; `max_concurrency`, null when unbounded), then
`duration` (s), `completed`, `failed`, `total_input_tokens`, `total_output_tokens`,
`request_throughput`, `request_goodput` (req/s; null without goodput targets),
`output_throughput` and `total_token_throughput` (tok/s), `max_concurrent_requests`, and for
each latency metric `ttft`, `tpot`, `itl` and `e2el` the keys `mean_<m>_ms`, `median_<m>_ms`,
`std_<m>_ms` and `p<q>_<m>_ms` for each percentile asked for (`--metric-percentiles
50,90,95,99`; the default is 99 only), in milliseconds; `--append-result` appends one such
object per line. `bench_result` writes one variant's summary row (seconds) as that object, and
`bench_lines` the run's file: one line per variant, each labelled with the variant's name (a
run of one variant is exactly the file of `--save-result`), so one script reads measured and
simulated results alike.

What the values are, against vLLM's:

* latencies: batchsim's `ttft_*`, `tpot_*`, `e2e_*` (`e2el`) and `itl_*` times 1000; `median`
  is the p50. TPOT is vLLM's definition when the scenario keeps the default `metrics.tpot:
  after_first`. batchsim's ITL is per token; vLLM's is per streamed chunk, which is the same
  unless the server bundles tokens (speculative decoding). No standard deviation is computed,
  so `std_*` is left out.
* counts and rates: over batchsim's measured set (warm-up and cool-down left out; with both 0,
  every request, as vLLM counts). `completed` and the token totals are the throughputs times
  `duration_s`, rounded: the counts those rates were divided from. `failed` is batchsim's
  rejected requests (a real server answers them with an error), over the whole run.
* `request_goodput` is batchsim's `goodput_rps` (requests within the scenario's SLOs, per
  second), null when the scenario sets none: vLLM's `--goodput` counts requests within its
  targets the same way.
* setup and traffic: `backend` and `endpoint_type` "batchsim", `label` the variant,
  `model_id` and `tokenizer_id` the scenario's model, `num_prompts` the requests of the run;
  the traffic is the workload's arrival process (a rate profile or a trace: "inf";
  `max_concurrency` the closed-loop clients' count). A served session (`batchsim serve`)
  knows neither: its clients set them, so "inf", 1 and null. `date` is the time of writing.
* `max_concurrent_requests`: the most requests in flight at once (arrival to finish, the
  finished ones, whole run), from the requests table; left out without one (a streamed run).

A metric that is undefined in the run (NaN) is left out, never written as zero.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

# (batchsim metric prefix, vLLM metric name)
LATENCIES: tuple[tuple[str, str], ...] = (
    ("ttft", "ttft"),
    ("tpot", "tpot"),
    ("itl", "itl"),
    ("e2e", "e2el"),
)
PERCENTILES: tuple[int, ...] = (50, 90, 95, 99)


def _number(row: dict[str, Any], key: str) -> float | None:
    """The finite value of `key`, or None when the row lacks it or it is undefined."""
    value = row.get(key)
    if value is None or isinstance(value, bool):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def bench_summary(summary_row: dict[str, Any]) -> dict[str, Any]:
    """vLLM bench field -> value for one variant's summary row (see the module docstring)."""
    out: dict[str, Any] = {}
    duration = _number(summary_row, "duration_s")
    if duration is not None:
        out["duration"] = duration
    rates = {
        "request_throughput": _number(summary_row, "requests_per_s"),
        "output_throughput": _number(summary_row, "output_tokens_per_s"),
        "total_token_throughput": _number(summary_row, "total_tokens_per_s"),
    }
    if duration is not None and all(rate is not None for rate in rates.values()):
        # the integer counts the rates were divided from; rounding undoes the division's error
        total = round(float(rates["total_token_throughput"] or 0.0) * duration)
        out["completed"] = round(float(rates["request_throughput"] or 0.0) * duration)
        out["total_output_tokens"] = round(float(rates["output_throughput"] or 0.0) * duration)
        out["total_input_tokens"] = total - out["total_output_tokens"]
    rejected = _number(summary_row, "num_rejected")
    if rejected is not None:
        out["failed"] = int(rejected)
    out.update({name: rate for name, rate in rates.items() if rate is not None})
    for ours, theirs in LATENCIES:
        mean = _number(summary_row, f"{ours}_mean_s")
        if mean is not None:
            out[f"mean_{theirs}_ms"] = mean * 1000.0
        median = _number(summary_row, f"{ours}_p50_s")
        if median is not None:
            out[f"median_{theirs}_ms"] = median * 1000.0
        for q in PERCENTILES:
            value = _number(summary_row, f"{ours}_p{q}_s")
            if value is not None:
                out[f"p{q}_{theirs}_ms"] = value * 1000.0
    return out


def _traffic(scenario: dict[str, Any], served: bool) -> dict[str, Any]:
    """`request_rate`, `burstiness` and `max_concurrency` of the run's workload."""
    out: dict[str, Any] = {"request_rate": "inf", "burstiness": 1.0, "max_concurrency": None}
    workload = scenario.get("workload") or {}
    if served or not isinstance(workload, dict):
        return out
    arrival = workload.get("arrival") or {}
    process = arrival.get("process") if isinstance(arrival, dict) else None
    if process in ("poisson", "gamma", "constant"):
        out["request_rate"] = float(arrival["rate"])
    if process == "gamma":
        out["burstiness"] = 1.0 / float(arrival["cv"]) ** 2
    elif process == "constant":
        out["burstiness"] = "inf"
    clients = workload.get("clients")
    if isinstance(clients, dict):
        out["max_concurrency"] = int(clients["num_clients"])
    return out


def _has_targets(slo: Any) -> bool:
    """Whether the scenario's `slo` sets any target (its own or a tier's)."""
    if not isinstance(slo, dict):
        return False
    tiers = slo.get("tiers") or {}
    return any(slo.get(k) is not None for k in ("ttft_s", "tpot_s")) or any(
        isinstance(t, dict) and any(v is not None for v in t.values()) for t in tiers.values()
    )


def peak_concurrency(requests: pd.DataFrame) -> int | None:
    """The most finished requests in flight at once, over half-open [arrival, finish)
    intervals (vLLM's sweep); None without a requests table."""
    if not len(requests) or not {"arrival_s", "finish_s", "rejected"} <= set(requests.columns):
        return None
    done = requests[~requests["rejected"].to_numpy(dtype=bool) & requests["finish_s"].notna()]
    if not len(done):
        return 0
    times = np.concatenate([done["arrival_s"].to_numpy(dtype=float),
                            done["finish_s"].to_numpy(dtype=float)])  # fmt: skip
    steps = np.concatenate([np.ones(len(done)), -np.ones(len(done))])
    order = np.lexsort((steps, times))  # at equal times a finish comes first
    return int(np.cumsum(steps[order]).max())


def bench_result(
    summary_row: dict[str, Any],
    *,
    scenario: dict[str, Any],
    variant: str,
    requests: pd.DataFrame | None = None,
    date: str | None = None,
) -> dict[str, Any]:
    """One variant's `vllm bench serve --save-result` object (see the module docstring):
    `scenario` is its resolved scenario (`VariantResult.scenario`)."""
    model = scenario.get("model")
    name = model.get("name") if isinstance(model, dict) else model
    served = "aborted_requests" in summary_row  # only a served session counts aborts
    requests_total = _number(summary_row, "num_requests")
    out: dict[str, Any] = {
        "date": date or datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "batchsim",
        "backend": "batchsim",
        "label": variant,
        "model_id": name,
        "tokenizer_id": name,
        "num_prompts": int(requests_total) if requests_total is not None else None,
        **_traffic(scenario, served),
    }
    fields = bench_summary(summary_row)
    for key in ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
                "request_throughput"):  # fmt: skip
        if key in fields:
            out[key] = fields.pop(key)
    goodput = _number(summary_row, "goodput_rps")
    out["request_goodput"] = goodput if _has_targets(scenario.get("slo")) else None
    out.update(fields)
    peak = peak_concurrency(requests) if requests is not None else None
    if peak is not None:
        out["max_concurrent_requests"] = peak
    return out


def bench_lines(results: Any, rows: dict[str, dict[str, Any]]) -> str:
    """The `bench_summary.json` text: one `bench_result` object per variant, one per line
    (vLLM's `--append-result` file; a single variant's is `--save-result`'s)."""
    import json

    date = datetime.now().strftime("%Y%m%d-%H%M%S")
    lines = []
    for name, row in rows.items():
        variant = results.variants[name]
        doc = bench_result(row, scenario=variant.scenario, variant=str(name),
                           requests=variant.requests, date=date)  # fmt: skip
        lines.append(json.dumps(doc, allow_nan=False))
    return "\n".join(lines) + "\n"
