"""Exact plans of the batching policies on small hand-built states, through the stand-in view
(`tests/standin.py`): no engine runs, so each test states what the policy sees and the whole
`StepPlan` it must return.

Block size 4 unless said; a decoding request of prompt 6 after one token has computed 6 tokens
in 2 blocks (room for 8), so it needs no block for its next token, while one of prompt 8 does.
"""

from __future__ import annotations

import pytest
from factories import make_continuous, make_requests, step
from standin import Pool, View, decoding, prefilling, request, swapped

from sim.core.plan import Padding, Preemption, StepPlan
from sim.core.request import Request
from sim.policies import ChunkedPolicy, ContinuousPolicy, Limits, StaticPolicy
from sim.policies.preemption import Preemptor
from sim.policies.reservation import Paged

FOREVER = 1 << 62  # a decode run the engine ends at the first change


def limits(
    *,
    seqs: int = 8,
    budget: int = 64,
    watermark: int = 0,
    preemption: str = "recompute",
    victim: str = "last_admitted",
    max_prefill_seqs: int | None = None,
) -> Limits:
    return Limits(
        max_num_seqs=seqs,
        max_num_batched_tokens=budget,
        max_model_len=10_000,
        watermark_blocks=watermark,
        reservation=Paged(),
        preemptor=Preemptor(mode=preemption, victim=victim),
        max_prefill_seqs=max_prefill_seqs,
    )


def pool(free: int = 100, total: int = 100) -> Pool:
    return Pool(total, free)


# -- continuous batching, prefill-first ----------------------------------------------------------


def test_prefill_first_admits_whole_prompts_up_to_the_token_budget() -> None:
    a, b, c = request(0, 30, 2), request(1, 30, 2), request(2, 10, 2)
    plan = ContinuousPolicy(limits(budget=64)).schedule(View(pool(), waiting=[a, b, c]))
    # 30 + 30 of 64 tokens: c's 10 do not fit the 4 left, and prompts are never split
    assert plan == StepPlan(prefill={a: 30, b: 30}, decode=False, admit=(a, b))
    assert plan is not None and list(plan.prefill) == [a, b]


def test_prefill_first_fills_only_the_free_seats_and_stalls_the_decodes() -> None:
    d = decoding(request(0, 6, 4))
    a, b = request(1, 10, 2), request(2, 10, 2)
    view = View(pool(), waiting=[a, b], running=[d])
    plan = ContinuousPolicy(limits(seqs=2)).schedule(view)
    assert plan == StepPlan(prefill={a: 10}, decode=False, admit=(a,))  # one seat left


def test_mixed_mode_runs_the_decodes_and_the_new_prompts_in_one_step() -> None:
    d = decoding(request(0, 6, 4))
    a, b = request(1, 10, 2), request(2, 10, 2)
    view = View(pool(), waiting=[a, b], running=[d])
    plan = ContinuousPolicy(limits(seqs=2), "mixed").schedule(view)
    assert plan == StepPlan(prefill={a: 10}, decode=True, admit=(a,))


def test_mixed_mode_takes_the_decodes_out_of_the_budget_first() -> None:
    d1, d2 = decoding(request(0, 6, 4)), decoding(request(1, 6, 4))
    a, b = request(2, 11, 2), request(3, 2, 1)
    view = View(pool(), waiting=[a, b], running=[d1, d2])
    plan = ContinuousPolicy(limits(budget=12), "mixed").schedule(view)
    # 10 tokens left after two decodes: a's 11 do not fit, and b waits behind a (head of line);
    # decodes alone repeat, and no newcomer could overtake the head, so arrivals do not cut them
    assert plan == StepPlan(decode=True, repeat=FOREVER, interruptible=False)


def test_the_watermark_keeps_blocks_free_while_requests_run() -> None:
    d = decoding(request(0, 6, 4))
    a = request(1, 36, 2)  # 9 blocks
    view = View(pool(free=10, total=20), waiting=[a], running=[d])
    kept_out = ContinuousPolicy(limits(watermark=2)).schedule(view)
    assert kept_out == StepPlan(decode=True, repeat=FOREVER, interruptible=False)  # 9 + 2 > 10
    let_in = ContinuousPolicy(limits(watermark=1)).schedule(view)
    assert let_in == StepPlan(prefill={a: 36}, decode=False, admit=(a,))  # 9 + 1 <= 10
    # with nothing running it would only keep out a request that fits the pool: none kept
    alone = request(2, 36, 2)
    plan = ContinuousPolicy(limits(watermark=2)).schedule(View(pool(10, 20), waiting=[alone]))
    assert plan == StepPlan(prefill={alone: 36}, decode=False, admit=(alone,))


