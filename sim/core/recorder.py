"""What a run leaves behind, recorded column by column as it happens.

* `StepLog`: one row per applied run of steps (a *step group*: `num_steps` identical decode steps,
  or a single step), each column a typed `array` grown in place, so a million rows cost their
  bytes and not a Python object each; `columns()` hands them to numpy without a copy.
* `ItlLog`: the pooled inter-token gaps as a weighted sample: single gaps `(gap_s, count)` and
  runs of growing gaps `(first_s, increment_s, num_gaps, count)` (the steps 2..k of a decode run
  each last `inc` longer than the one before), expanded only when the table is built; and
  emissions of several tokens at once (speculative decoding) `(gap_s, tokens, count)`, whose
  tokens each get `gap_s / tokens` in the per-token sample.
* `RequestLog`: one row per request, indexed by request id, written once when the request
  finishes or is rejected, so that finished requests need not stay in memory.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from sim.core.request import Request
from sim.core.step_times import StepTimes

# (name, array typecode): 'd' float64, 'q' int64, 'l'/'i' 32-bit ints for counts that fit
STEP_SCHEMA: tuple[tuple[str, str], ...] = (
    ("start_s", "d"),
    ("end_s", "d"),
    ("num_steps", "i"),
    ("duration_s", "d"),  # of the first step
    ("duration_increment_s", "d"),  # each later step is this much longer
    ("num_seqs", "i"),
    ("num_active_seqs", "i"),
    ("num_tokens", "i"),
    ("num_prefill_tokens", "i"),
    ("num_decode_tokens", "i"),
    ("sum_context_tokens", "q"),  # in the first step
    ("context_growth_per_step", "i"),
    ("kv_blocks_used", "i"),  # during the last step, before finished requests free theirs
    ("kv_block_seconds", "d"),
    ("num_waiting", "i"),
    ("num_running", "i"),
    ("num_preempted", "i"),
    ("kv_stored_token_seconds", "d"),
    ("kv_fragment_token_seconds", "d"),
    ("swap_s", "d"),
    ("kv_blocks_cached", "i"),  # prefix caching: cached free blocks during its last step
    # speculative decoding (single steps): requests that verified proposals, the tokens they
    # proposed and the target accepted, and the step's proposal and target (verify) seconds
    ("num_spec_seqs", "i"),
    ("num_spec_proposed", "i"),
    ("num_spec_accepted", "i"),
    ("spec_proposal_s", "d"),
    ("spec_verify_s", "d"),
    # KV tiers below the GPU (`sim.core.kv.tiers`): the seconds the step waited on loads from
    # them, and the blocks each tier holds at the step's end (a shared store: all of it)
    ("kv_load_s", "d"),
    ("kv_dram_blocks", "q"),
    ("kv_nvme_blocks", "q"),
    ("kv_remote_blocks", "q"),
)
_DTYPES = {"d": np.float64, "q": np.int64, "i": np.int32}
STEP_COLUMNS: tuple[str, ...] = ("instance", *(name for name, _ in STEP_SCHEMA))
# columns that are 0 in most rows (preemptions, swaps, prefix caching, speculation): only their
# nonzero rows are kept, and the table's column is a zeroed array the OS maps lazily, so a
# million step groups do not hold a hundred megabytes of zeros
SPARSE_COLUMNS = frozenset(
    {
        "num_preempted",
        "swap_s",
        "kv_blocks_cached",
        "num_spec_seqs",
        "num_spec_proposed",
        "num_spec_accepted",
        "spec_proposal_s",
        "spec_verify_s",
        "kv_load_s",
        "kv_dram_blocks",
        "kv_nvme_blocks",
        "kv_remote_blocks",
    }
)


class _SparseColumn:
    """The nonzero rows of a mostly-zero column: their row numbers and values."""

    def __init__(self, code: str, first: array[Any]) -> None:
        self.rows = array("q")
        self.values = array(code)
        self.first = first  # the log's first column: its length numbers the row being written

    def append(self, value: Any) -> None:
        if value:
            self.rows.append(len(self.first) - 1)
            self.values.append(value)

    def clear(self) -> None:
        del self.rows[:]
        del self.values[:]


class DenseRow:
    """The writers of a step row's dense columns, one attribute per column, named as it."""

    def __init__(self, by_name: dict[str, Callable[[Any], None]]) -> None:
        self.start_s = by_name["start_s"]
        self.end_s = by_name["end_s"]
        self.num_steps = by_name["num_steps"]
        self.duration_s = by_name["duration_s"]
        self.duration_increment_s = by_name["duration_increment_s"]
        self.num_seqs = by_name["num_seqs"]
        self.num_active_seqs = by_name["num_active_seqs"]
        self.num_tokens = by_name["num_tokens"]
        self.num_prefill_tokens = by_name["num_prefill_tokens"]
        self.num_decode_tokens = by_name["num_decode_tokens"]
        self.sum_context_tokens = by_name["sum_context_tokens"]
        self.context_growth_per_step = by_name["context_growth_per_step"]
        self.kv_blocks_used = by_name["kv_blocks_used"]
        self.kv_block_seconds = by_name["kv_block_seconds"]
        self.num_waiting = by_name["num_waiting"]
        self.num_running = by_name["num_running"]
        self.kv_stored_token_seconds = by_name["kv_stored_token_seconds"]
        self.kv_fragment_token_seconds = by_name["kv_fragment_token_seconds"]


