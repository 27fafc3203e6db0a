"""The `batchsim` command line (also `python -m sim`): one module per group of subcommands.

`entry` is the console entry point. It installs the interrupt handlers (`sim.cli.signals`)
first and imports the command line inside its own `try`, so that a Ctrl-C or SIGTERM at any
moment after the interpreter has started, even while the first modules load, ends in the same
one-line message and exit code (130, or 143) as a later one.
"""

from __future__ import annotations


def entry(argv: list[str] | None = None) -> int:
    try:
        code = _entry(argv)
    except KeyboardInterrupt:  # a signal inside the report itself: the message may be cut
        code = 130
    from sim.cli.signals import forget_handled_interrupt

    forget_handled_interrupt()  # else `python -m sim` may die of SIGINT after reporting it
    return code


def _entry(argv: list[str] | None) -> int:
    try:
        from sim.cli import signals

        with signals.interrupts():
            try:
                from sim.cli.main import main

                return main(argv)
            except Exception as exc:
                if not signals.interrupted():
                    raise
                return signals.report(exc)  # an import cut short by the signal
    except KeyboardInterrupt as exc:
        from sim.cli.signals import report

        return report(exc)
