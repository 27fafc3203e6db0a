"""Chrome trace-event export of a run, for Perfetto (ui.perfetto.dev) or chrome://tracing.

The document is `{"traceEvents": [...], "displayTimeUnit": "ms"}` in the Trace Event Format:
complete events (`ph: "X"`) with `ts` and `dur` in microseconds of simulated time, and metadata
events (`ph: "M"`) naming processes and threads. Per variant:

* one process per instance (`<variant> / instance <i> (<role>)`), one track (`tid` 0) holding
  one slice per engine step (step groups are expanded with `sim.metrics.steps.expand_steps`);
  a slice is named `prefill`, `decode` or `mixed` and carries the batch size, active sequences,
  prefill and decode tokens, KV blocks held and queue length as args;
* one process `<variant> / requests` with one track per request (`tid` = request id + 1):
  `queued` (arrival to first schedule), `prefill` (to the first token), in a disaggregated run
  `kv transfer wait` and `kv transfer` (handoff to the link, then the copy), and `decode` (to the
  finish). Rejected requests get an instant event. Large runs would drown the viewer, so only the
  first `max_requests` requests (by id) get tracks; the process name says how many were kept.
  The step tracks are cut at the same point (the last moment any tracked request is active), so
  a trace of a long run stays small; the instance process names then say where they end.

Variants all start at simulated time 0, so their processes overlap in time: compare them by
stacking, or export one variant (`variants=[...]`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from sim.metrics.steps import expand_steps

if TYPE_CHECKING:
    from sim.metrics.results import Results, VariantResult

DEFAULT_MAX_REQUESTS = 200
PIDS_PER_VARIANT = 10_000  # instance pids are offset + index; the requests pid is offset + 9999
STEP_ARGS = (("batch_size", "num_seqs"), ("active_seqs", "num_active_seqs"),
             ("prefill_tokens", "num_prefill_tokens"), ("decode_tokens", "num_decode_tokens"),
             ("kv_blocks_used", "kv_blocks_used"), ("waiting", "num_waiting"))  # fmt: skip
# (phase name, start column, end column), in the order a request goes through them
PHASES = (("queued", "arrival_s", "first_scheduled_s"),
          ("prefill", "first_scheduled_s", "first_token_s"),
          ("kv transfer wait", "handoff_s", "transfer_start_s"),
          ("kv transfer", "transfer_start_s", "transfer_end_s"))  # fmt: skip


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def _meta(name: str, pid: int, tid: int, value: Any) -> dict[str, Any]:
    """A metadata event: `process_name`/`thread_name` take a name, `*_sort_index` an index."""
    key = "name" if name.endswith("_name") else "sort_index"
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": {key: value}}


def _roles(variant: VariantResult) -> dict[int, str]:
    info = variant.instances
    if "index" in info.columns and "role" in info.columns:
        return {int(i): str(r) for i, r in zip(info["index"], info["role"], strict=True)}
    return {}


def _window_end(requests: pd.DataFrame, max_requests: int) -> float:
    """The last moment a tracked request is active (inf when every request is tracked)."""
    if len(requests) <= max_requests:
        return math.inf
    kept = requests.sort_values("id").head(max_requests)
    ends = pd.concat([kept["finish_s"], kept["arrival_s"]]).dropna()
    return float(ends.max()) if len(ends) else 0.0


def _step_events(
    variant: VariantResult, name: str, offset: int, until_s: float
) -> list[dict[str, Any]]:
    groups = variant.steps
    if math.isfinite(until_s) and len(groups):
        groups = groups[groups["start_s"] < until_s]
    steps = expand_steps(groups) if len(groups) else groups
    if math.isfinite(until_s) and len(steps):
        steps = steps[steps["start_s"] < until_s].reset_index(drop=True)
    if "instance" not in steps.columns:
        steps = steps.assign(instance=0)
    events: list[dict[str, Any]] = []
    roles = _roles(variant)
    instances = sorted({int(i) for i in steps["instance"]} | set(roles))
    cut = f", steps until {until_s:.3f} s" if math.isfinite(until_s) else ""
    for i in instances:
        pid = offset + i
        role = roles.get(i, "serve")
        events.append(_meta("process_name", pid, 0, f"{name} / instance {i} ({role}{cut})"))
        events.append(_meta("process_sort_index", pid, 0, pid))
        events.append(_meta("thread_name", pid, 0, "steps"))
    if not len(steps):
        return events
    columns = {arg: steps[col].to_numpy() for arg, col in STEP_ARGS if col in steps.columns}
    prefill = steps["num_prefill_tokens"].to_numpy()
    decode = steps["num_decode_tokens"].to_numpy()
    kinds = np.where(prefill > 0, np.where(decode > 0, "mixed", "prefill"), "decode")
    pids = steps["instance"].to_numpy(dtype=np.int64) + offset
    starts = steps["start_s"].to_numpy(dtype=float)
    durations = steps["duration_s"].to_numpy(dtype=float)
    for k in range(len(steps)):
        args = {arg: int(values[k]) for arg, values in columns.items()}
        events.append({"ph": "X", "name": str(kinds[k]), "cat": "step", "pid": int(pids[k]),
                       "tid": 0, "ts": _us(starts[k]), "dur": _us(durations[k]),
                       "args": args})  # fmt: skip
    return events


def _request_events(
    requests: pd.DataFrame, name: str, pid: int, max_requests: int
) -> list[dict[str, Any]]:
    kept = requests.sort_values("id").head(max_requests)
    label = f"{name} / requests ({len(kept)} of {len(requests)})"
    events = [_meta("process_name", pid, 0, label), _meta("process_sort_index", pid, 0, pid)]
    for row in kept.to_dict(orient="records"):
        tid = int(row["id"]) + 1
        events.append(_meta("thread_name", pid, tid, f"request {int(row['id'])}"))
        args = {"prompt_tokens": int(row["num_prompt_tokens"]),
                "output_tokens": int(row["num_output_tokens"]),
                "instance": int(row["instance"])}  # fmt: skip
        if row.get("rejected"):
            events.append({"ph": "i", "name": "rejected", "cat": "request", "pid": pid,
                           "tid": tid, "ts": _us(row["arrival_s"]), "s": "t",
                           "args": args})  # fmt: skip
            continue
        # decode starts when the KV has arrived (disaggregated) or at the first token
        transfer_end = row.get("transfer_end_s", math.nan)
        spans = [(p, row.get(a, math.nan), row.get(b, math.nan)) for p, a, b in PHASES]
        decode_from = transfer_end if not _missing(transfer_end) else row["first_token_s"]
        spans.append(("decode", decode_from, row["finish_s"]))
        for phase, start, end in spans:
            if _missing(start) or _missing(end) or end <= start:
                continue
            events.append({"ph": "X", "name": phase, "cat": "request", "pid": pid, "tid": tid,
                           "ts": _us(start), "dur": _us(end - start), "args": args})  # fmt: skip
    return events


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def trace_document(
    results: Results,
    *,
    max_requests: int = DEFAULT_MAX_REQUESTS,
    variants: Iterable[str] | None = None,
) -> dict[str, Any]:
    """The trace-event document of `results` (all variants, or those named in `variants`)."""
    names = list(variants) if variants is not None else list(results.variants)
    events: list[dict[str, Any]] = []
    for k, name in enumerate(names):
        variant = results[name]
        offset = (k + 1) * PIDS_PER_VARIANT
        until_s = _window_end(variant.requests, max_requests)
        events.extend(_step_events(variant, name, offset, until_s))
        events.extend(
            _request_events(variant.requests, name, offset + PIDS_PER_VARIANT - 1, max_requests)
        )
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"scenario": results.scenario_name, "time": "simulated",
                          "max_request_tracks": max_requests}}  # fmt: skip


def write_trace(results: Results, path: Path, *, max_requests: int = DEFAULT_MAX_REQUESTS) -> Path:
    """Write `trace_document(results)` as JSON to `path` (via a temporary file, then a rename)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with tmp.open("w", encoding="utf-8") as handle:
            json.dump(trace_document(results, max_requests=max_requests), handle,
                      separators=(",", ":"), allow_nan=False)  # fmt: skip
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
