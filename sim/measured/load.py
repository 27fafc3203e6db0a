"""How a measured benchmark sent its requests: at its own times (open loop) or by a fixed number
of clients, each sending its next request when its previous one ended (closed loop).

A closed loop replayed at its measured arrivals keeps the real engine's pace: a simulated engine
that is slower still gets the requests as early as the real one did. `load_of` reads what each
tool's files say of themselves, so that `batchsim replay` sends the requests by as many clients
as the benchmark had (`workload.trace.num_clients`):

- GuideLLM: each benchmark's strategy, `synchronous` (1 client), `concurrent` (`streams`) and
  `throughput` with `max_concurrency`; a sweep mixes strategies and is replayed open loop;
- `vllm bench serve`: `max_concurrency` with `request_rate` inf (with a finite rate, the
  concurrency only gated a rate: replayed at the measured arrivals);
- AIPerf: `input_config.loadgen` of the `profile_export_aiperf.json` beside the
  `profile_export.jsonl` (`concurrency` without `request_rate`); the records alone do not say.

Spans (`vllm_otlp`) and batchsim's own results carry no client settings: replayed open loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sim.measured.run import MeasuredRun


@dataclass(frozen=True)
class Load:
    """`clients`: closed-loop clients to replay the run with (None: its measured arrivals);
    `note`: one line saying so ("" when there is nothing to say); `caveat`: the note is a
    warning (the run was, or may have been, a closed loop replayed open)."""

    clients: int | None
    note: str = ""
    caveat: bool = False


OPEN = Load(None)


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 1 or value != int(value) or value > 100_000:
        return None
    return int(value)


def _closed(clients: int, what: str) -> Load:
    return Load(clients, f"{what}: a closed loop, replayed as {clients} client(s), each sending "
                f"its next request when its previous one ends")  # fmt: skip


def _guidellm(meta: dict[str, Any]) -> Load:
    benches = [b for b in meta.get("benchmarks") or [] if isinstance(b, dict)]
    loops: list[tuple[int, str, int | None]] = []  # (index, strategy, clients or None)
    for b in benches:
        kind = b.get("strategy")
        if kind == "synchronous":
            loops.append((b.get("index", 0), "synchronous", 1))
        elif kind == "concurrent":
            loops.append((b.get("index", 0), "concurrent", _count(b.get("streams"))))
        elif kind == "throughput":
            loops.append((b.get("index", 0), "throughput", _count(b.get("max_concurrency"))))
    if not loops:
        return OPEN
    if len(benches) > 1:
        named = ", ".join(f"{i} ({kind})" for i, kind, _ in loops)
        return Load(None, f"GuideLLM benchmarks {named} of this sweep were closed loops; the "
                    "sweep is replayed at its measured arrivals (open loop): --benchmark I "
                    "replays one by its clients", caveat=True)  # fmt: skip
    index, kind, clients = loops[0]
    if clients is None:
        return Load(None, f"GuideLLM benchmark {index} ({kind}) was a closed loop whose "
                    "concurrency the report does not state: replayed at its measured arrivals "
                    "(open loop)", caveat=True)  # fmt: skip
    setting = {"synchronous": "synchronous", "concurrent": f"concurrent, streams {clients}",
               "throughput": f"throughput, max_concurrency {clients}"}[kind]  # fmt: skip
    return _closed(clients, f"GuideLLM benchmark {index} ({setting})")


def _rate_is_inf(rate: Any) -> bool:
    if rate is None or rate == "inf":
        return True
    return isinstance(rate, int | float) and not isinstance(rate, bool) and math.isinf(rate)


def _vllm_bench(meta: dict[str, Any]) -> Load:
    if meta.get("max_concurrency") is None:
        return OPEN
    clients = _count(meta["max_concurrency"])
    if clients is None:
        return Load(None, f"vllm bench max_concurrency {meta['max_concurrency']!r} is not a "
                    "client count: replayed at the measured arrivals (open loop)",
                    caveat=True)  # fmt: skip
    rate = meta.get("request_rate")
    if not _rate_is_inf(rate):
        return Load(None, f"vllm bench max_concurrency {clients} gated a request_rate of "
                    f"{rate}/s: replayed at the measured arrivals (open loop)",
                    caveat=True)  # fmt: skip
    return _closed(clients, f"vllm bench serve --max-concurrency {clients}")


def _aiperf(meta: dict[str, Any]) -> Load:
    loadgen = meta.get("loadgen")
    if not isinstance(loadgen, dict):
        why = meta.get("loadgen_note") or "no profile_export_aiperf.json beside it"
        return Load(None, f"AIPerf's records do not say how the requests were sent ({why}): "
                    "the concurrency of a --concurrency run cannot be known; replayed at the "
                    "measured arrivals (open loop)", caveat=True)  # fmt: skip
    clients = _count(loadgen.get("concurrency"))
    rate = loadgen.get("request_rate")
    if rate is not None:
        if clients is None:
            return OPEN
        return Load(None, f"AIPerf --concurrency {clients} gated a --request-rate of {rate}/s: "
                    "replayed at the measured arrivals (open loop)", caveat=True)  # fmt: skip
    if clients is None:
        return Load(None, "AIPerf's input_config.loadgen states neither a concurrency nor a "
                    "request rate: replayed at the measured arrivals (open loop)",
                    caveat=True)  # fmt: skip
    return _closed(clients, f"AIPerf --concurrency {clients}")


def load_of(run: MeasuredRun) -> Load:
    """How `run`'s benchmark sent its requests, from what its files say (module docstring)."""
    meta = run.meta if isinstance(run.meta, dict) else {}
    if run.format == "guidellm":
        return _guidellm(meta)
    if run.format == "vllm_bench":
        return _vllm_bench(meta)
    if run.format == "aiperf":
        return _aiperf(meta)
    return OPEN
