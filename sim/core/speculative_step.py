"""An instance's speculative steps: lookahead KV before the step, acceptance and tokens after.

A plan whose `speculate` names decoding requests (`sim.core.plan`) runs as one step in which
every decoding request is handled on its own, outside the decode batch (`DecodeBatch` advances
its members one token per step; a speculating request emits a number of its own). At the step's
start the batch's members leave it, and each decoding request gets KV room for its next token
and its k lookahead tokens (k = 0 for those not speculating); the step computes 1 + k tokens of
each, priced as target tokens reading their sequence's KV once, and the proposal's seconds are
priced apart (`ProposalPricer`: a draft model's passes, heads, or a constant). At its end each
speculating request's accepted count `a` is drawn (`sim.core.acceptance`), the request emits
`a + 1` tokens together at the step's end (`Request.verify`), and the blocks holding only its
`k - a` rejected tokens go back to the pool. The requests stay out of the batch while steps
speculate; the first plain decode step takes them back in (the engine's `ready` list).
A draft model also computes every prompt chunk the target does, in every step (speculating or
not), in its first pass of a speculative step and in a pass of its own otherwise: the engine
adds those seconds to the step, as proposal time.

Inter-token gaps. The tokens of one emission share its time, so each of them is given the gap
since the request's previous token divided by their number: the pooled per-token gaps still sum
to each request's `finish - first token` and count `output tokens - 1`. The whole gap is kept
too (`ItlLog.emission`): a request's longest gap (`max_itl_s`, stalls) is the longest wait
between two emissions, undivided.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple, Protocol

from sim.core.acceptance import AcceptanceSampler
from sim.core.decode_batch import DecodeBatch
from sim.core.kv.pool import KVPool
from sim.core.kv_usage import KVUsage
from sim.core.recorder import ItlLog
from sim.core.request import Request

# a step's prompt chunks: (chunks, tokens, context after the step, attention work, each chunk's
# (tokens, context before it)), as a draft model computes them too
Prompts = tuple[int, int, int, int, tuple[tuple[int, int], ...]]


class ProposalPricer(Protocol):
    """Seconds the proposer takes in a step (`sim.costs.proposal.ProposalCost`)."""

    # a draft model computes the prompts' tokens too (its own KV of them)
    prefills: bool

    def proposal_s(
        self, lookahead: Sequence[int], contexts: Sequence[int], prompts: Prompts | None = None
    ) -> float:
        """For requests proposing `lookahead[i]` tokens after `contexts[i]` computed ones (a
        draft's first pass also computes the step's `prompts`)."""
        ...

    def prefill_s(self, prompts: Prompts) -> float:
        """A draft's pass over a step's prompt chunks alone (0 without a draft model)."""
        ...


class SpecStart(NamedTuple):
    """What a speculative step holds between its start and its end."""

    decoders: list[Request]  # every decoding request of the step, in order
    lookahead: Mapping[Request, int]  # the speculating ones and their k
    num_tokens: int  # decode and verification tokens computed: sum of 1 + k
    sum_context: int  # each decoding request's context after the step: computed + 1 + k
    num_spec_seqs: int
    num_proposed: int
    proposal_s: float


class Speculator:
    """Applies one instance's speculative steps (see the module docstring)."""

    def __init__(
        self,
        sampler: AcceptanceSampler,
        proposer: ProposalPricer,
        pool: KVPool,
        usage: KVUsage,
        paged: bool,
    ) -> None:
        self.sampler = sampler
        self.proposer = proposer
        self.pool = pool
        self.usage = usage
        self.paged = paged

    def draft_prefill_s(self, prompts: Prompts) -> float | None:
        """Seconds a draft model spends computing a step's prompt chunks (None: the proposer
        computes no prompts, an n-gram lookup)."""
        proposer = self.proposer
        return proposer.prefill_s(prompts) if proposer.prefills else None

    def begin(
        self,
        lookahead: Mapping[Request, int],
        ready: list[Request],
        running: list[Request],
        batch: DecodeBatch,
        grow: Callable[[Request, int], None],
        prompts: Prompts | None = None,
    ) -> SpecStart:
        """The step's start: batch members join `ready` (they decode on their own now), and
        every decoding request gets KV for its next token and its lookahead."""
        if batch.size:
            members = [r for r in running if r._batch is batch]
            for req in members:
                batch.leave(req)
            ready[:0] = members
        tokens = context = proposed = 0
        ks: list[int] = []
        contexts: list[int] = []
        for req in ready:
            computed = req.num_computed_tokens
            k = lookahead.get(req, 0)
            if k:
                left = req.max_output_tokens - req.num_output_tokens
                if k >= left:
                    raise AssertionError(f"request {req.id}: {k} lookahead, {left} tokens left")
                ks.append(k)
                contexts.append(computed)
                proposed += k
            target = computed + 1 + k
            grow(req, target)
            tokens += 1 + k
            context += target
        if len(ks) != len(lookahead):
            raise AssertionError("a speculating request is not a decoding request here")
        self.usage.stored_tokens += tokens
        proposal_s = self.proposer.proposal_s(ks, contexts, prompts)
        return SpecStart(list(ready), lookahead, tokens, context, len(ks), proposed, proposal_s)

    def end(
        self, step: SpecStart, start_s: float, end_s: float, itl: ItlLog
    ) -> tuple[list[Request], list[Request], int]:
        """The step's end: acceptance, tokens, freed lookahead. Returns the requests still
        decoding, those that emitted their last token, and the tokens accepted."""
        sampler, lookahead, usage, pool = self.sampler, step.lookahead, self.usage, self.pool
        window = sampler.window
        duration = end_s - start_s
        # emissions right after the previous step (gap = this step), pooled by their size
        back_to_back: dict[int, int] = {}
        alive: list[Request] = []
        finished: list[Request] = []
        accepted_total = rejected_total = 0
        for req in step.decoders:
            k = lookahead.get(req, 0)
            accepted = sampler.accepted(req, k) if k else 0
            follows = req.last_token_s == start_s
            gap = req.verify(k, accepted, start_s, end_s, window)
            emitted = accepted + 1
            if follows:
                back_to_back[emitted] = back_to_back.get(emitted, 0) + 1
            else:
                itl.emission(gap, emitted, 1)
            if k > accepted:
                rejected_total += k - accepted
                if self.paged:
                    held = req.kv_blocks
                    freed = pool.shrink(req, req.num_computed_tokens)
                    if freed:
                        usage.fragment_tokens -= usage.over(req, held) - usage.over(
                            req, held - freed
                        )
            accepted_total += accepted
            (finished if req.is_finished else alive).append(req)
        for emitted, count in back_to_back.items():
            itl.emission(duration, emitted, count)
        usage.stored_tokens -= rejected_total
        return alive, finished, accepted_total
