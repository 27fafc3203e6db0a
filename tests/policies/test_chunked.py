"""Chunked prefill (Sarathi-Serve) through the whole simulator: exact schedules and stalls.

The stall test checks the point of chunking: a decoding request that meets a late long prompt
waits for a whole-prompt prefill under prefill-first continuous batching (the stall grows with
the prompt), but only for one chunk's step under `chunked`. Expected values are hand-computed
from the cost formula
    T = t_mem + t_flop * num_tokens + t_kv * sum_context_tokens + t_attn * sum(chunk * context)
where each scheduled request contributes its context *after* the step (a decode: computed + 1).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import make_continuous, make_requests, step, tokens
from scenario_factory import run, unit_trace

from sim.metrics.steps import expand_steps

C = {
    "t_mem_s": 0.01,
    "t_flop_s_per_token": 1e-5,
    "t_kv_s_per_token": 1e-7,
    "t_attn_s_per_token2": 1e-9,
}
PROFILE = {"coefficients": C}
P0, O0 = 16, 600  # the decoding request
ARRIVAL = 0.5  # the long prompt arrives while it decodes


def cost(num_tokens: int, context: int, attention: int = 0) -> float:
    return (
        C["t_mem_s"]
        + C["t_flop_s_per_token"] * num_tokens
        + C["t_kv_s_per_token"] * context
        + C["t_attn_s_per_token2"] * attention
    )


def decode_until(t: float, computed: int, arrival: float) -> tuple[float, int]:
    """r0 decodes alone until the first step boundary at or after `arrival`."""
    while t < arrival:
        t += cost(1, computed + 1)
        computed += 1
    return t, computed


def expected_stall(mode: str, prompt: int, budget: int) -> float:
    t = cost(P0, P0, P0 * P0)  # r0's prefill
    t, computed = decode_until(t, P0, ARRIVAL)
    if mode == "prefill_first":  # r0 stalls for the whole prompt, then decodes once more
        return cost(prompt, prompt, prompt * prompt) + cost(1, computed + 1)
    stalls = []
    done = 0
    while done < prompt:  # each step: r0's decode token, then a chunk of what is left
        n = min(prompt - done, budget - 1)
        stalls.append(cost(1 + n, computed + 1 + done + n, n * (done + n)))
        done += n
        computed += 1
    return max(stalls)


def stall_run(tmp_path: Path, policy: dict, prompt: int) -> dict[str, float]:
    rows = [(0.0, P0, O0), (ARRIVAL, prompt, 1)]
    res = run(unit_trace(tmp_path, rows, policy, profile=PROFILE, model="llama-3-8b"))
    req = res.requests.set_index("id")
    assert req["finish_s"].notna().all()
    summary = res.summary()
    # r1 has one output token: r0's longest gap is the only stall, and the run's longest one
    assert summary["stall_p50_s"] == summary["stall_p99_s"] == req.loc[0, "max_itl_s"]
    assert summary["itl_max_s"] == req.loc[0, "max_itl_s"]
    return {"stall": float(req.loc[0, "max_itl_s"]), "ttft": float(req.loc[1, "ttft_s"])}


@pytest.mark.parametrize("prompt", [1024, 2048, 4096])
def test_chunked_bounds_the_decode_stall_that_prefill_first_lets_grow(
    tmp_path: Path, prompt: int
) -> None:
    budget = 512
    first = stall_run(tmp_path, {"name": "continuous", "max_num_batched_tokens": 8192}, prompt)
    chunked = stall_run(tmp_path, {"name": "chunked", "max_num_batched_tokens": budget}, prompt)
    assert first["stall"] == pytest.approx(expected_stall("prefill_first", prompt, 0), rel=1e-12)
    assert chunked["stall"] == pytest.approx(expected_stall("chunked", prompt, budget), rel=1e-12)
    # one step of a full budget at the largest context this case reaches bounds the stall
    bound = cost(budget, 2 * (P0 + O0) + prompt, (budget - 1) * prompt)
    assert chunked["stall"] <= bound < first["stall"]
    # the price: the long prompt's first token comes later
    assert chunked["ttft"] > first["ttft"]


def test_prefill_first_stall_grows_with_the_prompt_and_chunked_stays_flat(
    tmp_path: Path,
) -> None:
    first = [expected_stall("prefill_first", p, 0) for p in (1024, 2048, 4096)]
    chunked = [expected_stall("chunked", p, 512) for p in (1024, 2048, 4096)]
    assert first[0] < first[1] < first[2] and first[2] > 1.7 * first[0]
    assert max(chunked) < 1.25 * min(chunked) and max(chunked) < first[0]
    measured = stall_run(tmp_path, {"name": "continuous", "max_num_batched_tokens": 8192}, 4096)
    assert measured["stall"] == pytest.approx(first[2], rel=1e-12)


# --- an exact chunked schedule: the simulator against the policy driven by hand -------------

POLICY = {"name": "chunked", "max_num_seqs": 4, "max_num_batched_tokens": 8, "block_size": 4}
ROWS = [(0.0, 10, 3), (0.0, 5, 2), (2.0, 3, 2)]


def test_chunked_schedule_by_hand_matches_the_policy() -> None:
    policy = make_continuous(max_num_seqs=4, max_num_batched_tokens=8, block_size=4, mode="chunked")
    r0, r1, r2 = make_requests((10, 3), (5, 2), (3, 2))
    policy.add_request(r0, 0.0)
    policy.add_request(r1, 0.0)
    assert tokens(step(policy, 0.0)) == {0: 8}  # r0's first chunk takes the whole budget
    assert tokens(step(policy, 1.0)) == {0: 2, 1: 5}  # r0 finishes its prompt, r1 whole
    policy.add_request(r2, 2.0)
    assert tokens(step(policy, 2.0)) == {0: 1, 1: 1, 2: 3}  # decodes first, then r2
    assert r1.finish_s == 3.0
    assert tokens(step(policy, 3.0)) == {0: 1, 2: 1}
    assert (r0.finish_s, r2.finish_s) == (4.0, 4.0)
    assert (r0.first_token_s, r1.first_token_s, r2.first_token_s) == (2.0, 2.0, 3.0)
    assert step(policy, 4.0) is None and policy.kv.num_free == policy.kv.num_total


def test_chunked_schedule_through_the_simulator(tmp_path: Path) -> None:
    res = run(unit_trace(tmp_path, ROWS, POLICY))  # unit profile: every step 1 s
    steps = res.steps
    assert steps["start_s"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert steps["num_steps"].tolist() == [1, 1, 1, 1]
    assert steps["num_prefill_tokens"].tolist() == [8, 7, 3, 0]
    assert steps["num_decode_tokens"].tolist() == [0, 0, 2, 2]
    assert steps["num_seqs"].tolist() == [1, 2, 3, 2]
    # context after each step: r0 8 | r0 10 + r1 5 | r0 11 + r1 6 + r2 3 | r0 12 + r2 4
    assert steps["sum_context_tokens"].tolist() == [8, 15, 20, 16]
    req = res.requests.set_index("id")
    assert req["first_scheduled_s"].tolist() == [0.0, 1.0, 2.0]
    assert req["first_token_s"].tolist() == [2.0, 2.0, 3.0]
    assert req["finish_s"].tolist() == [4.0, 3.0, 4.0]
    assert req["max_itl_s"].tolist() == [1.0, 1.0, 1.0]


def test_chunked_attention_term_prices_each_chunk_against_its_context(tmp_path: Path) -> None:
    res = run(unit_trace(tmp_path, ROWS[:2], POLICY, profile=PROFILE))
    steps = res.steps
    assert steps["num_steps"].tolist() == [1, 1, 1, 1]
    durations = steps["duration_s"].tolist()
    assert durations[0] == pytest.approx(cost(8, 8, 8 * 8), rel=1e-12)
    # r0's second chunk (2 tokens over 10 of context) and r1's whole prompt (5 over 5)
    assert durations[1] == pytest.approx(cost(7, 15, 2 * 10 + 5 * 5), rel=1e-12)
    assert durations[2] == pytest.approx(cost(2, 11 + 6), rel=1e-12)  # two decodes
    assert durations[3] == pytest.approx(cost(1, 12), rel=1e-12)  # r0's last token


def test_prompts_over_the_budget_are_chunked_not_rejected(tmp_path: Path) -> None:
    rows = [(0.0, 20, 2), (0.0, 4, 2)]
    chunked = run(unit_trace(tmp_path, rows, {**POLICY}))
    assert chunked.summary()["num_rejected"] == 0
    steps = expand_steps(chunked.steps)
    assert steps["num_prefill_tokens"].tolist()[:3] == [8, 8, 8]  # 8, 8, then 4 + r1's 4
    assert chunked.steps["num_steps"].tolist()[0] == 2  # r0's two full chunks: one run
    req = chunked.requests.set_index("id")
    assert req.loc[0, "first_token_s"] == 3.0 and req.loc[1, "first_token_s"] == 3.0
    cont = {"name": "continuous", "max_num_seqs": 4, "max_num_batched_tokens": 8, "block_size": 4}
    rejected = run(unit_trace(tmp_path, rows, cont))
    req = rejected.requests.set_index("id")
    assert req["rejected"].tolist() == [True, False]
    assert rejected.summary()["num_rejected"] == 1


def test_a_prompts_chunk_is_at_most_the_long_prefill_threshold() -> None:
    # vLLM's long_prefill_token_threshold; with data-parallel attention a rank's chunk: two long
    # prompts share each step's budget instead of the first taking it whole
    policy = make_continuous(max_num_seqs=4, max_num_batched_tokens=8, block_size=4,
                             mode="chunked", max_chunk_tokens=4)  # fmt: skip
    r0, r1 = make_requests((10, 2), (6, 2))
    policy.add_request(r0, 0.0)
    policy.add_request(r1, 0.0)
    assert tokens(step(policy, 0.0)) == {0: 4, 1: 4}
    assert tokens(step(policy, 1.0)) == {0: 4, 1: 2}  # r1's prompt ends under the threshold
    assert tokens(step(policy, 2.0)) == {1: 1, 0: 2}  # r1 decodes first, then r0's last chunk
    assert (r0.first_token_s, r1.first_token_s) == (3.0, 2.0)
    # without it r0's first chunk takes the whole budget, as above
    whole = make_continuous(max_num_seqs=4, max_num_batched_tokens=8, block_size=4, mode="chunked")
    r0, r1 = make_requests((10, 2), (6, 2))
    whole.add_request(r0, 0.0)
    whole.add_request(r1, 0.0)
    assert tokens(step(whole, 0.0)) == {0: 8}


def test_the_threshold_reaches_the_policy_from_the_scenario(tmp_path: Path) -> None:
    policy = {**POLICY, "long_prefill_token_threshold": 4}
    res = run(unit_trace(tmp_path, [(0.0, 10, 2), (0.0, 6, 2)], policy))
    steps = expand_steps(res.steps)
    assert steps["num_prefill_tokens"].tolist()[:3] == [8, 6, 2]
    assert steps["num_seqs"].tolist()[:3] == [2, 2, 2]
