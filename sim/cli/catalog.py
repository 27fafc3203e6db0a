"""`batchsim catalog`: the catalog's models and GPUs, and the KV memory a pair leaves.

    batchsim catalog                                   # both tables
    batchsim catalog --model llama-3-70b --hardware h100-sxm --tensor-parallel 4
    batchsim catalog --model llama-3-8b --kv-dtype fp8 # KV capacity on every GPU
    batchsim catalog --model path/to/Qwen3-32B/config.json --hardware h200
    batchsim catalog --model deepseek-v3 --hardware h200 --data-parallel 8 --expert-parallel

With `--model` and/or `--hardware` a third table gives, for every selected pair, the KV bytes per
token and the KV capacity in tokens and in blocks. When both are named and the model does not fit,
the command fails like any bad input: one line naming weights vs usable memory, exit code 2.
"""

from __future__ import annotations

from typing import Any

from sim.cli.args import examples, int_between

# the bounds of sim.costs.catalog.HardwareSpec and of a scenario's policy.block_size
MAX_TP = MAX_DP = 1024
MAX_PP = 64
MAX_BLOCK_SIZE = 8192


def register(sub: Any) -> None:
    """Add the `catalog` subcommand to the CLI's subparsers."""
    cat = sub.add_parser(
        "catalog",
        help="list catalog models and GPUs, and the KV capacity of a pair",
        description="List catalog models and GPUs; with --model/--hardware, KV capacity.",
        **examples(
            "batchsim catalog",
            "batchsim catalog --model llama-3-70b --hardware h100-sxm --tensor-parallel 4",
        ),
    )
    cat.add_argument(
        "--model",
        help="catalog model, or a Hugging Face config.json (or its folder): show its KV capacity",
    )
    cat.add_argument("--hardware", help="catalog GPU: show KV capacity on it")
    cat.add_argument(
        "--tensor-parallel",
        type=int_between(1, MAX_TP),
        default=1,
        metavar="N",
        help="GPUs per instance (default 1)",
    )
    cat.add_argument(
        "--data-parallel", type=int_between(1, MAX_DP), default=1, metavar="N",
        help="data-parallel attention ranks of a mixture of experts (default 1)",
    )  # fmt: skip
    cat.add_argument(
        "--expert-parallel", action="store_true",
        help="whole experts on every GPU of a stage (default: experts split by tensor)",
    )  # fmt: skip
    cat.add_argument(
        "--pipeline-parallel", type=int_between(1, MAX_PP), default=1, metavar="N",
        help="pipeline stages (default 1)",
    )  # fmt: skip
    cat.add_argument("--weight-dtype", choices=["bf16", "fp16", "fp8", "int4", "mxfp4", "nvfp4"])
    cat.add_argument("--kv-dtype", choices=["bf16", "fp16", "fp8", "nvfp4"])
    cat.add_argument(
        "--block-size", type=int_between(1, MAX_BLOCK_SIZE), default=16,
        help="tokens per KV block (default 16)",
    )
    cat.add_argument("--gpu-memory-utilization", type=float, default=None, metavar="F")
    cat.set_defaults(handler=_catalog)


def _catalog(args: Any) -> int:
    # the tables need pandas and the catalog: imported only when the command runs
    from sim.cli.catalog_tables import catalog_command

    return catalog_command(args)
