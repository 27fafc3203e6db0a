"""A simulated run's summary under the names `vllm bench serve --save-result` writes.

vLLM's benchmark client (`vllm/benchmarks/serve.py`) saves one JSON object per run: `duration`
(s), `completed`, `failed`, `total_input_tokens`, `total_output_tokens`, `request_throughput`
(req/s), `output_throughput` and `total_token_throughput` (tok/s), and for each latency metric
`ttft`, `tpot`, `itl` and `e2el` the keys `mean_<m>_ms`, `median_<m>_ms`, `std_<m>_ms` and
`p<q>_<m>_ms` for each percentile asked for (`--metric-percentiles 50,90,95,99`; the default
is 99 only), in milliseconds. `bench_summary` maps one row of batchsim's summary (seconds) onto
those names, so one script reads measured and simulated results alike.

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
* `request_goodput` is left out: vLLM writes it only for its own `--goodput` targets, and
  batchsim's SLOs (per tier) are not those.

A metric that is undefined in the run (NaN) is left out, never written as zero.
"""

from __future__ import annotations

import math
from typing import Any

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


def bench_document(scenario_name: str, rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The `bench_summary.json` content: `{"scenario": name, "variants": {variant: fields}}`."""
    return {
        "scenario": scenario_name,
        "variants": {str(name): bench_summary(row) for name, row in rows.items()},
    }
