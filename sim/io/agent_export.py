"""Agents' tasks as the traces agentic benchmarks replay (`batchsim export --format weka` and
`--format rollouts`); the formats and their sources are described with their readers,
`sim.workload.weka_trace` and `sim.workload.agent_traces`, which read these files back as the
same calls: prompts, answers, waits, the calls each waits for, and which calls share which
prompt blocks.

Both take a workload whose calls wait on each other (`workload.agents`, `workload.rollouts`,
or a weka or rollouts trace); each task (the requests table's `session`) is written from its
own calls and the edges between them. Edges between tasks (an agent's next task after its
last, a rollout wave after the previous one) and task start times are not in these formats:
the notes say so, and what `trace.num_clients` replays in their place.

* `weka`: one trace per task, JSONL (as the public corpora's `traces.jsonl`), with the fields
  AIPerf's loader requires. The task's first call and each call that follows one ending are
  its parent calls; a call with several successors (or one in another context) forks: each
  successor starts a subagent, a chain of calls written as a `type: "subagent"` entry after the
  forking call, and the call all their last calls lead to is the next parent call (the join;
  none: they run in the background). `think_time` is the call's wait; `t` is the sum of the
  waits on the longest path to it (service times are known only after a run), so replay on
  think times (AIPerf `--use-think-time-only`, kv-cache-tester `--timing-strategy
  think-only`). `hash_ids`: one per 64-token block of the prompt (`block_size` 64) made of
  the workload's content units (16 tokens for a drawn workload: 4 to a block); two blocks get
  the same id exactly when their units and every block before them are equal, ids numbered in
  order of first use in each trace (`hash_id_scope: local`, so blocks shared across tasks,
  such as a system prompt, are each trace's own). Content whose unit does not divide 64 is
  written in blocks of one unit. A task whose graph is not parent calls with fan-outs of
  subagent chains (a subagent forking again) is refused.
* `rollouts`: one line per trajectory (a task whose calls form one chain): `group` (the prompt
  group's index: consecutive trajectories of one wave whose first calls share their whole
  prompt), `stream` (its index in the group), `prompt_len` (its first prompt), `out_lens`,
  `obs_lens` (what each next prompt adds beyond the answer; 0 after the last turn) and
  `tool_times` (the wait before each next turn; 0 after the last).
"""

from __future__ import annotations

import json
from functools import partial
from itertools import pairwise

import numpy as np

from sim.errors import ScenarioError
from sim.workload.arrays import RequestArrays

AGENT_FORMATS: tuple[str, ...] = ("weka", "rollouts")
WEKA_BLOCK_TOKENS = 64
MODEL = "batchsim"  # the weka fields name a model; replay clients send their own


def graph_problem(requests: RequestArrays) -> str | None:
    """Why the workload cannot be written as tasks (None: it can)."""
    if len(requests) == 0:
        return "the workload has no requests"
    s = requests.sessions
    if s is None or s.successors is None:
        return (
            "its requests are not tasks of calls that wait on each other: the weka and "
            "rollouts formats hold agents' tasks (workload.agents, workload.rollouts, or a weka "
            "or rollouts trace)"
        )
    return None


class Graph:
    """Each call's predecessors and successors within its task, and the tasks' calls."""

    def __init__(self, requests: RequestArrays) -> None:
        s = requests.sessions
        assert s is not None and s.successors is not None and s.successor_offsets is not None
        n = len(requests)
        self.session = s.session
        self.wait = s.think_s if s.think_s is not None else np.zeros(n)
        source = np.repeat(np.arange(len(s.successor_offsets) - 1), np.diff(s.successor_offsets))
        target = s.successors
        inside = (source < n) & (target < n)
        source, target = source[inside], target[inside]
        same = self.session[source] == self.session[target]
        self.preds: list[list[int]] = [[] for _ in range(n)]
        self.succs: list[list[int]] = [[] for _ in range(n)]
        for a, b in zip(source[same].tolist(), target[same].tolist(), strict=True):
            self.preds[b].append(a)
            self.succs[a].append(b)
        # edges between tasks or through gates (an agent's next task, a wave): not written
        self.across = len(s.successors) > int(same.sum())
        order = np.argsort(self.session, kind="stable")
        cuts = np.flatnonzero(np.diff(self.session[order])) + 1
        self.tasks = [part.tolist() for part in np.split(order, cuts)]
        content = requests.content
        # a call's context (where its ids start), to tell a subagent from its parent
        self.context = content.offsets[:-1] if content is not None and content.stops is not None \
            else None  # fmt: skip

    def same_context(self, a: int, b: int) -> bool:
        return self.context is None or bool(self.context[a] == self.context[b])


def _refused(task: int, why: str) -> ScenarioError:
    return ScenarioError(f"task {task} cannot be written as a weka trace: {why}", path="workload")