class SparseRow:
    """The writers of a step row's sparse columns (`SPARSE_COLUMNS`), named as they are."""

    def __init__(self, by_name: dict[str, Callable[[Any], None]]) -> None:
        self.num_preempted = by_name["num_preempted"]
        self.swap_s = by_name["swap_s"]
        self.kv_blocks_cached = by_name["kv_blocks_cached"]
        self.num_spec_seqs = by_name["num_spec_seqs"]
        self.num_spec_proposed = by_name["num_spec_proposed"]
        self.num_spec_accepted = by_name["num_spec_accepted"]
        self.spec_proposal_s = by_name["spec_proposal_s"]
        self.spec_verify_s = by_name["spec_verify_s"]
        self.kv_load_s = by_name["kv_load_s"]
        self.kv_dram_blocks = by_name["kv_dram_blocks"]
        self.kv_nvme_blocks = by_name["kv_nvme_blocks"]
        self.kv_remote_blocks = by_name["kv_remote_blocks"]


class StepLog:
    """Step-group rows of one instance. With `on_full`, the rows are handed over (`columns()`)
    and dropped whenever `capacity` have gathered: a streamed run keeps no table.

    The engine writes a row through one writer per column, named as the column (`start_s`,
    `end_s`, ...: each takes the row's value), in schema order: the dense columns' are `row`'s
    attributes, the sparse ones' `sparse`'s (`writer(name)` finds either); `append` holds the
    same functions as a tuple in schema order."""

    def __init__(
        self,
        instance: int = 0,
        on_full: Callable[[StepLog], None] | None = None,
        capacity: int = 1 << 16,
    ) -> None:
        self.instance = instance
        self.on_full = on_full
        self.capacity = capacity
        assert STEP_SCHEMA[0][0] not in SPARSE_COLUMNS
        self._first: array[Any] = array(STEP_SCHEMA[0][1])
        self._dense: dict[str, array[Any]] = {STEP_SCHEMA[0][0]: self._first}
        self._sparse: dict[str, _SparseColumn] = {}
        appends: list[Callable[[Any], None]] = []
        for name, code in STEP_SCHEMA:
            if name in SPARSE_COLUMNS:
                self._sparse[name] = _SparseColumn(code, self._first)
                appends.append(self._sparse[name].append)
            else:
                col = self._dense.setdefault(name, array(code))
                appends.append(col.append)
        self.append: tuple[Callable[[Any], None], ...] = tuple(appends)
        # each column's append by the column's name: the engine writes a row through these, one
        # per column in schema order (`sim.core.run.Run.record`; tests/core/test_recorder.py
        # checks that every column has one): the dense columns' in `row`, the sparse ones' in
        # `sparse`
        by_name = dict(zip((name for name, _ in STEP_SCHEMA), appends, strict=True))
        self.row = DenseRow(by_name)
        self.sparse = SparseRow(by_name)

    def writer(self, name: str) -> Callable[[Any], None]:
        """The writer of the column `name`."""
        found: Callable[[Any], None] = getattr(
            self.sparse if name in SPARSE_COLUMNS else self.row, name
        )
        return found

    def __len__(self) -> int:
        return len(self._first)

    def hand_over(self, *, force: bool = False) -> None:
        """Give the rows to `on_full` when there are `capacity` of them (or any, `force`)."""
        if self.on_full is not None and (len(self) >= self.capacity or (force and len(self))):
            self.on_full(self)
            for col in self._dense.values():
                del col[:]
            for sparse in self._sparse.values():
                sparse.clear()

    def columns(self) -> dict[str, np.ndarray]:
        """Every column as a numpy array (the instance column filled in)."""
        n = len(self)
        out: dict[str, np.ndarray] = {"instance": np.full(n, self.instance, dtype=np.int32)}
        for name, code in STEP_SCHEMA:
            dtype = _DTYPES[code]
            if name in self._sparse:
                sparse = self._sparse[name]
                column: np.ndarray = np.zeros(n, dtype)
                if len(sparse.rows):
                    rows = np.frombuffer(sparse.rows, dtype=np.int64)
                    column[rows] = np.frombuffer(sparse.values, dtype=dtype)
                out[name] = column
            else:
                col = self._dense[name]
                out[name] = np.frombuffer(col, dtype=dtype) if len(col) else np.zeros(0, dtype)
        return out


