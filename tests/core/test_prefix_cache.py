"""Automatic prefix caching (sim/core/kv/pool.py): exact hit accounting on hand cases, LRU
eviction order, blocks in use never evicted, reference counts, and conservation under random
operations (hypothesis)."""

from __future__ import annotations

import pytest
from factories import make_continuous, step, tokens
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from sim.core.kv.pool import CACHED, IN_USE, MISSING, KVPool
from sim.core.request import Request


def state(pool: KVPool, block_hash: int) -> int:
    """Where the GPU has the block: in use, cached and free, or missing."""
    refs, lru = pool.cache_contents()
    return IN_USE if block_hash in refs else CACHED if block_hash in lru else MISSING


def with_content(req: Request, ids: list[int], unit: int = 4, tokens: int = 0) -> Request:
    """Give a request content: one id per `unit` tokens (equal ids, equal tokens), describing
    its prompt (or its first `tokens` tokens)."""
    n = req.num_prompt_tokens
    return Request(req.id, req.arrival_s, n, req.max_output_tokens, content=ids,
                   content_unit=unit, content_tokens=tokens or n)  # fmt: skip


def test_a_shared_prefix_is_computed_once_and_the_last_token_always_computed() -> None:
    bench = make_continuous(num_blocks=20, block_size=4, max_num_seqs=4, prefix_caching=True)
    a = with_content(Request(0, 0.0, 16, 2), [1, 2, 3, 4])
    bench.add_request(a, 0.0)
    assert tokens(step(bench, 0.0)) == {0: 16}  # nothing cached yet: the whole prompt
    pool = bench.kv
    hashes = a.block_hashes(4)
    assert [state(pool, h) for h in hashes] == [IN_USE] * 4  # registered once computed
    # the same 16-token prompt: 3 blocks found (the last block is recomputed for its last token)
    b = with_content(Request(1, 1.0, 16, 2), [1, 2, 3, 4])
    # a different prompt sharing the first two blocks only
    c = with_content(Request(2, 1.0, 16, 2), [1, 2, 9, 9])
    bench.add_request(b, 1.0)
    bench.add_request(c, 1.0)
    free_before = pool.num_free
    assert tokens(step(bench, 1.0)) == {1: 4, 2: 8}  # prefill-first: a stalls
    assert (b.num_cached_tokens, c.num_cached_tokens) == (12, 8)
    refs = pool.cache_contents()[0]
    assert [refs[h] for h in hashes] == [3, 3, 2, 1]  # a, b and c share; b's own 4th
    # b: 1 new block (its last); c: 2 new ones; in-use hits take nothing from the free count
    assert pool.num_free == free_before - 3


def test_blocks_stay_cached_after_their_holders_leave_and_are_evicted_oldest_first() -> None:
    bench = make_continuous(num_blocks=6, block_size=4, max_num_seqs=4, prefix_caching=True)
    pool = bench.kv
    a = with_content(Request(0, 0.0, 8, 1), [1, 2])  # 2 blocks, finishes at its first token
    bench.add_request(a, 0.0)
    step(bench, 0.0)
    b = with_content(Request(1, 1.0, 8, 1), [3, 4])
    bench.add_request(b, 1.0)
    step(bench, 1.0)
    assert pool.num_cached_free == 4 and pool.num_free == 6  # both gone, their blocks cached
    # freed in order of leaving, each request's blocks tail first
    assert list(pool.cache_contents()[1]) == [*a.block_hashes(4)[::-1], *b.block_hashes(4)[::-1]]
    # a 16-token prompt of new content needs 4 blocks: the 2 never-cached ones, then a's two
    # blocks (freed first) are evicted; b's stay
    c = with_content(Request(2, 2.0, 16, 1), [5, 6, 7, 8])
    bench.add_request(c, 2.0)
    step(bench, 2.0)
    assert [state(pool, h) for h in a.block_hashes(4)] == [MISSING, MISSING]
    assert [state(pool, h) for h in b.block_hashes(4)] == [CACHED, CACHED]
    assert pool.num_evictions == 2
    # b's prompt again finds its first block (the second is recomputed: last token)
    d = with_content(Request(3, 3.0, 8, 1), [3, 4])
    bench.add_request(d, 3.0)
    assert tokens(step(bench, 3.0)) == {3: 4} and d.num_cached_tokens == 4


