"""Preemption victims and modes (sim/policies/preemption.py): hand-computed swap vs recompute
accounting, victim choice, host-memory fallback, and block conservation under random runs
(hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from factories import make_continuous, make_requests, step, tokens
from helpers_sim import run_arrays, run_arrays_with_instance, tiny_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.core.engine import KVSpec
from sim.core.kv_cache import BlockManager
from sim.errors import ScenarioError
from sim.policies.preemption import Preemptor
from sim.scenario.load import load_scenario_dict


def _policy(mode: str, host_bytes: float = 1000.0, victim: str = "last_admitted"):
    # 4 blocks of 2 tokens; 10 bytes per token, copied at 100 B/s
    return make_continuous(
        num_blocks=4,
        block_size=2,
        max_model_len=1000,
        preemption=Preemptor(mode=mode, victim=victim),
        kv=KVSpec(10.0, swap_bandwidth_bytes_per_s=100.0, host_memory_bytes=host_bytes),
    )


def _to_preemption(policy):
    r0, r1 = make_requests((3, 4), (3, 4))
    for r in (r0, r1):
        policy.add_request(r, 0.0)
    assert tokens(step(policy, 0.0)) == {0: 3, 1: 3}  # both prompts: 2 blocks each, pool full
    assert tokens(step(policy, 1.0)) == {0: 1, 1: 1}  # 4 tokens each fill their blocks
    plan = step(policy, 2.0)  # r0 needs a 3rd block: r1 (last admitted) is evicted
    return r0, r1, plan


def test_swap_copies_the_victims_kv_out_and_back_at_the_bandwidth():
    policy = _policy("swap")
    r0, r1, plan = _to_preemption(policy)
    # r1 stored 4 tokens in 2 blocks of 2: 4 * 10 bytes at 100 B/s = 0.4 s on the preempting step
    assert plan.preempted == (r1,) and plan.swap_s == pytest.approx(0.4)
    assert (r1.num_swaps, r1.swapped_bytes, r1.num_computed_tokens) == (1, 40, 4)
    assert (r1.num_preemptions, r1.num_recomputed_tokens) == (1, 0)
    assert policy.instance.host_used_bytes == 40 and list(policy.swapped) == [r1]
    assert tokens(step(policy, 3.0)) == {0: 1}  # 1 block free, r1 needs 3: it stays out
    assert r0.is_finished and policy.kv.num_free == 4
    plan = step(policy, 4.0)  # blocks free again: r1 comes back before anything new
    assert tokens(plan) == {1: 1} and plan.swap_s == pytest.approx(0.4)
    assert policy.instance.host_used_bytes == 0 and r1.num_output_tokens == 3
    assert r1.kv_blocks == 3  # 5 tokens stored


def test_recompute_drops_the_victims_tokens_and_requeues_it_first():
    policy = _policy("recompute")
    _, r1, plan = _to_preemption(policy)
    assert plan.swap_s == 0.0 and plan.preempted == (r1,)
    assert (r1.num_swaps, r1.num_recomputed_tokens, r1.num_computed_tokens) == (0, 4, 0)
    assert list(policy.waiting) == [r1]


def test_swap_falls_back_to_recompute_when_host_memory_is_full():
    policy = _policy("swap", host_bytes=30.0)  # 40 bytes do not fit
    _, r1, plan = _to_preemption(policy)
    assert plan.swap_s == 0.0 and (r1.num_swaps, r1.num_recomputed_tokens) == (0, 4)


@pytest.mark.parametrize(
    ("victim", "expected"), [("last_admitted", 2), ("lowest_priority", 0), ("most_kv", 1)]
)
def test_victim_choice(victim, expected):
    kv = BlockManager(100, 1)
    pre = Preemptor(victim=victim, tier_ranks={"paid": 0, "free": 1})
    running = make_requests((5, 1), (9, 1), (3, 1))
    for r, tier in zip(running, ["free", "paid", "paid"], strict=True):
        r.tier = tier
        kv.grow(r, r.num_prompt_tokens)
    assert pre.pick(running, lambda r: r.kv_blocks) == expected


def test_swap_time_lengthens_steps_and_matches_the_bytes():
    policy = {
        "name": "continuous",
        "max_num_seqs": 4,
        "max_num_batched_tokens": 64,
        "block_size": 2,
        "preemption": {"mode": "swap", "swap_bandwidth_gb_per_s": 1e-6},
    }
    arrival, prompt, output = [0.0] * 4, [10] * 4, [30] * 4
    res = run_arrays(tiny_scenario(policy, 100), arrival, prompt, output)
    req = res.requests
    assert req["num_swaps"].sum() > 0 and (req["num_recomputed_tokens"] == 0).all()
    # every swapped-out byte comes back in: twice the bytes over 1000 B/s
    assert res.steps["swap_s"].sum() == pytest.approx(2 * req["swapped_bytes"].sum() / 1e3)
    swap_steps = res.steps[res.steps["swap_s"] > 0]
    assert (swap_steps["duration_s"] > swap_steps["swap_s"]).all()
    s = res.summary()
    assert s["num_swaps"] == req["num_swaps"].sum() and s["swapped_bytes"] > 0


@pytest.mark.parametrize("field", ["swap_bandwidth_gb_per_s", "host_memory_gb"])
def test_zero_swap_settings_are_rejected_naming_the_field(field):
    raw = tiny_scenario({"name": "continuous", "preemption": {"mode": "swap", field: 0}}, 100)
    with pytest.raises(ScenarioError, match=f"policy.preemption.{field}"):
        load_scenario_dict(raw)


def test_the_string_form_still_names_the_mode():
    raw = tiny_scenario({"name": "chunked", "preemption": "swap"}, 100)
    assert load_scenario_dict(raw).variants[0].spec.policy.preemption.mode == "swap"


policies = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["continuous", "chunked"]),
        "max_num_seqs": st.integers(1, 6),
        "max_num_batched_tokens": st.integers(64, 128),
        "block_size": st.sampled_from([1, 2, 4, 8]),
        "watermark": st.sampled_from([0.0, 0.1]),
        "preemption": st.fixed_dictionaries(
            {
                "mode": st.sampled_from(["recompute", "swap"]),
                "victim": st.sampled_from(["last_admitted", "lowest_priority", "most_kv"]),
                "swap_bandwidth_gb_per_s": st.sampled_from([1e-6, 1.0]),
                "host_memory_gb": st.sampled_from([1e-7, 64.0]),
            }
        ),
    }
)


@st.composite
def workloads(draw):
    n = draw(st.integers(1, 25))
    gaps = st.sampled_from([0.0, 0.0, 0.001, 0.01, 0.1])
    arrival = np.cumsum(draw(st.lists(gaps, min_size=n, max_size=n))).tolist()
    prompt = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    return arrival, prompt, output


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=policies, work=workloads(), kv_tokens=st.integers(40, 200))
def test_blocks_and_tokens_are_conserved_under_swap_and_recompute(policy, work, kv_tokens):
    arrival, prompt, output = work
    res, pol = run_arrays_with_instance(tiny_scenario(policy, kv_tokens), arrival, prompt, output)
    stepwise = run_arrays(tiny_scenario(policy, kv_tokens, coalesce=False), arrival, prompt, output)
    req, steps = res.requests, res.steps
    # the pool and host memory are whole again (a double free raises in BlockManager.free)
    assert pol.kv.num_free == pol.kv.num_total and pol.host_used_bytes == 0
    assert not pol.running and not len(pol.waiting) and not pol.swapped
    assert (steps["kv_blocks_used"] <= pol.kv.num_total).all()
    served = req[~req["rejected"]]
    assert (served["num_output_tokens"] == served["max_output_tokens"]).all()
    recomputes = int((served["num_preemptions"] - served["num_swaps"]).sum())
    k = steps["num_steps"]
    prefill = int((k * steps["num_prefill_tokens"]).sum())
    decode = int((k * steps["num_decode_tokens"]).sum())
    prompts = int(served["num_prompt_tokens"].sum())
    recomputed = int(served["num_recomputed_tokens"].sum())
    # every token whose KV a finished request needed is computed once, plus the recomputed ones
    assert prefill + decode == prompts + int((served["num_output_tokens"] - 1).sum()) + recomputed
    # a victim that had emitted tokens also prefills its last one, which a decode would have
    # computed; a victim caught mid-prompt (chunked) does not
    assert prompts + recomputed <= prefill <= prompts + recomputed + recomputes
    cols = ["first_token_s", "finish_s", "num_preemptions", "num_swaps", "swapped_bytes"]
    a = res.requests[cols].to_numpy(float)
    b = stepwise.requests[cols].to_numpy(float)
    assert np.allclose(a, b, rtol=1e-9, atol=1e-12, equal_nan=True)
