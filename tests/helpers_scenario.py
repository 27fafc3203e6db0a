"""Scenario builders for tests that run the whole simulator on tiny, exact cases."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from sim import Results, load_scenario_dict, simulate

# every step costs t_mem seconds plus t_flop per token: easy to follow by hand
UNIT_PROFILE = {"coefficients": {"t_mem_s": 1.0, "t_flop_s_per_token": 0.0}}


def trace_file(tmp_path: Path, rows: list[tuple[float, int, int]], name: str = "t.csv") -> Path:
    path = tmp_path / name
    lines = ["arrival_s,prompt_tokens,output_tokens"]
    lines += [f"{a},{p},{o}" for a, p, o in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def scenario(
    tmp_path: Path, rows: list[tuple[float, int, int]], policy: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": "t",
        "workload": {"trace": {"path": str(trace_file(tmp_path, rows)), "format": "csv"}},
        "model": "llama-2-7b",
        "hardware": "a100-80g",
        "profile": copy.deepcopy(UNIT_PROFILE),
        "policy": policy,
    }
    raw.update(extra)
    return raw


def run(raw: dict[str, Any], tmp_path: Path | None = None) -> Results:
    return simulate(load_scenario_dict(raw, base_dir=tmp_path))
