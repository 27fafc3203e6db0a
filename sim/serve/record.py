"""What `/metrics` is told as the engine applies steps (`sim.serve.metrics` listens).

vLLM records its metrics at every engine step (vllm/v1/metrics/stats.py, `IterationStats`):
each request's new tokens, its first token's latency, the gap since its previous output, the
step's tokens; and a request's phase times when it ends. The live engine tells a `Meter` the
same, as the simulation applies its steps:

* per request (`LiveEngine` at each advance): `tokens` when it emitted new tokens, `ended`
  when it finished or was aborted;
* per instance, as its records are written (`Taps.records` gives each instance its step and
  gap logs, which forward every row to the meters that watch it): `gaps` for every inter-token
  gap the engine records (the gaps of the results' `itl` table, one per token and step; a
  speculative step's emission of several tokens is one gap, as vLLM observes it), and `steps`
  for every applied run of identical steps.
"""

from __future__ import annotations

from typing import Protocol

from sim.core.recorder import ItlLog, StepLog
from sim.core.request import Request
from sim.core.step_times import StepTimes


class Meter(Protocol):
    """What a listener of the engine's steps is told (see the module docstring)."""

    def tokens(self, req: Request, before: int) -> None:
        """`req` has emitted tokens beyond the `before` it had."""

    def ended(self, req: Request) -> None:
        """`req` finished or was aborted (or refused: no token, never scheduled)."""

    def gaps(self, gap_s: float, count: int) -> None:
        """`count` inter-token gaps of `gap_s` seconds were recorded."""

    def steps(self, num_tokens: int, num_steps: int) -> None:
        """`num_steps` steps that computed `num_tokens` tokens each were applied."""


class _TapGaps(ItlLog):
    """An instance's gap log that also tells its meters of each gap as it is written."""

    def __init__(self, meters: list[Meter]) -> None:
        super().__init__()
        self.meters = meters

    def gap(self, gap_s: float, count: int) -> None:
        super().gap(gap_s, count)
        if count > 0:
            for meter in self.meters:
                meter.gaps(gap_s, count)

    def emission(self, gap_s: float, tokens: int, count: int) -> None:
        super().emission(gap_s, tokens, count)  # one token: through `gap`
        if tokens > 1 and count > 0:
            for meter in self.meters:
                meter.gaps(gap_s, count)

    def run(self, times: StepTimes, num_steps: int, count: int) -> None:
        super().run(times, num_steps, count)  # equal steps: through `gap`
        if count > 0 and num_steps >= 2 and times.increment_s != 0.0:
            for k in range(2, num_steps + 1):
                gap = times.duration(k)
                for meter in self.meters:
                    meter.gaps(gap, count)


def _tap_steps(log: StepLog, meters: list[Meter]) -> StepLog:
    """`log`, whose rows also tell `meters` of their steps and tokens (the engine writes a row
    column by column, `num_steps` before `num_tokens`: `sim.core.run.Run.record`)."""
    row = log.row
    write_steps, write_tokens = row.num_steps, row.num_tokens
    held = [1]

    def num_steps(value: int) -> None:
        held[0] = value
        write_steps(value)

    def num_tokens(value: int) -> None:
        write_tokens(value)
        for meter in meters:
            meter.steps(value, held[0])

    row.num_steps = num_steps
    row.num_tokens = num_tokens
    return log


class Taps:
    """The meters watching each instance, and the logs that tell them (`records`)."""

    def __init__(self) -> None:
        self._everywhere: list[Meter] = []  # watch every instance, those launched later too
        self._at: dict[int, list[Meter]] = {}  # each instance's meters

    def records(self, index: int) -> tuple[StepLog, ItlLog]:
        """Instance `index`'s step and gap logs (`sim.topology.cluster.build_cluster`)."""
        meters = self._at.setdefault(index, list(self._everywhere))
        return _tap_steps(StepLog(index), meters), _TapGaps(meters)

    def watch(self, meter: Meter, instance: int | None = None) -> None:
        """`meter` hears of instance `instance`'s steps and gaps (None: every instance's)."""
        if instance is None:
            self._everywhere.append(meter)
            for meters in self._at.values():
                meters.append(meter)
        else:
            self._at.setdefault(instance, list(self._everywhere)).append(meter)
