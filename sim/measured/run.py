"""The common form of a measured run: one row per request a real serving engine answered.

Every reader (`vllm_otlp`, `vllm_bench`, `guidellm`, `aiperf`, `batchsim`) turns its file into a
`MeasuredRun` through `assemble`, which owns the rules they share: rows sorted by arrival (stable),
arrivals re-based so the first is 0, TPOT by the project's definition where the latencies allow
it (`(e2e - ttft) / (output - 1)`, else the file's own per-request mean), one clock for the whole
run (a span of more than `MAX_SPAN_S` means timestamps from different clocks or units), and every
array read-only so that a run can be handed around without copies.

A reader checks each value as it reads it (`sim.measured.values`) so that its errors name the
record; `assemble` checks only what needs the whole run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from sim.errors import ScenarioError

FORMATS = ("vllm_otlp", "vllm_bench", "guidellm", "aiperf", "batchsim")

# A measured benchmark lasts minutes to days; arrivals further apart than this come from two
# clocks (a monotonic clock mixed with the wall clock) or two units (seconds mixed with ms).
MAX_SPAN_S = 30 * 86400.0


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


@dataclass(frozen=True)
class MeasuredRun:
    """Requests of a measured run, sorted by arrival; all arrays read-only and of equal length."""

    source: str  # the file as given
    format: str  # one of FORMATS
    arrival_s: np.ndarray  # float64, ascending, first == 0.0: seconds since the first arrival
    prompt_tokens: np.ndarray  # int64 >= 1
    output_tokens: np.ndarray  # int64 >= 1
    ttft_s: np.ndarray  # float64, NaN where the file has none
    e2e_s: np.ndarray  # float64, NaN where none
    tpot_s: np.ndarray  # float64: (e2e - ttft) / (output - 1), else the file's own mean, else NaN
    itl_s: tuple[np.ndarray, ...] | None  # per request inter-token gaps, when the file has them
    request_id: np.ndarray  # object (str): the file's id, or the row number as a string
    origin_unix_s: float | None  # wall clock of the first arrival, when the file has a clock
    meta: dict[str, Any] = field(compare=False)  # what the file says of itself
    num_failed: int = 0  # requests the file marks as errored/cancelled, left out (counted)
    queue_s: np.ndarray | None = None  # float64 time in the engine's queue, when the file has it
    num_duplicates: int = 0  # rows dropped because their request id came earlier in the file

    def __len__(self) -> int:
        return len(self.arrival_s)

    def duplicate_ids(self) -> tuple[str, int]:
        """(the first request id that appears more than once, how many rows repeat an id)."""
        _, first, counts = np.unique(self.request_id.astype(str), return_index=True,
                                     return_counts=True)  # fmt: skip
        repeated = counts > 1
        if not repeated.any():
            return "", 0
        first_dup = int(np.min(first[repeated]))
        return str(self.request_id[first_dup]), int((counts[repeated] - 1).sum())

    def without_duplicates(self) -> MeasuredRun:
        """The run with each request id's first row only (a span exported twice counted once);
        `num_duplicates` says how many rows were dropped."""
        _, first = np.unique(self.request_id.astype(str), return_index=True)
        keep = np.sort(first)
        if len(keep) == len(self):
            return self
        return replace(self._take(keep, self.meta), num_duplicates=len(self) - len(keep))

    def _take(self, keep: np.ndarray, meta: dict[str, Any], shift: float = 0.0) -> MeasuredRun:
        def take(array: np.ndarray) -> np.ndarray:
            return _frozen(array[keep].copy())

        return replace(
            self,
            arrival_s=_frozen(self.arrival_s[keep] - shift),
            prompt_tokens=take(self.prompt_tokens),
            output_tokens=take(self.output_tokens),
            ttft_s=take(self.ttft_s),
            e2e_s=take(self.e2e_s),
            tpot_s=take(self.tpot_s),
            itl_s=None if self.itl_s is None else tuple(self.itl_s[i] for i in keep),
            request_id=take(self.request_id),
            origin_unix_s=None if self.origin_unix_s is None else self.origin_unix_s + shift,
            meta=meta,
            queue_s=None if self.queue_s is None else take(self.queue_s),
        )

    def window(self, start_s: float, end_s: float) -> MeasuredRun:
        """The requests arriving in [start_s, end_s), re-based so the first arrives at 0."""
        if not (math.isfinite(start_s) and math.isfinite(end_s)) or end_s <= start_s:
            raise ScenarioError(
                f"window [{start_s}, {end_s}) is not a finite, non-empty interval",
                file=self.source,
            )
        keep = np.flatnonzero((self.arrival_s >= start_s) & (self.arrival_s < end_s))
        if len(keep) == 0:
            raise ScenarioError(
                f"no request arrives in the window [{start_s:g}, {end_s:g}) s", file=self.source
            )
        first = float(self.arrival_s[keep[0]])
        return self._take(keep, {**self.meta, "window_s": [start_s, end_s]}, first)


def _floats(values: Sequence[float] | np.ndarray, n: int, what: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.shape != (n,):
        raise ValueError(f"{what}: {array.shape} values for {n} requests")
    return array


def assemble(
    *,
    source: str,
    fmt: str,
    arrival: Sequence[float] | np.ndarray,
    prompt_tokens: Sequence[int] | np.ndarray,
    output_tokens: Sequence[int] | np.ndarray,
    ttft_s: Sequence[float] | np.ndarray,
    e2e_s: Sequence[float] | np.ndarray,
    request_id: Sequence[str],
    records: Sequence[str],
    unix_clock: bool,
    meta: dict[str, Any],
    num_failed: int = 0,
    file_tpot_s: Sequence[float] | np.ndarray | None = None,
    itl_s: Sequence[np.ndarray] | None = None,
    queue_s: Sequence[float] | np.ndarray | None = None,
) -> MeasuredRun:
    """A `MeasuredRun` from per-request values a reader has already range-checked.

    `arrival` is in seconds on the file's own clock (`unix_clock`: seconds since the epoch, so
    the first arrival's wall time is kept); `records` names each request in errors ("line 3").
    """
    n = len(request_id)
    if n == 0:
        raise ScenarioError("holds no completed request", file=source)
    arrival_abs = _floats(arrival, n, "arrival")
    order = np.argsort(arrival_abs, kind="stable")
    span = float(arrival_abs[order[-1]] - arrival_abs[order[0]])
    if span > MAX_SPAN_S:
        # name the record furthest from the median: the odd one out in a mixed file
        median = float(np.median(arrival_abs))
        odd = int(np.argmax(np.abs(arrival_abs - median)))
        raise ScenarioError(
            f"arrival times span {span / 86400:.0f} days: timestamps on different clocks or "
            "in different units",
            file=source,
            path=records[odd],
        )
    origin = float(arrival_abs[order[0]])
    prompt = np.asarray(prompt_tokens, dtype=np.int64)[order]
    output = np.asarray(output_tokens, dtype=np.int64)[order]
    ttft = _floats(ttft_s, n, "ttft")[order]
    e2e = _floats(e2e_s, n, "e2e")[order]
    own = np.full(n, np.nan) if file_tpot_s is None else _floats(file_tpot_s, n, "tpot")[order]
    decode = np.isfinite(ttft) & np.isfinite(e2e) & (output >= 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        derived = (e2e - ttft) / (output - 1)
    tpot = np.where(decode, derived, own)
    ids = np.empty(n, dtype=object)
    ids[:] = [str(request_id[i]) for i in order]
    return MeasuredRun(
        source=source,
        format=fmt,
        arrival_s=_frozen(arrival_abs[order] - origin),
        prompt_tokens=_frozen(prompt),
        output_tokens=_frozen(output),
        ttft_s=_frozen(ttft),
        e2e_s=_frozen(e2e),
        tpot_s=_frozen(np.maximum(tpot, 0.0)),
        itl_s=None if itl_s is None else tuple(_frozen(np.asarray(itl_s[i])) for i in order),
        request_id=_frozen(ids),
        origin_unix_s=origin if unix_clock else None,
        meta=meta,
        num_failed=num_failed,
        queue_s=None if queue_s is None else _frozen(_floats(queue_s, n, "queue")[order]),
    )
