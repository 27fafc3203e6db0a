"""KV reservation modes: how much of a request's KV memory is held, and from when.

`paged` (vLLM) holds what the computed tokens fill and grows a block at a time on demand. The
contiguous modes reserve a request's memory whole at admission, as pre-paging servers did:
`max_length` reserves `max_model_len` tokens (the longest sequence the request could grow to,
the vLLM paper's baseline), `exact` reserves prompt + true output (an oracle). Both round up to
whole blocks (use `block_size: 1` for byte-exact contiguous allocation) and never need blocks
after admission.
"""

from __future__ import annotations

from typing import Protocol

from sim.core.request import Request


class Reservation(Protocol):
    # whether holdings grow as tokens are computed (else they are reserved whole up front)
    paged: bool

    def target(self, req: Request, num_tokens: int) -> int:
        """Tokens `req`'s holding must cover for it to store `num_tokens` tokens."""
        ...


class Paged:
    paged = True

    def target(self, req: Request, num_tokens: int) -> int:
        return num_tokens


class MaxLength:
    paged = False

    def __init__(self, max_model_len: int) -> None:
        self.max_model_len = max_model_len

    def target(self, req: Request, num_tokens: int) -> int:
        return max(num_tokens, self.max_model_len)


class Exact:
    paged = False

    def target(self, req: Request, num_tokens: int) -> int:
        return max(num_tokens, req.sequence_tokens)


def make_reservation(mode: str, max_model_len: int) -> Reservation:
    if mode == "paged":
        return Paged()
    if mode == "max_length":
        return MaxLength(max_model_len)
    if mode == "exact":
        return Exact()
    raise ValueError(f"unknown KV reservation mode {mode!r}")