def test_admission_stops_at_the_first_request_that_does_not_fit() -> None:
    d = decoding(request(0, 6, 4))
    big, small = request(1, 36, 2), request(2, 4, 1)  # 9 blocks, 1 block; 5 free
    blocked = View(pool(free=5, total=20), waiting=[big, small], running=[d])
    plan = ContinuousPolicy(limits()).schedule(blocked)
    assert plan == StepPlan(decode=True, repeat=FOREVER, interruptible=False)
    small_first = View(pool(free=5, total=20), waiting=[small, big], running=[d])
    plan = ContinuousPolicy(limits()).schedule(small_first)
    assert plan == StepPlan(prefill={small: 4}, decode=False, admit=(small,))


def test_with_nothing_runnable_there_is_no_plan() -> None:
    big = request(0, 36, 2)
    assert ContinuousPolicy(limits()).schedule(View(pool(free=5, total=20), waiting=[big])) is None
    assert ContinuousPolicy(limits()).schedule(View(pool())) is None


def test_decodes_alone_repeat_and_a_newcomer_may_cut_them_while_seats_are_free() -> None:
    d1, d2 = decoding(request(0, 6, 4)), decoding(request(1, 6, 4))
    plan = ContinuousPolicy(limits()).schedule(View(pool(), running=[d1, d2]))
    assert plan == StepPlan(decode=True, repeat=FOREVER, interruptible=True)
    full = ContinuousPolicy(limits(seqs=2)).schedule(View(pool(), running=[d1, d2]))
    assert full == StepPlan(decode=True, repeat=FOREVER, interruptible=False)


# -- preemption ------------------------------------------------------------------------------------


def two_needing_blocks() -> tuple[Request, Request, View]:
    # both have full blocks, one block is free: the walk in admission order gives it to a
    a = decoding(request(0, 8, 4))  # 8 computed, 2 blocks
    b = decoding(request(1, 4, 4))  # 4 computed, 1 block
    return a, b, View(pool(free=1, total=3), running=[a, b])


@pytest.mark.parametrize("mode", ["prefill_first", "mixed"])
def test_when_blocks_run_out_the_last_admitted_is_recomputed(mode: str) -> None:
    _, b, view = two_needing_blocks()
    plan = ContinuousPolicy(limits(), mode).schedule(view)
    # b frees its 1 block, but coming back needs 2 (4 prompt + 1 output tokens): not this step
    assert plan == StepPlan(decode=True, preempt=(Preemption(b, False),))


def test_a_swap_victim_goes_to_host_memory_when_it_fits_there() -> None:
    _, b, view = two_needing_blocks()
    policy = ContinuousPolicy(limits(preemption="swap"))
    assert view.swap_bytes(b) == 4  # one block of 4 tokens, 1 byte each
    assert policy.schedule(view) == StepPlan(decode=True, preempt=(Preemption(b, True),))
    view.host_bytes_free = 3  # it does not fit: recomputed instead
    assert policy.schedule(view) == StepPlan(decode=True, preempt=(Preemption(b, False),))


def test_the_most_kv_victim_is_the_largest_holder_and_the_other_gets_its_block() -> None:
    a, _, view = two_needing_blocks()
    plan = ContinuousPolicy(limits(victim="most_kv")).schedule(view)
    # a holds 2 blocks and the 1 planned for it; it goes, and b takes a block it freed
    assert plan == StepPlan(decode=True, preempt=(Preemption(a, False),))


def test_swapped_requests_come_back_before_anything_new_is_admitted() -> None:
    d = decoding(request(0, 6, 4))
    s1, s2 = swapped(request(1, 6, 4)), swapped(request(2, 6, 4))  # 2 blocks each on the host
    a = request(3, 4, 1)  # 1 block
    # each needs room for its 7 tokens (6 computed and its next): 2 blocks. With 3 free, s1
    # comes back and s2 does not; a waits for s2 though a block is left for it
    view = View(pool(free=3, total=20), waiting=[a], running=[d], swapped=[s1, s2])
    plan = ContinuousPolicy(limits(), "mixed").schedule(view)
    assert plan == StepPlan(decode=True, swap_in=(s1,), hold={s1: 7})
    # with every swapped request back, a joins the same step
    view = View(pool(free=10, total=20), waiting=[a], running=[d], swapped=[s1])
    plan = ContinuousPolicy(limits(), "mixed").schedule(view)
    assert plan == StepPlan(prefill={a: 4}, decode=True, admit=(a,), swap_in=(s1,), hold={s1: 7})


