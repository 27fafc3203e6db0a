"""Step cost model: the seconds one planned step takes, from a profile's coefficients.

The engine calls this once per planned step (hundreds of thousands of times per run), so the
profile's coefficients are copied into plain float attributes at construction and `step_time` is a
handful of float operations with no attribute chains, dict lookups or validation.

    T_step = t_mem + flop(num_tokens) + t_kv * sum_context_tokens + t_attn * prefill_attention_term

where `flop(n) = t_flop * n`, except in the `two_regime` form, where the slope changes from
`t_flop` to `t_flop_high` at `ridge_tokens` and the two pieces meet there (continuous, piecewise
linear). The seed form is the extended form with `t_kv = t_attn = 0`, which the profile schema
enforces, so one formula serves all three forms. The `split` form prices prompt and decode tokens
with their own slopes and adds a per-sequence term and causal prompt attention by chunk shape:

    T_step = t_mem + t_flop * prefill_tokens + t_decode * (num_tokens - prefill_tokens)
             + t_seq * num_seqs + t_kv * sum_context_tokens + t_attn * prefill_attention_term
             + t_pair * sum(chunk * (prefix + chunk / 2))

(padding tokens and slots count as decode tokens and sequences). Table profiles are priced by
`sim.costs.table_model`, engine effects on top by `sim.costs.knobs`; `sim.costs.pricer` picks.
"""

from __future__ import annotations

from sim.costs.expert_terms import ExpertStepCost
from sim.costs.features import StepFeaturesLike, causal_pairs, chunk_shapes
from sim.costs.knobs import BIG
from sim.costs.profile import Profile


