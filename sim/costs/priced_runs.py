"""What the engine asks of every pricer with a piecewise-linear run price (`run_times`,
`linear_steps`), given one method that prices a run whole, and the extrapolation counters.

`_times(features)` returns (first step s, increment per repeated step, steps that stay on this
linear piece, whether the run falls outside measured tables). The engine calls `run_times` and
then, for the same features, `linear_steps`: the second answer comes from the first call.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from sim.costs.features import StepFeaturesLike


class PricedRuns(ABC):
    num_extrapolated: int  # priced runs that fell outside the tables
    last_extrapolated: bool  # whether the run just priced did
    _last: tuple[StepFeaturesLike | None, int]

    @abstractmethod
    def _times(self, features: StepFeaturesLike) -> tuple[float, float, int, bool]: ...

    def run_times(self, features: StepFeaturesLike) -> tuple[float, float]:
        """The first step's seconds, and how much longer each repeated step is."""
        first, increment, steps, outside = self._times(features)
        self.last_extrapolated = outside
        if outside:
            self.num_extrapolated += 1
        self._last = (features, steps)
        return first, increment

    def linear_steps(self, features: StepFeaturesLike) -> int:
        """How many repeated steps stay on the linear piece of the step just priced."""
        last, steps = self._last
        return steps if last is features else self._times(features)[2]
