"""Reader of GuideLLM's benchmarks report (`guidellm benchmark --output-path x.json`).

The report is `{"benchmarks": [...], ...}`, one benchmark per strategy of the run (a sweep holds
a synchronous, a throughput and several constant-rate ones); each has `requests: {successful,
errored, incomplete}`, lists of per-request statistics. GuideLLM may keep only a sample of them
(`--output-sampling`): what the file holds is what is read. Three layouts of a request exist,
and each field is taken from the first that has it (times are seconds since the epoch):

- arrival: `request_start_time` or `info.timings.request_start` (current, 0.4+);
  `scheduler_info.request_timings.request_start` (0.3); `start_time` (0.1-0.2);
- first token: `info.timings.first_token_iteration`; `....first_iteration`; `first_token_time`;
- end: `request_end_time` or `info.timings.request_end`; `....request_end`; `end_time`;
- tokens: `prompt_tokens` and `output_tokens` in every layout (else `input_metrics.text_tokens`
  and `output_metrics.text_tokens`).

TTFT = first token - arrival and E2E = end - arrival. `benchmark=i` reads one benchmark
(0-based); by default all are read, in time order, and meta["benchmarks"] lists each one's
strategy, rate and index range in the run. Errored and incomplete (cancelled) requests are left
out and counted in `num_failed`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from sim.errors import ScenarioError
from sim.measured.detect import wrong_tool
from sim.measured.run import MeasuredRun, assemble
from sim.measured.values import (
    json_document,
    listing,
    mapping,
    read_file,
    tokens,
    ttft_within_e2e,
    unix_seconds,
)

_TIMES = {
    "arrival": (("request_start_time",), ("info", "timings", "request_start"),
                ("scheduler_info", "request_timings", "request_start"), ("start_time",)),
    "first": (("info", "timings", "first_token_iteration"),
              ("scheduler_info", "request_timings", "first_iteration"), ("first_token_time",)),
    "end": (("request_end_time",), ("info", "timings", "request_end"),
            ("scheduler_info", "request_timings", "request_end"), ("end_time",)),
}  # fmt: skip
_TOKENS = {
    "prompt": (("prompt_tokens",), ("input_metrics", "text_tokens")),
    "output": (("output_tokens",), ("output_metrics", "text_tokens")),
}


def _get(obj: dict[str, Any], paths: tuple[tuple[str, ...], ...]) -> tuple[str, Any]:
    """(dotted path, value) of the first path present with a non-null value, or ("", None)."""
    for keys in paths:
        node: Any = obj
        for key in keys:
            node = node.get(key) if isinstance(node, dict) else None
        if node is not None:
            return ".".join(keys), node
    return "", None


def _strategy(bench: dict[str, Any]) -> dict[str, Any]:
    for holder in ("config", "args"):
        strategy = (
            (bench.get(holder) or {}).get("strategy")
            if isinstance(bench.get(holder), dict)
            else None
        )
        if isinstance(strategy, dict):
            out = {"strategy": strategy.get("type_")}
            for key in ("rate", "streams", "max_concurrency"):
                if isinstance(strategy.get(key), int | float | type(None)) and key in strategy:
                    out[key] = strategy[key]
            return out
    return {"strategy": None}


def read_guidellm(path: Path, *, benchmark: int | None = None) -> MeasuredRun:
    """One benchmark, or all of them, of a GuideLLM report (see the module docstring)."""
    file = str(path)
    report = json_document(read_file(path, "GuideLLM report"), file)
    if not isinstance(report, dict) or not isinstance(report.get("benchmarks"), list):
        raise ScenarioError(wrong_tool(report, "guidellm"), file=file)
    benches = report["benchmarks"]
    if not benches:
        raise ScenarioError("holds no benchmark", file=file, path="benchmarks")
    if benchmark is not None and benchmark >= len(benches):
        raise ScenarioError(
            f"benchmark {benchmark} asked for; the report holds {len(benches)}", file=file
        )
    chosen = range(len(benches)) if benchmark is None else [benchmark]
    cols: dict[str, list[Any]] = {k: [] for k in ("arrival", "prompt", "output", "ttft", "e2e")}
    ids: list[str] = []
    records: list[str] = []
    summary: list[dict[str, Any]] = []
    failed = 0
    for b in chosen:
        where = f"benchmarks[{b}]"
        bench = mapping(benches[b], "a benchmark", file=file, at=where)
        requests = mapping(bench.get("requests"), "requests", file=file, at=f"{where}.requests")
        for status in ("errored", "incomplete"):
            failed += len(listing(requests.get(status) or [], status, file=file, at=where))
        done = listing(requests.get("successful") or [], "successful", file=file, at=where)
        first_row = len(ids)
        for r, request in enumerate(done):
            at = f"{where}.requests.successful[{r}]"
            request = mapping(request, "a request", file=file, at=at)
            times = {}
            for name, paths in _TIMES.items():
                key, value = _get(request, paths)
                if value is None:
                    if name == "first":
                        times[name] = math.nan  # a non-streamed request has no first token
                        continue
                    raise ScenarioError(f"request has no {name} time", file=file, path=at)
                times[name] = unix_seconds(value, key, file=file, at=at)
            if times["end"] < times["arrival"] or times["first"] < times["arrival"]:
                raise ScenarioError(
                    "a token time is before the request's start", file=file, path=at
                )
            ttft, e2e = times["first"] - times["arrival"], times["end"] - times["arrival"]
            ttft_within_e2e(ttft, e2e, file=file, at=at)
            for name, token_paths in _TOKENS.items():
                key, value = _get(request, token_paths)
                if value is None:
                    raise ScenarioError(f"request has no {name}_tokens", file=file, path=at)
                cols[name].append(tokens(value, key, file=file, at=at))
            cols["arrival"].append(times["arrival"])
            cols["ttft"].append(ttft)
            cols["e2e"].append(e2e)
            ids.append(str(request.get("request_id") or len(ids)))
            records.append(at)
        arrivals = cols["arrival"][first_row:]
        summary.append({"index": b, **_strategy(bench), "requests": len(arrivals),
                        "first_arrival": min(arrivals) if arrivals else None})  # fmt: skip
    run = assemble(
        source=file, fmt="guidellm", arrival=cols["arrival"], prompt_tokens=cols["prompt"],
        output_tokens=cols["output"], ttft_s=cols["ttft"], e2e_s=cols["e2e"], request_id=ids,
        records=records, unix_clock=True, num_failed=failed,
        meta={"tool": "guidellm", "benchmarks": summary, "benchmark": benchmark},
    )  # fmt: skip
    # each benchmark's rows in the run: benchmarks run one after the other, so their rows are
    # contiguous once sorted by arrival
    origin = run.origin_unix_s or 0.0
    for entry in summary:
        start = entry.pop("first_arrival")
        low = 0 if start is None else int(np.searchsorted(run.arrival_s, start - origin - 1e-9))
        entry["rows"] = [low, low + entry["requests"]]
    return run