def _chain(g: Graph, first: int, task: int) -> list[int]:
    """A subagent's calls from `first`, each the one successor of the one before, in its context."""
    calls = [first]
    while len(g.succs[calls[-1]]) == 1:
        nxt = g.succs[calls[-1]][0]
        if g.preds[nxt] != [calls[-1]] or not g.same_context(calls[-1], nxt):
            break
        calls.append(nxt)
    if len(g.succs[calls[-1]]) > 1:
        raise _refused(task, f"a subagent's call (request {calls[-1]}) forks again")
    return calls


def _fan_out(g: Graph, starts: list[int], task: int) -> tuple[list[list[int]], int]:
    """The subagents starting at `starts` and the call that joins them (-1: background)."""
    subs = [_chain(g, s, task) for s in starts]
    ends = {tuple(g.succs[sub[-1]]) for sub in subs}
    if ends == {()}:
        return subs, -1
    if len(ends) != 1 or () in ends:
        raise _refused(task, "its subagents do not all end in one join")
    join = ends.pop()[0]
    if sorted(g.preds[join]) != sorted(sub[-1] for sub in subs):
        raise _refused(task, f"request {join} waits for more than the subagents it joins")
    return subs, join


def _layout(g: Graph, calls: list[int], task: int) -> list[int | list[int]]:
    """The task as weka records in order: parent calls (ids) and subagents (lists of ids)."""
    roots = [c for c in calls if not g.preds[c]]
    out: list[int | list[int]] = []
    call = roots[0]
    if len(roots) > 1:  # subagents before the first parent call
        subs, call = _fan_out(g, roots, task)
        out += subs
    while call >= 0:
        out.append(call)
        succs = g.succs[call]
        if len(succs) == 1 and g.preds[succs[0]] == [call] and g.same_context(call, succs[0]):
            call = succs[0]
            continue
        if not succs:
            break
        if any(g.preds[s] != [call] for s in succs):
            raise _refused(task, f"a call after request {call} also waits for another call")
        subs, call = _fan_out(g, sorted(succs), task)
        out += subs
    if sum(1 if isinstance(r, int) else len(r) for r in out) != len(calls):
        raise _refused(task, "some of its calls are not on a parent's path or a subagent")
    return out


