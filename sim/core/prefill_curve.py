"""What prefilling `n` prompt tokens costs an instance, as routers and admission ask between
steps (never inside one): `PrefillCurve.seconds(n)`.

`n` tokens are priced as one step of them with no cached prefix, or beyond
`PREFILL_CHUNK_TOKENS` as that many tokens at the rate of a step of a full chunk (a
chunked-prefill token budget), so a backlog of many prompts is not priced as one prompt's
quadratic attention. A pricing is a pure function of its features, so answers are kept, and the
instances of one group (same profile, same pricing) share one curve.

`floor(n)` is the least of `seconds(m)` over every `m >= n`: a lower bound on the prefill of at
least `n` tokens that holds whatever the cost model's shape (a table profile need not grow with
the tokens). Beyond a chunk `seconds` grows with `n`, so the floor there is `seconds(n)`; below,
it is a suffix minimum, priced once per size down to the least asked for (at most a chunk's
pricings per curve). `sim.topology.ttft_index` bounds a predicted TTFT with it.
"""

from __future__ import annotations

from typing import Protocol

from sim.core.plan import StepFeatures

PREFILL_CHUNK_TOKENS = 2048
PREFILL_MEMO_SIZE = 1 << 14  # answers kept (routers ask for the same sizes)


class RunPricer(Protocol):
    def run_times(self, features: StepFeatures) -> tuple[float, float]:
        """The first step's seconds, and how much longer each repeated step is."""
        ...


class PrefillCurve:
    """Seconds to prefill `n` prompt tokens on one cost model (see the module docstring)."""

    def __init__(self, cost: RunPricer) -> None:
        self.cost = cost
        self._memo: dict[int, float] = {}
        # _suffix[m - self._low] = min(seconds(k) for k >= m), for m in [self._low, CHUNK + 1]
        self._suffix: list[float] = []
        self._low = PREFILL_CHUNK_TOKENS + 2

    def seconds(self, num_tokens: int) -> float:
        if num_tokens <= 0:
            return 0.0
        memo = self._memo
        seconds = memo.get(num_tokens)
        if seconds is not None:
            return seconds
        chunk = min(num_tokens, PREFILL_CHUNK_TOKENS)
        features = StepFeatures(1, chunk, chunk, 0, chunk, chunk * chunk, 0, 1, 0, ((chunk, 0),))
        first, _ = self.cost.run_times(features)
        seconds = first * num_tokens / chunk
        if len(memo) >= PREFILL_MEMO_SIZE:
            memo.clear()
        memo[num_tokens] = seconds
        return seconds

    def floor(self, num_tokens: int) -> float:
        """The least `seconds(m)` over every `m >= num_tokens`."""
        n = max(1, num_tokens)
        if n > PREFILL_CHUNK_TOKENS:
            return self.seconds(n)  # first(chunk) * n / chunk: grows with n
        low = self._low
        if n < low:
            # extend the suffix minimum down to n: k, then the cheaper of k and what is above
            top = PREFILL_CHUNK_TOKENS + 1
            if low > top:
                below = [self.seconds(top)]
                low = top
            else:
                below = []
            least = below[0] if below else self._suffix[0]
            grown: list[float] = []
            for k in range(low - 1, n - 1, -1):
                least = min(least, self.seconds(k))
                grown.append(least)
            grown.reverse()
            self._suffix = grown + below + self._suffix
            self._low = n
            low = n
        return self._suffix[n - low]
