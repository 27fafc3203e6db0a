"""How many of a request's speculated tokens the target accepts, drawn reproducibly.

Model. Position j (1..k) of a proposal is accepted with probability `a_j` given that positions
1..j-1 were, and the first rejection ends the run, so `P(accepted >= j) = a_1 * ... * a_j`. One
uniform `u` per verify step then gives the accepted count by inversion: the number of j <= k
with `u < a_1 * ... * a_j`. With one rate `a` for every position the mean number of tokens a
verify step emits (the accepted ones and the target's own) is `(1 - a^(k+1)) / (1 - a)`.

The rates of a request are the scenario's per-position list (`rate`, by tier), or one rate for
all its positions drawn once per request from a distribution (`per_request`, one value per
request id, drawn by the caller from a child stream of its own).

Draws. `u` is a hash (SplitMix64) of the scenario seed, the request id and the number of verify
steps the request has had: a counter-based stream, so a request's acceptances depend on nothing
else in the run (the batch it shares, its instance, other requests, whether decode steps are
coalesced), and turning speculation on moves no other random column (arrivals, lengths,
routing). Same seed, same acceptances.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from sim.core.request import Request

_MASK = (1 << 64) - 1
_STREAM = 0x5BEC0DE  # this stream's constant, mixed with the seed
_UNIT = 2.0**-53


def _mix(z: int) -> int:
    """SplitMix64's finalizer: a bijective 64-bit hash whose outputs on counters look random."""
    z = (z + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def thresholds(rates: tuple[float, ...]) -> tuple[float, ...]:
    """`P(accepted >= j)` for j = 1..k from the per-position rates."""
    out = []
    p = 1.0
    for a in rates:
        p *= a
        out.append(p)
    return tuple(out)


def expected_emitted(rates: tuple[float, ...]) -> float:
    """Mean tokens a verify step of len(rates) proposals emits: 1 + sum of P(accepted >= j)."""
    return 1.0 + sum(thresholds(rates))


class AcceptanceSampler:
    """Accepted counts of verify steps (see the module docstring), and the window of verify
    steps over which a request's recent acceptance is measured (0: not measured)."""

    def __init__(
        self,
        seed: int,
        *,
        by_tier: Mapping[str, tuple[float, ...] | None],
        default: tuple[float, ...] | None,
        per_request: np.ndarray | None = None,
        window: int = 0,
    ) -> None:
        # by_tier / default: P(accepted >= j) for j = 1..k; None: the request's own rate, from
        # per_request (indexed by request id); tiers missing from by_tier take the default
        self.key = _mix(_mix(seed & _MASK) ^ _STREAM)
        self.by_tier = dict(by_tier)
        self.default = default
        self.per_request = per_request
        self.window = window

    def uniform(self, request_id: int, step: int) -> float:
        """The uniform of a request's `step`-th verify step (0-based), in [0, 1)."""
        return (_mix(_mix(self.key ^ request_id) ^ step) >> 11) * _UNIT

    def accepted(self, req: Request, proposed: int) -> int:
        """How many of `proposed` tokens the target accepts in `req`'s next verify step."""
        u = (_mix(_mix(self.key ^ req.id) ^ req.num_spec_steps) >> 11) * _UNIT  # uniform()
        fixed = self.by_tier.get(req.tier, self.default) if self.by_tier else self.default
        n = 0
        if fixed is not None:
            while n < proposed and u < fixed[n]:
                n += 1
            return n
        assert self.per_request is not None
        a = float(self.per_request[req.id])
        p = a
        while n < proposed and u < p:
            n += 1
            p *= a
        return n
