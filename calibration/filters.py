"""Row filters and row weights for the timings readers: `COLUMN OP VALUE`.

`OP` is one of `=`, `!=`, `<`, `<=`, `>`, `>=`. Equality compares the text, or the numbers when
both sides are numbers (`num_seqs=8` matches `8.0`); the order comparisons need numbers and a
row whose cell is not a number never matches them. A weight is a filter and a factor,
`FILTER:W` (e.g. `kind=decode:3` or `num_tokens>=4096:0.5`): matching rows have their weight
multiplied by W.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass

from sim.errors import ScenarioError

# longest first, so that `<=` is not read as `<` followed by `=...`
OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "!=": operator.ne,
    "=": operator.eq,
    "<": operator.lt,
    ">": operator.gt,
}


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class RowFilter:
    column: str
    op: str
    value: str

    def matches(self, row: dict[str, str]) -> bool:
        text = row.get(self.column, "")
        a, b = _number(text), _number(self.value)
        if self.op in ("=", "!="):
            equal = text == self.value or (a is not None and a == b)
            return equal if self.op == "=" else not equal
        return a is not None and b is not None and OPS[self.op](a, b)


def parse_filter(text: str, option: str = "--filter") -> RowFilter:
    """`COLUMN OP VALUE` (spaces allowed around OP)."""
    for op in OPS:
        column, sep, value = text.partition(op)
        if sep and column.strip() and not any(o in column for o in OPS):
            flt = RowFilter(column.strip(), op, value.strip())
            if op in ("<", "<=", ">", ">=") and _number(flt.value) is None:
                raise ScenarioError(f"{op} needs a number, got {text!r}", path=option)
            return flt
    raise ScenarioError(
        f"a filter is COLUMN=VALUE (or !=, <, <=, >, >=), got {text!r}", path=option
    )


def parse_weight(text: str) -> tuple[RowFilter, float]:
    """`FILTER:W`: the rows the filter matches get their weight multiplied by W >= 0."""
    flt, sep, factor = text.rpartition(":")
    weight = _number(factor) if sep else None
    if weight is None or weight < 0:
        raise ScenarioError(f"a weight is FILTER:W with W >= 0, got {text!r}", path="--weight")
    return parse_filter(flt, "--weight"), weight
