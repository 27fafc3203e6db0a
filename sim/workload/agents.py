"""Agents' tasks as requests: each call a request, each task a graph of them (see
`sim.workload.agents_spec` for what a task is).

Ids: the calls known before the run come first, in arrival order (the first call of each
task that arrives by the arrival process, or of each agent's first task); every other call
follows, task by task, in the order it is drawn. A call that is not known up front arrives a
wait after the last call it waits for ended (`Sessions.successors`, `needs`, `think_s`): a
turn after its tool call (`tool_time`), a subagent's first turn at once after the turn that
forked it, the join at once after the slowest subagent's last answer, an agent's next task at
once after its previous task's last answer.

Content: each context (a task's main context, each subagent's) is one token sequence: the
agent type's system prompt (content shared by every task of the type), then the context's own
tokens; a subagent's sequence starts with its parent's whole units up to the fork and goes on
with its own. Each call's content is a view of its context's ids as far as its prompt and
answer reach, so the next call of the context finds them all, and the ids take memory once
per context, not once per call.

Determinism: every quantity of every agent type draws from a child stream of its own (`Draws`),
so changing one type's lengths or waits leaves the other types' tasks as they were.
"""

from __future__ import annotations

import numpy as np

from sim.errors import ScenarioError
from sim.workload.agents_spec import MAX_SUBAGENTS
from sim.workload.arrays import RequestArrays
from sim.workload.arrivals import sample_arrivals
from sim.workload.content import UNIT_TOKENS
from sim.workload.dists import (
    DelayDist,
    ExponentialDelay,
    FixedDelay,
    LengthDist,
    UniformDelay,
)
from sim.workload.lengths import TraceCache, sample_lengths
from sim.workload.sessions import sample_delays
from sim.workload.spec import AgentType, WorkloadSpec
from sim.workload.task_graph import Calls, context_content, graph_sessions

BLOCK = 4096  # values drawn at a time from one quantity's stream


class Draws:
    """Values of one distribution handed out one at a time, drawn a block at a time from the
    stream it was given (the same values whatever else is drawn)."""

    def __init__(
        self, dist: LengthDist | DelayDist, rng: np.random.Generator, traces: TraceCache
    ) -> None:
        self.dist, self.rng, self.traces = dist, rng, traces
        self.delay = isinstance(dist, FixedDelay | ExponentialDelay | UniformDelay)
        self.values: list[float] = []

    def next(self) -> float:
        if not self.values:
            block = (
                sample_delays(self.dist, BLOCK, self.rng)  # type: ignore[arg-type]
                if self.delay
                else sample_lengths(self.dist, BLOCK, self.rng, self.traces)  # type: ignore[arg-type]
            )
            self.values = block.tolist()[::-1]
        return self.values.pop()

    def tokens(self) -> int:
        return int(self.next())


class TypeDraws:
    """Every quantity of one agent type, each from its own child stream."""

    def __init__(
        self, t: AgentType, rng: np.random.Generator, traces: TraceCache, key: str
    ) -> None:
        self.count_key = f"{key}.subagents.count"
        streams = rng.spawn(14)
        self.task = Draws(t.task_tokens, streams[0], traces)
        self.turns = Draws(t.turns, streams[1], traces)
        self.tool_result = Draws(t.tool_result_tokens, streams[2], traces)
        self.output = Draws(t.output_tokens, streams[3], traces)
        self.tool_time = Draws(t.tool_time, streams[4], traces)
        self.fork = streams[5]
        self.forks: list[float] = []
        s = t.subagents
        self.sub = None
        if s is not None:
            self.sub = (
                Draws(s.count, streams[6], traces),
                Draws(s.turns, streams[7], traces),
                Draws(s.task_tokens, streams[8], traces),
                Draws(s.tool_result_tokens, streams[9], traces),
                Draws(s.output_tokens, streams[10], traces),
                Draws(s.tool_time, streams[11], traces),
                Draws(s.result_tokens, streams[12], traces),
            )

    def forks_now(self, probability: float) -> bool:
        if not self.forks:
            self.forks = self.fork.random(BLOCK).tolist()[::-1]
        return self.forks.pop() < probability


