"""Reader of `vllm bench serve --save-result --save-detailed` results (vllm/benchmarks/serve.py).

The result is one JSON object; `--append-result` appends more, one per line (`benchmark=i` picks
one, 0-based; default the first, the count is in meta). The per-request lists, one entry per
request in the order they were sent, are kept only with `--save-detailed`: `input_lens`,
`output_lens`, `ttfts` (seconds), `itls` (list of gaps in seconds per request), `errors` ("" when
the request succeeded), `generated_texts`, and in newer vLLM also `start_times` and `latencies`.
The file's own settings and totals (`date`, `backend`, `model_id`, `request_rate`, `burstiness`,
`max_concurrency`, `duration`, `completed`, `failed`, ...) go to meta.

What is derived, exactly:

- arrivals: `start_times` when the file has them. They are `time.perf_counter()` readings (a
  monotonic clock with an arbitrary origin), so `origin_unix_s` is None. Without them the file
  does not say when each request was sent; the arrivals are then evenly spaced at the configured
  `request_rate` (request i at i / rate: the mean spacing of the Poisson or gamma process the
  benchmark drew, not the draws), or all at 0 when the rate is `inf`. meta["arrival_times"]
  says which, and names `max_concurrency`, which gates sending by completions, when it was set.
- E2E: `latencies` when present, else TTFT plus the sum of the request's `itls` (what vLLM's
  own timeline plot does).
- TPOT: from E2E, TTFT and `output_lens` as for every format; ITL gaps are the `itls` lists.

A request with a non-empty error string is left out and counted in `num_failed`; without an
`errors` list, a request with 0 output tokens is taken as failed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from sim.errors import ScenarioError
from sim.measured.detect import wrong_tool
from sim.measured.run import MeasuredRun, assemble
from sim.measured.values import (
    MAX_TOKENS,
    column,
    cut_short,
    latency,
    listing,
    number,
    read_file,
    same_record,
    tokens,
    ttft_within_e2e,
)

META_KEYS = (
    "date", "backend", "endpoint_type", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency", "duration", "completed", "failed",
)  # fmt: skip


def _results(text: str, file: str) -> list[tuple[int, dict[str, Any]]]:
    """(line, result) for each JSON object of the file (one, or one per appended line)."""
    decoder = json.JSONDecoder()
    out: list[tuple[int, dict[str, Any]]] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        line = text.count("\n", 0, pos) + 1
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            reason = "truncated" if cut_short(exc) else "not JSON"
            raise ScenarioError(
                f"{reason} ({exc.msg})",
                file=file,
                path=f"line {text.count(chr(10), 0, exc.pos) + 1}",
            ) from None
        if not isinstance(obj, dict):
            raise ScenarioError("a result is not a JSON object", file=file, path=f"line {line}")
        out.append((line, obj))
    return out


def _arrivals(result: dict[str, Any], n: int, file: str) -> tuple[np.ndarray, str]:
    starts = result.get("start_times")
    if starts is not None:
        if not isinstance(starts, list) or len(starts) != n:
            raise ScenarioError(f"start_times does not hold {n} values", file=file)
        measured = column(
            starts, "start time", file=file, record=lambda i: f"request {i}", low=-1e12, high=1e12
        )
        return measured, "measured (start_times, perf_counter clock)"
    rate = result.get("request_rate", "inf")
    if rate in ("inf", None) or (isinstance(rate, float) and math.isinf(rate)):
        return np.zeros(n), "not in the file: all at 0 (request_rate inf)"
    rate = number(rate, "request_rate", file=file, at="request_rate")
    if rate <= 0:
        raise ScenarioError(
            f"request_rate {rate:g} is not positive", file=file, path="request_rate"
        )
    return np.arange(n) / rate, f"not in the file: evenly spaced at request_rate {rate:g}/s"


def read_vllm_bench(path: Path, *, benchmark: int | None = None) -> MeasuredRun:
    """One result of a `vllm bench serve` JSON file (see the module docstring)."""
    file = str(path)
    results = _results(read_file(path, "vllm bench result"), file)
    if not results:
        raise ScenarioError("holds no result", file=file)
    index = 0 if benchmark is None else benchmark
    if index >= len(results):
        raise ScenarioError(
            f"benchmark {index} asked for; the file holds {len(results)}", file=file
        )
    line, result = results[index]
    if "input_lens" not in result or "ttfts" not in result:
        if "resourceSpans" in result or "benchmarks" in result or "metadata" in result:
            raise ScenarioError(wrong_tool(result, "vllm_bench"), file=file, path=f"line {line}")
        raise ScenarioError(
            "no per-request lists (input_lens, ttfts): save the result with --save-detailed",
            file=file,
            path=f"line {line}",
        )
    lists = {
        k: listing(result.get(k), k, file=file, at=k)
        for k in ("input_lens", "output_lens", "ttfts")
    }
    n = len(lists["ttfts"])
    optional = {k: result.get(k) for k in ("itls", "errors", "latencies")}
    for key, values in [*lists.items(), *optional.items()]:
        if values is not None and (not isinstance(values, list) or len(values) != n):
            count = len(values) if isinstance(values, list) else "no list of"
            raise ScenarioError(
                f"{key} holds {count} entries for {n} requests (ttfts)", file=file, path=key
            )
    arrival, how = _arrivals(result, n, file)
    if "start_times" not in result and result.get("max_concurrency") is not None:
        how += f"; max_concurrency {result['max_concurrency']} gated sending by completions"
    errors, itls, latencies = optional["errors"], optional["itls"], optional["latencies"]
    keep: list[int] = []
    rows: dict[str, list[Any]] = {k: [] for k in ("prompt", "output", "ttft", "e2e", "itl")}
    failed = 0
    for i in range(n):
        at = f"request {i}"
        if errors is not None and errors[i] not in ("", None):
            failed += 1
            continue
        output = tokens(lists["output_lens"][i], "output_lens", file=file, at=at, low=0)
        if output == 0 and errors is None:
            failed += 1
            continue
        if output == 0:
            raise ScenarioError("output_lens is 0 for a request without error", file=file, path=at)
        ttft = latency(lists["ttfts"][i], "ttft", file=file, at=at)
        gaps = column(listing(itls[i], "itls", file=file, at=at), "inter-token gap", file=file,
                      record=same_record(at)) if itls is not None else None  # fmt: skip
        if latencies is not None:
            e2e = latency(latencies[i], "latency", file=file, at=at)
        elif gaps is not None:
            e2e = ttft + float(gaps.sum())
        else:
            e2e = math.nan
        ttft_within_e2e(ttft, e2e, file=file, at=at)
        keep.append(i)
        rows["prompt"].append(tokens(lists["input_lens"][i], "input_lens", file=file, at=at))
        rows["output"].append(min(output, MAX_TOKENS))
        rows["ttft"].append(ttft)
        rows["e2e"].append(e2e)
        rows["itl"].append(gaps)
    meta: dict[str, Any] = {k: result[k] for k in META_KEYS if k in result}
    meta.update(tool="vllm bench serve", arrival_times=how, results_in_file=len(results),
                benchmark=index)  # fmt: skip
    return assemble(
        source=file,
        fmt="vllm_bench",
        arrival=arrival[keep],
        prompt_tokens=rows["prompt"],
        output_tokens=rows["output"],
        ttft_s=rows["ttft"],
        e2e_s=rows["e2e"],
        request_id=[str(i) for i in keep],
        records=[f"request {i}" for i in keep],
        unix_clock=False,
        meta=meta,
        num_failed=failed,
        itl_s=None if itls is None else rows["itl"],
    )
