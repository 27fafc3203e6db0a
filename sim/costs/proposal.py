"""What speculative decoding's proposals cost, per step (`sim.core.speculative_step` asks).

The target's verification is priced like any step (its k + 1 tokens per speculating request are
step tokens); the proposals that precede it cost, by method:

* `draft`: the draft model runs k decode passes one after the other on the speculating
  requests, priced by the draft's own profile. Pass j (1..k) computes one token of each request
  still proposing (those with k_i >= j) over its context `computed_i + j`. The draft also
  computes every prompt chunk the target computes: in its first pass of a speculative step,
  and in a pass of its own (`prefill_s`) in a step that does not speculate.
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

# a step's prompt chunks: (chunks, tokens, context after the step, attention work, each chunk's
# (tokens, context before it)), as the engine counts them (`sim.core.speculative_step.Prompts`)
Prompts = tuple[int, int, int, int, tuple[tuple[int, int], ...]]


class _DecodeStep(NamedTuple):
    """The features a proposer's pass is priced on: one token each for `num_seqs` requests
    (a proposal pass), or a draft's prompt chunks."""

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
        return self.num_tokens - self.num_prefill_tokens

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
        self.prefills = method == "draft"  # a draft model computes the prompts too
        self.pricer = pricer
        self.scale = fraction if method == "heads" else 1.0
        self.passes_all = method == "draft" or sequential
        self.ngram_s = ngram_s

    def prefill_s(self, prompts: Prompts) -> float:
        """A draft model's pass over a step's prompt chunks alone (the target's own chunks:
        `(chunks, tokens, context after, attention work, shapes)`); 0 without a draft model."""
        if not self.prefills:
            return 0.0
        return self._pass(0, 0, prompts)

    def _pass(self, n: int, context: int, prompts: Prompts | None) -> float:
        """One pass: a token of each of `n` requests over `context` tokens in all, and the
        prompt chunks."""
        assert self.pricer is not None
        if prompts is None:
            step = _DecodeStep(n, n, context)
        else:
            seqs, tokens, prompt_context, attention, chunks = prompts
            step = _DecodeStep(
                n + seqs,
                n + tokens,
                context + prompt_context,
                num_prefill_tokens=tokens,
                prefill_attention_term=attention,
                chunks=chunks,
            )
        return self.pricer.run_times(step)[0]

    def proposal_s(
        self, lookahead: Sequence[int], contexts: Sequence[int], prompts: Prompts | None = None
    ) -> float:
        """For requests proposing `lookahead[i]` tokens after `contexts[i]` computed ones; a
        draft's first pass also computes the step's `prompts` (its prompt chunks)."""
        if not lookahead:
            return self.prefill_s(prompts) if prompts is not None else 0.0
        if self.method == "ngram":
            return self.ngram_s
        assert self.pricer is not None
        if not self.prefills:
            prompts = None  # heads compute no prompt tokens of their own
        if not self.passes_all:  # one pass of every request over its next token
            n = len(lookahead)
            return self.scale * self._pass(n, sum(contexts) + n, None)
        deepest = max(lookahead)
        n = len(lookahead)
        if min(lookahead) == deepest:  # all propose k: k passes of n, context growing by n
            total = 0.0
            first_pass = 1
            if prompts is not None:  # the first pass carries the prompt chunks
                total = self._pass(n, sum(contexts) + n, prompts)
                first_pass = 2
            k = deepest - first_pass + 1  # the passes left, alike but for their context
            if k <= 0:
                return self.scale * total
            step = _DecodeStep(n, n, sum(contexts) + n * first_pass, context_growth_per_step=n)
            first, increment = self.pricer.run_times(step)
            if self.pricer.linear_steps(step) >= k:
                return self.scale * (total + k * first + increment * (k * (k - 1) // 2))
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
            total += self._pass(n, summed + n * j, prompts if j == 1 else None)
        return self.scale * total
