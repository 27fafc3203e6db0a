"""The closed forms behind coalesced runs: step end times and integrated KV blocks."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core.recorder import StepTimes, decode_block_seconds


@settings(max_examples=300, deadline=None)
@given(
    computed=st.integers(0, 500),
    steps=st.integers(1, 200),
    bs=st.sampled_from([1, 2, 3, 7, 16, 32]),
    d0=st.floats(1e-4, 1.0),
    inc=st.floats(0.0, 1e-2),
)
def test_block_seconds_match_a_step_by_step_sum(
    computed: int, steps: int, bs: int, d0: float, inc: float
) -> None:
    times = StepTimes(0.0, d0, inc)
    brute = sum((d0 + (j - 1) * inc) * math.ceil((computed + j) / bs) for j in range(1, steps + 1))
    assert math.isclose(decode_block_seconds(computed, steps, bs, times), brute, rel_tol=1e-9)


@settings(max_examples=200, deadline=None)
@given(steps=st.integers(1, 300), d0=st.floats(1e-4, 1.0), inc=st.floats(0.0, 1e-2))
def test_step_end_times_are_the_running_sum_of_durations(steps: int, d0: float, inc: float) -> None:
    times = StepTimes(5.0, d0, inc)
    elapsed = 5.0
    for j in range(1, steps + 1):
        elapsed += times.duration(j)
        assert math.isclose(times.end(j), elapsed, rel_tol=1e-9)
