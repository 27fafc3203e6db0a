"""The decoding requests of one instance, advanced together in O(1) per run of steps.

In a decode step every decoding request computes one token and emits one. So the batch keeps a
step `clock` and each member stores its computed and output counts as offsets from it
(`Request` reads through); a run of k identical decode steps is `clock += k`, whatever the batch
size. What still differs between members is kept in aggregates that change only when a member
joins or leaves:

* KV blocks (paged pools). A member holds exactly the blocks its computed tokens fill, so it
  needs a new block at the step that starts with its computed tokens at a block boundary: with
  offset `o`, at every clock `D` with `(D + o) % block_size == 0`. `hist[r]` counts the members
  that need a block at clocks `D % block_size == r`; a run's block demand, the blocks it holds
  over time and the step at which the pool would run dry follow from `hist` in O(block_size) at
  most (O(k) for runs of k < block_size steps).
* Finishes: a heap of the clock at which each member emits its last token; a run ends at the
  first.
* Internal fragmentation: a member whose sequence ends inside its last block starts wasting the
  block's tail when it allocates that block; a heap of those clocks.
* Inter-token gaps: members that emitted in the same step have the same last-token time
  (`last_emit_s`), so the gaps of a step are one value with a count. A member's longest gap is the
  largest gap recorded since it joined: gap records are numbered and kept on a monotonic stack,
  so that query is a binary search.

A request joins when its first decode step is planned (prompt done, swapped back in, or seated
after a KV transfer). That first step is its own: its gap runs from its own last token, and its
block for that step was allocated explicitly. From the second step on it moves with the others.
It leaves when it finishes or is preempted, and gets its counts back as plain values.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from operator import mul
from typing import NamedTuple, Protocol

from sim.core.request import Request
from sim.core.step_times import StepTimes

_TRIANGLE = [j * (j - 1) // 2 for j in range(1025)]  # j(j-1)/2, for runs shorter than a block


class GrowthIntegrals(NamedTuple):
    """What the blocks allocated after a run's first step add to its KV integrals."""

    blocks: int  # blocks allocated at the starts of steps 2..k
    block_seconds: float  # those blocks, held from their step's start to the run's end
    fragment_tokens: int  # block tails (beyond a sequence's end) those allocations started
    fragment_token_seconds: float


NO_GROWTH = GrowthIntegrals(0, 0.0, 0, 0.0)
NOBODY: list[Request] = []  # no finishers (never appended to: callers only read it)


