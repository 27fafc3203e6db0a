"""The `batchsim` command line (also `python -m sim`): one module per group of subcommands.

`entry` is the console entry point. It imports the command line inside its own
`try`, so that a Ctrl-C at any moment after the interpreter has started, even while the
first modules load, ends in the same one-line message and exit code 130 as a later one.
"""

from __future__ import annotations

import sys


def entry(argv: list[str] | None = None) -> int:
    try:
        from sim.cli.main import main as run

        return run(argv)
    except KeyboardInterrupt:
        print("batchsim: interrupted; no results were written", file=sys.stderr)
        return 130
