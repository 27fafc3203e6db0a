"""What speculative decoding's proposals cost, per step (`sim.core.speculative_step` asks).

The target's verification is priced like any step (its k + 1 tokens per speculating request are
step tokens); the proposals that precede it cost, by method:

* `draft`: the draft model runs k decode passes one after the other on the speculating
  requests, priced by the draft's own profile. Pass j (1..k) computes one token of each request
  still proposing (those with k_i >= j) over its context `computed_i + j`.
* `heads`: each pass costs `fraction` of the target's decode step over the same requests (one
  token each over its context), with k passes one after the other (`sequential`: an
  autoregressive head, EAGLE) or one (`parallel`: independent heads, Medusa).
* `ngram`: a constant `ngram_s` per step (a lookup in the request's own tokens, on the host).

Engine effects (CUDA-graph padding, CPU overhead: `sim.costs.knobs`) are priced once per step,
on the target; the proposal's pricers are the profiles' own forms.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

from sim.costs.features import StepFeaturesLike


class _DecodeStep(NamedTuple):
    """One token each for `num_seqs` requests: the features a proposal pass is priced on."""

    num_seqs: int
    num_tokens: int
    sum_context_tokens: int
    num_prefill_tokens: int = 0
    prefill_attention_term: int = 0
    context_growth_per_step: int = 0
    attention_growth_per_step: int = 0
    chunks: tuple[tuple[int, int], ...] = ()

    @property
    def num_decode_tokens(self) -> int:
        return self.num_tokens

    @property
    def num_active_seqs(self) -> int:
        return self.num_seqs


class PassPricer(Protocol):
    def run_times(self, features: StepFeaturesLike) -> tuple[float, float]: ...

    def linear_steps(self, features: StepFeaturesLike) -> int: ...


class ProposalCost:
    """Seconds of one step's proposals (see the module docstring)."""

    def __init__(
        self,
        method: str,
        *,
        pricer: PassPricer | None = None,  # draft: the draft's; heads: the target's
        fraction: float = 1.0,  # heads: of the target's decode step, per pass
        sequential: bool = True,  # heads: k passes (else one)
        ngram_s: float = 0.0,
    ) -> None:
        if method not in ("draft", "heads", "ngram"):
            raise ValueError(f"unknown speculative method {method!r}")
        if method != "ngram" and pricer is None:
            raise ValueError(f"method {method!r} needs a step pricer")
        self.method = method
        self.pricer = pricer
        self.scale = fraction if method == "heads" else 1.0
        self.passes_all = method == "draft" or sequential
        self.ngram_s = ngram_s

    def proposal_s(self, lookahead: Sequence[int], contexts: Sequence[int]) -> float:
        """For requests proposing `lookahead[i]` tokens after `contexts[i]` computed ones."""
        if not lookahead:
            return 0.0
        if self.method == "ngram":
            return self.ngram_s
        assert self.pricer is not None
        run_times = self.pricer.run_times
        if not self.passes_all:  # one pass of every request over its next token
            n = len(lookahead)
            step = _DecodeStep(n, n, sum(contexts) + n)
            return self.scale * run_times(step)[0]
        deepest = max(lookahead)
        n = len(lookahead)
        if min(lookahead) == deepest:  # all propose k: k passes of n, context growing by n
            step = _DecodeStep(n, n, sum(contexts) + n, context_growth_per_step=n)
            first, increment = run_times(step)
            if self.pricer.linear_steps(step) >= deepest:
                k = deepest
                return self.scale * (k * first + increment * (k * (k - 1) // 2))
        count = [0] * (deepest + 1)  # requests proposing exactly k tokens
        context = [0] * (deepest + 1)
        for k, c in zip(lookahead, contexts, strict=True):
            count[k] += 1
            context[k] += c
        total = 0.0
        n = summed = 0
        for j in range(deepest, 0, -1):  # pass j: the requests with k >= j
            n += count[j]
            summed += context[j]
            total += run_times(_DecodeStep(n, n, summed + n * j))[0]
        return self.scale * total
