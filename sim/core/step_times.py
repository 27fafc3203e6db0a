"""When the steps of a run end, in closed form.

A run of k identical decode steps has step durations that grow by a constant: attention reads one
more token per decoding request each step, so `duration(j) = d0 + (j - 1) * inc`. `StepTimes`
gives every boundary of such a run without stepping through it, so a run of a thousand steps
costs what one step costs.
"""

from __future__ import annotations

import math
from typing import NamedTuple


class StepTimes(NamedTuple):
    start_s: float
    first_duration_s: float
    increment_s: float = 0.0

    def end(self, j: int) -> float:
        """End time of the j-th step of the run (1-based)."""
        return self.start_s + j * self.first_duration_s + self.increment_s * (j * (j - 1) // 2)

    def elapsed(self, j: int) -> float:
        """Seconds from the run's start to the end of its j-th step (0 for j = 0)."""
        return j * self.first_duration_s + self.increment_s * (j * (j - 1) // 2)

    def duration(self, j: int) -> float:
        """Duration of the j-th step (1-based)."""
        return self.first_duration_s + (j - 1) * self.increment_s

    def after(self, j: int) -> StepTimes:
        """The same run seen from the end of its j-th step: its remaining steps."""
        return StepTimes(self.end(j), self.duration(j + 1), self.increment_s)


def steps_before(times: StepTimes, max_steps: int, at_s: float) -> int:
    """The smallest j in 1..max_steps whose step ends at or after `at_s` (else max_steps)."""
    if times.end(max_steps) < at_s:
        return max_steps
    d0, inc = times.first_duration_s, times.increment_s
    span = at_s - times.start_s
    if inc > 0.0:  # end(j) - start = j*d0 + inc*j*(j-1)/2, increasing in j
        b = d0 - inc / 2.0
        j = math.ceil((-b + math.sqrt(b * b + 2.0 * inc * span)) / inc)
    else:
        j = math.ceil(span / d0) if d0 > 0.0 else 1
    j = min(max(j, 1), max_steps)
    # the closed form can be off by one in floating point: settle on the exact boundary
    while j > 1 and times.end(j - 1) >= at_s:
        j -= 1
    while j < max_steps and times.end(j) < at_s:
        j += 1
    return j
