"""KV tiers below the GPU (sim/core/kv/tiers.py, sim/core/kv/pool.py): exact transfer times and
LRU order on hand cases, loads that a step waits for or hides, conservation across every tier at
every step (hypothesis), tiers off changing nothing, coalesced and stepwise runs agreeing, and
unbounded tiers reaching the trace's offline reuse."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers_prefix import COEFFS, _content, check_pool, policies, shared_workloads
from helpers_sim import observed_steps, run_arrays_with_instance
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from scenario_factory import run, scenario, tiny_hardware, tiny_model

from sim.core.kv.tiers import Tier, TierStack
from sim.workload.arrays import Content

# -- a tier on its own -------------------------------------------------------------------------


def test_a_write_takes_the_channel_and_blocks_are_readable_once_written() -> None:
    tier = Tier("dram", 3, block_bytes=100.0, read_bytes_per_s=50.0, write_bytes_per_s=200.0,
                latency_s=0.5)  # fmt: skip
    assert tier.write([1, 2], now=1.0) == []
    # 0.5 s latency + 200 B at 200 B/s: readable from 2.5 s
    assert not tier.holds(1, 2.4) and tier.holds(1, 2.5)
    # the channel is busy until 2.5: a write at 2.0 starts then (0.5 + 0.5 s)
    tier.write([3], now=2.0)
    assert not tier.holds(3, 3.4) and tier.holds(3, 3.5)
    # a read: 0.5 s latency + 2 blocks of 100 B at 50 B/s
    assert tier.read([1, 3]) == pytest.approx(4.5)
    assert tier.stats()["read_bytes"] == 200 and tier.stats()["written_bytes"] == 300


def test_a_prefix_runs_only_over_blocks_already_written() -> None:
    """`run_length` (what a lookup finds below the GPU) counts a block from the moment its
    write ends, in the fastest tier holding it, with one tier and with several."""
    dram = Tier("dram", 8, 100.0, 100.0, 100.0, latency_s=1.0)
    dram.write([1, 2, 3], now=0.0)  # 1 s + 3 blocks at 1 s each: readable from 4.0
    alone = TierStack([dram])
    assert alone.run_length([1, 2, 3, 4], 3.9) == 0
    assert alone.run_length([1, 2, 3, 4], 4.0) == 3
    remote = Tier("remote", 8, 100.0, 100.0, 1000.0, latency_s=0.0)
    remote.write([4], now=0.0)  # readable from 0.1
    both = TierStack([dram, remote])
    assert both.run_length([4, 1], 0.05) == 0
    assert both.run_length([4, 1], 0.1) == 1  # block 1's write is still under way
    assert both.run_length([4, 1, 2, 5], 4.0) == 3
    assert both.found(4, 4.0) is remote and both.found(1, 4.0) is dram


def test_a_full_tier_evicts_its_least_recently_used_block() -> None:
    tier = Tier("nvme", 2, 1.0, 1.0, 1.0, 0.0)
    tier.write([1, 2], 0.0)
    tier.read([1])  # 1 is now the most recently used
    assert tier.write([3], 5.0) == [2]
    assert tier.hashes() == [1, 3]
    tier.write([1], 6.0)  # already held: touched, not written again
    assert tier.num_written == 3 and tier.hashes() == [3, 1]
    assert tier.num_written - tier.num_evicted == tier.num_blocks


def test_a_tier_of_no_capacity_holds_nothing() -> None:
    tier = Tier("dram", 0, 1.0, 1.0, 1.0, 0.0)
    assert tier.write([1], 0.0) == [] and tier.num_blocks == 0 and not tier.holds(1, 9.0)


def test_writing_through_fills_every_tier_and_eviction_cascades_downwards() -> None:
    dram, nvme = Tier("dram", 1, 1.0, 1.0, 1.0, 0.0), Tier("nvme", 2, 1.0, 1.0, 1.0, 0.0)
    through = TierStack([dram, nvme], write="through")
    through.computed([1, 2], 0.0)
    assert dram.hashes() == [2] and nvme.hashes() == [1, 2]
    through.evicted([9], 0.0)  # nothing: blocks went down when computed
    assert dram.hashes() == [2]
    dram2, nvme2 = Tier("dram", 1, 1.0, 1.0, 1.0, 0.0), Tier("nvme", 2, 1.0, 1.0, 1.0, 0.0)
    back = TierStack([dram2, nvme2], write="eviction")
    back.computed([1, 2], 0.0)
    assert dram2.num_blocks == nvme2.num_blocks == 0
    back.evicted([1, 2], 0.0)  # the GPU evicts 1 then 2: DRAM keeps 2, its eviction goes down
    assert dram2.hashes() == [2] and nvme2.hashes() == [1]
    # a load takes each block from the fastest tier holding it
    assert back.load([2, 1], 10.0) == pytest.approx(2.0)
    assert back.loaded == {"dram": 1, "nvme": 1}


def test_tiers_must_be_distinct_and_fastest_first() -> None:
    dram, nvme = Tier("dram", 1, 1.0, 1.0, 1.0, 0.0), Tier("nvme", 1, 1.0, 1.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="fastest first"):
        TierStack([nvme, dram])
    with pytest.raises(ValueError, match="unknown KV tier"):
        Tier("tape", 1, 1.0, 1.0, 1.0, 0.0)


# -- an instance with a DRAM tier --------------------------------------------------------------

BS = 4
BLOCK_BYTES = BS * 2.0  # the tiny model stores 2 bytes per token
DRAM = {"capacity_gb": 1e-6, "read_gb_per_s": 8e-9, "write_gb_per_s": 8e-9, "latency_s": 0.5}


def _evict_then_reload(tiers: dict[str, Any]) -> tuple[Any, Any]:
    """A (content 1-4) computes 4 blocks and leaves; B (other content) needs 4 of the GPU's 5
    blocks and evicts 3 of A's, tail first; C (A's content) finds A's first block on the GPU and
    the next 2 in DRAM (its last block is computed: its last token must be)."""
    raw = scenario(
        policy={"name": "continuous", "max_num_seqs": 4, "max_num_batched_tokens": 64,
                "block_size": BS, "watermark": 0.0, "prefix_caching": True},
        coefficients=COEFFS, model=tiny_model(), hardware=tiny_hardware(20), kv_tiers=tiers,
    )  # fmt: skip
    content = _content([[1, 2, 3, 4], [5, 6, 7, 8], [1, 2, 3, 4]], [16, 16, 16])
    content = type(content)(content.ids, content.offsets, 4, content.tokens)
    res, _ = run_arrays_with_instance(
        raw, [0.0, 10.0, 20.0], [16, 16, 16], [1, 1, 1], content=content
    )
    return res.requests, res.steps


@pytest.mark.parametrize("write", ["through", "eviction"])
def test_a_prefix_evicted_from_the_gpu_is_loaded_back_from_dram(write: str) -> None:
    req, steps = _evict_then_reload({"write": write, "dram": DRAM})
    assert req["num_cached_tokens"].tolist() == [0, 0, 12]
    last = steps.iloc[-1]
    # 0.5 s latency + 2 blocks of 8 B at 8 B/s; the step waits for it, then computes 4 tokens
    assert last["kv_load_s"] == pytest.approx(2.5)
    assert last["num_prefill_tokens"] == 4
    # through: A's and B's blocks were written as computed; on eviction: A's 3, then the 3 of
    # B's that C's new blocks evicted
    assert last["kv_dram_blocks"] == (8 if write == "through" else 6)
    off, off_steps = _evict_then_reload({})
    assert off["num_cached_tokens"].tolist() == [0, 0, 4]  # the GPU alone: A's first block
    assert steps["kv_load_s"].iloc[:-1].eq(0).all() and off_steps["kv_load_s"].eq(0).all()


def test_an_overlapped_load_costs_only_what_the_compute_does_not_hide() -> None:
    _, sync = _evict_then_reload({"dram": DRAM})
    _, overlap = _evict_then_reload({"load": "overlap", "dram": DRAM})
    s, o = sync.iloc[-1], overlap.iloc[-1]
    compute = s["duration_s"] - 2.5
    assert 0 < compute < 2.5
    assert o["duration_s"] == pytest.approx(2.5) and o["kv_load_s"] == pytest.approx(2.5 - compute)


def test_no_tiers_given_is_the_run_without_tiers() -> None:
    base = scenario(policy={"name": "chunked", "max_num_seqs": 8, "max_num_batched_tokens": 64,
                            "prefix_caching": True})  # fmt: skip
    a = run(base).summary()
    b = run({**base, "kv_tiers": {"write": "eviction", "load": "overlap"}}).summary()
    assert json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)
    assert not any(k.startswith("kv_block_hit_rate") for k in a)


# -- every tier conserved at every step --------------------------------------------------------


def check_tiers(instance: Any) -> None:
    check_pool(instance)
    for tier in instance.pool.lower_tiers():
        held = tier.hashes()
        assert len(held) == len(set(held)) <= tier.capacity_blocks  # each block once, in room
        assert tier.num_written - tier.num_evicted == tier.num_blocks  # nothing lost or made


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=policies,
    kv_tokens=st.integers(30, 160),
    coalesce=st.booleans(),
    workload=shared_workloads(),
    write=st.sampled_from(["through", "eviction"]),
    load=st.sampled_from(["sync", "overlap"]),
    dram_blocks=st.integers(0, 12),
    nvme_blocks=st.sampled_from([None, 0, 3, 40]),
)
# a step whose swap victim registers its decoded blocks (written through to a one-block DRAM
# tier) while an admission of the same step loads a block the plan counted from that tier: the
# victims' writes wait for the loads (sim/core/kv/pool.py `hold_tier_writes`)
@example(
    policy={"name": "chunked", "max_num_seqs": 3, "max_num_batched_tokens": 8, "block_size": 3,
            "watermark": 0.0, "preemption": "swap", "prefix_caching": True},
    kv_tokens=33, coalesce=False,
    workload=([0.0] * 9, [8, 6, 8, 8, 6, 8, 10, 8, 8], [1, 9, 1, 1, 11, 1, 8, 2, 1], Content(
        ids=np.array([1, 2, 3, 4, 1, 2, 6, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 6, 1, 2, 3, 4, 1, 2, 6,
                      7000, 7001, 1, 2, 3, 4, 1, 2, 3, 4]),
        offsets=np.array([0, 4, 7, 11, 15, 18, 22, 27, 31, 35]), unit=2,
        tokens=np.array([8, 6, 8, 8, 6, 8, 10, 8, 8]))),
    write="through", load="sync", dram_blocks=1, nvme_blocks=None,
)  # fmt: skip
def test_runs_with_tiers_conserve_blocks_in_every_tier(
    policy: dict[str, Any], kv_tokens: int, coalesce: bool, workload: Any, write: str,
    load: str, dram_blocks: int, nvme_blocks: int | None,
) -> None:  # fmt: skip
    if policy["name"] == "chunked":
        policy["max_num_batched_tokens"] = max(policy["max_num_batched_tokens"], 6)
    block_gb = policy["block_size"] * 2.0 / 2**30
    tiers: dict[str, Any] = {"write": write, "load": load,
                             "dram": {"capacity_gb": dram_blocks * block_gb * 1.0001}}
    if nvme_blocks is not None:
        tiers["nvme"] = {"capacity_gb": nvme_blocks * block_gb * 1.0001}
    raw = scenario(policy=policy, coefficients=COEFFS, model=tiny_model(),
                   hardware=tiny_hardware(kv_tokens), kv_tiers=tiers,
                   engine={"coalesce_decode_steps": coalesce})  # fmt: skip
    arrival, prompt, output, content = workload
    with observed_steps(lambda instance, run, ended: ended and check_tiers(instance)) as calls:
        res, instance = run_arrays_with_instance(raw, arrival, prompt, output, content=content)
    assert calls.ended == len(res.steps)
    check_tiers(instance)
    req = res.requests
    finished = ~np.isnan(req["finish_s"].to_numpy())
    assert (req["rejected"].to_numpy(dtype=bool) ^ finished).all()  # nothing lost
    tiers_held = [t.num_blocks for t in instance.pool.lower_tiers()]
    assert tiers_held[0] <= dram_blocks


@pytest.mark.parametrize("write", ["through", "eviction"])
def test_coalesced_and_stepwise_runs_agree_with_tiers_on(write: str) -> None:
    raw = scenario(
        policy={"name": "chunked", "max_num_seqs": 16, "max_num_batched_tokens": 256,
                "prefix_caching": True, "num_gpu_blocks": 120},
        workload={"num_requests": 150, "arrival": {"process": "poisson", "rate": 8.0},
                  "prompt_tokens": {"dist": "uniform", "low": 50, "high": 400},
                  "output_tokens": {"dist": "uniform", "low": 5, "high": 60},
                  "shared_prefix": {"num_prefixes": 6, "zipf": 1.0, "fraction": 0.9,
                                    "length": {"dist": "uniform", "low": 64, "high": 512}}},
        kv_tiers={"write": write, "dram": {"capacity_gb": 0.05}, "remote": {"capacity_gb": 1}},
    )  # fmt: skip
    on = run(raw)
    off = run({**raw, "engine": {"coalesce_decode_steps": False}})
    a, b = on.summary(), off.summary()
    assert a["kv_block_hit_rate_dram"] > 0
    for key, value in a.items():
        if isinstance(value, float) and not math.isnan(value):
            assert b[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    assert on.requests["num_cached_tokens"].tolist() == off.requests["num_cached_tokens"].tolist()
    for col in ("first_token_s", "finish_s"):  # equal up to the rounding of summed step times
        assert np.allclose(on.requests[col], off.requests[col], rtol=1e-9, atol=1e-12), col


# -- unbounded tiers reach the trace's offline reuse -------------------------------------------


def _mooncake_trace(path: Path, n: int, rng: np.random.Generator) -> list[list[int]]:
    """A Mooncake-format trace of conversations that grow turn by turn, 3 s apart (a light
    load: every prompt is computed before the next arrives)."""
    rows, lines, convs = [], [], []
    next_id = 1
    for i in range(n):
        conv = convs[int(rng.integers(len(convs)))] if convs else []
        if conv and rng.random() < 0.7 and len(conv) < 6:  # prompts stay within 4,096 tokens
            conv += list(range(next_id, next_id + int(rng.integers(1, 3))))
        else:
            conv = [0, *range(next_id, next_id + int(rng.integers(1, 4)))]
            convs.append(conv)
        next_id += 10
        ids = list(conv)
        tokens = 512 * len(ids) - int(rng.integers(0, 300))
        rows.append((ids, tokens))
        lines.append(json.dumps({"timestamp": 3000 * i, "input_length": tokens,
                                 "output_length": 4, "hash_ids": ids}))  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return rows  # type: ignore[return-value]


def offline_reuse(rows: list[tuple[list[int], int]], block_size: int) -> float:
    """Of all full prompt blocks looked up, the fraction an earlier request's prompt also had
    (same tokens from the start), at most all but the block of each prompt's last token."""
    seen: set[tuple[tuple[int, ...], int]] = set()
    looked = hit = 0
    for ids, tokens in rows:
        keys = []
        for b in range(tokens // block_size):
            end = (b + 1) * block_size
            keys.append((tuple(ids[: (end - 1) // 512 + 1]), end))
        looked += len(keys)
        limit = (tokens - 1) // block_size
        n = 0
        while n < limit and keys[n] in seen:
            n += 1
        hit += n
        seen.update(keys)
    return hit / looked


def test_unbounded_tiers_hit_what_the_trace_reuses(tmp_path: Path) -> None:
    rows = _mooncake_trace(tmp_path / "trace.jsonl", 120, np.random.default_rng(3))
    expected = offline_reuse(rows, 16)
    raw = scenario(
        policy={"name": "chunked", "max_num_seqs": 16, "max_num_batched_tokens": 2048,
                "prefix_caching": True, "num_gpu_blocks": 600},
        workload={"trace": {"format": "mooncake", "path": str(tmp_path / "trace.jsonl")}},
        kv_tiers={"dram": {"capacity_gb": "unbounded"}},
    )  # fmt: skip
    got = run(raw).summary()
    gpu_only = run({k: v for k, v in raw.items() if k != "kv_tiers"}).summary()
    assert expected > 0.5
    assert gpu_only["prefix_cache_block_hit_rate"] < expected - 0.05  # the GPU alone forgets
    assert got["prefix_cache_block_hit_rate"] == pytest.approx(expected, abs=0.005)
    # the tiers' shares add up to the whole, in blocks and in tokens
    blocks = got["kv_block_hit_rate_gpu"] + got["kv_block_hit_rate_dram"]
    assert blocks == pytest.approx(got["prefix_cache_block_hit_rate"], rel=1e-12)
    tokens = got["kv_token_hit_rate_gpu"] + got["kv_token_hit_rate_dram"]
    assert tokens == pytest.approx(got["prefix_cache_hit_rate"], rel=1e-12)
    assert got["kv_dram_evicted_blocks"] == 0 and got["kv_dram_read_bytes"] > 0
