"""What a cost model reads of a step: the features Protocol and the shape of its prompt chunks.

The engine counts a step's features (`sim.core.plan.StepFeatures`); costs may not import the core,
so this Protocol names the fields the cost models read. `chunk_shapes` gives each prompt chunk's
(tokens, context before it) as the kernels see it: static batching's padded prompts are all the
longest prompt's length (`Padding.prefill_tokens` says how many tokens were added), and a caller
that gives no chunks at all is taken to have computed one chunk.
"""

from __future__ import annotations

from typing import Protocol


class StepFeaturesLike(Protocol):
    """The fields of `sim.core.plan.StepFeatures` that price a step."""

    @property
    def num_seqs(self) -> int: ...

    @property
    def num_tokens(self) -> int: ...

    @property
    def num_prefill_tokens(self) -> int: ...

    @property
    def sum_context_tokens(self) -> int: ...

    @property
    def prefill_attention_term(self) -> int: ...

    @property
    def context_growth_per_step(self) -> int: ...

    @property
    def attention_growth_per_step(self) -> int: ...

    @property
    def chunks(self) -> tuple[tuple[int, int], ...]: ...


def chunk_shapes(features: StepFeaturesLike) -> tuple[tuple[int, int], ...]:
    """Each prompt chunk's (tokens, cached tokens before it), padding included."""
    chunks = features.chunks
    prefill = features.num_prefill_tokens
    if not chunks:
        if not prefill:
            return ()
        # one chunk: its attention term is prefill * (prefix + prefill)
        return ((prefill, max(features.prefill_attention_term // prefill - prefill, 0)),)
    computed = 0
    for c, _ in chunks:
        computed += c
    padded = prefill - computed
    if padded > 0 and (computed + padded) % len(chunks) == 0:
        # static batching pads every prompt of the batch to the longest one
        longest = (computed + padded) // len(chunks)
        return tuple((longest, p) for _, p in chunks)
    return chunks


def causal_pairs(chunks: tuple[tuple[int, int], ...]) -> float:
    """Query-key pairs a causal attention kernel scores: chunk x (prefix + chunk / 2) each."""
    total = 0.0
    for c, p in chunks:
        total += c * (p + c / 2)
    return total
