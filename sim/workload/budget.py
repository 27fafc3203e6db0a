"""How big a workload is before it exists: the request count it implies and the memory a run
of it needs, checked before anything is generated.

A synthetic workload stops at `num_requests` arrivals or at `duration_s`, so its size is known
from the spec (for a duration, the expected count `rate x duration` plus a margin; for a rate
profile, its integrated rate Lambda(duration) plus the margin). A run keeps
its workload's columns (`STREAMED_BYTES_PER_REQUEST`, all a streamed run keeps; a streamed run
that regenerates a synthetic workload as it goes keeps `GENERATED_BYTES_PER_REQUEST` and the
content ids of one chunk) and, unless it streams, its tables (`TABLE_BYTES_PER_REQUEST` in
all, per request and variant: from `benchmarks/bench_sim.py`, 0.9 GB peak for a million
requests), so a workload
that cannot fit in this machine's memory is refused up front with the estimate, instead of
trying to allocate terabytes or swapping for an hour: at load time what no run could hold, and
when a run with tables starts, what its tables could not. Closed-loop `clients` send
`num_requests`, or `num_clients x requests_per_client` if smaller, a count known from the spec;
`sessions` send their sessions' turns (sessions by `num_sessions` or the session arrival rate
times `duration_s`, times the mean of `turns`); `agents` every call of their tasks (the mean
task's calls by its types' weights: its turns, and each fork's subagents' turns); `rollouts`
every turn of every trajectory of every wave.

Content ids (prefix caching: one int64 per `UNIT_TOKENS` tokens of each request, and the
temporaries that build them) are counted too: for a `shared_prefix` every prompt grows by its
system prompt, and a session's turns each hold the whole history so far (quadratic in the
turns). Estimates use each length distribution's mean (an empirical one counts as 1 token: its
file is read only when the workload is generated).

Traces and measured runs are bounded by their file, so they are not estimated from the spec;
what a file could still blow up (content ids over its prompts, a session's turns drawn from an
empirical `turns` column) is checked where it is built, from the real counts, by
`content_problem` and `requests_problem`, before the arrays are allocated. A rate profile read
from a csv is alike: sized here by its count alone (not at all by a duration), then checked by
`sim.workload.arrivals` from the file's integrated rate, before any arrival is drawn.
"""

from __future__ import annotations

import json
import math
import os

from sim.workload.agents_spec import MAX_SUBAGENTS
from sim.workload.rate_profile import inline_curve
from sim.workload.spec import (
    MAX_TOKENS,
    ArrivalSpec,
    EmpiricalLength,
    FixedLength,
    LengthDist,
    LognormalLength,
    ProfileArrival,
    UniformLength,
    WorkloadSpec,
)

# a workload generated whole and the run's per-request state, streamed: generating 10 million
# requests peaks at 40 bytes each (one class, scenarios/autoscaling_day.yaml's lengths) and 68
# (a three-class mix with predicted outputs: the masks and draws of each class), and a streamed
# run adds next to nothing per request; 100 leaves a margin over the mix
STREAMED_BYTES_PER_REQUEST = 100
# a streamed run that regenerates its workload as it goes (`sim.workload.stream`) holds the
# chunks in flight (bounded, not per request) and one bit per request (`RequestLog.record`):
# bench_sim.py --stream, 200 MB for 1 million requests and 209 MB for 10 million
GENERATED_BYTES_PER_REQUEST = 1
STREAM_CHUNK_REQUESTS = 1 << 16  # requests generated at a time (`sim.workload.stream`)
TABLE_BYTES_PER_REQUEST = 1_200  # with the request, step and gap tables
# A content id is one int64; building them takes the positions, three repeated columns and
# the result at once (`content.content_ids`): about five int64 per unit at the peak.
CONTENT_BYTES_PER_UNIT = 40
CONTENT_UNIT_TOKENS = 16  # `content.UNIT_TOKENS` (content imports this module)


def mean_length(dist: LengthDist) -> float:
    """The mean of a length distribution (an empirical one: 1, its least possible value)."""
    if isinstance(dist, FixedLength):
        return float(dist.value)
    if isinstance(dist, UniformLength):
        return (dist.low + dist.high) / 2
    if isinstance(dist, LognormalLength):
        # exp(sigma^2 / 2) overflows past sigma ~ 37; the schema stops sigma at 20
        mean = dist.median * math.exp(dist.sigma**2 / 2)
        return max(float(dist.min), min(mean, float(dist.max or MAX_TOKENS)))
    assert isinstance(dist, EmpiricalLength)
    return 1.0


