"""Exact schedules of static batching: padding, tail bubbles and head-of-line blocking."""

from __future__ import annotations

from factories import make_requests, make_static, step, tokens

from sim.core.request import Request


def test_batch_prefills_then_decodes_with_padded_slots() -> None:
    policy = make_static(max_batch_size=2)
    r0, r1, r2 = make_requests((4, 3), (2, 1), (5, 2))
    for r in (r0, r1):
        policy.add_request(r, 0.0)
    plan = step(policy, 0.0)
    assert tokens(plan) == {0: 4, 1: 2}
    assert plan is not None and (plan.num_seqs, plan.num_tokens) == (2, 6)
    assert r1.finish_s == 1.0
    policy.add_request(r2, 0.5)  # arrives during the batch: it may not join
    plan = step(policy, 1.0)
    assert plan is not None and tokens(plan) == {0: 1}
    # r1's finished slot is still paid for: 2 slots, 2 tokens, 1 useful
    assert (plan.num_seqs, plan.num_tokens, plan.num_decode_tokens, plan.num_steps) == (2, 2, 1, 2)
    assert plan.sum_context_tokens == 6 + 2 and plan.context_growth_per_step == 2
    assert not plan.interruptible
    assert r0.finish_s == 3.0
    assert policy.kv.num_used == 0  # reservations released when the batch drains
    assert tokens(step(policy, 3.0)) == {2: 5}
    assert r2.first_scheduled_s == 3.0  # head-of-line blocked for 2.5 s behind r0


def test_kv_reserved_for_whole_sequence_at_admission() -> None:
    policy = make_static(capacity_tokens=12, max_batch_size=4)
    r0, r1, r2 = make_requests((4, 3), (3, 2), (2, 2))
    for r in (r0, r1, r2):
        assert policy.add_request(r, 0.0)
    assert tokens(step(policy, 0.0)) == {0: 4, 1: 3}  # r2's 4 tokens do not fit the last 5-7
    assert (r0.kv_blocks, r1.kv_blocks, policy.kv.num_free) == (7, 5, 0)


def test_max_model_len_reservation_and_rejection() -> None:
    policy = make_static(capacity_tokens=100, max_model_len=40, kv_reservation="max_model_len")
    r0, r1, r2 = make_requests((10, 5), (10, 5), (30, 20))
    assert not policy.add_request(r2, 0.0)  # 50 tokens exceed the model's context
    policy.add_request(r0, 0.0)
    policy.add_request(r1, 0.0)
    step(policy, 0.0)
    assert r0.kv_blocks == 40 and r1.kv_blocks == 40


def test_batch_starts_when_full_or_after_max_wait() -> None:
    policy = make_static(max_batch_size=3, max_wait_s=2.0)
    r0, r1 = (Request(0, 0.0, 4, 2), Request(1, 0.5, 4, 2))
    policy.add_request(r0, 0.0)
    policy.add_request(r1, 0.5)
    assert step(policy, 1.0) is None
    assert policy.next_wakeup_s(1.0) == 2.0
    assert tokens(step(policy, 2.0)) == {0: 4, 1: 4}


def test_padded_prompts_cost_the_longest_prompt_per_slot() -> None:
    policy = make_static(max_batch_size=2, pad_prompts=True)
    for r in make_requests((10, 2), (2, 2)):
        policy.add_request(r, 0.0)
    plan = step(policy, 0.0)
    assert plan is not None and plan.num_tokens == 20 and plan.prefill_attention_term == 200
