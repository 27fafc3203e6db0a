"""The decode batch's O(1) runs against a plain step-by-step model of the same requests.

Random joins, leaves and runs (hypothesis): after every run each member's computed and output
tokens, blocks held, last token time and longest gap, the blocks the run allocated and their
block-seconds, the fragment the run started wasting, the pooled inter-token gaps, the first finish
and the step at which a pool would run dry all equal what stepping one token at a time gives.
"""

from __future__ import annotations

import math
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core.decode_batch import DecodeBatch
from sim.core.request import Request
from sim.core.step_times import StepTimes


class Gaps:
    """A gap sink that keeps every gap (value -> count)."""

    def __init__(self) -> None:
        self.counts: Counter[float] = Counter()

    def gap(self, gap_s: float, count: int) -> None:
        self.counts[round(gap_s, 9)] += count

    def run(self, times: StepTimes, num_steps: int, count: int) -> None:
        for j in range(2, num_steps + 1):
            self.counts[round(times.duration(j), 9)] += count


class Naive:
    """One member, stepped a token at a time."""

    def __init__(self, req: Request, bs: int) -> None:
        self.computed = req._computed
        self.output = req._output
        self.held = req._kv_blocks
        self.last = req._last_token_s
        self.max_itl = req._max_itl_s
        self.final = req.sequence_tokens
        self.max_output = req.max_output_tokens
        self.bs = bs


def make_request(rid: int, prompt: int, done: int, out: int, bs: int) -> Request:
    """A request that has emitted `done` tokens, its next token's block allocated (the engine
    does that before it joins)."""
    req = Request(rid, 0.0, prompt, done + out)
    computed = prompt + done - 1
    req._computed, req._output = computed, done
    req._kv_blocks = -(-(computed + 1) // bs)
    req._last_token_s = 0.0
    return req


members_st = st.lists(
    st.tuples(st.integers(1, 40), st.integers(1, 5), st.integers(1, 30)),
    min_size=1,
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(
    bs=st.sampled_from([1, 2, 3, 4, 16]),
    first=members_st,
    later=members_st,
    runs=st.lists(st.integers(1, 40), min_size=1, max_size=5),
    d0=st.floats(0.01, 1.0),
    inc=st.sampled_from([0.0, 0.001, 0.01]),
    free=st.integers(0, 60),
)
def test_runs_match_a_token_by_token_model(bs, first, later, runs, d0, inc, free) -> None:
    batch = DecodeBatch(bs, paged=True)
    naive: dict[int, Naive] = {}
    gaps = Gaps()
    expected_gaps: Counter[float] = Counter()
    now = 1.0
    pending = [make_request(i, *spec, bs) for i, spec in enumerate(first)]
    waiting = [make_request(100 + i, *spec, bs) for i, spec in enumerate(later)]
    for k in runs:
        if pending:  # joiners: their first step's block is already theirs
            for req in pending:
                naive[req.id] = Naive(req, bs)
                req._last_token_s = now - 0.5  # a stall before their first decode
                naive[req.id].last = now - 0.5
                batch.join(req)
            pending = []
        members = [r for r in list_members(batch, naive)]
        if not members:
            break
        horizon = min(r.max_output - r.output for r in naive.values() if r.computed >= 0)
        assert batch.steps_to_finish() == horizon
        k = max(1, min(k, horizon))
        # the pool would run dry after: members need a block when computed hits a boundary
        dry = 1
        left = free
        while dry < k:
            need = sum(1 for m in naive.values() if (m.computed + dry) % bs == 0)
            if need > left:
                break
            left -= need
            dry += 1
        assert batch.steps_until_dry(free, k) == dry
        times = StepTimes(now, d0, inc)
        growth = batch.growth(k, times)
        blocks = 0
        block_seconds = 0.0
        tail_tokens = 0
        tail_seconds = 0.0
        total = times.elapsed(k)
        for j in range(1, k + 1):
            end = times.end(j)
            for m in naive.values():
                m.computed += 1
                need = -(-m.computed // bs) - m.held
                if j > 1 and need > 0:
                    blocks += need
                    block_seconds += need * (total - times.elapsed(j - 1))
                    over = (m.held + need) * bs - m.final
                    if over > 0:
                        tail_tokens += over
                        tail_seconds += over * (total - times.elapsed(j - 1))
                m.held = max(m.held, -(-m.computed // bs))
                gap = end - m.last
                regular = m.last == times.end(j - 1)  # the previous token ended the step before
                expected_gaps[round(times.duration(j) if regular else gap, 9)] += 1
                m.max_itl = max(m.max_itl, gap)
                m.last = end
                m.output += 1
        assert growth.blocks == blocks
        assert math.isclose(growth.block_seconds, block_seconds, rel_tol=1e-9, abs_tol=1e-9)
        assert growth.fragment_tokens == tail_tokens
        assert math.isclose(growth.fragment_token_seconds, tail_seconds, rel_tol=1e-9, abs_tol=1e-9)
        finished = batch.advance(k, times, gaps)
        for req in members:
            m = naive[req.id]
            assert (req.num_computed_tokens, req.num_output_tokens) == (m.computed, m.output)
            assert req.kv_blocks == m.held
            assert req.last_token_s == m.last
            assert math.isclose(req.max_itl_s, m.max_itl, rel_tol=1e-12)
        assert {r.id for r in finished} == {i for i, m in naive.items() if m.output >= m.max_output}
        for req in finished:  # they leave; their counts become plain values
            m = naive.pop(req.id)
            batch.leave(req)
            assert req._batch is None and req.num_computed_tokens == m.computed
            assert req.kv_blocks == m.held and math.isclose(req.max_itl_s, m.max_itl)
        now = times.end(k)
        if waiting:
            pending, waiting = waiting[:2], waiting[2:]
    assert gaps.counts == expected_gaps


def list_members(batch: DecodeBatch, naive: dict[int, Naive]) -> list[Request]:
    members = []
    for heap_entry in batch._finish:
        req = heap_entry[2]
        if req._batch is batch and req.id in naive and req not in members:
            members.append(req)
    return members