def _by_rate(
    count: float, key: str, arrival: ArrivalSpec, duration_s: float | None
) -> tuple[float, str] | None:
    """A count capped by an arrival process over `duration_s` (plus a margin: it is random);
    None when it cannot be known from the spec (a csv rate profile without a count)."""
    if duration_s is not None:
        if isinstance(arrival, ProfileArrival):
            curve = inline_curve(arrival)
            if curve is None:
                return None if math.isinf(count) else (count, key)
            by_time = curve.expected(duration_s)
        else:
            by_time = arrival.rate * duration_s
        by_time += 6 * math.sqrt(by_time)  # a few standard deviations more
        if by_time < count:
            return by_time, "workload.duration_s"
    return count, key


def expected_sessions(spec: WorkloadSpec) -> tuple[float, str] | None:
    """(sessions a sessions workload starts, the key that bounds it); None for other kinds."""
    if spec.sessions is None:
        return None
    s = spec.sessions
    count = math.inf if s.num_sessions is None else float(s.num_sessions)
    return _by_rate(count, "workload.sessions.num_sessions", s.arrival, spec.duration_s)


def expected_tasks(spec: WorkloadSpec) -> tuple[float, str] | None:
    """(tasks an agents workload runs, the key that bounds it); None for other kinds."""
    a = spec.agents
    if a is None:
        return None
    count = math.inf if a.num_tasks is None else float(a.num_tasks)
    if a.arrival is None:
        return count, "workload.agents.num_tasks"
    return _by_rate(count, "workload.agents.num_tasks", a.arrival, spec.duration_s)


def _agent_shape(spec: WorkloadSpec) -> tuple[float, float]:
    """(calls, content ids) of a mean task of an agents workload, its types by weight: the
    ids count once per context (sim.workload.agents)."""
    assert spec.agents is not None
    calls = units = 0.0
    total = sum(t.weight for t in spec.agents.types)
    for t in spec.agents.types:
        turns = mean_length(t.turns)
        out, tool = mean_length(t.output_tokens), mean_length(t.tool_result_tokens)
        main = t.system_tokens + mean_length(t.task_tokens) + turns * out + (turns - 1) * tool
        own_calls, contexts = turns, main
        if (s := t.subagents) is not None:
            subs = (turns - 1) * s.probability * min(mean_length(s.count), MAX_SUBAGENTS)
            sub_turns = mean_length(s.turns)
            own_calls += subs * sub_turns
            per_tool = mean_length(s.output_tokens) + mean_length(s.tool_result_tokens)
            sub_context = main / 2 + mean_length(s.task_tokens) + sub_turns * per_tool
            contexts += subs * (sub_context + mean_length(s.result_tokens))
        calls += t.weight / total * own_calls
        units += t.weight / total * (contexts / CONTENT_UNIT_TOKENS + own_calls)
    return calls, units


def _rollout_shape(spec: WorkloadSpec) -> tuple[float, float]:
    """(calls, content ids) of a rollouts workload: every turn of every trajectory; the ids of
    each trajectory's context once."""
    r = spec.rollouts
    assert r is not None
    trajectories = float(r.num_waves) * r.groups_per_wave * r.group_size
    turns = mean_length(r.turns)
    per_turn = mean_length(r.output_tokens) + mean_length(r.observation_tokens)
    context = r.system_tokens + mean_length(r.prompt_tokens) + turns * per_turn
    return trajectories * turns, trajectories * (context / CONTENT_UNIT_TOKENS + turns)


