"""Ctrl-C and SIGTERM while a command runs: both interrupt it the same way, and are remembered.

While `interrupts()` is active, SIGINT raises `KeyboardInterrupt` and SIGTERM raises
`Terminated` (a `KeyboardInterrupt`, so every cleanup written for Ctrl-C runs for both), and the
signal is recorded. The record matters because an interrupt does not always arrive as an
interrupt: one that lands while a C extension is being imported (numpy importing `datetime`
from C, say) comes out as an `ImportError` raised by that extension. `interrupted()` tells the
caller that whatever it caught followed a signal, so the command can say "interrupted" and
exit with 130 (143 for SIGTERM) instead of printing a traceback.

Stdlib only: the console entry point imports this before anything heavy.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

_received: list[int] = []


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C (a KeyboardInterrupt) but reported with exit code 143."""


def _raise(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)
    raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


@contextmanager
def interrupts() -> Iterator[None]:
    """Install the handlers (main thread only; elsewhere signals are left alone) and put the
    previous ones back afterwards."""
    _received.clear()
    try:
        previous = {sig: signal.signal(sig, _raise) for sig in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread (an embedding application)
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def interrupted() -> bool:
    """Whether a signal arrived under `interrupts()` (since it was last entered)."""
    return bool(_received)


def report(exc: BaseException) -> int:
    """Say that the command was interrupted (by `exc`, or by the signal behind it); the exit
    code: 143 for SIGTERM, else 130."""
    import sys

    if isinstance(exc, KeyboardInterrupt):
        term = isinstance(exc, Terminated)
    else:
        term = bool(_received) and _received[-1] == signal.SIGTERM
    print(
        f"batchsim: {'terminated' if term else 'interrupted'}; no results were written",
        file=sys.stderr,
    )
    return 143 if term else 130
