"""argparse value types that refuse what can never work, before any command runs.

argparse reports a failed type as one line naming the flag (`--workers: 0 must be at least
1`), so a bad flag never reaches the code that would misbehave on it (zero workers, a negative
count).
"""

from __future__ import annotations

import argparse


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def positive_int(text: str) -> int:
    """An integer >= 1."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def nonnegative_int(text: str) -> int:
    """An integer >= 0."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be at least 0")
    return value