class ItlLog:
    """Pooled inter-token gaps of one instance (handed over in chunks with `on_full`)."""

    def __init__(
        self, on_full: Callable[[ItlLog], None] | None = None, capacity: int = 1 << 16
    ) -> None:
        self.on_full = on_full
        self.capacity = capacity
        self.gap_s = array("d")
        self.count = array("q")
        # runs of growing gaps, column by column: first gap, increment, number of gaps, count
        self.run_first_s = array("d")
        self.run_increment_s = array("d")
        self.run_gaps = array("q")
        self.run_count = array("q")
        # emissions of several tokens at once: whole gap, tokens per emission, emissions
        self.multi_gap_s = array("d")
        self.multi_tokens = array("q")
        self.multi_count = array("q")

    def gap(self, gap_s: float, count: int) -> None:
        if count > 0:
            self.gap_s.append(gap_s)
            self.count.append(count)

    def emission(self, gap_s: float, tokens: int, count: int) -> None:
        """`count` emissions of `tokens` tokens each, `gap_s` after their previous token."""
        if count <= 0:
            return
        if tokens == 1:
            self.gap(gap_s, count)
        else:
            self.multi_gap_s.append(gap_s)
            self.multi_tokens.append(tokens)
            self.multi_count.append(count)

    def run(self, times: StepTimes, num_steps: int, count: int) -> None:
        """`count` gaps for each of steps 2..num_steps of a run: each that step's duration."""
        if count <= 0 or num_steps < 2:
            return
        if times.increment_s == 0.0:
            self.gap(times.first_duration_s, count * (num_steps - 1))
        else:
            self.run_first_s.append(times.duration(2))
            self.run_increment_s.append(times.increment_s)
            self.run_gaps.append(num_steps - 1)
            self.run_count.append(count)

    def drop(self) -> None:
        """Let go of the records (once `arrays()` has built the table): arrays a table still
        views stay alive through it, the rest (the runs before expansion) is freed."""
        self.gap_s, self.count = array("d"), array("q")
        self.run_first_s, self.run_increment_s = array("d"), array("d")
        self.run_gaps, self.run_count = array("q"), array("q")
        self.multi_gap_s, self.multi_tokens, self.multi_count = array("d"), array("q"), array("q")

    def hand_over(self, *, force: bool = False) -> None:
        size = len(self.gap_s) + len(self.run_gaps) + len(self.multi_gap_s)
        if self.on_full is not None and (size >= self.capacity or (force and size)):
            self.on_full(self)
            for col in (self.gap_s, self.count, self.run_first_s, self.run_increment_s):
                del col[:]
            del self.run_gaps[:]
            del self.run_count[:]
            del self.multi_gap_s[:]
            del self.multi_tokens[:]
            del self.multi_count[:]

    def arrays(
        self,
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64], npt.NDArray[np.int8]]:
        """Per-token gaps, their counts, and the tokens of the emission each belongs to (1 but
        for speculative emissions, whose tokens each get the gap divided by their number; at most
        65, so int8: this is the largest table of a run), the runs expanded (vectorized)."""
        gaps = np.frombuffer(self.gap_s, dtype=np.float64) if self.gap_s else np.zeros(0)
        counts = np.frombuffer(self.count, dtype=np.int64) if self.count else np.zeros(0, "i8")
        num = np.frombuffer(self.run_gaps, dtype=np.int64) if self.run_gaps else np.zeros(0, "i8")
        multi = len(self.multi_gap_s)
        if not len(num) and not multi:
            return gaps, counts, np.ones(len(gaps), dtype=np.int8)
        # written into the final arrays part by part, one temporary at a time: these are the
        # largest arrays of a run (a row per distinct gap)
        single, runs = len(gaps), int(num.sum())
        total = single + runs + multi
        out_g: npt.NDArray[np.float64] = np.empty(total, dtype=np.float64)
        out_c: npt.NDArray[np.int64] = np.empty(total, dtype=np.int64)
        out_t: npt.NDArray[np.int8] = np.ones(total, dtype=np.int8)
        out_g[:single], out_c[:single] = gaps, counts
        if runs:
            # gap k of a run: first + k * increment
            expanded = out_g[single : single + runs]
            expanded[:] = np.arange(runs, dtype=np.float64)
            expanded -= np.repeat((np.cumsum(num) - num).astype(np.float64), num)
            expanded *= np.repeat(np.frombuffer(self.run_increment_s, dtype=np.float64), num)
            expanded += np.repeat(np.frombuffer(self.run_first_s, dtype=np.float64), num)
            out_c[single : single + runs] = np.repeat(
                np.frombuffer(self.run_count, dtype=np.int64), num
            )
        if multi:
            tokens = np.frombuffer(self.multi_tokens, dtype=np.int64)
            out_g[single + runs :] = np.frombuffer(self.multi_gap_s, dtype=np.float64) / tokens
            out_c[single + runs :] = np.frombuffer(self.multi_count, dtype=np.int64) * tokens
            out_t[single + runs :] = tokens
        return out_g, out_c, out_t


