"""argparse value types that refuse what can never work, before any command runs; and the
examples each command's `--help` ends with (`examples`).

argparse reports a failed type as one line naming the flag (`--workers: 0 must be at least
1`), so a bad flag never reaches the code that would misbehave on it (zero workers, a negative
count).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any


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


def int_between(low: int, high: int) -> Callable[[str], int]:
    """A type for an integer from `low` to `high`."""

    def parse(text: str) -> int:
        value = _integer(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} must be from {low} to {high}")
        return value

    return parse


def seed_count(text: str) -> int:
    """Runs per variant of `run --seeds`: 2 to 1000."""
    value = _integer(text)
    if not 2 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"{value} must be from 2 to 1000 (runs per variant)")
    return value


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def float_between(low: float, high: float, unit: str = "") -> Callable[[str], float]:
    """A type for a number from `low` to `high` (NaN refused)."""

    def parse(text: str) -> float:
        value = _number(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} must be between {low:g} and {high:g}{unit}")
        return value

    return parse


def band_percent(text: str) -> float:
    """The half-width of `run --band` in percent: a finite number above 0 and below 100."""
    value = _number(text)
    if not (math.isfinite(value) and 0 < value < 100):
        raise argparse.ArgumentTypeError(
            f"{text} must be a percentage above 0 and below 100 (e.g. 10 for ±10 %)"
        )
    return value


def examples(*lines: str) -> dict[str, Any]:
    """`add_parser` keywords giving a command's `--help` an epilog of example invocations, one
    per line, kept as written."""
    return {
        "epilog": "examples:\n" + "\n".join(f"  {line}" for line in lines),
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }
