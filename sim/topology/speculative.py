"""An instance group's speculative decoding, built from its `policy.speculative`: the acceptance
sampler (`sim.core.acceptance`) and the proposal's pricer (`sim.costs.proposal`).

Per-request acceptance rates (`distribution`) are drawn here, once per run, one value per
request id from a child stream of the scenario seed of their own (`[seed, SPEC_RATES_STREAM,
group]`): the base model's draws first, then each tier's, each over every request id, so that
adding a tier moves no other tier's rates, and nothing else in the run draws from it.
"""

from __future__ import annotations

import numpy as np

from sim.core.acceptance import AcceptanceSampler, thresholds
from sim.costs.catalog import ModelSpec
from sim.costs.pricer import make_proposal
from sim.costs.proposal import ProposalCost
from sim.scenario.load import ResolvedGroup
from sim.scenario.speculative import (
    AcceptanceRatesSpec,
    RateDistributionSpec,
    SpeculativeSpec,
    mtp_fraction,
)
from sim.workload import RequestArrays

SPEC_RATES_STREAM = 2  # the routers' stream is [seed, 1]


def _draw(dist: RateDistributionSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    if dist.dist == "beta":
        assert dist.mean is not None
        c = dist.concentration
        return rng.beta(dist.mean * c, (1.0 - dist.mean) * c, n)
    assert dist.low is not None and dist.high is not None
    return rng.uniform(dist.low, dist.high, n)


def acceptance_sampler(
    spec: SpeculativeSpec, seed: int, group: int, requests: RequestArrays | None
) -> AcceptanceSampler:
    """The sampler of one group's instances (`group`: its index, for its own rate stream)."""
    k = spec.num_speculative_tokens
    acceptance = spec.acceptance
    models: list[tuple[str | None, AcceptanceRatesSpec]] = [(None, acceptance)]
    models += list(acceptance.tiers.items())
    per_request = None
    if any(m.distribution is not None for _, m in models):
        if requests is None:
            raise ValueError("per-request acceptance rates need the run's requests")
        n = len(requests.arrival_s)
        rng = np.random.default_rng([seed, SPEC_RATES_STREAM, group])
        per_request = np.full(n, np.nan)
        assert requests.tier_index is not None
        tier_of = np.asarray(requests.tier_names, dtype=object)[requests.tier_index]
        for tier, model in models:
            if model.distribution is None:
                continue
            rates = _draw(model.distribution, rng, n)
            mask = np.ones(n, dtype=bool) if tier is None else tier_of == tier
            per_request[mask] = rates[mask]
    by_tier: dict[str, tuple[float, ...] | None] = {}
    for tier, model in acceptance.tiers.items():
        rates_k = model.per_position(k)
        by_tier[tier] = thresholds(rates_k) if rates_k is not None else None
    base = acceptance.per_position(k)
    return AcceptanceSampler(
        seed,
        by_tier=by_tier,
        default=thresholds(base) if base is not None else None,
        per_request=per_request,
        window=spec.acceptance_window if spec.min_acceptance_rate is not None else 0,
    )


def proposal_cost(spec: SpeculativeSpec, group: ResolvedGroup, model: ModelSpec) -> ProposalCost:
    """The proposal's pricer of one group's instances (`model`: the target)."""
    if spec.method == "mtp":  # the target's own module, passes one after the other
        fraction = spec.head_fraction if spec.head_fraction is not None else mtp_fraction(model)
        return make_proposal("heads", group.profile, fraction=fraction, sequential=True)
    if spec.method == "draft":
        assert group.draft_profile is not None  # resolved at load
        return make_proposal("draft", group.draft_profile)
    if spec.method == "heads":
        return make_proposal(
            "heads", group.profile, fraction=spec.fraction, sequential=spec.sequential_heads
        )
    return make_proposal("ngram", ngram_s=spec.ngram_seconds)
