"""Workloads whose requests wait on each other (agents' tasks, RL rollouts, their traces): the
calls, the graph's edges and gates, and each context's content, built up as they are drawn or
read, then turned into the `RequestArrays` a run replays.

A node is a call (a request) or a gate (a barrier with no work: a rollout wave's end). A node
arrives its wait after the last node it waits for ended (`Sessions.successors`, `needs`,
`think_s`); the run's arrival source walks the graph (`sim.core.arrivals`).

Contexts: a call's tokens are its context's first tokens (prompt, then answer), so the next call
of the context finds them all. A context's ids are a shared prefix's units (`prefix` key: an
agent type's system prompt, the rollouts' global prefix), then those its ancestors hold up to
where it branched off (whole units: a unit across the branch point is the child's own, as its
tokens differ), then its own. Each context's ids are built once; each call views them as far
as its prompt and answer reach, so memory goes with the contexts, not the calls.
"""

from __future__ import annotations

import numpy as np

from sim.errors import ScenarioError
from sim.workload.arrays import Content, Sessions
from sim.workload.budget import calls_problem, content_problem
from sim.workload.content import UNIT_TOKENS

PREFIX_BASE = 1 << 40  # prefix k's unit j: PREFIX_BASE + k * 2**24 + j
OWN_BASE = 1 << 51  # context c's unit j: OWN_BASE + c * 2**24 + j (apart from sessions' ids)
MAX_CONTEXT_UNITS = 1 << 24  # units of one context the ids can tell apart
CHECK_EVERY = 1 << 16  # calls between checks of the memory the drawn calls take


class Calls:
    """The calls drawn so far, as columns, with the graph's edges and gates and the contexts."""

    def __init__(self, key: str) -> None:
        self.key = key  # the workload's key, for errors
        self.next_check = CHECK_EVERY  # calls at which the memory they take is checked next
        self.prompt: list[int] = []
        self.output: list[int] = []
        self.task: list[int] = []
        self.kind: list[int] = []  # the call's class (agent type)
        self.wait: list[float] = []  # its wait after the last node it waits for
        self.context: list[int] = []  # the context whose ids it views
        self.wave: list[int] = []  # a rollout's wave (-1: none)
        self.edges: list[tuple[int, int]] = []  # (node, a node that waits for it)
        self.gate_waits: list[float] = []  # gate k is node -1 - k until the calls are counted
        # per context: (prefix key or -1, prefix units, parent context or -1, units from it)
        self.contexts: list[tuple[int, int, int, int]] = []
        self.reach: list[int] = []  # per context: its tokens (the longest call's prompt + answer)

    def reserve(self, task: int, kind: int) -> int:
        """A call whose tokens come later (`fill`): the first calls known up front take the
        first ids."""
        return self.add(0, 0, task, kind, 0.0, -1)

    def add(
        self, prompt: int, output: int, task: int, kind: int, wait: float, ctx: int, wave: int = -1
    ) -> int:
        self.prompt.append(prompt)
        self.output.append(output)
        self.task.append(task)
        self.kind.append(kind)
        self.wait.append(wait)
        self.context.append(ctx)
        self.wave.append(wave)
        if ctx >= 0:
            self.reach[ctx] = max(self.reach[ctx], prompt + output)
        count = len(self.prompt)
        if count >= self.next_check:  # a drawn length (an empirical column) may be huge
            self.next_check += CHECK_EVERY
            problem = calls_problem(count)
            if problem is not None:
                raise ScenarioError(problem, path=self.key)
        return count - 1

    def fill(self, call: int, prompt: int, output: int, ctx: int, wave: int = -1) -> None:
        """The tokens and context of a reserved call."""
        self.prompt[call], self.output[call], self.context[call] = prompt, output, ctx
        self.wave[call] = wave
        self.reach[ctx] = max(self.reach[ctx], prompt + output)

    def gate(self, wait: float) -> int:
        """A new gate (its node id, negative until the calls are counted)."""
        self.gate_waits.append(wait)
        return -len(self.gate_waits)

    def new_context(self, prefix: int, prefix_units: int, parent: int, shared_units: int) -> int:
        self.contexts.append((prefix, prefix_units, parent, shared_units))
        self.reach.append(0)
        return len(self.contexts) - 1

    def __len__(self) -> int:
        return len(self.prompt)


def graph_sessions(calls: Calls) -> Sessions:
    """The calls' task graph: gates become the nodes after the calls."""
    n, gates = len(calls), len(calls.gate_waits)
    nodes = n + gates
    edges = np.asarray(calls.edges, dtype=np.int64).reshape(-1, 2)
    edges = np.where(edges < 0, n - 1 - edges, edges)  # gate -1 - k -> node n + k
    order = np.argsort(edges[:, 0], kind="stable")
    offsets = np.zeros(nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(edges[:, 0], minlength=nodes), out=offsets[1:])
    return Sessions(
        session=np.asarray(calls.task, dtype=np.int64),
        next_turn=np.full(n, -1, dtype=np.int64),
        think_s=np.asarray(calls.wait + calls.gate_waits, dtype=np.float64),
        successor_offsets=offsets,
        successors=edges[order, 1],
        needs=np.bincount(edges[:, 1], minlength=nodes).astype(np.int64),
        wave=np.asarray(calls.wave, dtype=np.int64) if max(calls.wave, default=-1) >= 0 else None,
    )


def context_content(calls: Calls) -> Content:
    """Each context's ids once, and each call's view of them."""
    tokens = np.asarray(calls.prompt, dtype=np.int64) + np.asarray(calls.output, dtype=np.int64)
    units = [-(-r // UNIT_TOKENS) for r in calls.reach]
    if max(units, default=0) > MAX_CONTEXT_UNITS:
        raise ScenarioError(
            f"a context reaches {max(units) * UNIT_TOKENS} tokens, beyond the "
            f"{MAX_CONTEXT_UNITS * UNIT_TOKENS} one context can hold: fewer or shorter turns",
            path=calls.key,
        )
    starts = np.zeros(len(units) + 1, dtype=np.int64)
    np.cumsum(units, out=starts[1:])
    problem = content_problem(int(starts[-1]))
    if problem is not None:
        raise ScenarioError(problem, path=calls.key)
    ids = np.empty(int(starts[-1]), dtype=np.int64)
    for c, (prefix, prefix_units, parent, _) in enumerate(calls.contexts):
        position = np.arange(units[c], dtype=np.int64)
        owner = np.full(units[c], c, dtype=np.int64)
        child, ancestor = c, parent
        while ancestor >= 0:  # each ancestor holds the units before its child branched off
            owner[: calls.contexts[child][3]] = ancestor
            child, ancestor = ancestor, calls.contexts[ancestor][2]
        own = OWN_BASE + (owner << 24) + position
        if prefix >= 0:
            own = np.where(position < prefix_units, PREFIX_BASE + (prefix << 24) + position, own)
        ids[starts[c] : starts[c + 1]] = own
    context = np.asarray(calls.context, dtype=np.int64)
    first = starts[context]
    stops = first + -(-tokens // UNIT_TOKENS)
    offsets = np.append(first, starts[-1])
    return Content(ids=ids, offsets=offsets, unit=UNIT_TOKENS, tokens=tokens, stops=stops)
