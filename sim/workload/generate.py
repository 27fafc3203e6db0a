"""Turn a `WorkloadSpec` into the request arrays the simulator consumes.

Determinism: the caller's generator is split with `rng.spawn` into five independent child
streams - arrivals, class choice, prompt lengths, output lengths, predicted output lengths (the
fifth was added later: `spawn` keys children by index, so the first four and every column drawn
from them are bit-for-bit what they were before) - so editing one part of the
workload (say, the output distribution) leaves every other column bit-for-bit unchanged. Within
a mix, classes draw their lengths in class order from the shared prompt (or output) stream, and
each class's draws land on that class's requests in arrival order. A synthetic workload is
drawn in chunks (`sim.workload.stream`, which a streamed run reads as it goes) and joined here.

Traces are normalized in this order: keep the window `start_s <= t < end_s` (trace seconds,
measured from the trace's first row), keep the first `max_rows` of it, shift so the first kept
request arrives at 0, divide by `rate_scale`, and only then apply the `num_requests` and
`duration_s` caps, which are in simulated seconds like everywhere else.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import numpy as np
import pandas as pd

from sim.errors import ScenarioError
from sim.measured import read_measured
from sim.workload.agent_traces import read_rollouts
from sim.workload.agents import generate_agents
from sim.workload.arrays import Content, RequestArrays, Sessions
from sim.workload.clients import generate_clients
from sim.workload.content import shared_prompt_prefix
from sim.workload.lengths import TraceCache
from sim.workload.mooncake import UNIT_TOKENS, read_mooncake
from sim.workload.rollouts import generate_rollouts
from sim.workload.sessions import generate_sessions
from sim.workload.spec import MEASURED_FORMATS, TraceSpec, WorkloadSpec
from sim.workload.stream import Workload, concat, iter_requests
from sim.workload.traces import TraceFileFormat, read_trace, resolve_path
from sim.workload.weka_trace import read_weka

GENERATE_CHUNK = 1 << 20  # requests drawn at a time when a workload is generated whole


def generate_requests(
    spec: WorkloadSpec,
    rng: np.random.Generator,
    base_dir: Path,
    max_model_len: int | None = None,
) -> RequestArrays:
    """Requests for `spec`; relative file paths in it resolve against `base_dir`;
    `max_model_len` is the model's context (for a trace's `long_prompts`)."""
    if spec.trace is not None:
        return _from_trace(spec, spec.trace, base_dir, max_model_len)
    if spec.sessions is not None:
        return generate_sessions(spec, rng, TraceCache(base_dir))
    if spec.agents is not None:
        return generate_agents(spec, rng, TraceCache(base_dir))
    if spec.rollouts is not None:
        return generate_rollouts(spec, rng, TraceCache(base_dir))
    if spec.clients is not None:
        return generate_clients(spec, rng, TraceCache(base_dir))
    return concat(iter_requests(spec, rng, base_dir, chunk=GENERATE_CHUNK))


def workload_for(
    spec: WorkloadSpec,
    seed: int,
    base_dir: Path,
    max_model_len: int | None = None,
    *,
    regenerate: bool = False,
) -> Workload:
    """The requests a run replays: generated whole from `seed`, or (`regenerate`: a streamed
    run of a workload the spec alone draws) regenerated from the seed as the run goes."""
    if regenerate:
        return Workload.streamed(spec, seed, base_dir)
    rng = np.random.default_rng(seed)
    return Workload.whole(generate_requests(spec, rng, base_dir, max_model_len))


def _from_trace(
    spec: WorkloadSpec, trace: TraceSpec, base_dir: Path, max_model_len: int | None
) -> RequestArrays:
    path = resolve_path(trace.path, base_dir)
    if trace.format == "weka":  # agents' traces: task graphs
        return read_weka(spec, trace, path)
    if trace.format == "rollouts":
        return read_rollouts(spec, trace, path)
    content: Content | None = None
    sessions: Sessions | None = None
    tier_index: np.ndarray | None = None
    tier_names: tuple[str, ...] = ("default",)
    columns = {
        key: name
        for key in ("tier_column", "id_column", "session_column")
        if (name := getattr(trace, key))
    }
    if trace.format == "mooncake":
        for key in columns:
            raise ScenarioError(
                f"a mooncake trace has no columns: {key} does not apply",
                path=f"workload.trace.{key}",
            )
        moon = read_mooncake(path)
        times, prompts, outputs = moon.arrival_s, moon.prompt_tokens, moon.output_tokens
    elif trace.format in MEASURED_FORMATS:
        for key in columns:
            raise ScenarioError(
                f"a measured run has no columns: {key} does not apply", path=f"workload.trace.{key}"
            )
        fmt = None if trace.format == "measured" else trace.format
        run = read_measured(path, fmt, benchmark=trace.benchmark,
                            drop_duplicates=trace.drop_duplicates)
        times, prompts, outputs = run.arrival_s, run.prompt_tokens, run.output_tokens
    else:
        data = read_trace(path, cast(TraceFileFormat, trace.format), tuple(columns.values()))
        times, prompts, outputs = data.arrival_s, data.prompt_tokens, data.output_tokens
    end_s = np.inf if trace.end_s is None else trace.end_s
    keep = np.flatnonzero((times >= trace.start_s) & (times < end_s))
    if trace.max_rows is not None:
        keep = keep[: trace.max_rows]
    if len(keep) == 0:
        window = f"[{trace.start_s}, {trace.end_s if trace.end_s is not None else 'end'})"
        raise ScenarioError(
            f"the trace window {window} s holds no requests (the trace spans "
            f"{float(times[-1]):.3f} s)",
            path="workload.trace",
        )
    origin = 0.0 if trace.keep_origin else times[keep[0]]  # the trace's clock, or the window's
    arrival_s = (times[keep] - origin) / trace.rate_scale
    # Caps in simulated time; arrival_s is sorted (the readers reject out-of-order rows).
    count = len(keep)
    if spec.num_requests is not None:
        count = min(count, spec.num_requests)
    if spec.duration_s is not None:
        count = min(count, int(np.searchsorted(arrival_s, spec.duration_s, side="left")))
    keep = keep[:count]
    arrival_s = arrival_s[:count]
    prompt = prompts[keep].copy()
    output = outputs[keep]
    notes: dict[str, int] = {}
    if trace.long_prompts != "keep" and max_model_len is not None:
        # requests longer than the model's context: dropped, or their prompt cut to fit
        too_long = prompt + output > max_model_len
        if trace.long_prompts == "clip":
            room = max_model_len - output
            fits = room >= 1
            notes["workload_clipped_prompts"] = int((too_long & fits).sum())
            prompt = np.where(too_long & fits, room, prompt)
            too_long &= ~fits  # an output alone over the context cannot be clipped: dropped
        notes["workload_dropped_requests"] = int(too_long.sum())
        kept = ~too_long
        keep, arrival_s, prompt, output = keep[kept], arrival_s[kept], prompt[kept], output[kept]
        count = len(keep)
    if trace.prefix_tokens and trace.format != "mooncake":
        shortest = int(np.argmin(prompt)) if len(prompt) else 0
        if len(prompt) and trace.prefix_tokens > int(prompt[shortest]):
            raise ScenarioError(
                f"a shared prefix of {trace.prefix_tokens} tokens is longer than a prompt of "
                f"{int(prompt[shortest])} tokens (request {shortest} of the window): every prompt "
                "must start with the whole prefix",
                path="workload.trace.prefix_tokens",
            )
        content = shared_prompt_prefix(prompt, trace.prefix_tokens, trace.prefix_groups)
    if trace.format == "mooncake":
        starts, ends = moon.offsets[keep], moon.offsets[keep + 1]
        pieces = [moon.hash_ids[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
        offsets = np.zeros(count + 1, dtype=np.int64)
        offsets[1:] = np.cumsum(ends - starts)
        ids = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
        content = Content(ids=ids, offsets=offsets, unit=UNIT_TOKENS, tokens=prompt.copy())
        sessions = Sessions(session=moon.session[keep])  # conversation labels (see mooncake)
    source_id: np.ndarray | None = None
    if trace.format in MEASURED_FORMATS:
        source_id = run.request_id[keep].astype(object)
    elif trace.format != "mooncake":
        if trace.tier_column:
            codes, uniques = pd.factorize(data.extra[trace.tier_column][keep])
            tier_index, tier_names = codes.astype(np.int64), tuple(str(u) for u in uniques)
        if trace.id_column:
            source_id = data.extra[trace.id_column][keep].astype(object)
        if trace.session_column:
            labels, names = pd.factorize(data.extra[trace.session_column][keep])
            sessions = Sessions(
                session=labels.astype(np.int64), names=np.asarray(names, dtype=object)
            )
    if trace.num_clients is not None:
        arrival_s, sessions = _clients(arrival_s, trace.num_clients)
    return RequestArrays(
        arrival_s=arrival_s.copy(),
        prompt_tokens=prompt,
        output_tokens=output.copy(),
        class_index=np.zeros(count, dtype=np.int64),
        class_names=("trace",),
        tier_index=tier_index,
        tier_names=tier_names,
        content=content,
        sessions=sessions,
        notes=notes,
        source_id=source_id,
    )


def _clients(arrival_s: np.ndarray, num_clients: int) -> tuple[np.ndarray, Sessions]:
    """A trace's requests sent by `num_clients` closed-loop clients: client i sends rows i,
    i + N, ... (dealt in arrival order), its first at that row's own time and each later one
    when its previous one has ended (arrival NaN until the run knows it)."""
    n = len(arrival_s)
    clients = min(num_clients, n)
    ids = np.arange(n, dtype=np.int64)
    arrival = np.full(n, np.nan)
    arrival[:clients] = arrival_s[:clients]
    next_turn = np.where(ids + clients < n, ids + clients, -1)
    think = np.zeros(n)
    think[:clients] = np.nan  # a client's first request follows no earlier one
    return arrival, Sessions(session=ids % clients, next_turn=next_turn, think_s=think)