def expected_requests(spec: WorkloadSpec) -> tuple[float, str] | None:
    """(requests the workload will have, the key that bounds it); None for a trace."""
    if spec.rollouts is not None:
        r = spec.rollouts
        turns = mean_length(r.turns)
        many = turns > float(r.num_waves) * r.groups_per_wave * r.group_size
        return _rollout_shape(spec)[0], f"workload.rollouts.{'turns' if many else 'num_waves'}"
    tasks = expected_tasks(spec)
    if tasks is not None:  # every call of every task is a request
        calls, _ = _agent_shape(spec)
        key = tasks[1] if calls <= tasks[0] else "workload.agents.types"
        return tasks[0] * calls, key
    sessions = expected_sessions(spec)
    if sessions is not None and spec.sessions is not None:  # every turn is a request
        turns = mean_length(spec.sessions.turns)
        key = sessions[1] if turns <= sessions[0] else "workload.sessions.turns"
        return sessions[0] * turns, key
    if spec.clients is not None:  # closed-loop clients: a count known up front
        sent = float(spec.clients.num_requests(spec.num_requests))
        if spec.num_requests is not None and sent == spec.num_requests:
            return sent, "workload.num_requests"
        return sent, "workload.clients.requests_per_client"
    if spec.trace is not None or spec.arrival is None:
        return None
    count = math.inf if spec.num_requests is None else float(spec.num_requests)
    return _by_rate(count, "workload.num_requests", spec.arrival, spec.duration_s)


def expected_content_units(spec: WorkloadSpec) -> tuple[float, str] | None:
    """(content ids the workload's requests will have, the key that makes them many); None
    when its tokens are all unique (no content ids) or it is a trace (see the module)."""
    requests = expected_requests(spec)
    if requests is None:
        return None
    tasks = expected_tasks(spec)
    if tasks is not None:
        return tasks[0] * _agent_shape(spec)[1], "workload.agents.types"
    if spec.rollouts is not None:
        return _rollout_shape(spec)[1], "workload.rollouts.num_waves"
    prefix = 0.0
    if spec.shared_prefix is not None:
        prefix = spec.shared_prefix.fraction * mean_length(spec.shared_prefix.length)
    if spec.sessions is not None:
        s = spec.sessions
        sessions = expected_sessions(spec)
        assert sessions is not None
        turns = mean_length(s.turns)
        lengths = (s.first_prompt, s.user_tokens, s.output_tokens)
        first, user, output = (mean_length(d) for d in lengths)
        # turn k holds the history: prefix + first + k (user + output), and its own output
        tokens = turns * (prefix + first + output) + (user + output) * turns * (turns - 1) / 2
        units = sessions[0] * (tokens / CONTENT_UNIT_TOKENS + turns)
        if turns * prefix > tokens / 2:  # mostly system prompt
            return units, "workload.shared_prefix.length"
        return units, requests[1]
    if spec.shared_prefix is None:
        return None
    if spec.clients is not None:
        prompt = mean_length(spec.clients.prompt_tokens)
    elif spec.mix is not None:
        weights = sum(cls.weight for cls in spec.mix)
        prompt = sum(cls.weight * mean_length(cls.prompt_tokens) for cls in spec.mix) / weights
    else:
        assert spec.prompt_tokens is not None
        prompt = mean_length(spec.prompt_tokens)
    units = requests[0] * ((prompt + prefix) / CONTENT_UNIT_TOKENS + 1)
    return units, "workload.shared_prefix.length"