class RequestLog:
    """Per-request outcomes, written when a request finishes or is rejected.

    Rows live at their request id (`num_requests` rows), or, with `on_full`, in a block of
    `capacity` rows with their `ids`, handed over when full: a streamed run keeps no table."""

    FLOAT_COLUMNS = (
        "arrival_s",
        "first_scheduled_s",
        "first_token_s",
        "finish_s",
        "max_itl_s",
        "handoff_s",
        "transfer_start_s",
        "transfer_end_s",
    )
    # int32 counts (a request's tokens, steps and preemptions fit; the rows are a large table's),
    # int64 bytes
    INT_COLUMNS = (
        "instance",
        "num_cached_tokens",
        "num_output_tokens",
        "num_preemptions",
        "num_recomputed_tokens",
        "num_swaps",
        "swapped_bytes",
        "decode_instance",
        "reject_code",
        "num_spec_steps",
        "num_spec_proposed",
        "num_spec_accepted",
    )
    WIDE_COLUMNS = frozenset({"swapped_bytes"})

    def __init__(
        self,
        num_requests: int,
        on_full: Callable[[RequestLog], None] | None = None,
        capacity: int = 1 << 16,
    ) -> None:
        self.on_full = on_full
        # told of every rejected (or aborted) request once it is recorded: a closed-loop client
        # whose request was refused sends its next one (`Source.turn_rejected`)
        self.on_rejected: Callable[[Request], None] | None = None
        rows = num_requests if on_full is None else min(capacity, max(1, num_requests))
        self.floats = {c: np.full(rows, np.nan) for c in self.FLOAT_COLUMNS}
        self.ints: dict[str, npt.NDArray[np.signedinteger[Any]]] = {
            c: np.zeros(rows, dtype=np.int64 if c in self.WIDE_COLUMNS else np.int32)
            for c in self.INT_COLUMNS
        }
        self.ids = np.arange(rows) if on_full is None else np.zeros(rows, dtype=np.int64)
        self._reset()
        # one bit per request: whether it was recorded (a request is recorded once)
        self._recorded = bytearray((num_requests + 7) >> 3)
        self.num_done = 0
        self.rows = 0  # rows held now (streamed: since the last hand-over)
        self.reasons: list[str] = [""]  # rejection causes; `reject_code` indexes this list

    def _reset(self) -> None:
        for col in self.floats.values():
            col[:] = np.nan
        for col in self.ints.values():
            col[:] = 0
        self.ints["instance"][:] = -1
        self.ints["decode_instance"][:] = -1

    def record(self, req: Request) -> None:
        """Write a finished or rejected request's row."""
        rid = req.id
        byte, bit = rid >> 3, 1 << (rid & 7)
        if self._recorded[byte] & bit:
            raise AssertionError(f"request {rid} recorded twice")
        self._recorded[byte] |= bit
        self.num_done += 1
        if self.on_full is None:
            i = rid
        else:
            i = self.rows
            self.ids[i] = rid
        self.rows += 1
        f, n = self.floats, self.ints
        f["arrival_s"][i] = req.arrival_s
        f["first_scheduled_s"][i] = req.first_scheduled_s
        f["first_token_s"][i] = req.first_token_s
        f["finish_s"][i] = req.finish_s
        f["max_itl_s"][i] = req.max_itl_s
        n["instance"][i] = req.instance
        n["num_output_tokens"][i] = req.num_output_tokens
        if req.num_cached_tokens:
            n["num_cached_tokens"][i] = req.num_cached_tokens
        if req.num_preemptions:
            n["num_preemptions"][i] = req.num_preemptions
            n["num_recomputed_tokens"][i] = req.num_recomputed_tokens
            n["num_swaps"][i] = req.num_swaps
            n["swapped_bytes"][i] = req.swapped_bytes
        if req.num_spec_steps:
            n["num_spec_steps"][i] = req.num_spec_steps
            n["num_spec_proposed"][i] = req.num_spec_proposed
            n["num_spec_accepted"][i] = req.num_spec_accepted
        if req.decode_instance >= 0:
            n["decode_instance"][i] = req.decode_instance
            f["handoff_s"][i] = req.handoff_s
            f["transfer_start_s"][i] = req.transfer_start_s
            f["transfer_end_s"][i] = req.transfer_end_s
        if req.reject_reason:
            if req.reject_reason not in self.reasons:
                self.reasons.append(req.reject_reason)
            n["reject_code"][i] = self.reasons.index(req.reject_reason)
        if self.on_full is not None and self.rows == len(self.ids):
            self.hand_over()
        if req.reject_reason and self.on_rejected is not None:
            self.on_rejected(req)

    def hand_over(self) -> None:
        """Streamed: give the rows held to `on_full` (`block()`) and start a new block."""
        if self.on_full is not None and self.rows:
            self.on_full(self)
            self._reset()
            self.rows = 0

    def block(self) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The rows held: their request ids, float columns and int columns."""
        rows = self.rows if self.on_full is not None else len(self.ids)
        return (
            self.ids[:rows],
            {c: a[:rows] for c, a in self.floats.items()},
            {c: a[:rows] for c, a in self.ints.items()},
        )
