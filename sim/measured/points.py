"""Closed-loop benchmark points: what a load sweep measured, one point per concurrency.

A point is C clients, each sending its next request the moment its previous one finished, the
prompt and output lengths they sent, and what the benchmark measured: total token throughput
(prompt + output tokens per second), mean TPOT and, when the file has it, mean TTFT. These are
what published benchmark tables and `vllm bench serve --max-concurrency` sweeps report; they are
the input of `batchsim calibrate-engine --points` (`sim.whatif.calibrate_points`).

Readers (`read_points`):

- **CSV** (`.csv`) with the columns of calibration/training/inferencex_train.csv, of which
  these are read: `conc` (clients), `isl` and `osl` (nominal prompt and output tokens),
  `random_range_ratio` (optional, default 1: lengths drawn uniformly from [ratio x nominal,
  nominal]), `tpot_mean_s`, `ttft_mean_s` (optional), and the throughput as `tput_per_gpu` with
  `num_gpus` (the deployment's) or as `total_tput_tok_s`; `num_requests` is optional (default 10
  x conc, as InferenceX sends), and so is `model` (the served model: `name (path)` as
  InferenceX writes it, a path or a name). Extra columns are ignored.
- **`vllm bench serve` results** (`.json`, `--save-result --save-detailed`; one file per
  concurrency or appended lines, each a point): `max_concurrency` must be set (a sweep without it
  is open-loop, not a closed-loop point); lengths are the requests' own mean lengths (fixed);
  the model is its `model_id`.
- **GuideLLM reports** (`.json`): each benchmark run with the `concurrent` strategy is a point
  (`streams` clients).

Throughput is measured over the benchmark's span: `duration` when the file gives it, else the
first request's start to the last request's end.

A point's output is 2 tokens or more (a mean TPOT needs a second token). The work a fit
simulates is bounded before anything runs: at most `MAX_POINTS` points, `MAX_TOTAL_REQUESTS`
requests and `MAX_TOTAL_STEPS` decode steps (each point's requests per client x output tokens)
over all files.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim.errors import ScenarioError
from sim.inputs.text import check_regular_file, read_text

MAX_POINTS_BYTES = 64 * 1024**2  # a sweep's table: far beyond any real one
MAX_CLIENTS = 100_000
MAX_LENGTH = 10_000_000
MAX_REQUESTS = 1_000_000
MAX_POINTS = 2_000  # a sweep has tens; the whole published table (calibration/training) 921
MAX_TOTAL_REQUESTS = 500_000  # simulated twice each; the largest published deployment: 23,200
MAX_TOTAL_STEPS = 50_000_000  # decode steps, likewise (published deployment: 2.9 million)
MAX_MODEL_CHARS = 300
MAX_THROUGHPUT = 1e9  # tokens per second
MAX_SECONDS = 86_400.0  # a mean TPOT or TTFT above a day is not a measurement


@dataclass(frozen=True)
class LoadPoint:
    """One closed-loop point: the load (clients, lengths, requests) and what was measured."""

    label: str  # file and line or benchmark, as errors and reports name it
    group: str  # points of one sweep (same lengths): the unit of cross-validation
    concurrency: int
    prompt_tokens: int  # nominal (the longest drawn)
    output_tokens: int
    range_ratio: float  # lengths drawn uniformly in [ratio x nominal, nominal]; 1: fixed
    num_requests: int
    throughput_tok_s: float  # prompt + output tokens per second, the whole deployment
    tpot_mean_s: float
    ttft_mean_s: float | None
    model: str | None = None  # the served model the file names (None: it names none)

    def lengths(self, nominal: int) -> dict[str, Any]:
        """The scenario's length distribution for one side (prompt or output)."""
        low = int(nominal * self.range_ratio)
        if low >= nominal:
            return {"dist": "fixed", "value": nominal}
        return {"dist": "uniform", "low": max(1, low), "high": nominal}