def generate_agents(
    spec: WorkloadSpec, rng: np.random.Generator, traces: TraceCache
) -> RequestArrays:
    a = spec.agents
    assert a is not None
    arrival_rng, type_rng, draws_rng = rng.spawn(3)
    if a.arrival is not None:
        keys = ("workload.agents.arrival", "workload.agents.num_tasks")
        starts = sample_arrivals(
            a.arrival, arrival_rng, a.num_tasks, spec.duration_s, base_dir=traces.base_dir,
            keys=keys,
        )  # fmt: skip
        num_tasks, agents = len(starts), len(starts)
    else:
        assert a.num_tasks is not None and a.concurrency is not None
        num_tasks, agents = a.num_tasks, min(a.concurrency, a.num_tasks)
        starts = np.zeros(agents)
    weights = np.array([t.weight for t in a.types], dtype=np.float64)
    kinds = type_rng.choice(len(a.types), size=num_tasks, p=weights / weights.sum())
    per_type = [
        TypeDraws(t, r, traces, f"workload.agents.types.{i}")
        for i, (t, r) in enumerate(zip(a.types, draws_rng.spawn(len(a.types)), strict=True))
    ]
    calls = Calls("workload.agents.types")
    for i in range(agents):  # the first calls known up front take the first ids, in order
        calls.reserve(i, int(kinds[i]))
    last_call: list[int] = []  # per task: its last call (the main context's last turn)
    for task in range(num_tasks):
        kind = int(kinds[task])
        first = task if task < agents else -1
        after = last_call[task - agents] if task >= agents else -1
        last_call.append(_task(calls, a.types[kind], per_type[kind], kind, task, first, after))
    return _arrays(spec, calls, starts)


def _task(
    calls: Calls, t: AgentType, d: TypeDraws, kind: int, task: int, first: int, after: int
) -> int:
    """Draw one task's calls; `first`: the id reserved for its first call (-1: a new one);
    `after`: the call its first call waits for (-1: none). Returns its last call."""
    system_units = t.system_tokens // UNIT_TOKENS
    ctx = calls.new_context(kind, system_units, -1, 0)
    tokens = t.system_tokens + d.task.tokens()
    turns = d.turns.tokens()
    previous: list[int] = [after] if after >= 0 else []
    wait = 0.0
    call = -1
    for turn in range(turns):
        output = d.output.tokens()
        if turn == 0 and first >= 0:
            call = first
            calls.fill(call, tokens, output, ctx)
        else:
            call = calls.add(tokens, output, task, kind, wait, ctx)
        calls.edges.extend((p, call) for p in previous)
        tokens += output
        if turn == turns - 1:
            break
        s = t.subagents
        if s is not None and d.sub is not None and d.forks_now(s.probability):
            count, sub_turns, sub_task, sub_tool, sub_out, sub_time, result = d.sub
            previous = []
            fork = tokens  # every subagent starts from the context as the fork left it
            k = count.tokens()
            if k > MAX_SUBAGENTS:  # a drawn count (an unbounded lognormal, a column)
                raise ScenarioError(
                    f"a fork drew {k} subagents; at most {MAX_SUBAGENTS}", path=d.count_key
                )
            for _ in range(k):
                sub = calls.new_context(kind, system_units, ctx, fork // UNIT_TOKENS)
                sub_tokens = fork + sub_task.tokens()
                last, sub_wait = call, 0.0
                for _ in range(sub_turns.tokens()):
                    out = sub_out.tokens()
                    c = calls.add(sub_tokens, out, task, kind, sub_wait, sub)
                    calls.edges.append((last, c))
                    last = c
                    sub_tokens += out + sub_tool.tokens()
                    sub_wait = sub_time.next()
                previous.append(last)
                tokens += result.tokens()  # each result joins the parent's context
            wait = 0.0  # the join: as soon as the slowest subagent's last answer ended
        else:
            previous = [call]
            tokens += d.tool_result.tokens()
            wait = d.tool_time.next()
    return call


def _arrays(spec: WorkloadSpec, calls: Calls, starts: np.ndarray) -> RequestArrays:
    a = spec.agents
    assert a is not None
    n = len(calls)
    arrival = np.full(n, np.nan)
    arrival[: len(starts)] = starts
    return RequestArrays(
        arrival_s=arrival,
        prompt_tokens=np.asarray(calls.prompt, dtype=np.int64),
        output_tokens=np.asarray(calls.output, dtype=np.int64),
        class_index=np.asarray(calls.kind, dtype=np.int64),
        class_names=tuple(t.name for t in a.types),
        tier_names=(spec.tier,),
        content=context_content(calls),
        sessions=graph_sessions(calls),
    )
