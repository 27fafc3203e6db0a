"""`batchsim catalog`: the catalog's models and GPUs, and the KV memory a pair leaves.

    batchsim catalog                                   # both tables
    batchsim catalog --model llama-3-70b --hardware h100-sxm --tensor-parallel 4
    batchsim catalog --model llama-3-8b --kv-dtype fp8 # KV capacity on every GPU

With `--model` and/or `--hardware` a third table gives, for every selected pair, the KV bytes per
token and the KV capacity in tokens and in blocks. When both are named and the model does not fit,
the command fails like any bad input: one line naming weights vs usable memory, exit code 2.
"""

from __future__ import annotations

from typing import Any

from sim.cli.args import positive_int


def register(sub: Any) -> None:
    """Add the `catalog` subcommand to the CLI's subparsers."""
    cat = sub.add_parser(
        "catalog",
        help="list catalog models and GPUs, and the KV capacity of a pair",
        description="List catalog models and GPUs; with --model/--hardware, KV capacity.",
    )
    cat.add_argument("--model", help="catalog model: show its KV capacity")
    cat.add_argument("--hardware", help="catalog GPU: show KV capacity on it")
    cat.add_argument(
        "--tensor-parallel",
        type=positive_int,
        default=1,
        metavar="N",
        help="GPUs per instance (default 1)",
    )
    cat.add_argument("--weight-dtype", choices=["bf16", "fp16", "fp8", "int4"])
    cat.add_argument("--kv-dtype", choices=["bf16", "fp16", "fp8"])
    cat.add_argument(
        "--block-size", type=positive_int, default=16, help="tokens per KV block (default 16)"
    )
    cat.add_argument("--gpu-memory-utilization", type=float, default=None, metavar="F")
    cat.set_defaults(handler=_catalog)


def _catalog(args: Any) -> int:
    # the tables need pandas and the catalog: imported only when the command runs
    from sim.cli.catalog_tables import catalog_command

    return catalog_command(args)