def test_a_recomputed_request_reuses_what_is_still_cached() -> None:
    # 4 blocks of 2: both prompts fit, both sequences do not; r1 is preempted (recompute) and
    # finds its own prompt block still cached when it comes back
    bench = make_continuous(num_blocks=4, block_size=2, prefix_caching=True)
    r0 = with_content(Request(0, 0.0, 3, 4), [10, 11], unit=2, tokens=4)
    r1 = with_content(Request(1, 0.0, 3, 4), [20, 21], unit=2, tokens=4)
    bench.add_request(r0)
    bench.add_request(r1)
    step(bench, 0.0)
    step(bench, 1.0)
    stepped = step(bench, 2.0)
    assert stepped is not None and stepped.preempted == (r1,)
    pool = bench.kv
    assert state(pool, r1.block_hashes(2)[0]) == CACHED
    for t in range(3, 9):
        step(bench, float(t))
        if r1.num_cached_tokens:
            break
    assert r1.num_cached_tokens == 2  # its first block, computed before the preemption


# -- conservation under random operations ------------------------------------------------------

CONTENTS = [[1, 2, 3], [1, 2, 4], [1, 5, 6], [7, 8, 9], [1, 2, 3, 4]]


class CachePool(RuleBasedStateMachine):
    """Admissions with hits, registrations, releases and allocations on a caching pool."""

    @initialize(num_blocks=st.integers(4, 24))
    def setup(self, num_blocks: int) -> None:
        self.pool = KVPool(num_blocks, 2, caching=True)
        self.holders: list[Request] = []
        self.next_id = 0

    @rule(content=st.sampled_from(CONTENTS), extra=st.integers(0, 3))
    def admit(self, content: list[int], extra: int) -> None:
        pool = self.pool
        req = with_content(Request(self.next_id, 0.0, 2 * len(content), 1), content, unit=2)
        self.next_id += 1
        known = req.num_prompt_tokens + 1
        hits = pool.cached_prefix(req, (known - 1) // 2, 0.0)
        from_free = sum(state(pool, h) == CACHED for h in req.block_hashes(2)[:hits])
        new = -(-known // 2) - hits + extra
        if new + from_free > pool.num_free:
            return
        pool.acquire(req, hits)
        pool.take(new)
        req.set_kv_blocks(req.kv_blocks + new)
        pool.register(req, 2 * len(content))
        self.holders.append(req)

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        if self.holders:
            req = self.holders.pop(data.draw(st.integers(0, len(self.holders) - 1)))
            self.pool.release(req)

    @invariant()
    def conserved(self) -> None:
        if not hasattr(self, "pool"):
            return
        pool = self.pool
        held = sum(r.kv_blocks for r in self.holders)
        shared = sum(count - 1 for count in pool.cache_contents()[0].values())
        # blocks in use (each counted once) + cached free + never-cached free = all
        assert held - shared + pool.num_free == pool.num_total
        assert pool.num_used == held - shared
        assert all(count > 0 for count in pool.cache_contents()[0].values())
        refs, lru = pool.cache_contents()
        assert not set(refs) & set(lru)  # a block in use is never in the free cache
        holders_of = {}
        for req in self.holders:
            for h in req.cached_blocks:
                holders_of[h] = holders_of.get(h, 0) + 1
        assert holders_of == pool.cache_contents()[0]


CachePool.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
TestCachePool = CachePool.TestCase


@settings(max_examples=50, deadline=None)
@given(block_size=st.sampled_from([1, 2, 3, 4, 8]), unit=st.sampled_from([2, 4, 512]))
def test_hashes_identify_prefixes_across_block_sizes(block_size: int, unit: int) -> None:
    ids = list(range(1, 1 + -(-40 // unit)))  # one content id per unit of the 40 tokens
    a = with_content(Request(0, 0.0, 40, 1), ids, unit)
    b = with_content(Request(1, 0.0, 40, 1), list(ids), unit)
    assert a.block_hashes(block_size) == b.block_hashes(block_size)
    assert len(a.block_hashes(block_size)) == 40 // block_size
    changed = list(a.content)
    changed[-1] = 99
    c = with_content(Request(2, 0.0, 40, 1), changed, unit)
    pairs = zip(a.block_hashes(block_size), c.block_hashes(block_size), strict=True)
    differs = [x != y for x, y in pairs]
    first = next((i for i, d in enumerate(differs) if d), None)
    if first is not None:  # once a block differs, every later one does (chained hashes)
        assert all(differs[first:])
    with pytest.raises(AssertionError):
        KVPool(1, block_size, caching=True).take(2)
