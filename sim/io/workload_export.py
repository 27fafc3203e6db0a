"""A workload's requests as files real benchmark clients replay (`batchsim export`).

Pure functions from `RequestArrays` to text; `write_atomically` puts text in place. Arrival
times are written from the first request (it arrives at 0): that is what the trace readers and
the clients do with a trace anyway, and batchsim's own readers then read back exactly the
numbers written. The formats:

* `csv`: batchsim's trace CSV, `arrival_s,prompt_tokens,output_tokens` (seconds, Python's
  shortest exact float text), read by `workload.trace.format: csv`; read back, the requests are
  these very numbers, so a run on it replays the same requests.
* `mooncake`: the Mooncake trace JSONL that AIPerf replays (`--custom-dataset-type
  mooncake_trace`): `timestamp` (milliseconds), `input_length`, `output_length`, `hash_ids`.
  A hash id names a block of 512 prompt tokens (AIPerf's default `--isl-block-size`), equal ids
  meaning equal tokens up to the end of that block, as in the Mooncake traces. batchsim's
  content describes tokens in units of its own (16 tokens for a synthetic workload's system
  prompts, 512 for a Mooncake trace): a block is `512 / unit` units, and two blocks get the same
  id exactly when their units and every block before them are equal, so shared system prompts
  share ids for their whole blocks and nothing else does. A workload without content (every
  token its request's own) gets ids of its own for every block. Ids are numbered 0, 1, ... in
  order of first use. If the unit does not divide 512 the ids are left out (said in `notes`),
  since no honest 512-token blocks can be made of them.
* `vllm-custom`: JSONL for `vllm bench serve --dataset-name custom`: `prompt` (text) and
  `output_tokens`. That dataset has no arrival times (the client draws its own from
  `--request-rate` and `--burstiness`) and needs text, which batchsim does not have. The text is
  made of common English words, one word for each token: on tokenizers that split words at
  spaces and hold these words whole (the Llama 2 and 3, Mistral, Qwen and GPT-2 families) a
  prompt is `prompt_tokens` tokens, plus the BOS token the tokenizer adds and, unless
  `--skip-chat-template`, the chat template's. vLLM counts the real prompt lengths with the
  model's tokenizer and reports their sum as `total_input_tokens`: compare it with the
  workload's. Each content unit starts with its id spelled in digit words, then filler words,
  so prompts share exactly the prefixes the workload's content shares (prefix caching sees the
  same reuse), and a request without shared content is unique from its first words.
* `weka` and `rollouts`: agents' tasks (calls that wait on each other) as the agentic traces
  AIPerf, inference-perf, kv-cache-tester and vLLM TPU's RL benchmark replay
  (`sim.io.agent_export`); every other format refuses them, as it refuses closed loops.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sim.io.agent_export import AGENT_FORMATS, export_agents
from sim.workload.arrays import RequestArrays

FORMATS: tuple[str, ...] = ("csv", "mooncake", "vllm-custom", "weka", "rollouts")
BLOCK_TOKENS = 512  # AIPerf's default --isl-block-size and the Mooncake traces' block
# one word per hex digit of a unit's id, and the filler after it (each one token, see above)
DIGIT_WORDS: tuple[str, ...] = ("zero", "one", "two", "three", "four", "five", "six", "seven",
                                "eight", "nine", "red", "blue", "green", "black", "white",
                                "gold")  # fmt: skip
FILLER_WORD = "the"


@dataclass(frozen=True)
class Export:
    """A format's text and what a user should know about it (one line each)."""

    text: str
    notes: list[str] = field(default_factory=list)


def open_loop_problem(requests: RequestArrays) -> str | None:
    """Why the workload cannot be written as a trace (None: it can)."""
    if requests.sessions is not None and requests.sessions.closed_loop:
        return (
            "closed-loop requests (sessions or clients): a later request arrives a while after "
            "an earlier one finishes, which only a run knows, so there are no arrival times"
        )
    if len(requests) == 0:
        return "the workload has no requests"
    if np.isnan(requests.arrival_s).any():
        return "some arrivals are known only during a run (closed-loop requests)"
    return None


def _arrivals(requests: RequestArrays) -> np.ndarray:
    arrival = np.asarray(requests.arrival_s, dtype=np.float64)
    return arrival - arrival[0]


def to_csv(requests: RequestArrays) -> Export:
    """batchsim's trace CSV (see the module docstring)."""
    lines = ["arrival_s,prompt_tokens,output_tokens"]
    arrival = _arrivals(requests).tolist()
    prompts = requests.prompt_tokens.tolist()
    outputs = requests.output_tokens.tolist()
    lines += [f"{t!r},{p},{o}" for t, p, o in zip(arrival, prompts, outputs, strict=True)]
    return Export("\n".join(lines) + "\n")


