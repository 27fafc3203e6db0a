"""Per-request state shared by every policy.

One token-accounting rule (DESIGN.md): a request knows `num_prompt_tokens + num_output_tokens`
tokens and has computed the KV of `num_computed_tokens` of them. A step gives it `n` tokens with
`n <= num_remaining`; when the step brings `num_computed_tokens` level with the known tokens, the
request emits one new output token. A fresh request therefore prefills its prompt (in one step or
in chunks) and emits its first token; a decoding request has exactly one token remaining; a
request preempted by recompute drops to zero computed tokens and prefills prompt plus outputs
again before it emits the next token. A request finishes when it has emitted
`max_output_tokens`.

A request preempted by swap keeps its computed tokens: its KV waits in host memory and comes
back before it runs again, so it neither recomputes nor re-emits anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

NAN = math.nan


@dataclass(slots=True, eq=False)
class Request:
    """Mutable state of one request; `eq=False` keeps identity semantics for dict keys."""

    id: int
    arrival_s: float
    num_prompt_tokens: int
    max_output_tokens: int  # the request's true output length (from the workload or trace)
    num_computed_tokens: int = 0
    num_output_tokens: int = 0
    kv_blocks: int = 0  # paged: blocks held; contiguous: tokens reserved
    first_scheduled_s: float = NAN
    first_token_s: float = NAN
    last_token_s: float = NAN
    finish_s: float = NAN
    max_itl_s: float = 0.0  # longest gap between two consecutive output tokens
    num_preemptions: int = 0
    num_recomputed_tokens: int = 0  # tokens prefilled again after preemptions
    rejected: bool = False
    tier: str = "default"  # service tier (paid, free, ...): queue rank/weight and SLO targets
    predicted_output_tokens: int = 0  # a predictor's guess of max_output_tokens (0: unknown)
    num_swaps: int = 0  # preemptions by swap (also counted in num_preemptions)
    swapped_bytes: int = 0  # KV bytes copied to host memory over all its swaps
    host_bytes: int = 0  # KV bytes it holds in host memory now (swapped out)
    instance: int = 0  # the instance that took it (the prefill instance when disaggregated)
    # disaggregated serving: the prompt's KV moves to a decode instance over a link
    decode_instance: int = -1
    handoff_s: float = NAN  # prompt done, KV waiting for a link and a decode instance
    transfer_start_s: float = NAN
    transfer_end_s: float = NAN

    @property
    def num_known_tokens(self) -> int:
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def num_remaining(self) -> int:
        """Tokens to compute before the next output token is emitted."""
        return self.num_prompt_tokens + self.num_output_tokens - self.num_computed_tokens

    @property
    def is_decoding(self) -> bool:
        return self.num_output_tokens > 0 and self.num_remaining == 1

    @property
    def is_finished(self) -> bool:
        return self.num_output_tokens >= self.max_output_tokens
