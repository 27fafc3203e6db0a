"""The whole fuzz corpus (the cases of every fuzz_corpus module) and the snapshot of a folder
that a case must leave as it found it."""

from __future__ import annotations

import hashlib
from pathlib import Path

from fuzz_corpus import Case, runtime_cases, schema_cases, speculative_cases, yaml_cases
from fuzz_corpus_agent_traces import agent_trace_cases
from fuzz_corpus_agents import agent_cases
from fuzz_corpus_audit import audit_cases
from fuzz_corpus_autoscale import autoscale_cases
from fuzz_corpus_bounds import bounds_cases
from fuzz_corpus_cli import cli_cases
from fuzz_corpus_clients import client_cases
from fuzz_corpus_day_profile import day_profile_cases
from fuzz_corpus_export import export_cases
from fuzz_corpus_files import profile_cases, trace_cases
from fuzz_corpus_front_door import front_door_cases
from fuzz_corpus_hf_config import hf_config_cases
from fuzz_corpus_measured import measured_cases
from fuzz_corpus_profile_cmds import profile_cmd_cases
from fuzz_corpus_replay import replay_cases
from fuzz_corpus_search import search_cases

CORPUS: list[Case] = [
    *yaml_cases(),
    *schema_cases(),
    *speculative_cases(),
    *runtime_cases(),
    *profile_cases(),
    *trace_cases(),
    *cli_cases(),
    *search_cases(),
    *autoscale_cases(),
    *measured_cases(),
    *export_cases(),
    *client_cases(),
    *agent_cases(),
    *agent_trace_cases(),
    *replay_cases(),
    *audit_cases(),
    *profile_cmd_cases(),
    *bounds_cases(),
    *day_profile_cases(),
    *front_door_cases(),
    *hf_config_cases(),
]


BIG_BYTES = 64 * 2**20  # a larger file (a sparse one of gigabytes) is digested by its ends


def snapshot(folder: Path) -> dict[str, str]:
    """Every path under `folder` with a digest of its content ("dir" for folders): of the whole
    content, or of its size and first and last MiB for a file above `BIG_BYTES`."""
    out = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        if path.is_dir():
            out[key] = "dir"
            continue
        size = path.stat().st_size
        if size <= BIG_BYTES:
            out[key] = hashlib.sha256(path.read_bytes()).hexdigest()
            continue
        with path.open("rb") as handle:
            head = handle.read(2**20)
            handle.seek(size - 2**20)
            tail = handle.read()
        out[key] = f"{size}:" + hashlib.sha256(head + tail).hexdigest()
    return out
