"""Prefix-caching runs checked step by step: step costs, shared-prefix workloads
(hypothesis strategies), the KV pool's checks and a checked run."""

from __future__ import annotations

from typing import Any

import numpy as np
from helpers_sim import observed_steps, run_arrays_with_instance
from hypothesis import strategies as st

from sim.core.instance import Instance
from sim.workload.arrays import Content

COEFFS = {
    "t_mem_s": 0.01,
    "t_flop_s_per_token": 1e-4,
    "t_kv_s_per_token": 1e-5,
    "t_attn_s_per_token2": 1e-7,
}


UNIT = 2  # tokens per content id


PREFIXES = [[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 6], [7, 8, 9, 10, 11], [1]]


def check_pool(instance: Instance) -> None:
    pool = instance.pool
    holders: dict[int, int] = {}
    for req in instance.engine.running:
        for h in req.cached_blocks:
            holders[h] = holders.get(h, 0) + 1
    for req in instance.engine.swapped:  # a swapped request's KV is in host memory, not the pool
        assert req.kv_blocks == 0 and not req.cached_blocks
    assert holders == pool.cache_contents()[0]
    held = sum(r.kv_blocks for r in instance.engine.running)
    shared = sum(count - 1 for count in pool.cache_contents()[0].values())
    assert held - shared == pool.num_used
    assert pool.num_used + pool.num_free == pool.num_total
    assert min((pool.num_free - pool.num_cached_free), pool.num_cached_free) >= 0
    assert not set(pool.cache_contents()[0]) & set(pool.cache_contents()[1])


def run_checked(
    raw: dict[str, Any],
    arrival: list[float],
    prompt: list[int],
    output: list[int],
    content: Content,
    check: Any = check_pool,
) -> tuple[Any, Instance]:
    """Run `raw` on these requests, checking the instance with `check` at every step boundary
    (the end of each applied step; mid-step a decode batch's holdings are settled lazily) and at
    the end of the run; the results and the instance."""
    with observed_steps(lambda instance, run, ended: ended and check(instance)) as calls:
        res, instance = run_arrays_with_instance(raw, arrival, prompt, output, content=content)
    assert calls.ended == len(res.steps)  # every step was checked, on either build
    check(instance)
    return res, instance


@st.composite
def shared_workloads(draw: Any) -> tuple[list[float], list[int], list[int], Content]:
    n = draw(st.integers(2, 30))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.0, 0.001, 0.02, 0.3]), min_size=n, max_size=n))
    ids: list[int] = []
    offsets = [0]
    prompts, outputs = [], []
    for i in range(n):
        prefix = draw(st.sampled_from(PREFIXES))
        own = draw(st.integers(0, 4))  # ids of its own after the shared prefix
        row = prefix + [1000 * (i + 1) + k for k in range(own)]
        tokens = UNIT * len(row) - draw(st.integers(0, UNIT - 1))  # the last unit may be partial
        ids += row
        offsets.append(len(ids))
        prompts.append(tokens)
        outputs.append(draw(st.integers(1, 40)))
    content = Content(
        ids=np.asarray(ids, dtype=np.int64),
        offsets=np.asarray(offsets, dtype=np.int64),
        unit=UNIT,
        tokens=np.asarray(prompts, dtype=np.int64),
    )
    return np.cumsum(gaps).tolist(), prompts, outputs, content


policies = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["continuous", "chunked"]),
        "max_num_seqs": st.integers(1, 6),
        "max_num_batched_tokens": st.integers(8, 64),
        "block_size": st.sampled_from([1, 2, 3, 4]),
        "watermark": st.sampled_from([0.0, 0.1]),
        "preemption": st.sampled_from(["recompute", "swap"]),
        "prefix_caching": st.just(True),
    }
)


def _content(rows: list[list[int]], tokens: list[int]) -> Content:
    return Content(
        ids=np.asarray([i for row in rows for i in row], dtype=np.int64),
        offsets=np.cumsum([0, *map(len, rows)]).astype(np.int64),
        unit=UNIT,
        tokens=np.asarray(tokens, dtype=np.int64),
    )