def _units(requests: RequestArrays) -> tuple[list[np.ndarray], int]:
    """Each request's content ids and the tokens per id; a request without content is one unit
    of its whole prompt, with an id no other request has."""
    content = requests.content
    n = len(requests)
    if content is None:
        base = -1 - np.arange(n, dtype=np.int64)  # negative: apart from any content id
        return [base[i : i + 1] for i in range(n)], 0
    out = []
    for i in range(n):
        ids = content.of(i)
        needed = -(-int(requests.prompt_tokens[i]) // content.unit)
        out.append(ids[:needed])  # a clipped prompt keeps the ids of its tokens only
    return out, content.unit


def block_hash_ids(requests: RequestArrays) -> list[list[int]] | None:
    """Per request, one id per 512-token block of its prompt (None: the content's unit does
    not divide 512); see the module docstring."""
    units, unit = _units(requests)
    if unit and BLOCK_TOKENS % unit:
        return None
    per_block = BLOCK_TOKENS // unit if unit else 0
    known: dict[tuple[int, tuple[int, ...]], int] = {}
    out: list[list[int]] = []
    for i, ids in enumerate(units):
        blocks = -(-int(requests.prompt_tokens[i]) // BLOCK_TOKENS)
        chain: list[int] = []
        previous = -1
        for b in range(blocks):
            if per_block:
                key = (previous, tuple(ids[b * per_block : (b + 1) * per_block].tolist()))
            else:  # no content: the request's own blocks
                key = (previous, (int(ids[0]), b))
            previous = known.setdefault(key, len(known))
            chain.append(previous)
        out.append(chain)
    return out


def to_mooncake(requests: RequestArrays) -> Export:
    """Mooncake trace JSONL as AIPerf replays it (see the module docstring)."""
    hashes = block_hash_ids(requests)
    notes = []
    if hashes is None:
        unit = requests.content.unit if requests.content is not None else 0
        notes.append(
            f"hash_ids left out: the workload's content comes in {unit}-token units, "
            f"which do not divide AIPerf's {BLOCK_TOKENS}-token blocks"
        )
    arrival_ms = (_arrivals(requests) * 1000.0).tolist()
    lines = []
    for i, ms in enumerate(arrival_ms):
        row: dict[str, object] = {
            "timestamp": ms,
            "input_length": int(requests.prompt_tokens[i]),
            "output_length": int(requests.output_tokens[i]),
        }
        if hashes is not None:
            row["hash_ids"] = hashes[i]
        lines.append(json.dumps(row))
    return Export("\n".join(lines) + "\n", notes)


def _spell(value: int, width: int) -> list[str]:
    """`value` in `width` hex digits, one word each."""
    return [DIGIT_WORDS[(value >> (4 * k)) & 15] for k in range(width - 1, -1, -1)]


def prompt_words(requests: RequestArrays) -> list[list[str]]:
    """Each prompt as words, one per token (see the module docstring)."""
    units, unit = _units(requests)
    flat = np.concatenate(units) if units else np.zeros(0, dtype=np.int64)
    uniques, dense = np.unique(flat, return_inverse=True)
    width = max(1, -(-int(len(uniques) - 1).bit_length() // 4))
    out = []
    start = 0
    for i, ids in enumerate(units):
        tokens = int(requests.prompt_tokens[i])
        size = unit or tokens
        words: list[str] = []
        for k, code in enumerate(dense[start : start + len(ids)].tolist()):
            length = min(size, tokens - k * size)
            spelled = _spell(code, width)[:length]
            words += spelled + [FILLER_WORD] * (length - len(spelled))
        start += len(ids)
        out.append(words)
    return out


def to_vllm_custom(requests: RequestArrays) -> Export:
    """JSONL for `vllm bench serve --dataset-name custom` (see the module docstring)."""
    words = prompt_words(requests)
    outputs = requests.output_tokens.tolist()
    lines = [
        json.dumps({"prompt": " ".join(w), "output_tokens": o})
        for w, o in zip(words, outputs, strict=True)
    ]
    span = float(_arrivals(requests)[-1])
    rate = (len(requests) - 1) / span if span > 0 else float("inf")
    notes = [
        f"no arrival times in this format: the workload's mean rate is {rate:.6g} req/s "
        f"({len(requests)} requests); give it as --request-rate"
    ]
    return Export("\n".join(lines) + "\n", notes)


def _agents(fmt: str) -> Callable[[RequestArrays], Export]:
    """The writer of agents' tasks in `fmt` (`sim.io.agent_export`)."""
    return lambda requests: Export(*export_agents(requests, fmt))


WRITERS = {"csv": to_csv, "mooncake": to_mooncake, "vllm-custom": to_vllm_custom,
           "weka": _agents("weka"), "rollouts": _agents("rollouts")}  # fmt: skip


def export_text(requests: RequestArrays, fmt: str) -> Export:
    """The workload in format `fmt` (one of `FORMATS`)."""
    return WRITERS[fmt](requests)


def looks_exported(path: Path, fmt: str) -> bool:
    """Whether `path` holds what this format writes (its first line), so it may be replaced."""
    try:
        with path.open("rb") as handle:
            first = handle.readline(4096).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    if fmt == "csv":
        return first.rstrip("\r\n") == "arrival_s,prompt_tokens,output_tokens"
    try:
        row = json.loads(first)
    except ValueError:
        return False
    if not isinstance(row, dict):
        return False
    if fmt in AGENT_FORMATS:  # a weka trace, a rollout trajectory
        return {"block_size", "requests"} <= set(row) if fmt == "weka" else "out_lens" in row
    if fmt == "mooncake":
        return {"timestamp", "input_length", "output_length"} <= set(row) <= {
            "timestamp", "input_length", "output_length", "hash_ids"}  # fmt: skip
    return set(row) == {"prompt", "output_tokens"}


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it into place: a reader sees
    the old file or the new one, and a failure leaves no partial file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".batchsim-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
