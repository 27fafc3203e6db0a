"""Step cost model: the seconds one planned step takes, from a profile's coefficients.

The engine calls this once per planned step (hundreds of thousands of times per run), so the
profile's coefficients are copied into plain float attributes at construction and `step_time` is a
handful of float operations with no attribute chains, dict lookups or validation.

    T_step = t_mem + flop(num_tokens) + t_kv * sum_context_tokens + t_attn * prefill_attention_term

where `flop(n) = t_flop * n`, except in the `two_regime` form, where the slope changes from
`t_flop` to `t_flop_high` at `ridge_tokens` and the two pieces meet there (continuous, piecewise
linear). The seed form is the extended form with `t_kv = t_attn = 0`, which the profile schema
enforces, so one formula serves all three forms.
"""

from __future__ import annotations

from typing import Protocol

from sim.costs.profile import Profile


class _PlanFeatures(Protocol):
    """The fields of a step's features that price it (`sim.core.plan.StepFeatures`; a Protocol,
    so that costs need not import the core)."""

    @property
    def num_tokens(self) -> int: ...

    @property
    def sum_context_tokens(self) -> int: ...

    @property
    def prefill_attention_term(self) -> int: ...

    @property
    def context_growth_per_step(self) -> int: ...

    @property
    def attention_growth_per_step(self) -> int: ...


class CostModel:
    """Prices steps with one profile's coefficients."""

    __slots__ = (
        "profile",
        "ridge_tokens",
        "t_attn_s_per_token2",
        "t_flop_high_s_per_token",
        "t_flop_s_per_token",
        "t_kv_s_per_token",
        "t_mem_s",
    )

    def __init__(self, profile: Profile) -> None:
        c = profile.coefficients
        self.profile = profile
        self.t_mem_s = float(c.t_mem_s)
        self.t_flop_s_per_token = float(c.t_flop_s_per_token)
        self.t_kv_s_per_token = float(c.t_kv_s_per_token)
        self.t_attn_s_per_token2 = float(c.t_attn_s_per_token2)
        if profile.model_form == "two_regime":
            assert c.ridge_tokens is not None and c.t_flop_high_s_per_token is not None
            self.ridge_tokens = float(c.ridge_tokens)
            self.t_flop_high_s_per_token = float(c.t_flop_high_s_per_token)
        else:
            # An infinite ridge keeps the single-slope forms on the same branch-light path.
            self.ridge_tokens = float("inf")
            self.t_flop_high_s_per_token = self.t_flop_s_per_token

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

    def plan_time(self, plan: _PlanFeatures) -> float:
        """Seconds for the first step of a step's features."""
        return self.step_time(plan.num_tokens, plan.sum_context_tokens, plan.prefill_attention_term)

    def run_times(self, features: _PlanFeatures) -> tuple[float, float]:
        """The first step's seconds, and how much longer each repeated step is: attention reads
        `context_growth_per_step` more KV tokens per step, and a repeated prompt chunk does
        `attention_growth_per_step` more attention work."""
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

    def linear_steps(self, features: _PlanFeatures) -> int:
        """How many repeated steps keep growing by the same increment (all of them here: the
        step time is linear in the context)."""
        return 1 << 62
