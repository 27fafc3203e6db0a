"""How KV memory is used over time: three exact time integrals per instance.

* blocks held (`kv_block_seconds`): the pool's used blocks, integrated over busy time;
* stored tokens (`kv_stored_token_seconds`): the tokens whose KV the holders have computed,
  counting each step's tokens during that step (a decode step stores the token it computes);
* internal fragmentation (`kv_fragment_token_seconds`): memory a request holds beyond its whole
  sequence `prompt + true output`, i.e. what it will never fill (the vLLM paper's measure). Paged
  allocation wastes at most the tail of a request's last block, and only once it has that block;
  a contiguous reservation of `max_model_len` wastes everything past the true length all along.

All three are piecewise constant within a step; they change at step starts (allocations, the
step's tokens), at step ends (finished requests free their KV) and, in P/D clusters, at any
instant (a KV transfer reserves, lands or leaves). `KVUsage` keeps the current stored and
fragment tallies and integrates a run of steps in closed form: its decode requests add one token
each per step and allocate blocks as they cross block boundaries (`DecodeBatch.growth`), so a run
of k steps costs O(1), not O(k). It integrates only while the instance runs a step: the summary's
KV utilization is time-weighted over busy time.

The summary derives `kv_reserved_utilization = stored / allocated` and `internal_fragmentation =
fragment / allocated`, allocated being block-seconds times the block size; the rest (allocated,
not yet stored, but to be filled later) is the reservation for requests' future tokens.
"""

from __future__ import annotations

from typing import NamedTuple

from sim.core.decode_batch import GrowthIntegrals
from sim.core.request import Request
from sim.core.step_times import StepTimes

NOTHING_EARLY = (0.0, 0.0, 0.0)


class PieceUsage(NamedTuple):
    """The KV integrals of one applied run (or piece of a run) of steps."""

    blocks_held: int  # during its last step
    block_seconds: float
    stored_token_seconds: float
    fragment_token_seconds: float


def series_sum(first: float, growth: float, num_steps: int, times: StepTimes) -> float:
    """Integral over a run of a quantity that is `first + m * growth` during step m + 1."""
    k = num_steps
    s1 = k * (k - 1) // 2
    s2 = (k - 1) * k * (2 * k - 1) // 6
    d0, inc = times.first_duration_s, times.increment_s
    return k * first * d0 + (first * inc + growth * d0) * s1 + growth * inc * s2


class KVUsage:
    """Stored and fragment tallies of one instance's KV holders, and the three integrals."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.stored_tokens = 0  # computed tokens of every request holding KV here
        self.fragment_tokens = 0  # held beyond every holder's whole sequence
        self.accrued_until_s = 0.0  # integrals are complete up to here within the busy step
        # integrated mid-step (before an outside change) for the step that is under way
        self._early = NOTHING_EARLY

    def over(self, req: Request, held_blocks: int) -> int:
        """Tokens `held_blocks` blocks hold beyond the request's whole sequence."""
        return max(0, held_blocks * self.block_size - req.sequence_tokens)

    def step_started(self, start_s: float) -> None:
        self.accrued_until_s = start_s
        self._early = NOTHING_EARLY

    def accrue_to(self, now_s: float, blocks_used: int) -> None:
        """Integrate the step under way up to `now_s` before an outside change at `now_s`."""
        span = now_s - self.accrued_until_s
        if span <= 0.0:
            return
        b, s, f = self._early
        self._early = (
            b + blocks_used * span,
            s + self.stored_tokens * span,
            f + self.fragment_tokens * span,
        )
        self.accrued_until_s = now_s

    def integrate(
        self,
        times: StepTimes,
        num_steps: int,
        blocks_used: int,
        stored_growth: int,
        growth: GrowthIntegrals,
    ) -> PieceUsage:
        """The integrals of `num_steps` steps from `times.start_s`, where the first step holds
        `blocks_used` blocks and the current tallies, and each later step stores
        `stored_growth` more tokens and allocates as `growth` says. Leaves the tallies as they
        are in the last step."""
        start, d0, inc = times
        k = num_steps
        tri = k * (k - 1) // 2
        total = k * d0 + inc * tri  # times.elapsed(k)
        stored = self.stored_tokens
        fragment = self.fragment_tokens
        block_seconds = blocks_used * total + growth.block_seconds
        # series_sum(stored, stored_growth, k, times), inlined: the hot path
        stored_ts = k * stored * d0 + (stored * inc + stored_growth * d0) * tri
        if stored_growth and inc:
            stored_ts += stored_growth * inc * ((k - 1) * k * (2 * k - 1) // 6)
        fragment_ts = fragment * total + growth.fragment_token_seconds
        already = self.accrued_until_s - start  # integrated before an outside change
        if already > 0.0:
            b, s, f = self._early
            block_seconds += b - blocks_used * already
            stored_ts += s - stored * already
            fragment_ts += f - fragment * already
            self._early = NOTHING_EARLY
        if k > 1:
            self.stored_tokens = stored + stored_growth * (k - 1)
        if growth.fragment_tokens:
            self.fragment_tokens = fragment + growth.fragment_tokens
        self.accrued_until_s = start + total
        return PieceUsage(blocks_used + growth.blocks, block_seconds, stored_ts, fragment_ts)
