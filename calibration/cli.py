"""The `batchsim calibrate`, `batchsim fit` and `batchsim profile` subcommands.

`register(sub)` adds the parsers to the `batchsim` CLI. This module must not import torch: the
CLI imports it to build its parser on every run, and torch is an optional extra. The benchmark is
imported inside the `calibrate` handler, and a missing torch is a one-line user error. (`sim`
never imports `calibration`, so these commands plug in by name: `sim.cli.main.PLUGINS`.)

    batchsim calibrate --model llama-3-8b --device cuda --out calibration/profiles/measured/x
    batchsim fit raw.csv --out calibration/profiles/mine [--filter model=llama-2-7b]
        [--filter 'num_tokens<=4096'] [--weight kind=decode:2]
    batchsim profile import VIDUR_ROOT --out calibration/profiles/imported/vidur
        [--model llama-2-7b --hardware h100-sxm --tensor-parallel 1]
    batchsim profile table raw.csv --out calibration/profiles/measured/x-table
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sim.cli.args import examples, int_between, positive_int
from sim.errors import ScenarioError

IMPORT_EXAMPLE = "batchsim profile import VIDUR_ROOT --out calibration/profiles/imported/vidur"
TABLE_EXAMPLE = (
    "batchsim profile table calibration/profiles/measured/llama-2-7b_h200/raw.csv --out /tmp/table"
)
TORCH_MISSING = "torch is not installed: pip install 'batchsim[calibration]'"


def register(sub: Any) -> None:
    """Add `calibrate` and `fit` to the `batchsim` subparsers."""
    cal = sub.add_parser(
        "calibrate",
        help="benchmark decode/prefill steps with PyTorch and fit a profile",
        **examples(
            "batchsim calibrate --model llama-3-8b --device cuda --out calibration/profiles/x",
            "batchsim calibrate --model llama-56m-example --device cpu --out /tmp/cpu-profile",
        ),
    )
    cal.add_argument("--model", required=True, help="catalog model, or llama-56m-example")
    cal.add_argument("--device", default="cuda", help="cuda, cuda:1 or cpu (default: cuda)")
    cal.add_argument("--out", type=Path, required=True, help="output folder of the profile")
    cal.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), help="default bf16, fp32 on cpu")
    cal.add_argument(
        "--grid", choices=("full", "cpu", "tiny"), help="grid preset (default full, cpu on cpu)"
    )
    cal.add_argument(
        "--layers", type=positive_int, help="layers to build and time (scaled to full depth)"
    )
    cal.add_argument("--repeats", type=positive_int, help="timed repeats per point")
    cal.add_argument("--no-cuda-graphs", action="store_true", help="time decode eagerly")
    cal.add_argument("--name", help="profile name (default: the output folder's name)")
    cal.set_defaults(handler=_calibrate)

    fit = sub.add_parser(
        "fit",
        help="fit a profile to step timings in a CSV",
        **examples(
            "batchsim fit calibration/profiles/measured/llama-2-7b_h200/raw.csv --out /tmp/fitted"
        ),
    )
    fit.add_argument("csv", type=Path, help="raw CSV of `calibrate`, or external step timings")
    fit.add_argument("--out", type=Path, required=True, help="output folder of the profile")
    _filters(fit)
    fit.add_argument(
        "--weight",
        dest="weights",
        action="append",
        default=[],
        metavar="FILTER:W",
        help="multiply the weight of matching rows by W, e.g. kind=decode:3 (repeatable; a "
        "`weight` column in the CSV sets each row's own)",
    )
    fit.add_argument("--model", help="catalog model the timings are of (recorded in provenance)")
    fit.add_argument("--device-name", help="device the timings were measured on (provenance)")
    fit.add_argument("--origin", help="where the timings come from (provenance)")
    fit.add_argument(
        "--source",
        choices=("measured", "imported"),
        default="measured",
        help="measured: your own runs; imported: published timings",
    )
    fit.add_argument("--name", help="profile name (default: the output folder's name)")
    fit.add_argument("--no-plot", action="store_true", help="skip fit.png")
    fit.set_defaults(handler=_fit)

    prof = sub.add_parser(
        "profile",
        help="make table profiles from published or raw timings",
        **examples(IMPORT_EXAMPLE, TABLE_EXAMPLE),
    )
    verbs = prof.add_subparsers(dest="profile_command", required=True)
    imp = verbs.add_parser(
        "import",
        help="table profiles from Vidur's per-operation GPU timings (no torch needed)",
        **examples(IMPORT_EXAMPLE),
    )
    imp.add_argument("root", type=Path, help="Vidur profiling tree (holds compute/, network/)")
    imp.add_argument("--out", type=Path, required=True, help="folder of the profile files")
    imp.add_argument("--model", help="catalog model (default: every model found)")
    imp.add_argument("--hardware", help="catalog GPU (default: every GPU found)")
    imp.add_argument(
        "--tensor-parallel", type=int_between(1, 1024),  # sim.costs.catalog.HardwareSpec's bound
        help="degree (default: the smallest that fits)",
    )
    imp.set_defaults(handler=_import)
    tab = verbs.add_parser(
        "table",
        help="a table profile straight from a raw timings CSV",
        **examples(TABLE_EXAMPLE),
    )
    tab.add_argument("csv", type=Path, help="raw CSV of `calibrate` (or external step timings)")
    tab.add_argument("--out", type=Path, required=True, help="output folder of the profile")
    _filters(tab)
    tab.add_argument("--model", help="catalog model the timings are of (recorded in provenance)")
    tab.add_argument("--name", help="profile name (default: the output folder's name)")
    tab.add_argument("--source", choices=("measured", "imported"), default="measured")
    tab.set_defaults(handler=_table)


def _filters(parser: Any) -> None:
    parser.add_argument(
        "--filter",
        dest="filters",
        action="append",
        default=[],
        metavar="COLUMN=VALUE",
        help="keep only matching rows: =, !=, <, <=, >, >=, e.g. model=llama-2-7b or "
        "'num_tokens<=4096' (repeatable: all must match)",
    )


def _import(args: argparse.Namespace) -> int:
    from calibration.vidur import import_tree

    written, skipped = import_tree(
        args.root,
        args.out,
        model=args.model,
        hardware=args.hardware,
        tensor_parallel=args.tensor_parallel,
    )
    for line in skipped:
        print(f"left out {line}")
    for path in written:
        print(f"wrote {path}")
    return 0


def _table(args: argparse.Namespace) -> int:
    from calibration.table_from_raw import format_table_outcome, table_from_raw

    outcome = table_from_raw(
        args.csv,
        args.out,
        name=args.name,
        filters=tuple(args.filters),
        model=args.model,
        source=args.source,
    )
    print(format_table_outcome(outcome))
    return 0


def _check_out(out: Path, *files: str) -> None:
    """`--out` before any work: a real, writable folder, and each file the command writes there
    absent or written by batchsim (a profile it replaces; never someone's file)."""
    from sim.io.destination import check_file_destination, check_out_folder

    check_out_folder(out)
    for name in files:
        check_file_destination(out / name)


def _fit(args: argparse.Namespace) -> int:
    from calibration.report import PROFILE_FILE, fit_timings, format_outcome

    _check_out(args.out, PROFILE_FILE)

    extra: dict[str, Any] = {}
    if args.device_name:
        extra["device"] = {"name": args.device_name}
    if args.origin:
        extra["origin"] = args.origin
    outcome = fit_timings(
        args.csv,
        args.out,
        name=args.name,
        source=args.source,
        filters=tuple(args.filters),
        weights=tuple(args.weights),
        model=args.model,
        extra=extra,
        plot=not args.no_plot,
    )
    print(format_outcome(outcome))
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    try:
        from calibration.calibrate import run_calibration
    except ImportError as exc:
        if exc.name is not None and exc.name.split(".")[0] == "torch":
            raise ScenarioError(TORCH_MISSING) from None
        raise
    from calibration.grid import preset
    from calibration.report import format_outcome

    _check_out(args.out, "profile.yaml")
    cpu = args.device == "cpu"
    grid = preset(
        args.grid or ("cpu" if cpu else "full"),
        layers_timed=args.layers,
        repeats=args.repeats,
        cuda_graphs=False if args.no_cuda_graphs else None,
    )
    dtype = args.dtype or ("fp32" if cpu else "bf16")
    outcome = run_calibration(args.model, args.device, dtype, grid, args.out, name=args.name)
    print(format_outcome(outcome))
    return 0