# -- chunked prefill -------------------------------------------------------------------------------


def test_a_chunk_that_fills_the_budget_repeats_while_the_prompt_lasts() -> None:
    d1, d2 = decoding(request(0, 6, 4)), decoding(request(1, 6, 4))
    c = request(2, 30, 2)
    plan = ChunkedPolicy(limits(budget=16)).schedule(View(pool(), waiting=[c], running=[d1, d2]))
    # 14 of the 16 tokens go to c's prompt; 30 // 14 = 2 such steps before it changes
    assert plan == StepPlan(prefill={c: 14}, decode=True, admit=(c,), repeat=2, interruptible=False)


def test_chunks_go_to_prompts_in_progress_first_then_new_ones_up_to_max_prefill_seqs() -> None:
    p = prefilling(request(0, 30, 2), 14)  # 4 blocks; 16 prompt tokens left
    e, f = request(1, 8, 2), request(2, 8, 2)
    view = View(pool(), waiting=[e, f], running=[p])
    plan = ChunkedPolicy(limits(budget=32, max_prefill_seqs=2)).schedule(view)
    assert plan == StepPlan(prefill={p: 16, e: 8}, decode=False, admit=(e,))
    assert plan is not None and list(plan.prefill) == [p, e]
    plan = ChunkedPolicy(limits(budget=20, max_prefill_seqs=2)).schedule(view)
    assert plan == StepPlan(prefill={p: 16, e: 4}, decode=False, admit=(e,))  # e's first chunk


def test_a_prompt_chunk_waits_for_blocks_holding_what_it_has() -> None:
    d = decoding(request(0, 8, 4))  # needs a block for its next token
    p = prefilling(request(1, 30, 2), 12)  # 3 blocks; its next 16 tokens need 4 more
    view = View(pool(free=3, total=10), running=[d, p])
    plan = ChunkedPolicy(limits(budget=17)).schedule(view)
    # d takes one of the 3 free blocks; the chunk needs 4 of the 2 left and waits
    assert plan == StepPlan(decode=True, repeat=FOREVER, interruptible=True)


# -- static batching -------------------------------------------------------------------------------


def static(**kw: object) -> StaticPolicy:
    args: dict = dict(max_batch_size=2, max_wait_s=1.0, max_model_len=100)
    args.update(kw)
    return StaticPolicy(**args)


def contiguous(free: int = 100) -> Pool:
    return Pool(100, free, block_size=1)  # contiguous reservations: one-token blocks


def test_static_waits_for_a_full_batch_or_the_oldest_to_wait_max_wait_s() -> None:
    policy = static()
    a = request(0, 10, 3, arrival_s=0.0)
    assert policy.schedule(View(contiguous(), waiting=[a], now=0.5)) is None
    assert policy.next_wakeup_s(View(contiguous(), waiting=[a], now=0.5)) == 1.0
    plan = policy.schedule(View(contiguous(), waiting=[a], now=1.0))
    assert plan == StepPlan(
        prefill={a: 10}, admit=(a,), hold={a: 13}, padding=Padding(), interruptible=False
    )
    b = request(1, 5, 1, arrival_s=0.25)
    plan = static().schedule(View(contiguous(), waiting=[a, b], now=0.25))  # a full batch
    assert plan == StepPlan(
        prefill={a: 10, b: 5}, admit=(a, b), hold={a: 13, b: 6}, interruptible=False
    )


def test_static_takes_at_most_max_batch_size_and_stops_at_the_first_reservation_too_big() -> None:
    a, b, c = request(0, 10, 5), request(1, 10, 5), request(2, 1, 1)
    plan = static(max_batch_size=2).schedule(View(contiguous(), waiting=[a, b, c]))
    assert plan == StepPlan(
        prefill={a: 10, b: 10}, admit=(a, b), hold={a: 15, b: 15}, interruptible=False
    )
    # 20 blocks free: b's 15 do not fit after a's, and c (2) waits behind b
    plan = static(max_batch_size=3).schedule(View(contiguous(free=20), waiting=[a, b, c]))
    assert plan == StepPlan(prefill={a: 10}, admit=(a,), hold={a: 15}, interruptible=False)
    # max_model_len reserved for each: c takes the whole pool
    reserve_all = static(max_batch_size=3, max_wait_s=0.0, kv_reservation="max_model_len")
    plan = reserve_all.schedule(View(contiguous(), waiting=[c, a]))
    assert plan == StepPlan(prefill={c: 1}, admit=(c,), hold={c: 100}, interruptible=False)