def _number(raw: str | None, name: str, where: str, file: str, *, low: float, high: float,
            integer: bool = False, low_open: bool = False) -> float:
    if raw is None or not raw.strip():
        raise ScenarioError(f"column {name} is empty", file=file, path=where)
    try:
        value = float(raw)
    except ValueError:
        raise ScenarioError(f"column {name}: {raw[:40]!r} is not a number", file=file,
                            path=where) from None
    bad_low = value <= low if low_open else value < low
    if not math.isfinite(value) or bad_low or value > high:
        side = ">" if low_open else ">="
        raise ScenarioError(f"column {name}: {raw[:40]} is outside {side} {low:g} and <= "
                            f"{high:g}", file=file, path=where)
    if integer and value != int(value):
        raise ScenarioError(f"column {name}: {raw[:40]} is not a whole number", file=file,
                            path=where)
    return value


def _csv_points(path: Path) -> list[LoadPoint]:
    file = str(path)
    text = read_text(path, "points table", max_bytes=MAX_POINTS_BYTES)
    reader = csv.DictReader(io.StringIO(text))
    columns = set(reader.fieldnames or ())
    missing = [c for c in ("conc", "isl", "osl", "tpot_mean_s") if c not in columns]
    if missing:
        raise ScenarioError(f"has no column {', '.join(missing)} (a closed-loop point needs "
                            "conc, isl, osl, tpot_mean_s and a throughput)", file=file)
    per_gpu = "tput_per_gpu" in columns and "num_gpus" in columns
    if not per_gpu and "total_tput_tok_s" not in columns:
        raise ScenarioError("has no throughput: give tput_per_gpu with num_gpus, or "
                            "total_tput_tok_s", file=file)
    out: list[LoadPoint] = []
    for row in reader:
        where = f"line {reader.line_num}"

        def num(name: str, low: float, high: float, integer: bool = False,
                low_open: bool = False, row: dict[str, Any] = row, where: str = where) -> float:
            return _number(row.get(name), name, where, file, low=low, high=high,
                           integer=integer, low_open=low_open)

        if len(out) >= MAX_POINTS:
            raise ScenarioError(f"more than {MAX_POINTS:,} points: fit on a sample", file=file,
                                path=where)
        conc = int(num("conc", 1, MAX_CLIENTS, integer=True))
        isl = int(num("isl", 1, MAX_LENGTH, integer=True))
        osl = int(num("osl", 1, MAX_LENGTH, integer=True))
        if osl < 2:
            raise ScenarioError(f"column osl: {osl} output token has no TPOT (a point needs "
                                "outputs of 2 tokens or more)", file=file, path=where)
        ratio = num("random_range_ratio", 0, 1) if row.get("random_range_ratio") else 1.0
        if per_gpu:
            gpus = num("num_gpus", 1, 100_000, integer=True)
            tput = num("tput_per_gpu", 0, MAX_THROUGHPUT, low_open=True) * gpus
        else:
            tput = num("total_tput_tok_s", 0, MAX_THROUGHPUT, low_open=True)
        requests = (int(num("num_requests", 1, MAX_REQUESTS, integer=True))
                    if row.get("num_requests") else 10 * conc)
        ttft = num("ttft_mean_s", 0, MAX_SECONDS, low_open=True) if row.get("ttft_mean_s") else None
        model = (row.get("model") or "").strip()[:MAX_MODEL_CHARS] or None
        out.append(LoadPoint(
            label=f"{path.name} {where}", group=f"{isl}/{osl}/{ratio:g}", concurrency=conc,
            prompt_tokens=isl, output_tokens=osl, range_ratio=ratio, num_requests=requests,
            throughput_tok_s=tput,
            tpot_mean_s=num("tpot_mean_s", 0, MAX_SECONDS, low_open=True), ttft_mean_s=ttft,
            model=model,
        ))  # fmt: skip
    if not out:
        raise ScenarioError("has a header and no points", file=file)
    return out