def physical_memory_bytes() -> int | None:
    """This machine's physical memory, or None where the platform does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def _size(num_bytes: float) -> str:
    for unit, scale in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:.1f} {unit}"
    return f"{num_bytes / 2**10:.0f} KiB"


def memory_problem(
    workloads: list[WorkloadSpec],
    *,
    tables: bool = False,
    seeds: list[int] | None = None,
    generated: list[bool] | None = None,
) -> tuple[str, str] | None:
    """(key, reason) when running these workloads (one per variant) cannot fit in memory,
    streamed (`tables=False`: what no run could hold) or keeping tables. With the variants'
    `seeds`, a streamed run counts each distinct workload once: variants with the same seed and
    workload replay one set of requests (`sim.simulate.simulate`), while each keeps its own
    tables. `generated` says which variants' streamed runs regenerate their workload as they go
    (`ResolvedScenario.regenerates_workload`): those hold next to nothing per request."""
    per_request = TABLE_BYTES_PER_REQUEST if tables else STREAMED_BYTES_PER_REQUEST
    flags = generated if generated is not None and not tables else [False] * len(workloads)
    if seeds is not None and not tables:
        distinct = {
            json.dumps([seed, w.model_dump(mode="json"), g], sort_keys=True): (w, g)
            for seed, w, g in zip(seeds, workloads, flags, strict=True)
        }
        workloads = [w for w, _ in distinct.values()]
        flags = [g for _, g in distinct.values()]
    sized = [(expected_requests(w), g) for w, g in zip(workloads, flags, strict=True)]
    known = [s for s, _ in sized if s is not None]
    if not known:
        return None
    contents = []
    for (size, g), w in zip(sized, workloads, strict=True):
        if (c := expected_content_units(w)) is not None:
            # regenerated: the content ids of one chunk at a time
            share = min(1.0, STREAM_CHUNK_REQUESTS / size[0]) if g and size and size[0] else 1.0
            contents.append((c[0] * share, c[1]))
    requests_bytes = sum(
        s[0] * (GENERATED_BYTES_PER_REQUEST if g else per_request) for s, g in sized if s
    )
    content_bytes = sum(units for units, _ in contents) * CONTENT_BYTES_PER_UNIT
    needed = requests_bytes + content_bytes
    memory = physical_memory_bytes()
    if memory is None or needed <= memory:
        return None
    variants = f" x {len(known)} variants" if len(known) > 1 else ""
    if content_bytes > requests_bytes:  # the content ids are what does not fit
        units, key = max(contents)
        return key, (
            f"the requests' content ids (prefix caching: one per {CONTENT_UNIT_TOKENS} tokens "
            f"of each prompt; about {units:.3g}{variants}) need an estimated {_size(needed)} "
            f"of memory; this machine has {_size(memory)}: shorten the prompts, system prompts "
            "or sessions, the tasks' contexts, or send fewer requests"
        )
    (count, key), regenerated = max((s, g) for s, g in sized if s is not None)
    if regenerated:
        per_request = GENERATED_BYTES_PER_REQUEST
    what = f"about {count:.3g} requests" if key.endswith("duration_s") else f"{count:.0f} requests"
    pairs = [(s[0], w) for (s, _), w in zip(sized, workloads, strict=True) if s is not None]
    biggest = max(pairs, key=lambda pair: pair[0])[1]
    advice = "lower num_requests or duration_s"
    if biggest.sessions is not None:
        advice = "lower sessions.num_sessions, sessions.turns or duration_s"
    if biggest.agents is not None:
        advice = "lower agents.num_tasks, the types' turns and subagents, or duration_s"
    if biggest.rollouts is not None:
        advice = "lower rollouts.num_waves, groups_per_wave, group_size or turns"
    if tables:
        advice += ", or stream the summary (batchsim run --stream, simulate(tables=False))"
    return key, (
        f"{what}{variants} need an estimated {_size(needed)} of memory (about "
        f"{per_request / 1000:.2g} kB per request and variant"
        f"{' with tables' if tables else ', streamed'}); this machine has "
        f"{_size(memory)}: {advice}"
    )


def _refusal(what: str, needed: float) -> str | None:
    memory = physical_memory_bytes()
    if memory is None or needed <= memory:
        return None
    return f"{what} need an estimated {_size(needed)} of memory; this machine has {_size(memory)}"


# a task graph's call while it is drawn: seven Python list entries (the ints and the float
# behind them), its edges and its share of the contexts (sim/workload/task_graph.py): 2
# million calls peak at about 740 MB
GRAPH_BYTES_PER_CALL = 400


def calls_problem(count: int) -> str | None:
    """The reason `count` calls of a task graph, drawn so far, cannot be held while the rest
    is drawn; None when they can."""
    return _refusal(f"{count} calls drawn so far", float(count) * GRAPH_BYTES_PER_CALL)


def requests_problem(count: int) -> str | None:
    """The reason `count` requests, now known (a session's turns drawn), cannot be held even
    streamed; None when they can."""
    return _refusal(f"{count} requests", float(count) * STREAMED_BYTES_PER_REQUEST)


def arrivals_problem(count: float, source: str) -> str | None:
    """The reason about `count` arrivals expected from `source` (a rate profile read from a
    file) cannot be held even streamed; None when they can."""
    what = f"about {count:.3g} requests (expected from {source})"
    return _refusal(what, count * STREAMED_BYTES_PER_REQUEST)


def content_problem(units: int) -> str | None:
    """The reason `units` content ids, now known (a trace's prompts), cannot be built; None
    when they can."""
    what = f"the requests' {units} content ids (one per {CONTENT_UNIT_TOKENS} prompt tokens)"
    return _refusal(what, float(units) * CONTENT_BYTES_PER_UNIT)