def _sum_elapsed(x0: int, stride: int, count: int, times: StepTimes) -> float:
    """Sum of `times.elapsed(x)` for x = x0, x0 + stride, ... (`count` terms), in closed form."""
    if count <= 0:
        return 0.0
    s1 = count * x0 + stride * count * (count - 1) // 2
    s2 = (
        count * x0 * x0
        + x0 * stride * count * (count - 1)
        + stride * stride * (count - 1) * count * (2 * count - 1) // 6
    )
    return times.first_duration_s * s1 + times.increment_s * ((s2 - s1) // 2)


class DecodeBatch:
    """Members advance one token per decode step; see the module docstring."""

    def __init__(self, block_size: int, paged: bool) -> None:
        self.block_size = block_size
        self.paged = paged  # members grow their KV holding (paged) or hold a fixed reservation
        self.clock = 0  # decode steps applied on this instance
        self.size = 0
        self.sum_computed_offset = 0  # sum of members' computed tokens = size * clock + this
        self.sum_outstanding = 0  # sum of members' (max_output - output offset) ...
        self.hist = [0] * block_size  # paged: members needing a block at clock % block_size
        self.last_emit_s = math.nan  # when the members synced so far emitted their last token
        self.pending: list[Request] = []  # joined for the step planned now: first step own
        self._finish: list[tuple[int, int, Request]] = []  # (clock after last token, id, req)
        self._tails: list[tuple[int, int, Request, int]] = []  # (clock, id, req, tail tokens)
        self._gap_index: list[int] = []  # monotonic stack of gap records: index ...
        self._gap_value: list[float] = []  # ... and value, decreasing
        self._num_gaps = 0
        self._joins = 0  # serial numbers of memberships: heap entries of an old one are stale

    # -- membership -----------------------------------------------------------------------

    def join(self, req: Request) -> None:
        """Add a request whose first decode step is planned now (its blocks for that step are
        already allocated)."""
        clock = self.clock
        computed = req._computed
        req._computed = computed - clock
        req._output -= clock
        req._batch = self
        req._sync = -1  # set when its first step is applied
        self._joins += 1
        serial = req._serial = self._joins
        self.size += 1
        self.sum_computed_offset += computed - clock
        self.sum_outstanding += req.max_output_tokens - req._output
        # it emits its last token in the step that brings clock + output offset to the maximum
        heapq.heappush(self._finish, (req.max_output_tokens - req._output, serial, req))
        if self.paged:
            bs = self.block_size
            # from its second step on (clock + 1) it needs a block when computed hits a boundary
            self.hist[(-req._computed) % bs] += 1
            final = req.sequence_tokens
            last_block = -(-final // bs)
            tail = last_block * bs - final
            held = req._kv_blocks  # explicit until this step is applied
            if tail and held < last_block:
                at = (last_block - 1) * bs - req._computed  # clock of the step allocating it
                heapq.heappush(self._tails, (at, serial, req, tail))
        self.pending.append(req)

    def leave(self, req: Request) -> None:
        """Remove a member; its counts become plain values again."""
        if req._batch is not self:
            raise AssertionError(f"request {req.id} is not in this decode batch")
        clock = self.clock
        if req in self.pending:  # left before its first step was applied (preempted)
            self.pending.remove(req)
        else:
            req._max_itl_s = max(req._max_itl_s, self.max_gap_since(req._sync))
            req._last_token_s = self.last_emit_s
        offset = req._computed
        self.size -= 1
        self.sum_computed_offset -= offset
        self.sum_outstanding -= req.max_output_tokens - req._output
        if self.paged:
            self.hist[(-offset) % self.block_size] -= 1
            req._kv_blocks = -(-(clock + offset) // self.block_size)
        req._computed = clock + offset
        req._output += clock
        req._batch = None  # stale heap entries are skipped when they surface

    def _current(self, serial: int, req: Request) -> bool:
        """Whether a heap entry belongs to the request's present membership."""
        return req._batch is self and req._serial == serial

    @property
    def sum_computed(self) -> int:
        return self.size * self.clock + self.sum_computed_offset

    @property
    def outstanding_tokens(self) -> int:
        """Output tokens the members have still to emit."""
        return self.sum_outstanding - self.size * self.clock

    # -- queries for planning -----------------------------------------------------------------

    def demand_at(self, clock: int) -> int:
        """Blocks the members need at the start of the step starting at `clock` (paged)."""
        return self.hist[clock % self.block_size] if self.paged else 0

    def needs_block(self, req: Request) -> bool:
        """Whether a member needs a new block to decode in the next step."""
        return self.paged and (self.clock + req._computed) % self.block_size == 0

    def steps_to_finish(self) -> int:
        """Steps until the first member emits its last token (a large number when empty)."""
        heap = self._finish
        while heap:
            top = heap[0]
            req = top[2]
            if req._batch is self and req._serial == top[1]:
                return top[0] - self.clock
            heapq.heappop(heap)  # an entry of a membership that ended
        return 1 << 62

    def steps_until_dry(self, free_blocks: int, limit: int) -> int:
        """The longest run, up to `limit` steps counted from the step starting now (whose
        blocks are allocated), whose later steps find the blocks they need in `free_blocks`."""
        if not self.paged or not self.size or limit <= 1:
            return limit
        bs = self.block_size
        size = self.size
        # each member takes one block every block_size steps: plenty of room is one comparison
        if free_blocks >= size * ((limit + bs - 2) // bs):
            return limit
        cycles, left = divmod(free_blocks, size)
        hist = self.hist
        c = self.clock + 1
        i = 0
        while i < bs:
            need = hist[(c + i) % bs]
            if need > left:
                break
            left -= need
            i += 1
        return min(limit, 1 + cycles * bs + i)

    # -- applying -------------------------------------------------------------------------------

    def start_step(self) -> tuple[int, int]:
        """Blocks the members allocate at the start of the step at the current clock, and the
        fragment tokens those allocations start wasting."""
        if not self.paged:
            return 0, 0
        clock = self.clock
        tails = self._tails
        if not tails or tails[0][0] > clock:
            return self.hist[clock % self.block_size], 0
        return self.hist[clock % self.block_size], self._pop_tails(clock)

    def _pop_tails(self, clock: int) -> int:
        tails = self._tails
        total = 0
        while tails and tails[0][0] <= clock:
            at, serial, req, tail = heapq.heappop(tails)
            if self._current(serial, req) and at == clock:
                total += tail
        return total

    def growth(self, num_steps: int, times: StepTimes) -> GrowthIntegrals:
        """Blocks allocated at the starts of steps 2..k of a run starting at the current clock,
        and what they add to the block-seconds and fragment integrals up to the run's end."""
        if num_steps < 2 or not self.paged or not self.size:
            return NO_GROWTH
        bs = self.block_size
        total = times.elapsed(num_steps)
        c = self.clock
        hist = self.hist
        if num_steps - 1 < bs:
            # steps a = 2..k start at clocks c+1..c+k-1: a slice of the histogram, rotated;
            # each block is held from the end of step a-1, elapsed(a-1) = j*d0 + inc*j(j-1)/2
            start = (c + 1) % bs
            seg = hist[start : start + num_steps - 1]
            if len(seg) < num_steps - 1:
                seg = seg + hist[: num_steps - 1 - len(seg)]
            blocks = sum(seg)
            s1 = sum(map(mul, seg, range(1, num_steps)))
            if times.increment_s:
                if num_steps > len(_TRIANGLE):  # grow the table for block sizes beyond it
                    _TRIANGLE.extend(j * (j - 1) // 2 for j in range(len(_TRIANGLE), num_steps))
                s2 = sum(map(mul, seg, _TRIANGLE[1:num_steps]))
            else:
                s2 = 0
            held_from = times.first_duration_s * s1 + times.increment_s * s2
        else:
            blocks = 0
            held_from = 0.0  # sum over allocations of elapsed(step start)
            for i in range(bs):  # steps a = 2 + i + m * bs
                n = hist[(c + 1 + i) % bs]
                if n:
                    count = (num_steps - 2 - i) // bs + 1
                    blocks += n * count
                    held_from += n * _sum_elapsed(1 + i, bs, count, times)
        tail_tokens = 0
        tail_seconds = 0.0
        tails = self._tails
        end_clock = c + num_steps - 1
        if not tails or tails[0][0] > end_clock:
            return GrowthIntegrals(blocks, blocks * total - held_from, 0, 0.0)
        while tails and tails[0][0] <= end_clock:
            at, serial, req, tail = heapq.heappop(tails)
            if self._current(serial, req) and at > c:
                tail_tokens += tail
                tail_seconds += tail * (total - times.elapsed(at - c))
        return GrowthIntegrals(blocks, blocks * total - held_from, tail_tokens, tail_seconds)

    def advance(self, num_steps: int, times: StepTimes, gaps: GapSink) -> list[Request]:
        """Apply `num_steps` decode steps: every member computes and emits one token per step.
        Records the inter-token gaps; returns the members that emitted their last token (they
        are still members: the caller lets them leave)."""
        start, d0, inc = times
        end_1 = start + d0
        pending = self.pending
        synced = self.size - len(pending)
        values = self._gap_value
        if synced:
            first_gap = end_1 - self.last_emit_s
            # tokens in consecutive steps: the pooled gap is the step itself
            gaps.gap(d0 if self.last_emit_s == start else first_gap, synced)
            if values and values[-1] > first_gap:  # the common case: nothing to pop
                self._gap_index.append(self._num_gaps)
                values.append(first_gap)
                self._num_gaps += 1
            else:
                self._record_gap(first_gap)
        if pending:
            after_first = self._num_gaps
            for req in pending:
                gap = end_1 - req._last_token_s
                gaps.gap(d0 if req._last_token_s == start else gap, 1)
                if gap > req._max_itl_s:
                    req._max_itl_s = gap
                req._sync = after_first
            pending.clear()
        if num_steps > 1:
            gaps.run(times, num_steps, self.size)
            self._record_gap(max(d0 + inc, d0 + (num_steps - 1) * inc))
        clock = self.clock = self.clock + num_steps
        self.last_emit_s = start + num_steps * d0 + inc * (num_steps * (num_steps - 1) // 2)
        heap = self._finish
        if not heap or heap[0][0] > clock:
            return NOBODY
        finished: list[Request] = []
        while heap and heap[0][0] <= clock:
            _, serial, req = heapq.heappop(heap)
            if req._batch is self and req._serial == serial:
                finished.append(req)
        return finished

    # -- longest gaps ---------------------------------------------------------------------------

    def _record_gap(self, value: float) -> None:
        index, values = self._gap_index, self._gap_value
        while values and values[-1] <= value:
            index.pop()
            values.pop()
        index.append(self._num_gaps)
        values.append(value)
        self._num_gaps += 1

    def max_gap_since(self, record: int) -> float:
        """The largest gap recorded at or after gap record `record` (0.0 if none)."""
        if record < 0:
            return 0.0
        pos = bisect_left(self._gap_index, record)
        return self._gap_value[pos] if pos < len(self._gap_value) else 0.0


class GapSink(Protocol):
    """Where inter-token gaps go (`sim.core.recorder.ItlLog` implements it)."""

    def gap(self, gap_s: float, count: int) -> None:
        """`count` gaps of `gap_s` seconds."""

    def run(self, times: StepTimes, num_steps: int, count: int) -> None:
        """`count` gaps for each of steps 2..num_steps of a run (each that step's duration)."""