def _run_point(run: Any, label: str, clients: Any, duration: Any) -> LoadPoint:
    """A point from one measured benchmark's requests."""
    file = run.source
    if not isinstance(clients, int) or isinstance(clients, bool) or not 1 <= clients <= MAX_CLIENTS:
        raise ScenarioError(f"{label}: not a closed-loop point (its concurrency is "
                            f"{clients!r}; a point needs 1 to {MAX_CLIENTS} clients)", file=file)
    prompt = run.prompt_tokens.astype(float)
    output = run.output_tokens.astype(float)
    if isinstance(duration, int | float) and not isinstance(duration, bool) and duration > 0:
        span = float(duration)
    else:
        span = float(np.nanmax(run.arrival_s + run.e2e_s)) if len(run) else math.nan
    if not math.isfinite(span) or not 0 < span <= 30 * MAX_SECONDS:
        raise ScenarioError(f"{label}: the benchmark's span {span!r} s is not a duration",
                            file=file)
    tpot = float(np.nanmean(run.tpot_s)) if np.isfinite(run.tpot_s).any() else math.nan
    if not (math.isfinite(tpot) and tpot > 0):
        raise ScenarioError(f"{label}: no request has a TPOT (outputs of one token, or no "
                            "token times)", file=file)
    ttft = float(np.nanmean(run.ttft_s)) if np.isfinite(run.ttft_s).any() else None
    isl, osl = round(float(prompt.mean())), round(float(output.mean()))
    if osl < 2:
        raise ScenarioError(f"{label}: its mean output is {float(output.mean()):g} tokens; a "
                            "point needs outputs of 2 tokens or more", file=file)
    model = run.meta.get("model_id")
    model = model[:MAX_MODEL_CHARS] if isinstance(model, str) and model else None
    return LoadPoint(
        label=label, group=f"{isl}/{osl}", concurrency=clients, prompt_tokens=isl,
        output_tokens=osl, range_ratio=1.0, num_requests=len(run),
        throughput_tok_s=float(prompt.sum() + output.sum()) / span, tpot_mean_s=tpot,
        ttft_mean_s=ttft, model=model,
    )


def _json_points(path: Path) -> list[LoadPoint]:
    from sim.measured import detect_format, read_measured

    fmt = detect_format(path)
    if fmt == "vllm_bench":
        first = read_measured(path, fmt, benchmark=0)
        count = int(first.meta.get("results_in_file", 1) or 1)
        out = []
        for i in range(count):
            run = first if i == 0 else read_measured(path, fmt, benchmark=i)
            label = f"{path.name}" + (f" result {i}" if count > 1 else "")
            out.append(_run_point(run, label, run.meta.get("max_concurrency"),
                                  run.meta.get("duration")))
        return out
    if fmt == "guidellm":
        whole = read_measured(path, fmt)
        out = []
        for bench in whole.meta.get("benchmarks", []):
            if bench.get("strategy") != "concurrent":
                continue
            run = read_measured(path, fmt, benchmark=int(bench["index"]))
            out.append(_run_point(run, f"{path.name} benchmark {bench['index']}",
                                  bench.get("streams"), None))
        if not out:
            raise ScenarioError("has no benchmark of the concurrent strategy (no closed-loop "
                                "point)", file=str(path))
        return out
    raise ScenarioError(f"is a {fmt} file; closed-loop points come from a CSV table, "
                        "vllm bench serve results or a GuideLLM report", file=str(path))


def read_points(paths: list[Path]) -> list[LoadPoint]:
    """Every point of the given files, in order (see the module docstring)."""
    out: list[LoadPoint] = []
    for path in paths:
        check_regular_file(path, "points file")
        points = _csv_points(path) if path.suffix.lower() == ".csv" else _json_points(path)
        out.extend(points)
        if len(out) > MAX_POINTS:
            raise ScenarioError(f"more than {MAX_POINTS:,} points: fit on a sample",
                                file=str(path))
        _check_work(out, str(path))
    return out


def _check_work(points: list[LoadPoint], file: str) -> None:
    """The simulations a fit of `points` runs are bounded (see the module docstring)."""
    requests = sum(p.num_requests for p in points)
    steps = sum(-(-p.num_requests // p.concurrency) * p.output_tokens for p in points)
    for total, bound, what in ((requests, MAX_TOTAL_REQUESTS, "requests"),
                               (steps, MAX_TOTAL_STEPS, "decode steps")):
        if total > bound:
            raise ScenarioError(f"the points up to this file ask for {total:,} simulated {what}; "
                                f"at most {bound:,} in all (fewer points, or fewer requests "
                                "per point)", file=file)