def test_static_padded_prompts_pay_for_the_longest() -> None:
    a, b = request(0, 10, 2), request(1, 6, 2)
    plan = static(pad_prompts=True).schedule(View(contiguous(), waiting=[a, b]))
    # 4 padded tokens; attention 10 * 10 * 2 - (100 + 36) = 64
    padding = Padding(num_seqs=0, context_tokens=4, prefill_tokens=4, attention_term=64)
    assert plan == StepPlan(
        prefill={a: 10, b: 6},
        admit=(a, b),
        hold={a: 12, b: 8},
        padding=padding,
        interruptible=False,
    )


def test_static_finished_members_keep_their_slot_as_padding() -> None:
    policy = static()
    a, b = request(0, 4, 1), request(1, 6, 3)
    assert policy.schedule(View(contiguous(), waiting=[a, b])) is not None  # the batch: a, b
    # the prompts ran: a emitted its only token and finished, b decodes on
    a.admit(0.0)
    a.compute(4, 0.0, 1.0)
    a.finish(1.0)
    b = decoding(b, block_size=1)
    plan = policy.schedule(View(contiguous(), running=[b], now=1.0))
    # a's slot decodes padding over its 4 + 1 tokens until b, the longest, is done
    padding = Padding(num_seqs=1, context_tokens=5)
    assert plan == StepPlan(decode=True, padding=padding, repeat=FOREVER, interruptible=False)


# -- the stand-in answers as the engine does -------------------------------------------------------


@pytest.mark.parametrize("mode", ["prefill_first", "mixed", "chunked"])
def test_the_stand_in_view_of_an_engine_state_gets_the_engine_plan(mode: str) -> None:
    # 8 blocks of 4 tokens for sequences of up to 20: decodes run out of blocks, and evict
    bench = make_continuous(num_blocks=8, block_size=4, max_num_batched_tokens=16, mode=mode)
    requests = make_requests((8, 12), (6, 14), (5, 10), (4, 9), (9, 2))
    for r in requests:
        bench.add_request(r)
    now = 0.0
    compared = 0
    while step(bench, now, num_steps=1) is not None:
        now += 1.0
        inst = bench.instance.engine
        view = View(
            Pool(bench.kv.num_total, bench.kv.num_free, bench.kv.block_size),
            waiting=list(inst.waiting.ordered()),
            running=inst.running,
            swapped=list(inst.swapped),
            now=now,
        )
        assert view.num_decoding == inst.num_decoding
        assert [r.id for r in view.prefilling] == [r.id for r in inst.prefilling]
        assert view.decode_block_demand() == inst.decode_block_demand()
        assert bench.policy.schedule(view) == bench.plan(now)
        compared += 1
    assert compared >= 20 and all(r.is_finished for r in requests)
    assert sum(r.num_preemptions for r in requests) >= 3


# -- prefix caching and KV tiers, asked of the pool ----------------------------------------------


def with_content(req: Request, ids: list[int]) -> Request:
    n, out = req.num_prompt_tokens, req.max_output_tokens
    return Request(req.id, req.arrival_s, n, out, content=ids, content_unit=4, content_tokens=n)


def test_an_admission_starts_from_gpu_hits_then_loads_the_tier_run_after_them() -> None:
    a = with_content(request(0, 16, 2), [1, 2, 3, 4])
    h = a.block_hashes(4)
    # block 0 is cached and in use, block 1 cached and free, blocks 2 and 3 in a tier below
    kv = Pool(100, 50, in_use=[h[0]], cached_free=[h[1]], lower=[h[2], h[3]])
    plan = ContinuousPolicy(limits()).schedule(View(kv, waiting=[a]))
    # at most 3 blocks are hits (its last token is computed): 2 on the GPU, 1 loaded
    assert plan == StepPlan(prefill={a: 4}, decode=False, admit=(a,), cached={a: 2},
                            loaded={a: 1})  # fmt: skip


def test_tier_loads_need_fresh_blocks_within_the_free_count() -> None:
    a = with_content(request(0, 16, 2), [1, 2, 3, 4])
    h = a.block_hashes(4)
    # 4 blocks for 16 tokens: 1 cached in use, then 3 new (2 loaded, 1 computed); 2 free
    kv = Pool(100, 2, in_use=[h[0]], lower=[h[1], h[2]])
    assert ContinuousPolicy(limits()).schedule(View(kv, waiting=[a])) is None
    kv.num_free = 3
    plan = ContinuousPolicy(limits()).schedule(View(kv, waiting=[a]))
    assert plan is not None and plan.cached == {a: 1} and plan.loaded == {a: 2}
