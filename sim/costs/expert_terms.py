"""A profile's `experts:` block: what a mixture-of-experts step adds to the dense step cost.

A profile of a mixture-of-experts model (or of data-parallel attention ranks) prices a step of
`T` tokens over `S` sequences as

    T_step = t_mem + u(S) * (the extended form's per-rank terms)
             + t_expert_read_s * experts_read(T)                    # routed weights read
             + T * k * compute_share * t_expert_pair_s              # routed expert compute
             + T * t_exchange_s_per_token + t_exchange_s            # token exchange

where the extended form's coefficients (`t_flop`, `t_kv`, `t_attn`) hold the dense part of
every layer (attention, dense layers, shared experts) as the aggregate of `data_parallel` ranks,
and `u(S) = ceil(S / dp) * dp / S` is how much more than an even share the busiest rank holds
when the step's sequences are spread over the ranks as evenly as whole sequences allow: every
rank must finish before the expert layers exchange tokens, so the busiest rank sets the step
(with one rank, `u = 1`). `experts_read(T)` and `compute_share` are the busiest GPU's expected
distinct experts and share of routed tokens (sim/costs/moe.py). The exchange is the
expert-parallel dispatch and combine all-to-all (or, for experts split by tensor across ranks,
the reduction over all the instance's GPUs): bytes per token over the link, and a latency per
MoE layer and direction. `sim.costs.parallel` computes these terms from datasheets.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field, model_validator

from sim.costs.moe import ExpertRouting
from sim.inputs.strict_model import StrictModel

MAX_TERM_S = 10.0  # a second-scale per-token or per-expert term is already absurd


class ExpertTerms(StrictModel):
    """`experts:` of a profile (extended form only)."""

    model_config = ConfigDict(frozen=True)

    num_experts: int = Field(ge=1, le=65_536)  # routed experts per MoE layer
    experts_per_token: int = Field(ge=1, le=65_536)
    # the hottest expert's share of routed tokens (None: uniform)
    hottest_share: float | None = Field(default=None, gt=0, lt=1)
    expert_parallel: int = Field(default=1, ge=1, le=65_536)
    gpus: int = Field(default=1, ge=1, le=65_536)  # GPUs the experts are spread over
    # busiest expert-parallel GPU's routed tokens over the mean (None: drawn from the routing)
    imbalance: float | None = Field(default=None, ge=1, le=65_536)
    data_parallel: int = Field(default=1, ge=1, le=65_536)  # attention ranks
    # replicas of the hottest experts beside the model's own, on the expert-parallel ranks
    redundant_experts: int = Field(default=0, ge=0, le=65_536)
    # seconds one GPU takes to read one whole routed expert of every MoE layer
    t_expert_read_s: float = Field(ge=0, le=MAX_TERM_S)
    # seconds one GPU takes to compute one token through one expert of every MoE layer
    t_expert_pair_s: float = Field(ge=0, le=MAX_TERM_S)
    t_exchange_s_per_token: float = Field(default=0.0, ge=0, le=MAX_TERM_S)
    t_exchange_s: float = Field(default=0.0, ge=0, le=MAX_TERM_S)  # per step

    @model_validator(mode="after")
    def _check_layout(self) -> ExpertTerms:
        e, k, ep = self.num_experts, self.experts_per_token, self.expert_parallel
        if k > e:
            raise ValueError(f"experts_per_token ({k}) cannot exceed num_experts ({e})")
        r = self.redundant_experts
        if r and ep == 1:
            raise ValueError(f"redundant_experts ({r}) needs expert_parallel > 1")
        if (e + r) % ep:
            raise ValueError(
                f"expert_parallel ({ep}) must divide num_experts + redundant_experts ({e + r})"
            )
        if ep > 1 and ep != self.gpus:
            raise ValueError(f"expert_parallel ({ep}) must be 1 or gpus ({self.gpus})")
        share = self.hottest_share
        if share is not None and not (1 / e <= share <= 1 / k):
            raise ValueError(
                f"hottest_share ({share:g}) must lie between 1 / num_experts and "
                "1 / experts_per_token"
            )
        if self.imbalance is not None and self.imbalance > ep:
            raise ValueError(f"imbalance ({self.imbalance:g}) cannot exceed expert_parallel")
        return self


class ExpertStepCost:
    """Prices the expert part of a step and the busiest data-parallel rank's share."""

    __slots__ = ("data_parallel", "routing", "t_exchange_s", "t_per_token", "t_read_s")

    def __init__(self, terms: ExpertTerms) -> None:
        self.routing = ExpertRouting(
            terms.num_experts,
            terms.experts_per_token,
            hottest_share=terms.hottest_share,
            expert_parallel=terms.expert_parallel,
            gpus=terms.gpus,
            imbalance=terms.imbalance,
            redundant=terms.redundant_experts,
        )
        self.data_parallel = terms.data_parallel
        self.t_read_s = terms.t_expert_read_s
        pair = terms.experts_per_token * self.routing.compute_share * terms.t_expert_pair_s
        self.t_per_token = pair + terms.t_exchange_s_per_token
        self.t_exchange_s = terms.t_exchange_s

    def seconds(self, num_tokens: int) -> float:
        """The expert layers' seconds for a step of `num_tokens` tokens."""
        if num_tokens <= 0:
            return 0.0
        read = self.t_read_s * self.routing.experts_read(num_tokens)
        return read + self.t_per_token * num_tokens + self.t_exchange_s

    def rank_factor(self, num_seqs: int) -> float:
        """u(S): the busiest rank's sequences over an even share (1 with one rank)."""
        dp = self.data_parallel
        if dp == 1 or num_seqs <= 0:
            return 1.0
        return -(-num_seqs // dp) * dp / num_seqs
