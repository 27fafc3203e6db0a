"""The gateway's index for `slo_headroom`: the least predicted TTFT without predicting it on every
candidate.

`slo_headroom` chooses the candidate with the least predicted TTFT, ties to the lowest index
(`sim.topology.router`), predicted as (`sim.topology.signals.predicted_ttft`)

    ttft(i) = max(0, e(i) - now) + prefill_seconds_i(backlog(i) + prompt - cached(i))

with `e(i)` the end of instance i's step under way. A prediction reads the instance's queues, so
predicting on every candidate makes each arrival cost as much as the fleet is large. The index
keeps instead, per instance, a time its step under way cannot end before:

* an instance with no run, on SimPy's clock, waits for no step until it starts a run: it is in
  the idle set, by index;
* any other is in the busy heap at the end of its step under way, less `MARGIN_S` (and at
  least the decision's time). The index reads the run's step times once
  (`Instance.step_grid`) and walks its step ends as time passes: a bound time has passed
  moves to the first step end not clearly (by `MARGIN_S`) before the decision. The step under way
  only ends later as time passes, so a bound holds until the instance starts or ends a run or
  takes a request, when it tells the index (`Instance.on_load`), which reads its run again at
  the next decision. So the heap is ordered as the waits' bounds are, and moving a bound costs a
  few flops, not a read of the instance. `MARGIN_S` (a microsecond) covers the rounding between
  these step ends and `step_end_s`'s (settling re-bases a run's times), so a bound is never above
  the wait it bounds.

The gateway predicts, with their cached prefix, the candidates that may have one
(`Instance.may_cache_prefix`), and passes the best. Every other candidate has nothing
cached and a backlog of 0 tokens or more, so it predicts at least

    max(0, bound - now) + floor(prompt)

`floor` the least prefill of at least the prompt over the instances' prefill curves
(`PrefillCurve.floor`: whatever the cost model's shape). A decision takes the idle candidates by
index and then the busy heap's by bound, predicts each, and stops once the next one's lower
bound is above the best prediction (an idle one's: or equal, at a higher index; the idle set is in
index order). Every candidate not taken predicts no less than the choice (or as much, at a higher
index), so the choice is the full scan's, exactly (tests/topology/test_ttft_index.py checks it
at every decision). A decision then costs the candidates near the least prediction and the
instances that started or ended a run or ended a step since the last one: about the steps per
arrival of one instance, not the fleet.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from typing import Protocol

from sim.core.step_times import StepTimes, steps_before
from sim.topology.told_index import ToldIndex, Watched

NO_STEP_S = -math.inf  # an idle instance's bound: it waits for no step
MARGIN_S = 1e-6  # a bound's slack against the rounding of step ends (see the module docstring)
JUMP_STEPS = 8  # a bound further behind than this many steps is moved by solving for the step


class Curve(Protocol):
    def floor(self, num_tokens: int) -> float: ...


class Timed(Watched, Protocol):
    """What the index reads of an instance (`sim.core.instance.Instance`)."""

    def step_grid(self) -> tuple[float, float, float, int]: ...

    def prefill_curve(self) -> Curve: ...


class TtftIndex(ToldIndex[Timed]):
    """Bounds on each instance's step under way (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__(NO_STEP_S)
        # each watched instance's run as last read (`step_grid`), and the step of its bound
        self.grid: list[tuple[float, float, float, int]] = []
        self.step: list[int] = []
        self.idle: list[tuple[int, int]] = []  # (index, version)
        self.busy: list[tuple[float, int, int]] = []  # (bound, index, version)
        self.curves: list[Curve] = []  # the watched instances' prefill curves, each once

    def _grow(self) -> None:
        self.grid.append((0.0, 0.0, 0.0, 0))
        self.step.append(0)

    def _watched(self, instance: Timed) -> None:
        curve = instance.prefill_curve()
        if not any(c is curve for c in self.curves):
            self.curves.append(curve)

    def floor(self, num_tokens: int) -> float:
        """The least seconds any watched instance takes to prefill `num_tokens` or more."""
        return min(c.floor(num_tokens) for c in self.curves)

    def _read(self, i: int, now: float) -> None:
        """Read instance i's run again, and its bound from its first step."""
        instance = self.instances[i]
        assert instance is not None
        self.is_told[i] = False
        self.grid[i] = instance.step_grid()
        self.step[i] = 1
        self._move(i, now)

    def _move(self, i: int, now: float) -> None:
        """Instance i's bound at `now`, from its run as read: the end of the first step of it
        not clearly before `now`, less the margin, and at least `now`."""
        start, first, growth, steps = self.grid[i]
        if steps == 0:  # no run: it waits for nothing once its clock is SimPy's
            bound = NO_STEP_S if start <= now else start
        else:
            j = self.step[i]
            if j + JUMP_STEPS < steps and (
                start + (j + JUMP_STEPS) * first
                + growth * ((j + JUMP_STEPS) * (j + JUMP_STEPS - 1) // 2)
                + MARGIN_S < now
            ):  # fmt: skip
                # far behind: solve for the step (a step before the one found is clearly over)
                times = StepTimes(start, first, growth)
                j = max(j, steps_before(times, steps, now - 2 * MARGIN_S) - 1)
            end = start + j * first + growth * (j * (j - 1) // 2)
            while j < steps and end + MARGIN_S < now:
                j += 1
                end = start + j * first + growth * (j * (j - 1) // 2)
            self.step[i] = j
            bound = max(now, end - MARGIN_S)
        self.bound[i] = bound
        self.version[i] += 1
        self._push((bound, i, self.version[i]))

    def _push(self, entry: tuple[float, int, int]) -> None:
        if entry[0] == NO_STEP_S:
            heapq.heappush(self.idle, (entry[1], entry[2]))
        else:
            heapq.heappush(self.busy, entry)

    def _refresh(self, now: float) -> None:
        for i in self.told:
            self._read(i, now)
        self.told.clear()
        if len(self.idle) + len(self.busy) > 4 * len(self.instances) + 64:  # rebuild
            self.parked.clear()  # every instance's entry is in the new heaps
            self.idle, self.busy = [], []
            for i, x in enumerate(self.instances):
                if x is not None:
                    self._push((self.bound[i], i, self.version[i]))

    def best(
        self,
        candidates: Sequence[int] | None,
        floor_s: float,
        predict: Callable[[int], float],
        best_s: float = math.inf,
        best_index: int = -1,
        predicted: Sequence[int] = (),
    ) -> int:
        """The candidate (default: every watched instance) with the least prediction, ties to
        the lowest index. `floor_s`: `floor(prompt)`; `predict(i)`: instance i's predicted TTFT
        with nothing cached; `best_s` at `best_index`: the best among `predicted`, those the
        gateway predicted with their cached prefix (not predicted again)."""
        env = self.env
        assert env is not None
        now = env.now
        if self.told:
            self._refresh(now)
        allowed = self._allowed_now(candidates)
        version, parked, idle, busy = self.version, self.parked, self.idle, self.busy
        grid, step, bounds = self.grid, self.step, self.bound
        while busy and busy[0][0] < now:  # bounds time has passed: moved along their runs
            entry = busy[0]
            i = entry[1]
            if entry[2] != version[i]:
                heapq.heappop(busy)
                continue
            if allowed is not None and i not in allowed:
                heapq.heappop(busy)
                parked[i] = entry
                continue
            start, first, growth, steps = grid[i]
            j = step[i]
            if steps == 0 or j + JUMP_STEPS >= steps:
                heapq.heappop(busy)
                self._move(i, now)
                continue
            # the common case, inline: the next step end or one a few steps on
            end = start + j * first + growth * (j * (j - 1) // 2)
            k = 0
            while end + MARGIN_S < now and k < JUMP_STEPS:  # clearly over: the next
                j += 1
                k += 1
                end = start + j * first + growth * (j * (j - 1) // 2)
            if k == JUMP_STEPS:
                heapq.heappop(busy)
                self._move(i, now)
                continue
            step[i] = j
            bound = end - MARGIN_S
            if bound < now:
                bound = now
            bounds[i] = bound
            v = version[i] + 1
            version[i] = v
            heapq.heapreplace(busy, (bound, i, v))
        taken_idle: list[tuple[int, int]] = []
        taken_busy: list[tuple[float, int, int]] = []
        while True:
            while idle:  # drop superseded entries, park those of non-candidates
                i, v = idle[0]
                if v != version[i]:
                    heapq.heappop(idle)
                elif allowed is not None and i not in allowed:
                    heapq.heappop(idle)
                    parked[i] = (NO_STEP_S, i, v)
                else:
                    break
            if idle and (floor_s < best_s or (floor_s == best_s and idle[0][0] < best_index)):
                pair = heapq.heappop(idle)
                taken_idle.append(pair)
                i = pair[0]
            else:
                while busy:
                    entry = busy[0]
                    i = entry[1]
                    if entry[2] != version[i]:
                        heapq.heappop(busy)
                    elif allowed is not None and i not in allowed:
                        heapq.heappop(busy)
                        parked[i] = entry
                    else:
                        break
                if not busy or max(0.0, busy[0][0] - now) + floor_s > best_s:
                    break  # every candidate left predicts no less than the choice
                entry = heapq.heappop(busy)
                taken_busy.append(entry)
                i = entry[1]
            if i in predicted:
                continue
            value = predict(i)
            if value < best_s or (value == best_s and i < best_index):
                best_s, best_index = value, i
        for pair in taken_idle:
            heapq.heappush(idle, pair)
        for entry in taken_busy:
            heapq.heappush(busy, entry)
        if best_index < 0:
            raise ValueError("no candidate instance is indexed")
        return best_index
