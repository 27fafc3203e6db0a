"""Reader of the WEKA / kv-cache-tester agentic trace (`workload.trace.format: weka`): coding
agents' sessions with their subagents, as task graphs (`sim.workload.task_graph`).

Sources: the format is kv-cache-tester's (`callanjfox/kv-cache-tester` @
94f6046dfd9c0c8bc0cdb24a5aa6579bac8669bf: `docs/trace_replay_tester.md`,
`trace_replay_tester.py`, `traces/trace_0003.json`); AIPerf's loader pins its fields
(`ai-dynamo/aiperf` @ 90f31d18c57a572640729b1070a01b1bf2c7c7e4:
`src/aiperf/dataset/loader/weka_trace_models.py`), inference-perf's `weka_trace_replay`
(`kubernetes-sigs/inference-perf` @ 7de5ef2ed6f7934e0ecbc8297e593f79e68430c0:
`docs/weka_trace_replay.md`) and SemiAnalysis's InferenceX AgentX benchmark
(`SemiAnalysisAI/InferenceX` @ 843c6254ff69b567f772f6a5fd97675af3d04431:
`utils/agentic/datasets/build_weka_hf_dataset.py`, which publishes the corpora on Hugging Face
as `traces.jsonl`, `semianalysisai/cc-traces-weka-*`) replay it.

A trace is one JSON object, one session: `id`, `block_size` (tokens per hash id; 64 in the
public corpora), `hash_id_scope` (`local`: ids are the trace's own, the default; `global`:
equal ids across traces are equal blocks), optional `models`, `tool_tokens`, `system_tokens`,
`totals` (read past), and `requests`, in order: calls (`type` `n` or `s`: `in` prompt tokens,
`out` answer tokens, `hash_ids` one id per `block_size` tokens of the prompt, equal leading
ids a shared prefix; `think_time` the client's wait before it, s; `t`, `api_time`, `ttft`,
`model` and the rest are read past) and subagents (`type: subagent`, with `subagent_type` and
their own `requests`: calls only, never nested subagents). The file is a `.json` file holding
one trace (or a list of them), a folder of such `.json` files (kv-cache-tester's `traces/`,
taken in name order), or JSONL, one trace per line (the corpora's `traces.jsonl`), read one
line at a time.

Each trace is a task (the requests table's `session`: the trace's index in file order; each
call's `source_id` is `<trace id>/<record>` or `<trace id>/<record>/<inner record>`). The graph,
as kv-cache-tester and AIPerf replay it, from position alone: each parent call arrives its
`think_time` after the previous parent call ended; the subagents between parent calls k and
k + 1 are a fan-out: each starts its `think_time` after parent call k ended and runs its calls
in order, each its `think_time` after the previous one ended; parent call k + 1 then waits for
the last call of every subagent of the fan-out (a join: they all started after call k, so
waiting on k as well would change nothing). A subagent before the first parent call starts at
the task's start (the first parent call joins it); one after the last parent call runs in the
background (nothing waits for it). A call that waits for nothing starts the task: its
`think_time` is not waited. Every trace starts at 0, or with `trace.num_clients: N` in N lanes:
trace i + N starts when every call of trace i has ended (a gate), as AIPerf's AgentX lanes
recycle (without its random start turn). Calls are class `agent`, subagents' calls their
`subagent_type`. Zero answers are sent as one token (AIPerf raises them to 1 too).

Content: a call's ids are its `hash_ids` (the first `ceil(in / block_size)` of them), one per
`block_size` tokens (`Content.unit`), covering `min(in, len(hash_ids) * block_size)` prompt
tokens; a `local` trace's ids are renumbered apart from every other trace's, so traces share
no blocks (AIPerf's rule), while a trace's subagents share its id space (equal tool
definitions collide on purpose).

Every value is checked before it is used, and a bad one is refused with a `ScenarioError`
naming the file, the line (JSONL; or the trace of a `.json` file) and the record
(`requests[4].requests[2].in`): a missing `block_size`, `requests` or `in`/`out`, a count that
is not an integer in range, a `block_size` above 2^20 or unlike the file's first, a hash id
that is not a 64-bit integer, a wait that is not a finite number of seconds >= 0, an unknown
`type`, a subagent inside a subagent, an empty `requests`, a duplicate trace `id`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sim.errors import ScenarioError
from sim.inputs.text import MAX_TRACE_BYTES, read_text
from sim.workload.agent_traces import (
    At,
    check_options,
    finite,
    integer,
    listed,
    read_json_lines,
    seconds,
    shown,
)
from sim.workload.arrays import Content, RequestArrays
from sim.workload.budget import calls_problem, content_problem
from sim.workload.spec import TraceSpec, WorkloadSpec
from sim.workload.task_graph import CHECK_EVERY, Calls, graph_sessions
from sim.workload.traces import check_trace_found

MAX_BLOCK_TOKENS = 1 << 20
MAX_NAME_CHARS = 256  # a trace id, a subagent type
MAX_CLASSES = 1024  # subagent types told apart; the rest are "subagent"
PARENT, SUBAGENT = "agent", "subagent"
NO_IDS = np.zeros(0, dtype=np.int64)


@dataclass
class Trace:
    """One trace's calls in file order, each with the calls (by index) it waits for."""

    prompts: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    kinds: list[int] = field(default_factory=list)
    ids: list[np.ndarray] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    preds: list[list[int]] = field(default_factory=list)
    sinks: list[int] = field(default_factory=list)  # the calls nothing waits for

    def add(self, call: tuple[int, int, float, np.ndarray], kind: int, preds: list[int],
            label: str) -> int:  # fmt: skip
        prompt, output, wait, ids = call
        self.prompts.append(prompt)
        self.outputs.append(output)
        self.waits.append(wait if preds else 0.0)  # a task's first calls wait for nothing
        self.kinds.append(kind)
        self.ids.append(ids)
        self.labels.append(label)
        self.preds.append(preds)
        return len(self.prompts) - 1


