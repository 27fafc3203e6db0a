"""Whole runs with speculative decoding on, checked with hypothesis: random requests through a
tiny KV pool, random lookahead, acceptance, dynamic rules, reservation and preemption modes,
coalesced or not, so that lookahead slots, rejected slots, preemptions, swaps and runs of plain
decode steps (speculation switched off by batch size) meet in the same runs.

At every step boundary the pool must balance: the blocks in use are exactly those the running
requests hold; a paged holding is exactly the blocks its computed tokens fill (the rejected
lookahead's blocks went back), a reserved one covers them; the KV-usage tallies are the computed
tokens and the held-beyond-the-sequence tokens of the holders. During a speculative step every
speculating request holds room for its next token and its lookahead. At the end the pool is
whole, and tokens are conserved: the target computed every emitted token plus the rejected ones.
The checks run through the engine's step observer (`Instance.on_step`), so they run on the
compiled build too, and every step is seen (the observer's calls are counted against the steps
table); the examples must reach speculation, preemptions, coalesced runs and a `max_length`
reservation that serves requests.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
from helpers_prefix import run_checked, shared_workloads
from helpers_sim import observed_steps, run_arrays_with_instance
from hypothesis import HealthCheck, event, example, given, seed, settings
from hypothesis import strategies as st
from scenario_factory import scenario, tiny_hardware, tiny_model

from sim.core.instance import Instance
from sim.core.run import Run

COEFFS = {
    "t_mem_s": 0.01,
    "t_flop_s_per_token": 1e-4,
    "t_kv_s_per_token": 1e-5,
    "t_attn_s_per_token2": 1e-7,
}


def check_pool(instance: Instance) -> None:
    """The pool and the KV tallies at a step boundary (see the module docstring)."""
    pool, usage = instance.pool, instance.engine.usage
    running = instance.engine.running
    assert pool.num_used == sum(r.kv_blocks for r in running)
    paged = instance.policy.paged_kv
    for req in running:
        fill = pool.blocks_for(req.num_computed_tokens)
        assert req.kv_blocks == fill if paged else req.kv_blocks >= fill, req
    assert usage.stored_tokens == sum(r.num_computed_tokens for r in running)
    assert usage.fragment_tokens == sum(usage.over(r, r.kv_blocks) for r in running)
    assert not [r for r in instance.engine.swapped if r.kv_blocks]


speculative = st.fixed_dictionaries(
    {
        "method": st.just("ngram"),
        "num_speculative_tokens": st.integers(1, 5),
        "acceptance": st.one_of(
            st.fixed_dictionaries({"rate": st.sampled_from([0.0, 0.3, 0.7, 1.0])}),
            st.fixed_dictionaries(
                {"rate": st.lists(st.sampled_from([0.0, 0.5, 0.9, 1.0]), min_size=1, max_size=4)}
            ),
            st.just({"distribution": {"dist": "uniform", "low": 0.0, "high": 1.0}}),
        ),
        "ngram_s": st.sampled_from([0.0, 0.001]),
    },
    optional={
        "disable_by_batch_size": st.integers(1, 4),
        "min_acceptance_rate": st.sampled_from([0.2, 0.6]),
        "acceptance_window": st.integers(1, 4),
    },
)
policies = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["continuous", "chunked"]),
        "max_num_seqs": st.integers(1, 6),
        "max_num_batched_tokens": st.integers(8, 64),
        "block_size": st.sampled_from([1, 2, 3, 4, 8]),
        "watermark": st.sampled_from([0.0, 0.1]),
        "preemption": st.sampled_from(["recompute", "swap"]),
        "kv_reservation": st.sampled_from(["paged", "paged", "paged", "exact", "max_length"]),
        "speculative": speculative,
    },
    optional={"mode": st.sampled_from(["prefill_first", "mixed"])},
)


@st.composite
def workloads(draw: Any) -> tuple[list[float], list[int], list[int]]:
    n = draw(st.integers(1, 25))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.0, 0.001, 0.02, 0.3]), min_size=n, max_size=n))
    prompt = draw(st.lists(st.integers(1, 30), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 60), min_size=n, max_size=n))
    return np.cumsum(gaps).tolist(), prompt, output


COVERAGE: Counter = Counter()  # how many examples of the test below reached each case
LAST: set[str] = set()  # the cases the last example reached
# `max_length` reserves the model's whole length for each request: with the 200-token model
# and the pools drawn (hypothesis favours small ones) it once rejected every request in every
# example. A shorter model (the longest request, 30 + 60 tokens and a lookahead of 5, fits) on a
# pool of at least 120 tokens serves them, one or two at a time
MAX_LENGTH_MODEL_LEN = 100
MAX_LENGTH_MIN_POOL = 120


# the `max_length` arm serving requests (a whole-length reservation each) while speculating
@example(
    policy={
        "name": "continuous",
        "max_num_seqs": 4,
        "max_num_batched_tokens": 64,
        "block_size": 4,
        "watermark": 0.0,
        "preemption": "recompute",
        "kv_reservation": "max_length",
        "speculative": {
            "method": "ngram",
            "num_speculative_tokens": 3,
            "acceptance": {"rate": 0.7},
            "ngram_s": 0.0,
        },
    },
    kv_tokens=240,
    coalesce=True,
    workload=([0.0, 0.0, 0.02, 0.3], [10, 30, 5, 20], [40, 12, 60, 3]),
)
# preemptions and coalesced runs of plain decode steps (speculation off above one sequence)
@example(
    policy={
        "name": "continuous",
        "max_num_seqs": 4,
        "max_num_batched_tokens": 64,
        "block_size": 4,
        "watermark": 0.0,
        "preemption": "swap",
        "kv_reservation": "paged",
        "speculative": {
            "method": "ngram",
            "num_speculative_tokens": 2,
            "acceptance": {"rate": 0.7},
            "ngram_s": 0.0,
            "disable_by_batch_size": 1,
        },
    },
    kv_tokens=60,
    coalesce=True,
    workload=([0.0, 0.0, 0.0, 0.5], [10, 10, 10, 10], [40, 40, 40, 40]),
)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@seed(7)  # its own examples, not the function's digest: an edit to the body keeps them
@given(
    policy=policies, kv_tokens=st.integers(40, 240), coalesce=st.booleans(), workload=workloads()
)
def _speculation_conserves_kv_and_tokens(
    policy: dict[str, Any], kv_tokens: int, coalesce: bool, workload: Any
) -> None:
    if policy["name"] == "chunked":
        policy.pop("mode", None)
    arrival, prompt, output = workload
    max_length = policy["kv_reservation"] == "max_length"
    if max_length:
        kv_tokens = max(kv_tokens, MAX_LENGTH_MIN_POOL)
    raw = scenario(
        policy=policy,
        coefficients=COEFFS,
        model=tiny_model(MAX_LENGTH_MODEL_LEN if max_length else 200),
        hardware=tiny_hardware(kv_tokens),
        engine={"coalesce_decode_steps": coalesce},
    )
    lookahead_seen = [0]

    def observe(instance: Instance, run: Run, ended: bool) -> None:
        # through the engine's observer (both builds): the pool at every step boundary, and
        # what a speculative step holds while it runs
        if ended:
            check_pool(instance)
            return
        if run.spec is not None:  # held during the step: next token and lookahead
            assert run.num_steps == 1
            for req in run.spec.decoders:
                k = run.plan.speculate.get(req, 0)
                room = instance.pool.blocks_for(req.num_computed_tokens + 1 + k)
                assert req.kv_blocks >= room
                lookahead_seen[0] += k
            assert instance.pool.num_used == sum(r.kv_blocks for r in instance.engine.running)

    with observed_steps(observe) as calls:
        res, instance = run_arrays_with_instance(raw, arrival, prompt, output)
    assert calls.ended == len(res.steps)
    check_pool(instance)
    pool = instance.pool
    assert pool.num_used == 0 and pool.num_free == pool.num_total
    req, steps = res.requests, res.steps
    rejected = req["rejected"].to_numpy(dtype=bool)
    finished = ~np.isnan(req["finish_s"].to_numpy())
    assert (rejected ^ finished).all()  # nothing lost
    fin = req[finished]
    assert (fin["num_output_tokens"] == fin["max_output_tokens"]).all()
    assert (fin["num_spec_accepted"] <= fin["num_spec_proposed"]).all()
    k_max = policy["speculative"]["num_speculative_tokens"]
    assert (fin["num_spec_proposed"] <= k_max * fin["num_spec_steps"]).all()
    if not len(steps):
        return
    k = steps["num_steps"].to_numpy()
    assert (steps.loc[steps["num_spec_seqs"] > 0, "num_steps"] == 1).all()
    decode = int((steps["num_decode_tokens"] * k).sum())
    proposed = int(steps["num_spec_proposed"].sum())
    accepted = int(steps["num_spec_accepted"].sum())
    assert proposed == lookahead_seen[0] == int(req["num_spec_proposed"].sum())
    assert accepted == int(req["num_spec_accepted"].sum())
    preemptions = int(req["num_preemptions"].sum())
    prefill = int((steps["num_prefill_tokens"] * k).sum())
    # the target computed every token whose KV a finished request holds at its end (all but its
    # last output), those computed again after recompute preemptions, and the rejected ones
    kept = (fin["num_prompt_tokens"] + fin["num_output_tokens"] - 1).sum()
    recomputed = int(req["num_recomputed_tokens"].sum())
    assert prefill + decode - (proposed - accepted) == kept + recomputed
    assert int(res.itl["count"].sum()) == int((fin["num_output_tokens"] - 1).sum())
    assert (steps["num_seqs"] <= policy["max_num_seqs"]).all()
    over = steps["num_tokens"] > policy["max_num_batched_tokens"]
    alone = (steps["num_seqs"] == 1) & (steps["num_decode_tokens"] == 0)
    assert (~over | alone).all()  # verification tokens stay within the budget
    assert (steps["kv_blocks_used"] <= pool.num_total).all()
    reached = {
        "speculated": proposed > 0,
        "preemptions": preemptions > 0,
        "coalesced runs": bool((k > 1).any()),
        "max_length served": max_length and bool(finished.any()),
    }
    for case, yes in reached.items():
        event(f"{case} {'yes' if yes else 'no'}")
        COVERAGE[case] += yes
    LAST.clear()
    LAST.update(case for case, yes in reached.items() if yes)


def test_runs_with_speculation_conserve_kv_and_tokens() -> None:
    """The hypothesis runs above, then what they reached: a strategy that stops reaching a
    case (as the `max_length` arm once did, every request rejected) fails here."""
    COVERAGE.clear()
    _speculation_conserves_kv_and_tokens()
    for case, least in (
        ("speculated", 50),
        ("preemptions", 3),
        ("coalesced runs", 3),
        ("max_length served", 5),
    ):
        assert COVERAGE[case] >= least, (case, dict(COVERAGE))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=policies,
    kv_tokens=st.integers(30, 160),
    coalesce=st.booleans(),
    workload=shared_workloads(),
)
def test_speculation_with_prefix_caching_keeps_the_pool_balanced(
    policy: dict[str, Any], kv_tokens: int, coalesce: bool, workload: Any
) -> None:
    """Rejected lookahead blocks are never cached ones: with prefix caching on, the pool
    balances before every step (`test_prefix_runs.check_pool`) and is whole at the end."""
    policy = {**policy, "prefix_caching": True, "kv_reservation": "paged"}
    if policy["name"] == "chunked":
        policy.pop("mode", None)
        policy["max_num_batched_tokens"] = max(policy["max_num_batched_tokens"], 6)
    arrival, prompt, output, content = workload
    raw = scenario(
        policy=policy,
        coefficients=COEFFS,
        model=tiny_model(),
        hardware=tiny_hardware(kv_tokens),
        engine={"coalesce_decode_steps": coalesce},
    )
    res, instance = run_checked(raw, arrival, prompt, output, content)
    pool = instance.pool
    assert pool.num_used == 0 and not pool.cache_contents()[0]
    req = res.requests
    assert (req["rejected"] ^ req["finish_s"].notna()).all()
    event(f"speculated {'yes' if req['num_spec_proposed'].any() else 'no'}")
    event(f"hits {'yes' if req['num_cached_tokens'].any() else 'no'}")