class Blocks:
    """Per trace, one id per block of a prompt, numbered in order of first use."""

    def __init__(self, requests: RequestArrays) -> None:
        self.requests = requests
        content = requests.content
        self.unit = content.unit if content is not None else 0
        per = WEKA_BLOCK_TOKENS // self.unit if self.unit and not WEKA_BLOCK_TOKENS % self.unit \
            else 1  # fmt: skip
        self.per = per
        self.block = self.unit * per if self.unit else WEKA_BLOCK_TOKENS
        self.known: dict[tuple[int, tuple[int, ...]], int] = {}

    def ids(self, call: int) -> list[int]:
        prompt = int(self.requests.prompt_tokens[call])
        content = self.requests.content
        if content is None:  # every block the call's own
            units = [-1 - call] * -(-prompt // self.block)
            per = 1
        else:
            units = content.of(call)[: -(-prompt // self.unit)].tolist()
            per = self.per
        out, previous = [], -1
        for b in range(0, len(units), per):
            key = (previous, tuple(units[b : b + per]) if content is not None else (call, b))
            previous = self.known.setdefault(key, len(self.known))
            out.append(previous)
        return out


def _record(
    requests: RequestArrays, g: Graph, blocks: Blocks, t: dict[int, float], c: int
) -> dict[str, object]:
    """Call `c` as a weka request; `t`: the calls' start times so far (the longest path of
    waits to each)."""
    t[c] = max((t[p] for p in g.preds[c]), default=0.0) + float(g.wait[c])
    return {"t": t[c], "type": "n", "model": MODEL, "in": int(requests.prompt_tokens[c]),
            "out": int(requests.output_tokens[c]), "hash_ids": blocks.ids(c),
            "think_time": float(g.wait[c])}  # fmt: skip


def to_weka(requests: RequestArrays) -> tuple[str, list[str]]:
    """One weka trace per task, JSONL (see the module docstring)."""
    g = Graph(requests)
    blocks = Blocks(requests)
    names = requests.class_names
    lines = []
    for calls in g.tasks:
        task = int(g.session[calls[0]])
        blocks.known = {}
        t: dict[int, float] = {}
        record = partial(_record, requests, g, blocks, t)
        records: list[dict[str, object]] = []
        for k, part in enumerate(_layout(g, calls, task)):
            if isinstance(part, int):
                records.append(record(part))
                continue
            inner = [record(c) for c in part]
            kind = names[int(requests.class_index[part[0]])]
            records.append({"t": inner[0]["t"], "type": "subagent", "agent_id": f"agent_{k:03d}",
                            "subagent_type": kind, "status": "completed", "models": [MODEL],
                            "requests": inner})  # fmt: skip
        trace = {"id": f"task_{task}", "models": [MODEL], "block_size": blocks.block,
                 "hash_id_scope": "local", "requests": records}  # fmt: skip
        lines.append(json.dumps(trace, separators=(",", ":")))
    notes = [
        "t is each call's start as the sum of the waits before it (no service times): replay "
        "on think_time (AIPerf --use-think-time-only, kv-cache-tester --timing-strategy "
        "think-only)"
    ]
    if blocks.block != WEKA_BLOCK_TOKENS:
        notes.append(f"block_size {blocks.block}: the workload's content comes in "
                     f"{blocks.unit}-token units, which do not divide 64")  # fmt: skip
    known = len(np.unique(g.session[~np.isnan(requests.arrival_s)]))  # tasks started up front
    notes += _lost(requests, g, g.tasks, known, ("tasks", "trace", "traces"))
    return "\n".join(lines) + "\n", notes


def _lost(
    requests: RequestArrays, g: Graph, parts: list[list[int]], known: int,
    words: tuple[str, str, str],
) -> list[str]:  # fmt: skip
    """What the tasks had that the file cannot say: edges between tasks (`known` of the
    `parts`, the traces or groups, started up front), their start times, and content shared
    between `parts`. `words`: tasks, a part, parts."""
    what, part, many = words
    if g.across:
        notes = [
            f"{what} that wait for other {what} (an agent's next task, a wave after the "
            f"previous one and its training time) are not in this format: trace.num_clients: "
            f"{known} replays {known} {many} at a time, each next one when one ends"
        ]
    else:
        notes = [f"the {what}' start times are not in this format: every {part} starts at 0 "
                 "when replayed (trace.num_clients: N runs N at a time)"]  # fmt: skip
    content = requests.content
    if content is not None and len(parts) > 1:
        ids = [np.unique(np.concatenate([content.of(c) for c in calls])) for calls in parts]
        _, counts = np.unique(np.concatenate(ids), return_counts=True)
        if (counts > 1).any():
            notes.append(f"content shared across {many} (a system prompt, a global prefix) is "
                         f"each {part}'s own in this format")  # fmt: skip
    return notes


def _chain_of(g: Graph, calls: list[int], task: int) -> None:
    for k, c in enumerate(calls):
        if g.preds[c] != ([calls[k - 1]] if k else []) or len(g.succs[c]) > 1:
            raise ScenarioError(
                f"task {task} cannot be written as a rollout trajectory: its calls are not one "
                "chain (subagents)",
                path="workload",
            )


def to_rollouts(requests: RequestArrays) -> tuple[str, list[str]]:
    """One rollout trajectory per task, JSONL (see the module docstring)."""
    g = Graph(requests)
    prompt, output = requests.prompt_tokens.tolist(), requests.output_tokens.tolist()
    content, wave = requests.content, requests.sessions.wave if requests.sessions else None
    lines, group, stream, previous = [], -1, 0, None
    groups: list[list[int]] = []  # each group's calls
    known = 0  # groups started up front
    for calls in g.tasks:
        task = int(g.session[calls[0]])
        _chain_of(g, calls, task)
        first = calls[0]
        shared = () if content is None else \
            tuple(content.of(first)[: prompt[first] // content.unit].tolist())  # fmt: skip
        key = (int(wave[first]) if wave is not None else -1, prompt[first], shared)
        if content is None or key != previous:
            group, stream, previous = group + 1, 0, key
            groups.append([])
            known += int(not np.isnan(requests.arrival_s[first]))
        groups[-1] += calls
        observations = [prompt[b] - prompt[a] - output[a] for a, b in pairwise(calls)]
        if any(o < 0 for o in observations):
            raise ScenarioError(
                f"task {task} cannot be written as a rollout trajectory: a turn's prompt is "
                "shorter than the one before with its answer",
                path="workload",
            )
        row = {"group": group, "stream": stream, "prompt_len": prompt[first],
               "out_lens": [output[c] for c in calls], "obs_lens": [*observations, 0],
               "tool_times": [float(g.wait[c]) for c in calls[1:]] + [0.0]}  # fmt: skip
        lines.append(json.dumps(row))
        stream += 1
    notes = _lost(requests, g, groups, known, ("trajectories", "group", "groups"))
    return "\n".join(lines) + "\n", notes


def export_agents(requests: RequestArrays, fmt: str) -> tuple[str, list[str]]:
    """The workload's tasks in `fmt` (one of `AGENT_FORMATS`): text and notes."""
    return to_weka(requests) if fmt == "weka" else to_rollouts(requests)
