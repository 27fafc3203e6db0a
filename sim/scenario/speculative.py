"""`policy.speculative`: speculative decoding for the continuous and chunked policies.

A proposer (a small draft model, EAGLE/Medusa-style heads on the target, or n-gram lookup in
the context) proposes up to `num_speculative_tokens` (k) tokens per decoding request; the target
verifies them, plus the request's own next token, in one step, accepts a leading run of them and
emits the accepted ones and one more token of its own. What the schema states:

* `method` and the proposal's cost: `mtp` drafts with the target's own multi-token prediction
  module (DeepSeek-V3 ships one: `num_mtp_layers` of the model), run k times in a row like a
  sequential head, each pass costing `head_fraction` of the target's decode step of those
  requests, by default `mtp_fraction(model)`: one decoder layer plus the shared LM head, taken
  as two layers' worth of the target's step (DeepSeek-V3's LM head, 0.93B parameters, is about
  one MoE layer's active parameters). `draft` runs `draft_model` (a catalog name or a mapping,
  priced by `draft_profile`: the target's built-in step model on the same GPU by default) k
  times in a row on the speculating requests; its weights and its KV take GPU memory next to
  the target's. `heads` costs `head_fraction` of the target's decode step of those requests
  per pass, k passes one after the other (`head_passes: sequential`, EAGLE) or one
  (`parallel`, Medusa). `ngram` costs `ngram_s` seconds per step (a lookup on the host).
* `acceptance`: the probability that each proposed position is accepted given that the ones
  before it were: one `rate` for every position, a list by position (the last repeating), or a
  per-request rate drawn from a `distribution` (beta or uniform); per tier with `tiers`.
* dynamic speculation: none while `disable_by_batch_size` or more requests run (vLLM's rule), and
  a request stops speculating once its acceptance over its last `acceptance_window` verify steps
  falls below `min_acceptance_rate`.

`num_speculative_tokens: 0` switches speculation off (the run is the plain policy's, exactly).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from sim.costs.catalog import ModelSpec
from sim.inputs.strict_model import StrictModel

MAX_SPECULATIVE_TOKENS = 64
DEFAULT_HEAD_FRACTION = 0.1  # an EAGLE head: about one decoder layer plus the LM head of an 8B
DEFAULT_NGRAM_S = 1e-4  # a prompt-lookup proposer's host time per step


class _Strict(StrictModel):
    model_config = ConfigDict(frozen=True)


class RateDistributionSpec(_Strict):
    """Each request's per-position acceptance rate, drawn once from this distribution."""

    dist: Literal["beta", "uniform"]
    mean: float | None = Field(default=None, gt=0, lt=1)  # beta
    concentration: float = Field(default=10.0, gt=0, le=1e6)  # beta: alpha + beta
    low: float | None = Field(default=None, ge=0, le=1)  # uniform
    high: float | None = Field(default=None, ge=0, le=1)

    @model_validator(mode="after")
    def _parameters(self) -> RateDistributionSpec:
        if self.dist == "beta":
            if self.mean is None:
                raise ValueError("dist 'beta' needs mean (and optionally concentration)")
            if self.low is not None or self.high is not None:
                raise ValueError("dist 'beta' takes mean and concentration, not low/high")
        else:
            if self.low is None or self.high is None:
                raise ValueError("dist 'uniform' needs low and high")
            if self.low > self.high:
                raise ValueError(f"low ({self.low}) must not exceed high ({self.high})")
            if self.mean is not None:
                raise ValueError("dist 'uniform' takes low and high, not mean")
        return self


