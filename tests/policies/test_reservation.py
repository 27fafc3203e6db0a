"""KV reservation modes of continuous batching: paged, max_length, exact (the paging argument)."""

from __future__ import annotations

import numpy as np
import pytest
from factories import make_continuous, make_requests, step
from helpers_sim import run_arrays
from scenario_factory import scenario, tiny_hardware, tiny_model, tiny_scenario


def test_contiguous_modes_reserve_at_admission():
    for mode, blocks in (("paged", 3), ("max_length", 25), ("exact", 4)):
        policy = make_continuous(
            num_blocks=100, block_size=4, max_model_len=100, kv_reservation=mode
        )
        (r,) = make_requests((10, 5))
        policy.add_request(r, 0.0)
        step(policy, 0.0)
        assert r.kv_blocks == blocks, mode  # paged: 10 tokens; max_length: 100; exact: 15


def test_a_reservation_over_the_pool_is_rejected():
    policy = make_continuous(
        num_blocks=10, block_size=4, max_model_len=100, kv_reservation="max_length"
    )
    assert not policy.add_request(make_requests((10, 5))[0], 0.0)


def _run(mode: str, coalesce: bool = True):
    policy = {
        "name": "continuous",
        "max_num_seqs": 64,
        "max_num_batched_tokens": 4096,
        "block_size": 4,
        "kv_reservation": mode,
        "watermark": 0.0,
    }
    rng = np.random.default_rng(3)
    n = 80
    prompt = rng.integers(20, 60, n).tolist()
    output = rng.integers(5, 60, n).tolist()
    raw = scenario(
        policy=policy,
        model=tiny_model(max_model_len=400),
        hardware=tiny_hardware(2000),
        engine={"coalesce_decode_steps": coalesce},
    )
    return run_arrays(raw, [0.0] * n, prompt, output)


def test_paged_reaches_a_larger_batch_than_max_length_reservation():
    s = {m: _run(m).summary() for m in ("paged", "max_length", "exact")}
    assert s["paged"]["mean_batch_size"] > 3 * s["max_length"]["mean_batch_size"]
    assert s["max_length"]["max_batch_size"] == 2000 // 400
    assert s["max_length"]["mean_batch_size"] < s["exact"]["mean_batch_size"]
    assert s["paged"]["output_tokens_per_s"] > s["max_length"]["output_tokens_per_s"]
    # paged stores almost all it allocates; max-length reservation mostly never fills it
    assert s["paged"]["kv_reserved_utilization"] > 0.9
    assert s["paged"]["internal_fragmentation"] < 0.05
    assert s["max_length"]["internal_fragmentation"] > 0.5
    for m in s.values():
        assert m["kv_reserved_utilization"] + m["internal_fragmentation"] <= 1.0 + 1e-9


@pytest.mark.parametrize("mode", ["paged", "max_length", "exact"])
def test_kv_usage_metrics_do_not_depend_on_coalescing(mode):
    a, b = _run(mode).summary(), _run(mode, coalesce=False).summary()
    for key in (
        "kv_tokens_stored_mean",
        "kv_reserved_utilization",
        "internal_fragmentation",
        "kv_utilization_mean",
        "mean_batch_size",
        "e2e_p99_s",
    ):
        assert a[key] == pytest.approx(b[key], rel=1e-9), key


def test_stored_tokens_of_one_request_by_hand():
    # one request, prompt 8, output 3, block 4: prefill stores 8 tokens, decodes 9 then 10;
    # with zero t_kv every step lasts the same, so the mean is (8 + 9 + 10) / 3
    policy = {"name": "continuous", "block_size": 4}
    coeffs = {"t_mem_s": 0.01, "t_flop_s_per_token": 0.0}
    raw = tiny_scenario(policy, 1000, coefficients=coeffs)
    s = run_arrays(raw, [0.0], [8], [3]).summary()
    assert s["kv_tokens_stored_mean"] == pytest.approx(9.0)
    # allocated: 8, 12, 12 tokens; the sequence (11) leaves 1 slot of its last block unfilled
    assert s["kv_reserved_utilization"] == pytest.approx(27 / 32)
    assert s["internal_fragmentation"] == pytest.approx(2 / 32)
