"""Speculative decoding: exact schedules on hand cases, the acceptance model against its
formula, the dynamic rules, the proposal's costs, the metrics' definitions, and the guarantee
that a run without speculation is today's run exactly.

Hand cases use per-position rates of 0 and 1, which make acceptance deterministic: with rates
`[1, 1, 0]` a request proposing 3 tokens has exactly 2 accepted and emits 3 per step.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from factories import make_continuous, make_requests, step, tokens
from helpers_cluster import pd_scenario, run_with_cluster
from scenario_factory import run, scenario, tiny_hardware, tiny_model

from sim.core.acceptance import AcceptanceSampler, expected_emitted, thresholds
from sim.costs.proposal import ProposalCost
from sim.policies.speculation import SpeculationRule
from sim.scenario.load import load_scenario_dict
from sim.simulate import simulate

COEFFS = {
    "t_mem_s": 0.01,
    "t_flop_s_per_token": 1e-4,
    "t_kv_s_per_token": 1e-5,
    "t_attn_s_per_token2": 1e-7,
}


def sampler(rates: list[float], window: int = 0, seed: int = 0) -> AcceptanceSampler:
    """Per-position rates (the last repeating, up to 16 positions)."""
    per_position = tuple(rates[min(j, len(rates) - 1)] for j in range(16))
    return AcceptanceSampler(seed, by_tier={}, default=thresholds(per_position), window=window)


def spec_bench(k: int, rates: list[float], proposal_s: float = 0.0, **kw):
    """A continuous bench whose decodes speculate k tokens (ngram proposals of `proposal_s`)."""
    rule_kw = {
        key: kw.pop(key) for key in ("disable_by_batch_size", "min_acceptance_rate") if key in kw
    }
    window = kw.pop("window", 0)
    return make_continuous(
        speculation=SpeculationRule(k, **rule_kw),
        acceptance=sampler(rates, window),
        proposer=ProposalCost("ngram", ngram_s=proposal_s),
        **kw,
    )


# -- exact schedules --------------------------------------------------------------------------


def test_each_step_verifies_k_plus_one_and_emits_the_accepted_and_one_more() -> None:
    bench = spec_bench(3, [1.0, 1.0, 0.0], block_size=4, num_blocks=100)
    a, b = make_requests((8, 10), (4, 3))
    bench.add_request(a)
    bench.add_request(b)
    first = step(bench, 0.0)
    assert tokens(first) == {0: 8, 1: 4} and first.emitted == {0: 1, 1: 1}
    # A has 9 tokens left: 3 lookahead; B has 2 left: 1 lookahead (it never emits past its end)
    s1 = step(bench, 1.0)
    assert s1.lookahead == {0: 3, 1: 1}
    assert tokens(s1) == {0: 4, 1: 2}
    assert s1.num_decode_tokens == 6 and s1.num_tokens == 6 and s1.num_seqs == 2
    assert s1.num_steps == 1  # a speculative step is never repeated
    assert s1.emitted == {0: 3, 1: 2}  # A: 2 of 3 accepted + 1; B: 1 of 1 + 1
    assert b.is_finished and b.finish_s == 2.0
    # A's context after the step: computed 8 + 1 + 3 lookahead; B's 4 + 1 + 1
    assert s1.sum_context_tokens == 12 + 6
    s2 = step(bench, 2.0)
    assert tokens(s2) == {0: 4} and s2.emitted == {0: 3}
    s3 = step(bench, 3.0)  # 3 tokens left: 2 lookahead, both accepted, and its own
    assert tokens(s3) == {0: 3} and s3.lookahead == {0: 2} and s3.emitted == {0: 3}
    assert a.is_finished and a.finish_s == 4.0 and a.num_output_tokens == 10
    assert step(bench, 4.0) is None
    assert (a.num_spec_steps, a.num_spec_proposed, a.num_spec_accepted) == (3, 8, 6)
    assert (b.num_spec_steps, b.num_spec_proposed, b.num_spec_accepted) == (1, 1, 1)
    assert bench.kv.num_free == bench.kv.num_total


def test_lookahead_blocks_are_held_for_the_step_and_the_rejected_ones_freed() -> None:
    bench = spec_bench(3, [0.0], block_size=4, num_blocks=100)  # nothing is ever accepted
    (a,) = make_requests((11, 6))
    bench.add_request(a)
    step(bench, 0.0)  # prefill: 11 computed, 3 blocks
    assert a.kv_blocks == 3
    inst = bench.instance
    during: list[tuple[dict[int, int], int, int]] = []

    def watch(instance: Any, run: Any, ended: bool) -> None:
        if not ended:  # the step has started: its blocks are held
            during.append((tokens_of(run), a.kv_blocks, bench.kv.num_used))

    inst.on_step = watch
    inst.step_by_hand(inst.engine.now)
    # its next token and 3 lookahead: 15 tokens, 4 blocks during the step
    assert during == [({0: 4}, 4, 4)]
    # none accepted: it emitted its own token only; the block holding only rejected slots is free
    assert a.num_output_tokens == 2 and a.num_computed_tokens == 12
    assert a.kv_blocks == 3 and bench.kv.num_used == 3
    assert inst.engine.usage.stored_tokens == 12
    assert list(inst.engine.steps.columns()["num_spec_accepted"]) == [0, 0]
    assert list(inst.engine.steps.columns()["num_spec_proposed"]) == [0, 3]


def tokens_of(run) -> dict[int, int]:
    return {r.id: 1 + run.plan.speculate.get(r, 0) for r in run.spec.decoders}


def test_verification_tokens_count_against_the_token_budget_before_prompts() -> None:
    # chunked: 3 decodes take 3 of the 8 tokens; the lookahead takes the 5 left in admission
    # order (the first gets 4, the second 1, the third none), so the waiting prompt gets nothing
    bench = spec_bench(4, [1.0], mode="chunked", max_num_batched_tokens=8, block_size=4)
    reqs = make_requests((2, 20), (2, 20), (2, 20), (6, 5))
    for r in reqs[:3]:
        bench.add_request(r)
    step(bench, 0.0)  # the three prompts, chunked into one step (2 + 2 + 2)
    bench.add_request(reqs[3], 1.0)
    s = step(bench, 1.0)
    assert s.lookahead == {0: 4, 1: 1}
    assert tokens(s) == {0: 5, 1: 2, 2: 1} and s.num_tokens == 8
    assert not s.plan.prefill  # the prompt waits: the budget went to the running requests
    assert s.emitted == {0: 5, 1: 2, 2: 1}


def test_lookahead_takes_only_free_blocks_and_never_preempts() -> None:
    # 5 blocks of 4. After the prompts A holds 3 blocks (9 tokens) and B 1 (3 tokens): one
    # block is free. A (admitted first) takes it for its 4 lookahead tokens (9 + 1 + 4 = 14
    # slots); B's next token fits its block but no lookahead does, so B just decodes
    bench = spec_bench(4, [1.0], block_size=4, num_blocks=5)
    a, b = make_requests((9, 8), (3, 4))
    bench.add_request(a)
    bench.add_request(b)
    step(bench, 0.0)
    assert bench.kv.num_free == 1
    s = step(bench, 1.0)
    assert s.lookahead == {0: 4} and tokens(s) == {0: 5, 1: 1} and not s.preempted
    assert s.emitted == {0: 5, 1: 1}
    assert a.kv_blocks == 4 and b.kv_blocks == 1 and bench.kv.num_free == 0
    s = step(bench, 2.0)  # A: 14 computed in 16 slots, 2 left: 1 lookahead fits its blocks
    assert s.lookahead.get(0) == 1


def test_disable_by_batch_size_turns_speculation_off_as_vllm_does() -> None:
    # vLLM: no speculation while running_queue_size >= disable_by_batch_size
    bench = spec_bench(2, [1.0], disable_by_batch_size=2, block_size=4)
    reqs = make_requests((4, 30), (4, 8))
    for r in reqs:
        bench.add_request(r)
    step(bench, 0.0)
    s = step(bench, 1.0)  # two running: off, and the plain decodes run as one coalesced run
    assert s.lookahead == {} and s.num_steps > 1 and s.plan.repeat > 1
    assert reqs[1].is_finished  # the run ends at the first finish
    s = step(bench, 1.0 + s.num_steps)  # one running: on again
    assert s.lookahead == {0: 2} and s.emitted == {0: 3} and s.num_steps == 1


def test_a_request_whose_acceptance_falls_below_the_floor_stops_speculating() -> None:
    bench = spec_bench(2, [0.0], min_acceptance_rate=0.2, window=3, block_size=4)
    (a,) = make_requests((4, 30))
    bench.add_request(a)
    step(bench, 0.0)
    proposed = [step(bench, 1.0 + i).lookahead for i in range(5)]
    # its window fills after 3 verify steps with nothing accepted: it proposes no more
    assert proposed == [{0: 2}, {0: 2}, {0: 2}, {}, {}]
    assert a.spec_recent_acceptance == 0.0


def test_acceptance_above_the_floor_keeps_speculating() -> None:
    bench = spec_bench(2, [0.6], min_acceptance_rate=0.05, window=16, block_size=4)
    (a,) = make_requests((4, 400))
    bench.add_request(a)
    step(bench, 0.0)
    t = 1.0
    while not a.is_finished:
        last = step(bench, t)
        t += 1.0
    # it proposed in every step but the last (one token left: nothing to propose)
    assert a.num_spec_steps == t - 2 and last.lookahead == {}
    rate = a.num_spec_accepted / a.num_spec_proposed
    assert 0.4 < rate < 0.56  # a = 0.6, k = 2: E[accepted] / k = (0.6 + 0.36) / 2 = 0.48


# -- the acceptance model ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rates", "k"),
    [([0.5], 2), ([0.7], 4), ([0.9], 4), ([0.8], 1), ([0.6], 6), ([0.9, 0.7, 0.5], 3)],
    ids=lambda v: str(v),
)
def test_mean_emitted_per_verify_step_matches_the_formula_within_one_percent(rates, k) -> None:
    raw = scenario(
        policy={
            "name": "continuous",
            "max_num_seqs": 32,
            "max_num_batched_tokens": 4096,
            "speculative": {
                "method": "ngram",
                "num_speculative_tokens": k,
                "acceptance": {"rate": rates if len(rates) > 1 else rates[0]},
            },
        },
        workload={
            "num_requests": 32,
            "arrival": {"process": "poisson", "rate": 100.0},
            "prompt_tokens": {"dist": "fixed", "value": 16},
            "output_tokens": {"dist": "fixed", "value": 8000},
        },
        coefficients=COEFFS,
        model=tiny_model(),
        hardware=tiny_hardware(300_000),
    )
    res = run(raw)
    steps = res.steps
    # steps where every speculating request proposed all k (none near its end)
    full = steps[
        (steps["num_spec_seqs"] > 0) & (steps["num_spec_proposed"] == k * steps["num_spec_seqs"])
    ]
    seq_steps = full["num_spec_seqs"].sum()
    assert seq_steps > 60_000
    mean = (full["num_spec_accepted"].sum() + seq_steps) / seq_steps
    per_position = tuple(rates[min(j, len(rates) - 1)] for j in range(k))
    a = per_position[0]
    formula = (1 - a ** (k + 1)) / (1 - a) if len(rates) == 1 else expected_emitted(per_position)
    assert mean == pytest.approx(formula, rel=0.01)
    # the run-level metric (capped steps near the ends included) agrees closely too
    summary = res.summary()
    assert summary["spec_tokens_per_step"] == pytest.approx(formula, rel=0.02)


def test_the_formula_is_the_inverse_cdf_of_one_uniform() -> None:
    assert expected_emitted((0.7,) * 4) == pytest.approx((1 - 0.7**5) / 0.3)
    s = sampler([1.0, 1.0, 0.0])
    req = make_requests((1, 10))[0]
    assert [s.accepted(req, k) for k in range(4)] == [0, 1, 2, 2]
    assert sampler([0.0]).accepted(req, 5) == 0
    assert sampler([1.0]).accepted(req, 5) == 5


def test_draws_are_a_function_of_seed_request_and_step_only() -> None:
    a, b = sampler([0.5], seed=1), sampler([0.5], seed=1)
    draws = [a.uniform(7, n) for n in range(1000)]
    assert draws == [b.uniform(7, n) for n in range(1000)]
    assert draws != [sampler([0.5], seed=2).uniform(7, n) for n in range(1000)]
    assert draws != [a.uniform(8, n) for n in range(1000)]
    u = np.asarray([a.uniform(i, n) for i in range(200) for n in range(200)])
    assert u.min() >= 0.0 and u.max() < 1.0
    # uniform: each tenth holds a tenth of 40,000 draws (within 5 standard deviations)
    counts = np.histogram(u, bins=10, range=(0.0, 1.0))[0]
    assert (abs(counts - 4000) < 5 * math.sqrt(4000 * 0.9)).all()


def _tier_scenario(acceptance: dict, **policy) -> dict:
    return scenario(
        policy={
            "name": "chunked",
            "max_num_seqs": 16,
            "max_num_batched_tokens": 512,
            "speculative": {
                "method": "ngram",
                "num_speculative_tokens": 3,
                "acceptance": acceptance,
            },
            **policy,
        },
        workload={
            "num_requests": 300,
            "arrival": {"process": "poisson", "rate": 30.0},
            "mix": [
                {
                    "name": "chat",
                    "weight": 1,
                    "tier": "chat",
                    "prompt_tokens": {"dist": "fixed", "value": 20},
                    "output_tokens": {"dist": "fixed", "value": 200},
                },
                {
                    "name": "code",
                    "weight": 1,
                    "tier": "code",
                    "prompt_tokens": {"dist": "fixed", "value": 20},
                    "output_tokens": {"dist": "fixed", "value": 200},
                },
            ],
        },
        coefficients=COEFFS,
        model=tiny_model(),
        hardware=tiny_hardware(100_000),
    )


def test_per_request_rates_are_drawn_per_tier() -> None:
    res = run(
        _tier_scenario(
            {
                "distribution": {"dist": "beta", "mean": 0.8, "concentration": 20},
                "tiers": {"chat": {"distribution": {"dist": "uniform", "low": 0.1, "high": 0.3}}},
            }
        )
    )
    req = res.requests
    rate = req["num_spec_accepted"] / req["num_spec_proposed"]
    chat, code = rate[req["tier"] == "chat"], rate[req["tier"] == "code"]
    # k = 3: acceptance per proposed token is (a + a^2 + a^3) / 3
    assert chat.mean() == pytest.approx(
        np.mean([(a + a**2 + a**3) / 3 for a in (0.1, 0.2, 0.3)]), abs=0.03
    )
    assert code.mean() > 0.55
    assert code.std() > chat.std() / 3  # each request has a rate of its own


def test_turning_speculation_on_moves_no_other_random_column() -> None:
    on = run(_tier_scenario({"distribution": {"dist": "beta", "mean": 0.6}}))
    raw = _tier_scenario({"rate": 0.6})
    del raw["policy"]["speculative"]
    off = run(raw)
    cols = ["id", "arrival_s", "num_prompt_tokens", "max_output_tokens", "tier"]
    pd.testing.assert_frame_equal(on.requests[cols], off.requests[cols])


# -- off is off ---------------------------------------------------------------------------------


def _pressure(**speculative) -> dict:
    policy = {
        "name": "continuous",
        "max_num_seqs": 12,
        "block_size": 8,
        "max_num_batched_tokens": 512,
        "mode": "mixed",
    }
    if speculative:
        policy["speculative"] = {"method": "ngram", "acceptance": {"rate": 0.7}, **speculative}
    return scenario(
        policy=policy,
        workload={
            "num_requests": 300,
            "arrival": {"process": "poisson", "rate": 12.0},
            "prompt_tokens": {"dist": "uniform", "low": 10, "high": 120},
            "output_tokens": {"dist": "lognormal", "median": 30, "sigma": 1.0, "max": 200},
        },
        seed=7,
        coefficients=COEFFS,
        model=tiny_model(),
        hardware=tiny_hardware(1200),
    )


OLD_STEP_COLUMNS = [
    "instance",
    "start_s",
    "end_s",
    "num_steps",
    "duration_s",
    "duration_increment_s",
    "num_seqs",
    "num_active_seqs",
    "num_tokens",
    "num_prefill_tokens",
    "num_decode_tokens",
    "sum_context_tokens",
    "context_growth_per_step",
    "kv_blocks_used",
    "kv_block_seconds",
    "num_waiting",
    "num_running",
    "num_preempted",
    "kv_stored_token_seconds",
    "kv_fragment_token_seconds",
    "swap_s",
    "kv_blocks_cached",
]


@pytest.mark.parametrize(
    "speculative",
    [{"num_speculative_tokens": 0}, {"num_speculative_tokens": 3, "disable_by_batch_size": 1}],
    ids=["k0", "always-disabled"],
)
def test_speculation_off_is_todays_run_exactly(speculative) -> None:
    base = run(_pressure())
    off = run(_pressure(**speculative))
    assert base.requests["num_preemptions"].sum() > 0  # the run is under KV pressure
    pd.testing.assert_frame_equal(base.requests, off.requests)
    pd.testing.assert_frame_equal(base.steps, off.steps)
    pd.testing.assert_frame_equal(base.itl, off.itl)
    assert (off.steps["num_spec_seqs"] == 0).all()
    a, b = base.summary(), off.summary()
    for key in a:
        assert a[key] == b[key] or (math.isnan(a[key]) and math.isnan(b[key])), key
    assert base.steps.columns[: len(OLD_STEP_COLUMNS)].tolist() == OLD_STEP_COLUMNS


def test_speculation_on_changes_the_run() -> None:
    on = run(_pressure(num_speculative_tokens=3))
    assert on.summary()["spec_acceptance_rate"] > 0.4
    assert on.summary()["tpot_p50_s"] < run(_pressure()).summary()["tpot_p50_s"]


@pytest.mark.parametrize("policy", ["mixed", "prefill_first", "chunked"])
def test_stepwise_engine_matches_coalesced_runs_with_speculation(policy) -> None:
    raw = _pressure(num_speculative_tokens=3, disable_by_batch_size=4, min_acceptance_rate=0.5)
    if policy == "chunked":
        raw["policy"] = {**raw["policy"], "name": "chunked"}
        del raw["policy"]["mode"]
    else:
        raw["policy"]["mode"] = policy
    raw["variants"] = {"coalesced": None, "stepwise": {"engine": {"coalesce_decode_steps": False}}}
    res = simulate(load_scenario_dict(raw))
    fast, slow = res["coalesced"], res["stepwise"]
    assert (fast.steps["num_steps"] > 1).any()  # runs coalesced while speculation was off
    assert (fast.steps["num_spec_seqs"] > 0).any()
    assert fast.requests["num_preemptions"].sum() > 0
    assert (slow.steps["num_steps"] == 1).all()
    for col in ("first_scheduled_s", "first_token_s", "finish_s", "max_itl_s"):
        np.testing.assert_allclose(fast.requests[col], slow.requests[col], rtol=1e-9, err_msg=col)
    for col in (
        "num_output_tokens",
        "num_preemptions",
        "num_spec_steps",
        "num_spec_proposed",
        "num_spec_accepted",
    ):
        assert (fast.requests[col] == slow.requests[col]).all(), col
    assert fast.itl["count"].sum() == slow.itl["count"].sum()
    sf, ss = fast.summary(), slow.summary()
    assert sf.keys() == ss.keys()
    for key in sf:
        assert sf[key] == pytest.approx(ss[key], rel=1e-9, nan_ok=True), key


# -- metrics ------------------------------------------------------------------------------------


def test_per_token_gaps_divide_an_emission_and_stalls_keep_it_whole() -> None:
    bench = spec_bench(3, [1.0, 1.0, 0.0], block_size=4)
    (a,) = make_requests((8, 7))
    bench.add_request(a)
    step(bench, 0.0)  # first token at 1
    step(bench, 1.0)  # 3 tokens at 2
    step(bench, 5.0)  # 3 tokens at 6: a gap of 4 s
    assert a.is_finished
    gaps, counts, sizes = bench.instance.engine.itl.arrays()
    sample = sorted(zip(gaps.tolist(), counts.tolist(), sizes.tolist(), strict=True))
    assert sample == [(pytest.approx(1 / 3), 3, 3), (pytest.approx(4 / 3), 3, 3)]
    assert counts.sum() == a.num_output_tokens - 1
    assert (gaps * counts).sum() == pytest.approx(a.finish_s - a.first_token_s)
    assert a.max_itl_s == 4.0  # the longest wait between two emissions, undivided


def test_summary_reports_acceptance_tokens_per_step_and_time_shares() -> None:
    raw = _pressure(num_speculative_tokens=2)
    raw["policy"]["speculative"] = {
        "method": "heads",
        "num_speculative_tokens": 2,
        "acceptance": {"rate": [1.0, 0.0]},
        "head_fraction": 0.5,
    }
    res = run(raw)
    s, steps = res.summary(), res.steps
    # rates [1.0, 0.0]: every speculating sequence's first proposal is accepted and its second
    # (if any) rejected, so each of its steps accepts exactly 1: the accepted count is the number
    # of speculating sequence-steps and 2.0 tokens per step is exact, not an estimate
    req = res.requests
    seq_steps = int(steps["num_spec_seqs"].sum())
    proposed = int(req["num_spec_proposed"].sum())
    assert seq_steps > 100 and int(req["num_spec_steps"].sum()) == seq_steps
    assert s["num_spec_accepted"] == seq_steps and s["num_spec_proposed"] == proposed
    assert s["spec_tokens_per_step"] == 2.0
    assert s["spec_acceptance_rate"] == seq_steps / proposed
    assert seq_steps < proposed < 2 * seq_steps  # the last steps of a request propose 1
    busy = s["busy_s"]
    assert s["spec_proposal_time_share"] == pytest.approx(steps["spec_proposal_s"].sum() / busy)
    assert s["spec_verify_time_share"] == pytest.approx(steps["spec_verify_s"].sum() / busy)
    assert 0 < s["spec_proposal_time_share"] < s["spec_verify_time_share"] <= 1.0
    spec = steps[steps["num_spec_seqs"] > 0]
    # a step lasts its proposals plus its target's verification (no swaps here)
    np.testing.assert_allclose(
        spec["duration_s"], spec["spec_proposal_s"] + spec["spec_verify_s"] + spec["swap_s"]
    )
    assert req["num_spec_accepted"].sum() == s["num_spec_accepted"]
    # emission gaps: each row is `count` tokens of emissions of `tokens` tokens each, a whole
    # gap of gap_s * tokens; expanded into one value per emission, numpy gives the statistics
    itl = res.itl
    emissions = (itl["count"] // itl["tokens"]).to_numpy()
    assert (emissions * itl["tokens"] == itl["count"]).all()
    whole = np.repeat((itl["gap_s"] * itl["tokens"]).to_numpy(), emissions)
    assert s["spec_emission_gap_mean_s"] == pytest.approx(whole.mean(), rel=1e-12)
    for q in (50, 99):
        expected = np.percentile(whole, q)
        assert s[f"spec_emission_gap_p{q}_s"] == pytest.approx(expected, rel=1e-12)
    assert s["spec_emission_gap_p50_s"] >= s["itl_p50_s"]
    assert s["itl_max_s"] >= s["spec_emission_gap_p99_s"] - 1e-12


def test_runs_without_speculation_have_no_spec_metrics() -> None:
    assert not [k for k in run(_pressure()).summary() if "spec" in k]


# -- proposal costs -----------------------------------------------------------------------------


class Linear:
    """t = 1 + num_tokens + 0.001 * context, to read the passes priced off the result."""

    def __init__(self, linear: int = 1 << 62) -> None:
        self.seen: list[tuple[int, int]] = []
        self.linear = linear  # repeated passes priced in closed form while within this

    def run_times(self, f) -> tuple[float, float]:
        self.seen.append((f.num_seqs, f.sum_context_tokens))
        first = 1.0 + f.num_tokens + 0.001 * f.sum_context_tokens
        return first, 0.001 * f.context_growth_per_step

    def linear_steps(self, f) -> int:
        return self.linear


def test_a_draft_runs_k_passes_over_the_requests_still_proposing() -> None:
    pricer = Linear()
    cost = ProposalCost("draft", pricer=pricer)
    # k = 3 and 1, contexts 100 and 50: pass 3 and 2 one request, pass 1 both
    seconds = cost.proposal_s([3, 1], [100, 50])
    assert pricer.seen == [(1, 103), (1, 102), (2, 152)]
    assert seconds == pytest.approx((2 + 0.103) + (2 + 0.102) + (3 + 0.152))
    assert cost.proposal_s([], []) == 0.0


@pytest.mark.parametrize("linear", [1, 1 << 62], ids=["pass-by-pass", "closed-form"])
def test_equal_lookahead_passes_cost_the_same_priced_either_way(linear) -> None:
    pricer = Linear(linear)
    seconds = ProposalCost("draft", pricer=pricer).proposal_s([3, 3], [100, 50])
    # passes of 2 requests over contexts 150 + 2j: 3 + 0.001 * (150 + 2j), j = 1..3
    assert seconds == pytest.approx(sum(3 + 0.001 * (150 + 2 * j) for j in (1, 2, 3)))
    assert len(pricer.seen) == (1 if linear > 3 else 4)


def test_heads_cost_a_fraction_of_the_target_per_pass() -> None:
    sequential = ProposalCost("heads", pricer=Linear(), fraction=0.1)
    parallel = ProposalCost("heads", pricer=Linear(), fraction=0.1, sequential=False)
    assert sequential.proposal_s([2], [10]) == pytest.approx(0.1 * ((2 + 0.012) + (2 + 0.011)))
    assert parallel.proposal_s([2], [10]) == pytest.approx(0.1 * (2 + 0.011))
    assert ProposalCost("ngram", ngram_s=0.002).proposal_s([4, 4], [1, 1]) == 0.002


def test_a_draft_model_also_computes_the_prompts() -> None:
    # every step lasts 1 s on the target; the draft prices t = 1 + tokens + 0.001 * context
    pricer = Linear()
    bench = make_continuous(
        speculation=SpeculationRule(2),
        acceptance=sampler([1.0]),
        proposer=ProposalCost("draft", pricer=pricer),
        block_size=4,
    )
    (a,) = make_requests((8, 10))
    bench.add_request(a)
    s = step(bench, 0.0)  # the prompt: the target's second and the draft's pass over 8 tokens
    assert pricer.seen == [(1, 8)] and a.first_token_s == pytest.approx(1.0 + 9.008)
    s = step(bench, a.first_token_s)  # two draft passes, then the target's verification
    assert s.lookahead == {0: 2}
    # passes over contexts 9 and 10, priced in closed form from the first: 2 x 2.009 + 0.001
    assert pricer.seen == [(1, 8), (1, 9)]
    proposal = (2 + 0.001 * 9) * 2 + 0.001
    steps = bench.instance.engine.steps.columns()
    assert list(steps["spec_proposal_s"]) == pytest.approx([9.008, proposal])
    assert list(steps["spec_verify_s"]) == [0.0, 1.0]
    assert list(steps["duration_s"]) == pytest.approx([10.008, 1.0 + proposal])


def test_a_drafts_first_pass_carries_the_steps_prompt_chunks() -> None:
    pricer = Linear()
    bench = make_continuous(
        mode="chunked",
        max_num_batched_tokens=8,
        speculation=SpeculationRule(2),
        acceptance=sampler([1.0]),
        proposer=ProposalCost("draft", pricer=pricer),
        block_size=4,
    )
    a, b = make_requests((4, 10), (6, 5))
    bench.add_request(a)
    step(bench, 0.0)
    bench.add_request(b, 10.0)
    s = step(bench, 10.0)  # A: 1 + 2 lookahead; B: a 5-token chunk of its prompt
    assert tokens(s) == {0: 3, 1: 5} and s.lookahead == {0: 2}
    # pass 1: A's token over 5 of context and B's chunk (5 tokens, context 5); pass 2: A alone
    assert pricer.seen == [(1, 4), (2, 10), (1, 6)]


def test_a_draft_model_takes_memory_from_the_kv_pool() -> None:
    draft = {
        "name": "llama-3.2-1b",
        "num_parameters": 1_235_814_400,
        "num_layers": 16,
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "num_kv_heads": 8,
        "head_dim": 64,
        "max_model_len": 131072,
    }
    base = scenario(
        policy={"name": "continuous"},
        model="llama-3-8b",
        hardware="h100-sxm",
        profile="roofline",
        workload={
            "num_requests": 5,
            "arrival": {"process": "poisson", "rate": 1.0},
            "prompt_tokens": {"dist": "fixed", "value": 10},
            "output_tokens": {"dist": "fixed", "value": 10},
        },
    )
    with_draft = {
        **base,
        "policy": {
            "name": "continuous",
            "speculative": {
                "method": "draft",
                "num_speculative_tokens": 2,
                "acceptance": {"rate": 0.7},
                "draft_model": draft,
            },
        },
    }
    plain = run(base).instances["kv_blocks_total"].iloc[0]
    spec = run(with_draft).instances["kv_blocks_total"].iloc[0]
    # weights 16.06 + 2.47 GB; KV per token 131,072 + 32,768 bytes (16 layers x 8 x 64 x 2 x 2)
    free = 0.9 * 81_559 * 2**20 - 2**30
    assert plain == int((free - 2 * 8_030_261_248) // (16 * 131_072))
    assert spec == int((free - 2 * (8_030_261_248 + 1_235_814_400)) // (16 * (131_072 + 32_768)))


# -- topologies ---------------------------------------------------------------------------------


def test_a_disaggregated_decode_pool_speculates() -> None:
    raw = pd_scenario()
    raw["disaggregation"]["decode"]["policy"] = {
        "name": "continuous",
        "max_num_seqs": 32,
        "max_num_batched_tokens": 4096,
        "speculative": {
            "method": "ngram",
            "num_speculative_tokens": 3,
            "acceptance": {"rate": 0.8},
            "disable_by_batch_size": 24,
        },
    }
    res, cluster = run_with_cluster(raw)
    req, steps = res.requests, res.steps
    served = req[~req["rejected"]]
    assert (served["num_output_tokens"] == served["max_output_tokens"]).all()
    for inst in cluster.instances:
        assert inst.pool.num_free == inst.pool.num_total
        assert inst.num_waiting == 0 and inst.num_running == 0
    prefill, decode = steps[steps["instance"] < 2], steps[steps["instance"] >= 2]
    assert prefill["num_spec_seqs"].sum() == 0 and decode["num_spec_seqs"].sum() > 0
    # every output token after the first was emitted on a decode instance
    emitted = (decode["num_decode_tokens"] * decode["num_steps"]).sum() - (
        decode["num_spec_proposed"].sum() - decode["num_spec_accepted"].sum()
    )
    assert emitted == (served["num_output_tokens"] - 1).sum()
    assert res.summary()["spec_tokens_per_step"] == pytest.approx((1 - 0.8**4) / 0.2, rel=0.05)


def test_the_side_by_side_table_shows_speculation_when_a_variant_speculates() -> None:
    raw = _pressure(num_speculative_tokens=2)
    raw["variants"] = {
        "on": None,
        "off": {"policy": {"speculative": {"num_speculative_tokens": 0}}},
    }
    results = simulate(load_scenario_dict(raw))
    table = results.side_by_side()
    assert table.at["spec accepted %", "on"] == pytest.approx(
        100 * results["on"].summary()["spec_acceptance_rate"]
    )
    assert math.isnan(table.at["spec accepted %", "off"])
    plain = simulate(load_scenario_dict(_pressure())).side_by_side()
    assert not [label for label in plain.index if label.startswith("spec")]
