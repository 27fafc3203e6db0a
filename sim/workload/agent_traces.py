"""Readers of agentic traces whose calls wait on each other, and the RL rollout trace.

Two formats are read as task graphs (`sim.workload.task_graph`): `weka`, the WEKA /
kv-cache-tester agentic trace (its reader is `sim.workload.weka_trace`), and `rollouts`, read
here: the trace replay of vLLM TPU's GRPO multi-turn benchmark, `vllm-project/tpu-inference`
@ b8692ff01fa191343836996c27a39dc95f008b88, `scripts/vllm/benchmarking/agentic_benchmark/`
`README.md` and `benchmark_agentic.py` (trace replay added in 65eedbd46, `tool_times` in
5fa7bb815).

A rollout trace is JSONL, one trajectory per line: `group` (an integer or a string; every line
the same kind), `stream` (its sample in the group, an integer >= 0, absent: 0), `prompt_len`
(the group's prompt, tokens), `out_lens` (each turn's answer, tokens: one call per entry),
`obs_lens` (the environment's observation appended after each turn) and optionally `tool_times`
(seconds after each turn before the next). Other keys (`turns`, `final_len`, `reward`) are
ignored, as the benchmark ignores them. As the benchmark replays it: groups in sorted order,
streams sorted within a group; the group's prompt is its first stream's `prompt_len`, shared by
every stream (their content: a context of the group that each stream's context branches off, as
`sim.workload.rollouts` draws them); turn k's prompt is that prompt plus the answers and
observations of the turns before it; turn k arrives `tool_times[k - 1]` after turn k - 1's
answer ended (a missing entry of `obs_lens` or `tool_times` counts as 0). Every group starts at
0, or with `trace.num_clients: N` N groups at a time: group g + N starts when every call of
group g has ended (a gate, as a wave's barrier; the benchmark's `--concurrency` is this sliding
window). The format has no waves and no prefix shared across groups.

Every line is read as it streams past and checked before it is used: a line that is not a JSON
object, a missing `group`, `out_lens` or `obs_lens`, a count that is not an integer in range, a
time that is not a finite number of seconds >= 0 (up to 1e9), a list longer than `out_lens`, a
group whose first stream has no `prompt_len`, a trajectory whose context outgrows what one
context can hold, or a (group, stream) seen twice is refused with a `ScenarioError` naming the
file and the line. A zero answer is sent as one token (the model's end of sequence), as the
other trace readers do.

Trace options that window or scale arrivals (`start_s`, `end_s`, `rate_scale`, `keep_origin`,
the columns, `prefix_tokens`, `long_prompts`) and the workload's `num_requests` and `duration_s`
do not apply to a task graph and are refused; `max_rows` keeps the first groups (rollouts) or
traces (weka), `num_clients` runs them N at a time.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim.errors import ScenarioError
from sim.inputs.text import MAX_TRACE_BYTES, check_regular_file
from sim.workload.arrays import RequestArrays
from sim.workload.content import UNIT_TOKENS
from sim.workload.spec import MAX_TOKENS, TraceSpec, WorkloadSpec
from sim.workload.task_graph import MAX_CONTEXT_UNITS, Calls, context_content, graph_sessions
from sim.workload.traces import check_trace_found

MAX_LINE_BYTES = MAX_TRACE_BYTES  # one line (one trace) read at a time, at most this long
MAX_WAIT_S = 1e9  # as a scenario's delays
MAX_CONTEXT_TOKENS = MAX_CONTEXT_UNITS * UNIT_TOKENS  # what one context's ids can tell apart
MAX_STREAM = 2**31 - 1
# trace options that have no meaning for a task graph, with their defaults
WINDOW_OPTIONS: dict[str, object] = {
    "rate_scale": 1.0, "start_s": 0.0, "end_s": None, "keep_origin": False,
    "long_prompts": "keep", "tier_column": None, "id_column": None, "session_column": None,
    "prefix_tokens": 0, "prefix_groups": 1,
}  # fmt: skip


@dataclass(frozen=True)
class At:
    """Where a value sits, for errors: the file and the line (or the trace)."""

    file: str
    path: str

    def error(self, reason: str) -> ScenarioError:
        return ScenarioError(reason, file=self.file, path=self.path)


def shown(value: object) -> str:
    """A value as an error shows it: a 400-digit integer or a long string is cut."""
    text = repr(value)
    return text if len(text) <= 24 else f"{text[:12]}...({len(text)} characters)"


def check_options(spec: WorkloadSpec, trace: TraceSpec) -> None:
    """Refuse the options that window, scale or cap arrivals: a task graph has none."""
    why = (
        f"does not apply to a {trace.format} trace: its calls wait on each other, so it has "
        "no arrival times to window, scale or cap (trace.max_rows keeps the first "
        f"{'groups' if trace.format == 'rollouts' else 'traces'}, trace.num_clients runs them "
        "N at a time)"
    )
    for key, default in WINDOW_OPTIONS.items():
        if getattr(trace, key) != default:
            raise ScenarioError(why, path=f"workload.trace.{key}")
    for key in ("num_requests", "duration_s"):
        if getattr(spec, key) is not None:
            raise ScenarioError(why, path=f"workload.{key}")


def integer(value: object, name: str, at: At, low: int, high: int = MAX_TOKENS) -> int:
    """An integer in [low, high], checked as a Python number before it is used."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise at.error(f"{name} {shown(value)} is not an integer")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise at.error(f"{name} {shown(value)} is not an integer")
    if value < low:
        raise at.error(f"{name} {shown(value)} is below {low}")
    if value > high:
        raise at.error(f"{name} {shown(value)} is above {high}")
    return int(value)


