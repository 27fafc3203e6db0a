"""The cost model an instance prices its steps with: the profile's, engine effects on top.

`make_cost_model(profile, scenario_pricing)` returns a `CostModel` (analytic forms) or a
`TableCostModel` (table profiles), wrapped in a `KnobbedPricer` when the profile's `pricing`
merged with the scenario's `engine.pricing` switches an engine effect on. Every one offers the
engine's `StepPricer` methods (`run_times`, `linear_steps`) and also `cpu_overhead_s(features)`
(host seconds per step, 0 without CPU overhead), `num_extrapolated` (priced runs that fell
outside a table) and `last_extrapolated` (whether the run just priced did).
"""

from __future__ import annotations

from sim.costs.cost_model import CostModel, ExpertCostModel
from sim.costs.knobs import KnobbedPricer, PricingSpec, merge_pricing
from sim.costs.profile import Profile
from sim.costs.proposal import ProposalCost
from sim.costs.table_model import TableCostModel

Pricer = CostModel | TableCostModel | KnobbedPricer


def make_cost_model(profile: Profile, scenario_pricing: PricingSpec | None = None) -> Pricer:
    base: CostModel | TableCostModel
    if profile.table is not None:
        base = TableCostModel(profile)
    elif profile.experts is not None:  # a mixture of experts (sim/costs/expert_terms.py)
        base = ExpertCostModel(profile)
    else:
        base = CostModel(profile)
    pricing = merge_pricing(profile.pricing, scenario_pricing)
    return KnobbedPricer(base, pricing) if pricing.active else base


def make_proposal(
    method: str,
    profile: Profile | None = None,
    *,
    fraction: float = 1.0,
    sequential: bool = True,
    ngram_s: float = 0.0,
) -> ProposalCost:
    """A speculative proposal's cost (`sim.costs.proposal`), its passes priced by a cost model
    of `profile` (a draft model's, or the target's own for heads; none for n-grams)."""
    pricer = make_cost_model(profile) if profile is not None else None
    return ProposalCost(
        method, pricer=pricer, fraction=fraction, sequential=sequential, ngram_s=ngram_s
    )
