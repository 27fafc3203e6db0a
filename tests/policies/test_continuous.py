"""Exact step-by-step schedules of continuous batching (both modes) and its preemption."""

from __future__ import annotations

from factories import make_continuous, make_requests, step, tokens
from scenario_factory import continuous, fixed, scenario

from sim import load_scenario_dict, simulate
from sim.core.request import Request


def test_prefill_first_schedule_stalls_decodes_for_prefills() -> None:
    policy = make_continuous(max_num_seqs=2, max_num_batched_tokens=8, block_size=4)
    r0, r1, r2 = make_requests((4, 3), (3, 1), (5, 2))
    for r in (r0, r1, r2):
        assert policy.add_request(r, 0.0)
    assert tokens(step(policy, 0.0, num_steps=1)) == {0: 4, 1: 3}  # r2 has no seat left
    assert r1.finish_s == 1.0 and r0.num_output_tokens == 1
    assert tokens(step(policy, 1.0, num_steps=1)) == {2: 5}  # prefill only: r0 stalls
    assert tokens(step(policy, 2.0, num_steps=1)) == {0: 1, 2: 1}
    assert r2.finish_s == 3.0
    assert tokens(step(policy, 3.0, num_steps=1)) == {0: 1}
    assert r0.finish_s == 4.0 and r0.max_itl_s == 2.0  # the stall behind r2's prefill
    assert step(policy, 4.0) is None
    assert policy.kv.num_free == policy.kv.num_total


def test_mixed_mode_runs_decodes_and_prefills_in_one_step() -> None:
    policy = make_continuous(max_num_seqs=2, max_num_batched_tokens=8, block_size=4, mode="mixed")
    r0, r1, r2 = make_requests((4, 3), (3, 1), (5, 2))
    for r in (r0, r1, r2):
        policy.add_request(r, 0.0)
    assert tokens(step(policy, 0.0, num_steps=1)) == {0: 4, 1: 3}
    plan = step(policy, 1.0, num_steps=1)
    assert tokens(plan) == {0: 1, 2: 5}
    assert plan is not None and plan.num_prefill_tokens == 5 and plan.num_decode_tokens == 1
    assert tokens(step(policy, 2.0, num_steps=1)) == {0: 1, 2: 1}
    assert (r0.finish_s, r2.finish_s) == (3.0, 3.0)
    assert r0.max_itl_s == 1.0


def test_without_a_token_budget_whole_prompts_join_any_step() -> None:
    # Orca-style mixed batching (max_num_batched_tokens: null): every waiting prompt that has
    # a seat and blocks joins the step, however many tokens that makes
    raw = scenario(
        workload={
            "num_requests": 3,
            "arrival": {"process": "constant", "rate": 1000.0},
            "prompt_tokens": fixed(3000),
            "output_tokens": fixed(4),
        },
        policy=continuous(mode="mixed", max_num_batched_tokens=None, max_num_seqs=8),
        profile=None,
        variants={"budget": {"policy": {"max_num_batched_tokens": 2048}}, "none": {}},
    )
    res = simulate(load_scenario_dict(raw))
    budget, none = res["budget"], res["none"]
    # with a budget the 3000-token prompts cannot run unchunked: rejected
    assert budget.requests["rejected"].all()
    assert not none.requests["rejected"].any()
    assert none.steps["num_prefill_tokens"].max() == 6000  # two prompts in one step
    ids = none.requests.sort_values("first_scheduled_s")
    assert ids["first_scheduled_s"].nunique() == 2  # the first alone, the other two together


def test_token_budget_limits_admission_first_come_first_served() -> None:
    policy = make_continuous(max_num_batched_tokens=10, block_size=4)
    r0, r1, r2 = make_requests((6, 2), (6, 2), (2, 2))
    for r in (r0, r1, r2):
        policy.add_request(r, 0.0)
    # r1 does not fit the remaining budget of 4, and r2 may not overtake it (FCFS)
    assert tokens(step(policy, 0.0, num_steps=1)) == {0: 6}
    assert tokens(step(policy, 1.0, num_steps=1)) == {1: 6, 2: 2}


def test_recompute_preemption_of_the_most_recent_request() -> None:
    # 3 blocks of 2 tokens: both prompts fit, but not both sequences at once
    policy = make_continuous(num_blocks=3, block_size=2)
    r0, r1 = make_requests((2, 4), (2, 2))
    policy.add_request(r0, 0.0)
    policy.add_request(r1, 0.0)
    assert tokens(step(policy, 0.0, num_steps=1)) == {0: 2, 1: 2}
    plan = step(policy, 1.0, num_steps=1)
    # r0 takes the last free block; r1 (admitted last) needs one too and is preempted
    assert tokens(plan) == {0: 1}
    assert plan is not None and plan.preempted == (r1,)
    assert (r1.num_computed_tokens, r1.num_preemptions, r1.num_recomputed_tokens) == (0, 1, 2)
    assert list(policy.waiting) == [r1] and policy.kv.num_free == 1
    # r1 must recompute prompt + its output (3 tokens, 2 blocks): it waits for r0's blocks
    plan = step(policy, 2.0)
    assert tokens(plan) == {0: 1} and plan is not None and plan.num_steps == 2
    assert r0.finish_s == 4.0
    plan = step(policy, 4.0)
    assert tokens(plan) == {1: 3}  # prompt + the one token it had emitted
    assert r1.finish_s == 5.0 and r1.num_output_tokens == 2
    assert r1.max_itl_s == 4.0  # from its first token at t=1 to its second at t=5