class AcceptanceRatesSpec(_Strict):
    """One acceptance model: a per-position `rate` (one for all positions, or a list by
    position, the last repeating) or a per-request rate drawn from `distribution`."""

    rate: float | list[float] | None = Field(default=None)
    distribution: RateDistributionSpec | None = None

    @model_validator(mode="after")
    def _one_model(self) -> AcceptanceRatesSpec:
        if (self.rate is None) == (self.distribution is None):
            raise ValueError("give either rate or distribution")
        rates = self.rate if isinstance(self.rate, list) else [self.rate]
        if not rates:
            raise ValueError("rate: an empty list; give at least one rate")
        for r in rates:
            if r is not None and not 0.0 <= r <= 1.0:
                raise ValueError(f"rate {r} is not a probability (0 to 1)")
        return self

    def per_position(self, k: int) -> tuple[float, ...] | None:
        """The k per-position rates (None: drawn per request)."""
        if self.rate is None:
            return None
        rates = self.rate if isinstance(self.rate, list) else [self.rate]
        return tuple(rates[min(j, len(rates) - 1)] for j in range(k))


class AcceptanceSpec(AcceptanceRatesSpec):
    # a tier's own model (tiers not listed take the one above)
    tiers: dict[str, AcceptanceRatesSpec] = Field(default_factory=dict)


_METHOD_FIELDS = {
    "draft": ("draft_model", "draft_profile"),
    "heads": ("head_fraction", "head_passes"),
    "ngram": ("ngram_s",),
    "mtp": ("head_fraction",),
}


class SpeculativeSpec(_Strict):
    method: Literal["draft", "heads", "ngram", "mtp"]
    num_speculative_tokens: int = Field(ge=0, le=MAX_SPECULATIVE_TOKENS)
    acceptance: AcceptanceSpec
    # draft: the draft model, and its step costs on the target's GPU (by default the target's
    # step model when that is "roofline" or counted events, else counted events; a profile
    # file or inline coefficients)
    draft_model: ModelSpec | None = None
    draft_profile: str | dict[str, Any] | None = None
    # heads: proposal = this fraction of the target's decode step of the speculating requests,
    # once per pass; sequential: k passes (EAGLE), parallel: one (Medusa)
    head_fraction: float | None = Field(default=None, gt=0, le=10)
    head_passes: Literal["sequential", "parallel"] | None = None
    # ngram: host seconds per step
    ngram_s: float | None = Field(default=None, ge=0, le=10)
    # no speculation while this many requests or more run (vLLM's disable_by_batch_size)
    disable_by_batch_size: int | None = Field(default=None, gt=0)
    # a request stops speculating when its acceptance over its last `acceptance_window` verify
    # steps falls below this
    min_acceptance_rate: float | None = Field(default=None, gt=0, le=1)
    acceptance_window: int = Field(default=16, gt=0, le=100_000)

    @model_validator(mode="after")
    def _method_fields(self) -> SpeculativeSpec:
        allowed = set(_METHOD_FIELDS[self.method])
        for method, names in _METHOD_FIELDS.items():
            for name in names:
                if name not in allowed and getattr(self, name) is not None:
                    raise ValueError(f"{name} is for method {method}, not {self.method}")
        if self.method == "draft" and self.draft_model is None:
            raise ValueError("method 'draft' needs draft_model (a catalog name or a mapping)")
        return self

    @property
    def per_request(self) -> bool:
        """Whether acceptance rates are drawn per request (for every request, before the run)."""
        models = [self.acceptance, *self.acceptance.tiers.values()]
        return self.active and any(m.distribution is not None for m in models)

    @property
    def active(self) -> bool:
        return self.num_speculative_tokens > 0

    @property
    def fraction(self) -> float:
        return DEFAULT_HEAD_FRACTION if self.head_fraction is None else self.head_fraction

    @property
    def sequential_heads(self) -> bool:
        return self.head_passes != "parallel"

    @property
    def ngram_seconds(self) -> float:
        return DEFAULT_NGRAM_S if self.ngram_s is None else self.ngram_s


def mtp_fraction(model: ModelSpec) -> float:
    """One multi-token-prediction pass as a fraction of the target's decode step: its decoder
    layer and the LM head it shares with the target, two layers' worth."""
    return min(1.0, 2.0 / model.num_layers)