class Reader:
    """The traces of one file, checked one by one, and what must agree across them."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.block = 0
        self.scope = ""
        self.first = ""  # where the first trace was (for a disagreement)
        self.names: dict[str, str] = {}  # trace id -> where
        self.classes: dict[str, int] = {PARENT: 0}
        self.next_id = 0  # a local trace's ids start here
        self.traces: list[Trace] = []
        self.calls = self.units = self.checked = 0

    def trace(self, obj: object, at: At) -> None:
        if not isinstance(obj, dict):
            raise at.error("not a JSON object (one trace: id, block_size, requests)")
        index = len(self.traces)
        name = obj.get("id", str(index))
        if not isinstance(name, str) or len(name) > MAX_NAME_CHARS:
            raise at.error(f"id {shown(name)} is not a string of at most {MAX_NAME_CHARS} "
                           "characters")  # fmt: skip
        if name in self.names:
            raise at.error(f"id {name!r} is also the id of the trace at {self.names[name]}")
        self.names[name] = at.path if at.file == self.file else f"{at.file}: {at.path}"
        if "block_size" not in obj:
            raise at.error("block_size is missing (tokens per hash id; 64 in the public traces)")
        block = integer(obj["block_size"], "block_size", at, 1, MAX_BLOCK_TOKENS)
        scope = obj.get("hash_id_scope", "local")
        if scope not in ("local", "global"):
            raise at.error(f"hash_id_scope {shown(scope)} is not 'local' or 'global'")
        if not self.first:
            self.block, self.scope, self.first = block, scope, at.path
        for key, value, mine in (("block_size", block, self.block),
                                 ("hash_id_scope", scope, self.scope)):  # fmt: skip
            if value != mine:
                raise at.error(f"{key} {value!r} differs from {mine!r} at {self.first} (one "
                               "per file)")  # fmt: skip
        for key in ("tool_tokens", "system_tokens"):
            if obj.get(key) is not None:
                integer(obj[key], key, at, 0)
        if "requests" not in obj:
            raise at.error("requests is missing")
        records = listed(obj["requests"], "requests", at)
        if not records:
            raise at.error("requests is empty (a trace has at least one call)")
        self.traces.append(self._graph(records, name, at))
        self._fits()

    def _graph(self, records: list[object], name: str, at: At) -> Trace:
        """The trace's calls and who waits for whom (see the module docstring)."""
        t = Trace()
        parent = -1  # the last parent call
        fan: list[int] = []  # the last calls of the subagents since
        for k, rec in enumerate(records):
            where = f"requests[{k}]"
            if _type(rec, where, at) != SUBAGENT:
                preds = fan or ([parent] if parent >= 0 else [])
                parent, fan = t.add(self._call(rec, where, at), 0, preds, f"{name}/{k}"), []
                continue
            assert isinstance(rec, dict)
            kind = self._kind(rec.get("subagent_type"), where, at)
            if rec.get("agent_id") is not None and not isinstance(rec["agent_id"], str):
                raise at.error(f"{where}.agent_id {shown(rec['agent_id'])} is not a string")
            finite(rec.get("t"), f"{where}.t", at)
            if "requests" not in rec:
                raise at.error(f"{where}.requests is missing (the subagent's calls)")
            inner = listed(rec["requests"], f"{where}.requests", at)
            if not inner:
                raise at.error(f"{where}.requests is empty (a subagent has at least one call)")
            last = parent
            for j, call in enumerate(inner):
                at_j = f"{where}.requests[{j}]"
                if _type(call, at_j, at) == SUBAGENT:
                    raise at.error(f"{at_j} is a subagent inside a subagent: subagents nest one "
                                   "level deep in this format")  # fmt: skip
                preds = [last] if last >= 0 else []
                last = t.add(self._call(call, at_j, at), kind, preds, f"{name}/{k}/{j}")
            fan.append(last)
        t.sinks = fan or [parent]
        if self.scope == "local":  # the trace's own ids, apart from every other trace's
            lengths = [len(ids) for ids in t.ids]
            if sum(lengths):
                dense, count = _dense(np.concatenate(t.ids))
                t.ids = np.split(dense + self.next_id, np.cumsum(lengths)[:-1])
                self.next_id += count
        return t

    def _call(self, rec: object, where: str, at: At) -> tuple[int, int, float, np.ndarray]:
        """(prompt, output, wait, ids) of a call record."""
        assert isinstance(rec, dict)
        lengths = []
        for key, alias, low in (("in", "input_length", 1), ("out", "output_length", 0)):
            name = key if key in rec or alias not in rec else alias
            if name not in rec:
                raise at.error(f"{where}.{key} is missing")
            lengths.append(integer(rec[name], f"{where}.{name}", at, low))
        prompt, output = lengths
        given = rec.get("hash_ids")
        hashes = [] if given is None else listed(given, f"{where}.hash_ids", at)
        if not set(map(type, hashes)) <= {int}:  # (checked in C; no bools, floats, strings)
            bad = next(i for i, h in enumerate(hashes) if type(h) is not int)
            raise at.error(f"{where}.hash_ids[{bad}] {shown(hashes[bad])} is not an integer")
        try:
            ids = np.asarray(hashes, dtype=np.int64) if hashes else NO_IDS
        except OverflowError:
            bad = next(i for i, h in enumerate(hashes) if not -(2**63) <= h < 2**63)
            raise at.error(f"{where}.hash_ids[{bad}] {shown(hashes[bad])} is outside the "
                           "64-bit integers") from None  # fmt: skip
        for key in ("t", "api_time", "ttft"):
            finite(rec.get(key), f"{where}.{key}", at)
        wait = seconds(rec.get("think_time"), f"{where}.think_time", at)
        return prompt, max(output, 1), wait, ids[: -(-prompt // self.block)]

    def _kind(self, value: object, where: str, at: At) -> int:
        if value is None:
            value = SUBAGENT
        if not isinstance(value, str) or len(value) > MAX_NAME_CHARS:
            raise at.error(f"{where}.subagent_type {shown(value)} is not a string of at most "
                           f"{MAX_NAME_CHARS} characters")  # fmt: skip
        if value not in self.classes and len(self.classes) >= MAX_CLASSES:
            value = SUBAGENT
        return self.classes.setdefault(value, len(self.classes))

    def _fits(self) -> None:
        """The calls and ids read so far fit in memory (checked every `CHECK_EVERY` calls)."""
        t = self.traces[-1]
        self.calls += len(t.prompts)
        self.units += sum(len(ids) for ids in t.ids)
        if self.calls < self.checked + CHECK_EVERY:
            return
        self.checked = self.calls
        problem = calls_problem(self.calls) or content_problem(self.units)
        if problem is not None:
            raise ScenarioError(problem, file=self.file)


def _dense(ids: np.ndarray) -> tuple[np.ndarray, int]:
    """Each id's rank among the distinct ids, and how many there are (ids in a narrow range,
    as the traces' small integers are, ranked by a table instead of a sort)."""
    low, high = int(ids.min()), int(ids.max())
    if high - low > 4 * len(ids) + 1024:
        uniques, dense = np.unique(ids, return_inverse=True)
        return dense.astype(np.int64), len(uniques)
    seen = np.zeros(high - low + 1, dtype=bool)
    seen[ids - low] = True
    rank = np.cumsum(seen) - 1
    return rank[ids - low].astype(np.int64), int(rank[-1]) + 1


def _type(rec: object, where: str, at: At) -> str:
    if not isinstance(rec, dict):
        raise at.error(f"{where} is not a JSON object")
    kind = rec.get("type")
    if kind is None:
        raise at.error(f"{where}.type is missing (n, s or subagent)")
    if kind not in ("n", "s", SUBAGENT):
        raise at.error(f"{where}.type {shown(kind)} is unknown (n, s or subagent)")
    return str(kind)


def _whole(reader: Reader, path: Path, limit: int | None) -> None:
    """The traces of a `.json` file: one object, or a list of them."""
    file = str(path)
    text = read_text(path, "trace file", max_bytes=MAX_TRACE_BYTES)
    if not text.strip():
        raise ScenarioError("trace file is empty", file=file)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        hint = ": one trace per line is a .jsonl file" if exc.msg == "Extra data" else ""
        raise At(file, f"line {exc.lineno}").error(f"not JSON ({exc.msg}){hint}") from None
    except RecursionError:  # [[[[...]]]]
        raise ScenarioError("not JSON (nested too deeply)", file=file) from None
    except ValueError as exc:  # a 5,000-digit number
        raise ScenarioError(f"not JSON ({str(exc)[:80]})", file=file) from None
    traces = value if isinstance(value, list) else [value]
    for i, obj in enumerate(traces):
        if limit is not None and len(reader.traces) >= limit:
            return
        reader.trace(obj, At(file, f"trace {i}" if isinstance(value, list) else "trace"))


def read_weka(spec: WorkloadSpec, trace: TraceSpec, path: Path) -> RequestArrays:
    """A weka trace file (or folder) as a task graph (see the module docstring)."""
    check_options(spec, trace)
    file = str(path)
    check_trace_found(path)
    reader = Reader(file)
    limit = trace.max_rows
    if path.is_dir():
        names = sorted(n for n in os.listdir(path) if n.endswith(".json"))
        if not names:
            raise ScenarioError("folder holds no .json trace files", file=file)
        for name in names:
            if limit is not None and len(reader.traces) >= limit:
                break
            _whole(reader, path / name, limit)
    elif path.suffix.lower() == ".json":
        _whole(reader, path, limit)
    else:
        for line, row in read_json_lines(path):
            if limit is not None and len(reader.traces) >= limit:
                break
            if row is not None:
                reader.trace(row, At(file, f"line {line}"))
    if not reader.traces:
        raise ScenarioError("the weka trace has no traces", file=file)
    return _arrays(reader, trace.num_clients)


def _arrays(reader: Reader, num_clients: int | None) -> RequestArrays:
    """The calls in id order: the first calls of the traces that start at 0 first."""
    traces = reader.traces
    lanes = len(traces) if num_clients is None else min(num_clients, len(traces))
    calls = Calls("workload.trace")
    reserved = [
        [calls.reserve(i, t.kinds[c]) for c in range(len(t.prompts)) if not t.preds[c]]
        for i, t in enumerate(traces[:lanes])
    ]
    ids: list[np.ndarray] = [NO_IDS] * len(calls)
    labels = [""] * len(calls)
    sinks: list[list[int]] = []  # per trace: its calls nothing waits for (call ids)
    for i, t in enumerate(traces):
        gate = 0
        if i >= lanes:  # starts once every call of trace i - lanes has ended
            gate = calls.gate(0.0)
            calls.edges.extend((s, gate) for s in sinks[i - lanes])
        roots = iter(reserved[i]) if i < lanes else None
        mine: list[int] = []  # the trace's calls' ids
        for c, preds in enumerate(t.preds):
            if not preds and roots is not None:
                call = next(roots)
                calls.prompt[call], calls.output[call] = t.prompts[c], t.outputs[c]
                ids[call], labels[call] = t.ids[c], t.labels[c]
            else:
                call = calls.add(t.prompts[c], t.outputs[c], i, t.kinds[c], t.waits[c], -1)
                if preds:
                    calls.edges.extend((mine[p], call) for p in preds)
                else:
                    calls.edges.append((gate, call))
                ids.append(t.ids[c])
                labels.append(t.labels[c])
            mine.append(call)
        sinks.append([mine[s] for s in t.sinks])
        traces[i] = Trace()  # read: its memory can go
    n = len(calls)
    prompt = np.asarray(calls.prompt, dtype=np.int64)
    lengths = np.asarray([len(x) for x in ids], dtype=np.int64)
    content = None
    if lengths.sum():
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tokens = np.minimum(prompt, lengths * reader.block)
        content = Content(ids=np.concatenate(ids), offsets=offsets, unit=reader.block,
                          tokens=tokens)  # fmt: skip
    arrival = np.full(n, np.nan)
    arrival[: sum(len(r) for r in reserved)] = 0.0
    return RequestArrays(
        arrival_s=arrival,
        prompt_tokens=prompt,
        output_tokens=np.asarray(calls.output, dtype=np.int64),
        class_index=np.asarray(calls.kind, dtype=np.int64),
        class_names=tuple(reader.classes),
        content=content,
        sessions=graph_sessions(calls),
        source_id=np.asarray(labels, dtype=object),
    )
