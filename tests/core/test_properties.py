"""Properties of whole runs and of the KV block pool, checked with hypothesis.

Random small workloads (1-40 requests, 1-token outputs, tied arrival times) run against random
policy limits on a tiny GPU whose KV pool holds a few dozen to a few hundred tokens, so that some
requests can never fit (rejected on arrival) and others get preempted. Every run must conserve
requests, tokens and KV blocks, keep per-request timestamps monotone, and keep steps ordered and
within the policy's limits.

Token accounting under recompute (sim/policies/continuous.py `_preempt`, sim/core/request.py): a
request preempted after emitting k tokens has computed P + k - 1 tokens; `num_recomputed_tokens`
grows by exactly that (tokens whose KV is computed again), and its recompute prefills P + k
tokens, the last of which replaces the decode step it would have run. So per preemption the
prefill tokens exceed the prompt by `recomputed + 1` and the decode tokens drop by 1:

    prefill tokens = sum P + sum num_recomputed_tokens + sum num_preemptions
    decode tokens  = sum (O - 1) - sum num_preemptions
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers_sim import run_arrays_with_instance
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from scenario_factory import scenario, tiny_hardware, tiny_model

from sim.core.kv.pool import KVPool
from sim.core.request import Request

COEFFS = {
    "t_mem_s": 0.01,
    "t_flop_s_per_token": 1e-4,
    "t_kv_s_per_token": 1e-5,
    "t_attn_s_per_token2": 1e-7,
}
EPS = 1e-9

static_policies = st.fixed_dictionaries(
    {
        "name": st.just("static"),
        "max_batch_size": st.integers(1, 5),
        "max_wait_s": st.sampled_from([0.0, 0.0, 0.005, 0.05, 0.5]),
    }
)
continuous_policies = st.fixed_dictionaries(
    {
        "name": st.just("continuous"),
        "max_num_seqs": st.integers(1, 6),
        "max_num_batched_tokens": st.integers(8, 128),
        "mode": st.sampled_from(["prefill_first", "mixed"]),
        "block_size": st.sampled_from([1, 2, 4, 8, 16]),
        "watermark": st.sampled_from([0.0, 0.01, 0.1, 0.3]),
    }
)


@st.composite
def workloads(draw, max_prompt=64, max_output=64, gaps=(0.0, 0.0, 0.001, 0.01, 0.03, 0.2, 1.0)):
    n = draw(st.integers(1, 40))
    arrival = np.cumsum(draw(st.lists(st.sampled_from(gaps), min_size=n, max_size=n))).tolist()
    prompt = draw(st.lists(st.integers(1, max_prompt), min_size=n, max_size=n))
    output = draw(
        st.lists(st.one_of(st.just(1), st.integers(1, max_output)), min_size=n, max_size=n)
    )
    return arrival, prompt, output


def expected_rejected(policy, prompt, output, kv_tokens, max_model_len):
    total = prompt + output
    if policy["name"] == "static":
        return (total > max_model_len) | (total > kv_tokens)
    pool = (kv_tokens // policy["block_size"]) * policy["block_size"]
    return (prompt > policy["max_num_batched_tokens"]) | (total > max_model_len) | (total > pool)


def check_run(res, pol, policy, prompt, output, kv_tokens, max_model_len):
    """Every invariant of one finished run (see the module docstring); `pol` is the policy object
    the run used, `policy` its scenario mapping."""
    req, steps, ctx = res.requests, res.steps, res.context
    # the pool is whole again and nothing is left queued or running
    assert pol.pool.num_free == pol.pool.num_total == ctx.kv_blocks_total
    assert pol.num_waiting == 0 and pol.num_running == 0
    prompt, output = np.asarray(prompt), np.asarray(output)
    n = len(prompt)
    # no request lost; each finishes exactly once or is rejected, never both
    assert req["id"].tolist() == list(range(n))
    assert (req["num_prompt_tokens"].to_numpy() == prompt).all()
    assert (req["max_output_tokens"].to_numpy() == output).all()
    rejected = req["rejected"].to_numpy(dtype=bool)
    finished = ~np.isnan(req["finish_s"].to_numpy())
    assert (rejected ^ finished).all()
    assert (rejected == expected_rejected(policy, prompt, output, kv_tokens, max_model_len)).all()
    fin, rej = req[finished], req[rejected]
    assert (fin["num_output_tokens"] == fin["max_output_tokens"]).all()
    assert (rej["num_output_tokens"] == 0).all()
    assert rej[["first_scheduled_s", "first_token_s", "finish_s"]].isna().all().all()
    # timestamps monotone per request
    assert (fin["arrival_s"] <= fin["first_scheduled_s"]).all()
    assert (fin["first_scheduled_s"] < fin["first_token_s"]).all()
    assert (fin["first_token_s"] <= fin["finish_s"]).all()
    # first come, first served: arrivals (ties in id order) are admitted in id order
    assert (np.diff(fin["first_scheduled_s"].to_numpy()) >= 0).all()
    one_token = fin["max_output_tokens"] == 1
    assert (fin.loc[one_token, "first_token_s"] == fin.loc[one_token, "finish_s"]).all()
    assert (fin.loc[one_token, "max_itl_s"] == 0.0).all()
    assert (fin.loc[~one_token, "max_itl_s"] > 0.0).all()

    p_fin, o_fin = prompt[finished], output[finished]
    preemptions = int(req["num_preemptions"].sum())
    recomputed = int(req["num_recomputed_tokens"].sum())
    if len(steps) == 0:
        assert not finished.any()
        return
    k = steps["num_steps"].to_numpy()
    # tokens conserved (module docstring)
    decode_tokens = int((steps["num_decode_tokens"].to_numpy() * k).sum())
    prefill_tokens = int((steps["num_prefill_tokens"].to_numpy() * k).sum())
    assert decode_tokens + finished.sum() + preemptions == o_fin.sum()
    assert prefill_tokens == p_fin.sum() + recomputed + preemptions
    assert prefill_tokens >= p_fin.sum()
    if preemptions == 0:
        assert recomputed == 0 and prefill_tokens == p_fin.sum()
    assert int(steps["num_preempted"].sum()) == preemptions
    assert (steps.loc[steps["num_prefill_tokens"] > 0, "num_steps"] == 1).all()
    # every output token after the first leaves exactly one inter-token gap
    assert int(res.itl["count"].sum()) == int((o_fin - 1).sum())
    assert (res.itl["gap_s"] > 0).all()
    # KV never exceeds the pool and is all returned at the end
    assert (steps["kv_blocks_used"] <= ctx.kv_blocks_total).all()
    assert (steps["kv_blocks_used"] >= 0).all()
    assert steps["kv_blocks_used"].iloc[-1] > 0  # held during the last step, freed after it
    # step groups are ordered and do not overlap
    start, end = steps["start_s"].to_numpy(), steps["end_s"].to_numpy()
    assert (end > start).all()
    assert (start[1:] >= end[:-1] - EPS).all()
    assert start[0] >= req["arrival_s"].min()
    assert abs(end[-1] - fin["finish_s"].max()) <= EPS
    # batch limits
    assert (steps["num_active_seqs"] <= steps["num_seqs"]).all()
    if policy["name"] == "static":
        assert preemptions == 0
        assert (steps["num_seqs"] <= policy["max_batch_size"]).all()
    else:
        assert (steps["num_seqs"] <= policy["max_num_seqs"]).all()
        over = steps["num_tokens"] > policy["max_num_batched_tokens"]
        # only a lone recompute longer than the budget may exceed it (continuous.py `_admit`)
        alone = (steps["num_seqs"] == 1) & (steps["num_decode_tokens"] == 0)
        assert (~over | alone).all()


def run_case(policy, kv_tokens, max_model_len, coalesce, arrival, prompt, output):
    raw = scenario(
        policy=policy,
        coefficients=COEFFS,
        model=tiny_model(max_model_len),
        hardware=tiny_hardware(kv_tokens),
        engine={"coalesce_decode_steps": coalesce},
    )
    return run_arrays_with_instance(raw, arrival, prompt, output)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=st.one_of(static_policies, continuous_policies),
    kv_tokens=st.integers(24, 360),
    max_model_len=st.sampled_from([70, 100_000]),
    coalesce=st.booleans(),
    workload=workloads(),
)
def test_run_invariants(policy, kv_tokens, max_model_len, coalesce, workload):
    if policy["name"] == "continuous":
        assume(kv_tokens >= policy["block_size"])  # at least one block in the pool
    arrival, prompt, output = workload
    res, pol = run_case(policy, kv_tokens, max_model_len, coalesce, arrival, prompt, output)
    check_run(res, pol, policy, prompt, output, kv_tokens, max_model_len)
    req = res.requests
    event(f"{policy['name']}: rejections {'yes' if req['rejected'].any() else 'no'}")
    event(f"{policy['name']}: preemptions {'yes' if req['num_preemptions'].any() else 'no'}")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=continuous_policies,
    kv_tokens=st.integers(40, 200),
    coalesce=st.booleans(),
    workload=workloads(max_prompt=24, max_output=100, gaps=(0.0, 0.0, 0.001, 0.01, 0.05)),
)
def test_run_invariants_under_kv_pressure(policy, kv_tokens, coalesce, workload):
    """Bursts of long outputs into a small pool: continuous batching preempts often."""
    assume(kv_tokens >= policy["block_size"])
    arrival, prompt, output = workload
    res, pol = run_case(policy, kv_tokens, 100_000, coalesce, arrival, prompt, output)
    check_run(res, pol, policy, prompt, output, kv_tokens, 100_000)
    event(f"preemptions {'yes' if res.requests['num_preemptions'].any() else 'no'}")


def test_example_with_rejections_and_preemptions():
    """The search space reaches both rejections and preemptions (a pinned example of each)."""
    policy = {
        "name": "continuous",
        "max_num_seqs": 4,
        "max_num_batched_tokens": 64,
        "mode": "mixed",
        "block_size": 4,
        "watermark": 0.0,
    }
    arrival = [0.0, 0.0, 0.0, 0.01, 0.01, 0.05]
    prompt = [20, 20, 20, 10, 90, 30]
    output = [30, 30, 30, 5, 5, 1]
    res, pol = run_case(policy, 96, 100_000, True, arrival, prompt, output)
    check_run(res, pol, policy, prompt, output, 96, 100_000)
    assert res.requests["rejected"].tolist() == [False, False, False, False, True, False]
    assert res.requests["num_preemptions"].sum() > 0


# --- the block pool as a state machine --------------------------------------------------------


NUM_POOL_REQUESTS = 6
request_ids = st.integers(0, NUM_POOL_REQUESTS - 1)


class BlockPool(RuleBasedStateMachine):
    """Random allocate / free on a `KVPool`, checked against a plain model of the counts."""

    @initialize(num_blocks=st.integers(0, 40), block_size=st.integers(1, 8))
    def setup(self, num_blocks, block_size):
        self.kv = KVPool(num_blocks, block_size)
        self.reqs = {rid: Request(rid, 0.0, 1, 1) for rid in range(NUM_POOL_REQUESTS)}
        self.held = dict.fromkeys(self.reqs, 0)  # model: request id -> blocks held

    @rule(rid=request_ids, num_tokens=st.integers(0, 400))
    def grow(self, rid, num_tokens):
        req, bs = self.reqs[rid], self.kv.block_size
        need = max(0, -(-num_tokens // bs) - self.held[rid])
        free_before = self.kv.num_free
        assert self.kv.blocks_needed(req, num_tokens) == need
        if need > free_before:  # the policy plans within the free blocks: beyond is a bug
            with pytest.raises(AssertionError):
                self.kv.grow(req, num_tokens)
            assert self.kv.num_free == free_before  # a failed allocation changes nothing
        else:
            assert self.kv.grow(req, num_tokens) == need
            self.held[rid] += need
            assert req.kv_blocks * bs >= num_tokens

    @rule(rid=request_ids)
    def release(self, rid):
        free = self.kv.num_free
        assert self.kv.release(self.reqs[rid]) == 0  # no caching: nothing stays shared
        assert self.kv.num_free == free + self.held[rid]
        self.held[rid] = 0

    @rule(rid=request_ids)
    def double_release(self, rid):
        self.kv.release(self.reqs[rid])
        assert self.kv.release(self.reqs[rid]) == 0  # the second release returns nothing
        self.held[rid] = 0

    @rule(num_blocks=st.integers(0, 10))
    def over_free_is_refused(self, num_blocks):
        if num_blocks > self.kv.num_used:
            with pytest.raises(AssertionError):
                self.kv.give_back(num_blocks)  # and the counts stay as they were

    @invariant()
    def conserved(self):
        if not hasattr(self, "kv"):
            return
        assert self.kv.num_free + sum(r.kv_blocks for r in self.reqs.values()) == self.kv.num_total
        assert all(self.reqs[rid].kv_blocks == held for rid, held in self.held.items())
        assert 0 <= self.kv.num_free <= self.kv.num_total
        assert self.kv.num_used == sum(self.held.values())


BlockPool.TestCase.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
TestBlockPool = BlockPool.TestCase