def test_requests_that_can_never_complete_are_rejected() -> None:
    policy = make_continuous(
        num_blocks=4, block_size=4, max_num_batched_tokens=32, max_model_len=100
    )
    assert not policy.add_request(Request(0, 0.0, 10, 7), 0.0)  # 17 tokens > 16 in the pool
    assert not policy.add_request(Request(1, 0.0, 40, 1), 0.0)  # prompt over the token budget
    assert policy.add_request(Request(2, 0.0, 10, 6), 0.0)
    big = make_continuous(max_model_len=100)
    assert not big.add_request(Request(3, 0.0, 60, 41), 0.0)  # over max_model_len


def test_decode_run_ends_at_first_finish_and_before_blocks_run_out() -> None:
    policy = make_continuous(num_blocks=6, block_size=4)
    r0, r1 = make_requests((4, 20), (4, 5))
    policy.add_request(r0, 0.0)
    policy.add_request(r1, 0.0)
    step(policy, 0.0)
    plan = step(policy, 1.0)
    assert plan is not None
    # 4 free blocks after this step's 2; r1 finishes after 4 more tokens
    assert plan.num_steps == 4
    assert plan.interruptible and plan.context_growth_per_step == 2


def test_watermark_keeps_blocks_free_at_admission() -> None:
    policy = make_continuous(num_blocks=10, block_size=4, watermark=0.2)
    r0, r1 = make_requests((16, 2), (12, 2))
    policy.add_request(r0, 0.0)
    policy.add_request(r1, 0.0)
    # r0 takes 4 blocks; r1's 3 more leave 3 free, above the 2 reserved
    assert tokens(step(policy, 0.0, num_steps=1)) == {0: 16, 1: 12}
    tight = make_continuous(num_blocks=10, block_size=4, watermark=0.4)
    a, b = make_requests((16, 2), (12, 2))
    tight.add_request(a, 0.0)
    tight.add_request(b, 0.0)
    assert tokens(step(tight, 0.0, num_steps=1)) == {0: 16}  # 3 left, under the 4 reserved


def test_chunked_schedule_budget_8_prompts_20_and_3_with_two_decodes() -> None:
    policy = make_continuous(max_num_batched_tokens=8, block_size=4, mode="chunked")
    d0, d1, a, b = make_requests((4, 50), (4, 50), (20, 3), (3, 2))
    for r in (d0, d1):
        policy.add_request(r, 0.0)
    step(policy, 0.0, num_steps=1)  # both prompts in one step: now both decode
    policy.add_request(a, 1.0)
    policy.add_request(b, 1.0)
    assert tokens(step(policy, 1.0, num_steps=1)) == {0: 1, 1: 1, 2: 6}
    assert tokens(step(policy, 2.0, num_steps=1)) == {0: 1, 1: 1, 2: 6}
    assert tokens(step(policy, 3.0, num_steps=1)) == {0: 1, 1: 1, 2: 6}
    assert a.num_output_tokens == 0 and a.num_computed_tokens == 18
    plan = step(policy, 4.0, num_steps=1)
    assert tokens(plan) == {0: 1, 1: 1, 2: 2, 3: 3}  # a's last chunk, then b whole
    assert plan is not None and plan.num_prefill_tokens == 5 and plan.num_decode_tokens == 2
    # attention of each chunk reads the prompt computed so far: 2*(18+2) + 3*3
    assert plan.prefill_attention_term == 2 * 20 + 3 * 3
    assert a.first_token_s == 5.0 and b.first_token_s == 5.0
    # the decodes never stalled: one token every step
    assert d0.max_itl_s == 1.0 and d0.num_output_tokens == 5


def test_chunked_limits_prompts_per_step_and_accepts_prompts_over_the_budget() -> None:
    policy = make_continuous(max_num_batched_tokens=8, mode="chunked", max_prefill_seqs=1)
    a, b = make_requests((30, 2), (3, 2))
    assert policy.add_request(a, 0.0)  # 30 > 8 is fine when prompts are chunked
    policy.add_request(b, 0.0)
    assert tokens(step(policy, 0.0, num_steps=1)) == {0: 8}
    assert tokens(step(policy, 1.0, num_steps=1)) == {0: 8}
    assert tokens(step(policy, 2.0, num_steps=1)) == {0: 8}
    assert tokens(step(policy, 3.0, num_steps=1)) == {0: 6}  # b waits: one prompt per step
    assert tokens(step(policy, 4.0, num_steps=1)) == {0: 1, 1: 3}
