"""`batchsim measured`: what a measured run (or a vLLM startup log) holds, on one screen.

    batchsim measured traces.json                      # format detected from the content
    batchsim measured sweep.json --format guidellm --benchmark 2
    batchsim measured results/quickstart --variant continuous
    batchsim measured --vllm-log vllm.log              # the engine's configuration

For a run: its format, requests and failed requests, the span of arrivals (and the wall clock
of the first, when the file has one), the measured p50/p90/p99 and mean of TTFT, TPOT and E2E in
milliseconds, the token counts, and what the file says of itself. A bad file is one line naming
the file and the record, exit code 2, like any bad input.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from sim.cli.args import examples, nonnegative_int
from sim.errors import ScenarioError

_FORMATS = ("vllm_otlp", "vllm_bench", "guidellm", "aiperf", "batchsim")  # sim.measured.FORMATS


def register(sub: Any) -> None:
    """Add the `measured` subcommand to the CLI's subparsers."""
    cmd = sub.add_parser(
        "measured",
        help="describe a measured run of a real engine, or a vLLM startup log",
        description="Read a measured run (vLLM OTLP spans, vllm bench serve, GuideLLM, AIPerf, "
        "batchsim results) and print what it holds; or print a vLLM log's engine config.",
        **examples(
            "batchsim measured calibration/measured/vllm-0.11-h100-llama-2-7b/traces.json",
            "batchsim measured --vllm-log calibration/measured/vllm-0.11-h100-llama-2-7b/vllm.log",
        ),
    )
    cmd.add_argument("run", type=Path, nargs="?", help="measured run file (or results folder)")
    cmd.add_argument("--format", dest="fmt", choices=_FORMATS, help="default: from the content")
    cmd.add_argument("--benchmark", type=nonnegative_int, metavar="I", help="benchmark index")
    cmd.add_argument("--variant", help="variant of a batchsim results folder")
    cmd.add_argument("--vllm-log", type=Path, metavar="LOG", help="print a vLLM log's config")
    cmd.add_argument("--drop-duplicates", action="store_true",
                     help="keep the first row of a request id that appears twice")
    cmd.set_defaults(handler=_measured)


def _measured(args: Any) -> int:
    if (args.run is None) == (args.vllm_log is None):
        raise ScenarioError("measured: give either a measured run or --vllm-log LOG (one of them)")
    from sim.measured import read_measured, read_vllm_log

    if args.vllm_log is not None:
        config = read_vllm_log(args.vllm_log)
        print(f"vLLM log: {args.vllm_log} (engine config of the last start)")
        for name, value in vars(config).items():
            if name != "lines":
                line = config.lines.get(name)
                print(f"  {name:<26} {_short(value):<40} {'' if line is None else f'line {line}'}")
        return 0
    run = read_measured(args.run, args.fmt, benchmark=args.benchmark, variant=args.variant,
                        drop_duplicates=args.drop_duplicates)
    print("\n".join(describe(run)))
    return 0


def _short(value: Any, width: int = 70) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


def describe(run: Any) -> list[str]:
    """The lines `batchsim measured` prints for a `MeasuredRun`."""
    import numpy as np

    span = float(run.arrival_s[-1])
    clock = ""
    if run.origin_unix_s is not None:
        when = dt.datetime.fromtimestamp(run.origin_unix_s, tz=dt.timezone.utc)
        clock = f", first at {when:%Y-%m-%d %H:%M:%S} UTC"
    rate = f", {(len(run) - 1) / span:.3g} requests/s" if span > 0 else ""
    out = [
        f"measured run: {run.source} (format {run.format})",
        f"requests: {len(run)} completed, {run.num_failed} failed (left out)"
        + (f", {run.num_duplicates} repeated ids dropped" if run.num_duplicates else ""),
        f"arrivals: over {span:.1f} s{rate}{clock}",
        f"{'ms':<6}{'p50':>10}{'p90':>10}{'p99':>10}{'mean':>10}{'count':>8}",
    ]
    for name, values in (("TTFT", run.ttft_s), ("TPOT", run.tpot_s), ("E2E", run.e2e_s)):
        known = values[np.isfinite(values)] * 1000.0
        if len(known) == 0:
            out.append(f"{name:<6}{'n/a':>10}{'':>30}{0:>8}")
            continue
        p50, p90, p99 = np.percentile(known, [50, 90, 99])
        out.append(
            f"{name:<6}{p50:>10.1f}{p90:>10.1f}{p99:>10.1f}{known.mean():>10.1f}{len(known):>8}"
        )
    for name, counts in (("prompt", run.prompt_tokens), ("output", run.output_tokens)):
        out.append(
            f"{name} tokens: mean {counts.mean():.0f}, p50 {np.median(counts):.0f}, "
            f"min {counts.min()}, max {counts.max()}"
        )
    if run.itl_s is not None:
        out.append(f"inter-token gaps: {sum(len(g) for g in run.itl_s)} in the file")
    out.append("meta:")
    out.extend(f"  {key}: {_short(value)}" for key, value in run.meta.items())
    return out
