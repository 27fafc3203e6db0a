"""Ctrl-C and SIGTERM while a command runs: both interrupt it the same way, and are remembered.

While `interrupts()` is active, SIGINT raises `KeyboardInterrupt` and SIGTERM raises
`Terminated` (a `KeyboardInterrupt`, so every cleanup written for Ctrl-C runs for both), and the
signal is recorded. The record matters because an interrupt does not always arrive as an
interrupt: one that lands while a C extension is being imported (numpy importing `datetime`
from C, say) comes out as an `ImportError` raised by that extension. `interrupted()` tells the
caller that whatever it caught followed a signal, so the command can say "interrupted" and
exit with 130 (143 for SIGTERM) instead of printing a traceback. One that lands in a weakref
callback or a finalizer (the import system runs such callbacks while modules load) would be
printed and dropped by Python there, and the command would run on: it is raised again a few
milliseconds later instead, once the callback has returned. One that a library swallows (an
optional import wrapped in `except ImportError`, when the signal turned that import into an
ImportError) is raised again by `raise_if_interrupted()` before any results are committed.

Stdlib only: the console entry point imports this before anything heavy.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import FrameType

_received: list[int] = []


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C (a KeyboardInterrupt) but reported with exit code 143."""


_pending: list[int] = []  # a signal whose exception waits until it can propagate
_RETRY_S = 0.002


def _ignores_exceptions(frame: FrameType | None) -> bool:
    """Whether an exception raised in `frame` would be printed and dropped: a weakref callback
    (the import system's module-lock clean-up runs one) or a finalizer, somewhere up the stack."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__" or (
            code.co_name == "cb" and code.co_filename.startswith("<frozen importlib")
        ):
            return True
        frame = frame.f_back
    return False


_reporting: list[bool] = []  # set once the command is saying it was interrupted
_deferred: list[bool] = []  # set once the command finishes what a first signal began


def _raise(signum: int, frame: FrameType | None) -> None:
    if _deferred:  # a stop is finishing its work: the signal changes nothing
        return
    if signum not in _pending:
        _received.append(signum)
    if _reporting:  # already on the way out: a second exception would only cut the report
        return
    if _ignores_exceptions(frame):
        # raised here, the interrupt would be lost and the command would run on: try again
        # in a moment, once the callback has returned
        if signum not in _pending:
            _pending.append(signum)
        signal.setitimer(signal.ITIMER_REAL, _RETRY_S)
        return
    _pending.clear()
    signal.setitimer(signal.ITIMER_REAL, 0)
    raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


def _retry(signum: int, frame: FrameType | None) -> None:
    if _pending:
        _raise(_pending[0], frame)


@contextmanager
def interrupts() -> Iterator[None]:
    """Install the handlers (main thread only; elsewhere signals are left alone) and put the
    previous ones back afterwards."""
    _received.clear()
    _pending.clear()
    _reporting.clear()
    _deferred.clear()
    try:
        previous = {sig: signal.signal(sig, _raise) for sig in (signal.SIGINT, signal.SIGTERM)}
        previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, _retry)
    except ValueError:  # not the main thread (an embedding application)
        yield
        return
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        stopping = bool(_deferred)  # kept for an enclosing `interrupts()`: still exiting
        for sig, handler in previous.items():
            # after a stop a signal began and the command finished (it wrote its results), the
            # process is exiting: one more signal must not turn its exit status into 130 or 143
            if stopping and sig in (signal.SIGINT, signal.SIGTERM):
                handler = signal.SIG_IGN
            signal.signal(sig, handler)


def defer_interrupts() -> None:
    """From now on (while `interrupts()` is active) SIGINT and SIGTERM are dropped: the command
    is finishing what a first signal began (`batchsim serve`'s stop, which writes its results),
    and a second one must not cut that short."""
    _deferred.append(True)


def raise_if_interrupted() -> None:
    """Raise the interrupt again if a signal arrived under `interrupts()` but the command ran on
    (a library swallowed its exception): called just before results are committed."""
    if _received:
        raise Terminated if _received[-1] == signal.SIGTERM else KeyboardInterrupt


def forget_handled_interrupt() -> None:
    """Clear CPython's note of an interrupt that escaped source run by `exec` or `eval`.

    CPython notes a KeyboardInterrupt that leaves code run from a string (dataclasses and
    namedtuple build their methods that way, so one lands there while modules load) and, when
    `python -m` exits, kills the process with SIGINT (exit status -2) even though the command
    caught it and reported it. Running source from a string resets that note.
    """
    exec("")


def interrupted() -> bool:
    """Whether a signal arrived under `interrupts()` (since it was last entered)."""
    return bool(_received)


def report(exc: BaseException, outcome: str = "no results were written") -> int:
    """Say that the command was interrupted (by `exc`, or by the signal behind it) and what
    that left (`outcome`); the exit code: 143 for SIGTERM, else 130."""
    import sys

    _reporting.append(True)
    _pending.clear()
    with suppress(ValueError):  # not the main thread
        signal.setitimer(signal.ITIMER_REAL, 0)
    if isinstance(exc, KeyboardInterrupt):
        term = isinstance(exc, Terminated)
    else:
        term = bool(_received) and _received[-1] == signal.SIGTERM
    print(f"batchsim: {'terminated' if term else 'interrupted'}; {outcome}", file=sys.stderr)
    return 143 if term else 130


def report_resumable(exc: KeyboardInterrupt, saved: str, where: str) -> int:
    """`report` for a resumable command (sweep, search): what it had saved, and where."""
    return report(exc, f"{saved} saved in {where}; rerun the same command to resume")