class CostModel:
    """Prices steps with one profile's coefficients (for a table profile: its fallback form)."""

    __slots__ = (
        "profile",
        "ridge_tokens",
        "split",
        "t_attn_s_per_pair",
        "t_attn_s_per_token2",
        "t_decode_s_per_token",
        "t_flop_high_s_per_token",
        "t_flop_s_per_token",
        "t_kv_s_per_token",
        "t_mem_s",
        "t_seq_s_per_seq",
    )
    # analytic forms hold everywhere: nothing is extrapolated (the table model counts its own)
    num_extrapolated = 0
    last_extrapolated = False
    has_tables = False  # whether steps can fall outside measured tables

    def __init__(self, profile: Profile, with_experts: bool = False) -> None:
        if profile.experts is not None and not with_experts:
            raise ValueError(
                "a profile with an experts block prices with ExpertCostModel "
                "(sim.costs.pricer.make_cost_model picks it)"
            )
        c = profile.coefficients
        form = profile.analytic_form
        self.profile = profile
        self.t_mem_s = float(c.t_mem_s)
        self.t_flop_s_per_token = float(c.t_flop_s_per_token)
        self.t_kv_s_per_token = float(c.t_kv_s_per_token)
        self.t_attn_s_per_token2 = float(c.t_attn_s_per_token2)
        if form == "two_regime":
            assert c.ridge_tokens is not None and c.t_flop_high_s_per_token is not None
            self.ridge_tokens = float(c.ridge_tokens)
            self.t_flop_high_s_per_token = float(c.t_flop_high_s_per_token)
        else:
            # An infinite ridge keeps the single-slope forms on the same branch-light path.
            self.ridge_tokens = float("inf")
            self.t_flop_high_s_per_token = self.t_flop_s_per_token
        self.split = form == "split"
        self.t_decode_s_per_token = float(c.t_decode_s_per_token or 0.0)
        self.t_seq_s_per_seq = float(c.t_seq_s_per_seq)
        self.t_attn_s_per_pair = float(c.t_attn_s_per_pair)

    def step_time(
        self, num_tokens: int, sum_context_tokens: int, prefill_attention_term: int
    ) -> float:
        """Seconds for one step computing `num_tokens` tokens over the given attention work."""
        ridge = self.ridge_tokens
        if num_tokens <= ridge:
            flop = self.t_flop_s_per_token * num_tokens
        else:
            flop = self.t_flop_s_per_token * ridge + self.t_flop_high_s_per_token * (
                num_tokens - ridge
            )
        return (
            self.t_mem_s
            + flop
            + self.t_kv_s_per_token * sum_context_tokens
            + self.t_attn_s_per_token2 * prefill_attention_term
        )

    def plan_time(self, plan: StepFeaturesLike) -> float:
        """Seconds for the first step of a step's features."""
        return self.step_time(plan.num_tokens, plan.sum_context_tokens, plan.prefill_attention_term)

    def run_times(self, features: StepFeaturesLike) -> tuple[float, float]:
        """The first step's seconds, and how much longer each repeated step is: attention reads
        `context_growth_per_step` more KV tokens per step, and a repeated prompt chunk does
        `attention_growth_per_step` more attention work."""
        if self.split:
            first, increment, _, _ = self.price(features, features.num_tokens, features.num_seqs)
            return first, increment
        n = features.num_tokens
        ridge = self.ridge_tokens
        if n <= ridge:
            flop = self.t_flop_s_per_token * n
        else:
            flop = self.t_flop_s_per_token * ridge + self.t_flop_high_s_per_token * (n - ridge)
        t_kv = self.t_kv_s_per_token
        first = (
            self.t_mem_s
            + flop
            + t_kv * features.sum_context_tokens
            + self.t_attn_s_per_token2 * features.prefill_attention_term
        )
        increment = t_kv * features.context_growth_per_step
        if features.attention_growth_per_step:  # a prompt chunk repeated: it attends further
            increment += self.t_attn_s_per_token2 * features.attention_growth_per_step
        return first, increment

    def price(
        self, features: StepFeaturesLike, num_tokens: int, num_seqs: int
    ) -> tuple[float, float, int, bool]:
        """`run_times` with the linear layers computing `num_tokens` tokens over `num_seqs`
        slots (padding included), the steps it holds for (all) and whether it extrapolates
        (never)."""
        if self.split:
            prefill = features.num_prefill_tokens
            linear = (
                self.t_flop_s_per_token * prefill
                + self.t_decode_s_per_token * (num_tokens - prefill)
                + self.t_seq_s_per_seq * num_seqs
            )
        elif num_tokens <= self.ridge_tokens:
            linear = self.t_flop_s_per_token * num_tokens
        else:
            ridge = self.ridge_tokens
            linear = self.t_flop_s_per_token * ridge + self.t_flop_high_s_per_token * (
                num_tokens - ridge
            )
        t_kv = self.t_kv_s_per_token
        first = (
            self.t_mem_s
            + linear
            + t_kv * features.sum_context_tokens
            + self.t_attn_s_per_token2 * features.prefill_attention_term
        )
        if self.split and features.num_prefill_tokens:
            first += self.t_attn_s_per_pair * causal_pairs(chunk_shapes(features))
        increment = t_kv * features.context_growth_per_step
        if features.attention_growth_per_step:  # a repeated chunk: c more prefix per step
            increment += (
                self.t_attn_s_per_token2 + self.t_attn_s_per_pair
            ) * features.attention_growth_per_step
        return first, increment, BIG, False

    def linear_steps(self, features: StepFeaturesLike) -> int:
        """How many repeated steps keep growing by the same increment (all of them here: the
        step time is linear in the context)."""
        return BIG

    def cpu_overhead_s(self, features: StepFeaturesLike) -> float:
        """Host seconds per step: none unless the pricing knobs add some (`sim.costs.knobs`)."""
        return 0.0


class ExpertCostModel(CostModel):
    """A mixture of experts' profile (its `experts:` block, sim/costs/expert_terms.py): the
    analytic form prices the dense part per data-parallel rank, scaled by the busiest rank's
    share, and the routed experts and their exchange are added. A subclass, so that dense
    profiles price on `CostModel`'s path unchanged."""

    def __init__(self, profile: Profile) -> None:
        super().__init__(profile, with_experts=True)
        assert profile.experts is not None
        self.experts = ExpertStepCost(profile.experts)

    def plan_time(self, plan: StepFeaturesLike) -> float:
        return self.price(plan, plan.num_tokens, plan.num_seqs)[0]

    def run_times(self, features: StepFeaturesLike) -> tuple[float, float]:
        first, increment, _, _ = self.price(features, features.num_tokens, features.num_seqs)
        return first, increment

    def price(
        self, features: StepFeaturesLike, num_tokens: int, num_seqs: int
    ) -> tuple[float, float, int, bool]:
        first, increment, steps, outside = super().price(features, num_tokens, num_seqs)
        experts = self.experts
        u = experts.rank_factor(num_seqs)  # the busiest rank's share of the per-rank terms
        first = self.t_mem_s + (first - self.t_mem_s) * u + experts.seconds(num_tokens)
        return first, increment * u, steps, outside