def seconds(value: object, name: str, at: At) -> float:
    """A wait in seconds (absent or null: 0), finite, >= 0 and at most `MAX_WAIT_S`."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise at.error(f"{name} {shown(value)} is not a number of seconds")
    if not (isinstance(value, float) and not math.isfinite(value)) and 0 <= value <= MAX_WAIT_S:
        return float(value)
    raise at.error(f"{name} {shown(value)} is not a finite number of seconds in [0, 1e9]")


def finite(value: object, name: str, at: At) -> None:
    """An optional number that is read but not used (a recorded time): finite when given."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise at.error(f"{name} {shown(value)} is not a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise at.error(f"{name} {shown(value)} is not a finite number")
    if abs(value) > 1e15:
        raise at.error(f"{name} {shown(value)} is beyond +-1e15")


def listed(value: object, name: str, at: At) -> list[Any]:
    if not isinstance(value, list):
        raise at.error(f"{name} is not a list")
    return value


def read_json_lines(path: Path) -> Iterator[tuple[int, object]]:
    """Each non-blank line of a JSONL file as (line number, its JSON value), one line read at a
    time; a line that is too long, not UTF-8 or not JSON is refused by its number."""
    file = str(path)
    check_trace_found(path)
    check_regular_file(path, "trace file")
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise ScenarioError(f"cannot read trace file: {exc.strerror or exc}", file=file) from None
    with handle:
        line = 0
        while True:
            try:
                raw = handle.readline(MAX_LINE_BYTES + 1)
            except OSError as exc:
                reason = f"cannot read trace file: {exc.strerror or exc}"
                raise ScenarioError(reason, file=file) from None
            if not raw:
                return
            line += 1
            at = At(file, f"line {line}")
            if len(raw) > MAX_LINE_BYTES:
                raise at.error(f"a line longer than {MAX_LINE_BYTES / 2**20:.0f} MiB")
            yield line, parse_json(raw[3:] if line == 1 and raw[:3] == b"\xef\xbb\xbf" else raw, at)


def parse_json(raw: bytes, at: At) -> object:
    """One JSON value (None for blank text); not UTF-8 or not JSON: refused where it sits."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise at.error(
            f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at byte {exc.start}; save the file "
            "as UTF-8"
        ) from None
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise at.error(f"not JSON ({exc.msg})") from None
    except RecursionError:  # [[[[...]]]]
        raise at.error("not JSON (nested too deeply)") from None
    except ValueError as exc:  # a 5,000-digit number
        raise at.error(f"not JSON ({str(exc)[:80]})") from None


# --- rollouts -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trajectory:
    group: int | str
    stream: int
    prompt: int  # its own prompt_len (0: absent); the group's first stream's is used
    outputs: list[int]
    observations: list[int]  # as long as outputs (missing entries 0)
    waits: list[float]  # as long as outputs (missing entries 0)
    line: int


def _trajectory(row: object, at: At, line: int) -> Trajectory:
    if not isinstance(row, dict):
        raise at.error("not a JSON object (one trajectory: group, stream, prompt_len, out_lens, "
                       "obs_lens)")  # fmt: skip
    if "group" not in row:
        raise at.error("group is missing")
    group = row["group"]
    if isinstance(group, bool) or not isinstance(group, int | str):
        raise at.error(f"group {shown(group)} is not an integer or a string")
    if isinstance(group, int) and abs(group) > 2**63 - 1:
        raise at.error(f"group {shown(group)} is outside the 64-bit integers")
    stream = integer(row.get("stream", 0), "stream", at, 0, MAX_STREAM)
    given_prompt = row.get("prompt_len")
    prompt = 0 if given_prompt is None else integer(given_prompt, "prompt_len", at, 0)
    for key in ("out_lens", "obs_lens"):
        if key not in row:
            raise at.error(f"{key} is missing")
    outs = listed(row["out_lens"], "out_lens", at)
    if not outs:
        raise at.error("out_lens is empty (a trajectory has at least one turn)")
    outputs = [integer(v, f"out_lens[{k}]", at, 0) for k, v in enumerate(outs)]
    turns = len(outputs)
    observations = [integer(v, f"obs_lens[{k}]", at, 0)
                    for k, v in enumerate(_aligned(row, "obs_lens", turns, at))]  # fmt: skip
    waits = [seconds(v, f"tool_times[{k}]", at)
             for k, v in enumerate(_aligned(row, "tool_times", turns, at))]  # fmt: skip
    return Trajectory(group, stream, prompt, outputs, observations, waits, line)


def _aligned(row: dict[str, Any], key: str, turns: int, at: At) -> list[Any]:
    """A list of one entry per turn (absent entries 0); longer than the turns: refused."""
    given = [] if row.get(key) is None else listed(row[key], key, at)
    if len(given) > turns:
        raise at.error(f"{key} has {len(given)} entries for {turns} turns (out_lens)")
    return given + [0] * (turns - len(given))


def _groups(path: Path, max_groups: int | None) -> list[list[Trajectory]]:
    """The file's trajectories by group, groups and streams sorted, the first `max_groups`."""
    file = str(path)
    by_group: dict[int | str, dict[int, Trajectory]] = {}
    kind: type | None = None
    first_line = 0
    for line, row in read_json_lines(path):
        if row is None:
            continue
        at = At(file, f"line {line}")
        t = _trajectory(row, at, line)
        if kind is None:
            kind, first_line = type(t.group), line
        elif type(t.group) is not kind:
            raise at.error(f"group {shown(t.group)} is not of the kind of line {first_line}'s "
                           "(every group an integer, or every one a string)")  # fmt: skip
        streams = by_group.setdefault(t.group, {})
        if t.stream in streams:
            raise at.error(f"group {shown(t.group)} stream {t.stream} is also on line "
                           f"{streams[t.stream].line}")  # fmt: skip
        streams[t.stream] = t
    if not by_group:
        raise ScenarioError("the rollout trace has no trajectories", file=file)
    keys = sorted(by_group)
    if max_groups is not None:
        keys = keys[:max_groups]
    return [[by_group[k][s] for s in sorted(by_group[k])] for k in keys]


