"""`batchsim export`: write the workload a scenario simulates as a file real clients replay.

    batchsim export s.yaml --format csv --out w.csv            # batchsim's trace CSV
    batchsim export s.yaml --format mooncake --out w.jsonl     # AIPerf: mooncake_trace
    batchsim export s.yaml --format vllm-custom --out w.jsonl  # vllm bench serve: custom
    batchsim export a.yaml --format weka --out w.jsonl         # agents' tasks: AIPerf weka_trace
    batchsim export r.yaml --format rollouts --out r.jsonl     # RL rollouts: vLLM TPU benchmark
    batchsim export s.yaml --format csv --out w.csv --set workload.arrival.rate=4 --variant b

The requests are generated exactly as `batchsim run` generates them (the same seed, workload,
folder for relative paths and model context), so the file holds the very requests the run
simulated; the formats are described in `sim.io.workload_export`. Variants share their requests
unless one changes the workload, the seed or the model's context: then `--variant` must say
which one (default: the first, when all agree).

The output is written atomically (a temporary file beside it, then a rename). It is refused when
it is a folder, lies in a folder that does not exist, or is an existing file that this format
did not write (its first line is not the format's), unless `--force`. Closed-loop sessions are
refused: their later turns arrive when earlier ones finish, which only a run knows. Agents' tasks
and rollouts (calls that wait on each other) are written by `weka` and `rollouts` only, and only
they are.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sim.cli.args import examples
from sim.errors import ScenarioError

FORMAT_CHOICES: tuple[str, ...] = ("csv", "mooncake", "vllm-custom", "weka", "rollouts")


def register(sub: Any) -> None:
    """Add the `export` subcommand to the CLI's subparsers."""
    export = sub.add_parser(
        "export",
        help="write a scenario's requests as a trace real benchmark clients replay",
        description="Write the requests a scenario simulates: batchsim's trace CSV, a Mooncake "
        "trace for AIPerf, or a custom dataset for vllm bench serve.",
        **examples(
            "batchsim export scenarios/quickstart.yaml --format mooncake --out w.jsonl",
            "batchsim export scenarios/quickstart.yaml --format vllm-custom --out w.jsonl",
        ),
    )
    export.add_argument("scenario", type=Path, help="scenario YAML file")
    export.add_argument("--format", dest="export_format", required=True, choices=FORMAT_CHOICES)
    export.add_argument("--out", type=Path, required=True, help="file to write")
    export.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE"
    )
    export.add_argument("--variant", default=None, help="the variant whose requests to write")
    export.add_argument("--force", action="store_true", help="replace any existing file")
    export.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    export.set_defaults(handler=_export)


def _check_out(out: Path, fmt: str, force: bool) -> None:
    """Before anything is generated: the output is a file we may write."""
    from sim.io.workload_export import looks_exported

    where = str(out)
    if out.is_dir():
        raise ScenarioError("is a folder; give a file name", path=f"--out {where}")
    parent = out.parent
    if not parent.is_dir():
        raise ScenarioError(f"folder {str(parent)!r} does not exist", path=f"--out {where}")
    if out.exists() or out.is_symlink():
        if not out.is_file():
            raise ScenarioError("exists and is not a regular file", path=f"--out {where}")
        if not force and not looks_exported(out, fmt):
            raise ScenarioError(
                f"exists and is not a {fmt} export (use --force to replace it)",
                path=f"--out {where}",
            )


def _variant(scenario: Any, name: str | None) -> Any:
    """The variant whose requests are written (see the module docstring)."""
    variants = scenario.variants
    if name is not None:
        chosen = [v for v in variants if v.variant == name]
        if not chosen:
            known = ", ".join(v.variant for v in variants)
            raise ScenarioError(f"no variant {name!r} (variants: {known})", path="--variant")
        return chosen[0]
    keys = {_workload_key(v): v.variant for v in variants}
    if len(keys) > 1:
        names = ", ".join(keys.values())
        raise ScenarioError(
            f"variants {names} simulate different requests: pick one with --variant",
            file=scenario.file,
            path="variants",
        )
    return variants[0]


def _workload_key(resolved: Any) -> str:
    # what sim.simulate keys a variant's workload by: equal keys, the very same requests
    spec = resolved.spec
    workload = spec.workload.model_dump(mode="json")
    key = [spec.seed, workload, str(resolved.base_dir), spec.model.max_model_len]
    return json.dumps(key, sort_keys=True)


def _export(args: argparse.Namespace) -> int:
    import numpy as np

    from sim.io.agent_export import AGENT_FORMATS, graph_problem
    from sim.io.workload_export import export_text, open_loop_problem, write_atomically
    from sim.scenario.load import load_scenario
    from sim.workload import generate_requests

    _check_out(args.out, args.export_format, args.force)
    scenario = load_scenario(args.scenario, args.overrides)
    resolved = _variant(scenario, args.variant)
    spec = resolved.spec
    try:  # as sim.simulate generates a variant's requests
        requests = generate_requests(
            spec.workload,
            np.random.default_rng(spec.seed),
            resolved.base_dir,
            spec.model.max_model_len,
        )
    except ScenarioError as exc:
        raise exc.with_file(scenario.file) from None
    if args.export_format in AGENT_FORMATS:
        problem = graph_problem(requests)
    elif (problem := open_loop_problem(requests)) and graph_problem(requests) is None:
        problem += " (agents' tasks: --format weka or rollouts)"
    if problem is not None:
        raise ScenarioError(f"cannot export: {problem}", file=scenario.file, path="workload")
    try:
        exported = export_text(requests, args.export_format)
    except ScenarioError as exc:  # a task the format cannot hold
        raise ScenarioError(f"cannot export: {exc.reason}", file=scenario.file,
                            path=exc.path) from None  # fmt: skip
    write_atomically(args.out, exported.text)
    if not args.quiet:
        for note in exported.notes:
            print(f"note: {note}", file=sys.stderr)
        print(f"{len(requests)} requests of variant {resolved.variant!r} written to {args.out}")
    return 0