def read_rollouts(spec: WorkloadSpec, trace: TraceSpec, path: Path) -> RequestArrays:
    """A rollout trace as a task graph (see the module docstring)."""
    check_options(spec, trace)
    file = str(path)
    groups = _groups(path, trace.max_rows)
    lanes = len(groups) if trace.num_clients is None else min(trace.num_clients, len(groups))
    calls = Calls("workload.trace")
    for _ in range(sum(len(g) for g in groups[:lanes])):  # first turns known up front
        calls.reserve(len(calls), 0)
    sources: list[str] = [""] * len(calls)
    task = 0
    ends: list[list[int]] = []  # per group: its trajectories' last calls
    for g, group in enumerate(groups):
        head = group[0]
        prompt = head.prompt
        if prompt == 0:
            raise At(file, f"line {head.line}").error(
                f"group {shown(head.group)}'s first stream has no prompt_len (the group's "
                "prompt, shared by its streams)"
            )
        gate = -1
        if g >= lanes:  # starts once every call of group g - lanes has ended
            gate = calls.gate(0.0)
            calls.edges.extend((end, gate) for end in ends[g - lanes])
        root = calls.new_context(-1, 0, -1, 0)  # the group's prompt: no call views it alone
        ends.append([])
        for t in group:
            total = prompt + sum(t.outputs) + sum(t.observations)
            if total > MAX_CONTEXT_TOKENS:
                raise At(file, f"line {t.line}").error(
                    f"the trajectory grows to {total} tokens, beyond the {MAX_CONTEXT_TOKENS} "
                    "one context can hold"
                )
            ctx = calls.new_context(-1, 0, root, prompt // UNIT_TOKENS)
            tokens, call = prompt, -1
            for k, out in enumerate(t.outputs):
                wait = t.waits[k - 1] if k else 0.0
                if k == 0 and g < lanes:
                    call = task
                    calls.fill(call, tokens, max(out, 1), ctx)
                    sources[call] = f"{t.group}/{t.stream}/0"
                else:
                    previous = call if k else gate
                    call = calls.add(tokens, max(out, 1), task, 0, wait, ctx)
                    calls.edges.append((previous, call))
                    sources.append(f"{t.group}/{t.stream}/{k}")
                tokens += out + t.observations[k]
            ends[-1].append(call)
            task += 1
    n = len(calls)
    arrival = np.full(n, np.nan)
    arrival[: sum(len(g) for g in groups[:lanes])] = 0.0
    return RequestArrays(
        arrival_s=arrival,
        prompt_tokens=np.asarray(calls.prompt, dtype=np.int64),
        output_tokens=np.asarray(calls.output, dtype=np.int64),
        class_index=np.zeros(n, dtype=np.int64),
        class_names=("rollout",),
        content=context_content(calls),
        sessions=graph_sessions(calls),
        source_id=np.asarray(sources, dtype=object),
    )
