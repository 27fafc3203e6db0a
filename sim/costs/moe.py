"""How many experts a step's tokens touch, and how unevenly they land on expert-parallel ranks.

A mixture-of-experts layer routes each token to `k` of its `E` experts. A step's expert weight
reads are set by the experts *some* token of the step chose: with `T` tokens routed independently
and expert `i` chosen by a token with probability `q_i`, the expected number of distinct experts
touched is

    D(T) = sum_i (1 - (1 - q_i) ** T)

Uniform routing has `q_i = k / E`, so `D(T) = E * (1 - (1 - k / E) ** T)`: `k` experts at one
token (the small-batch regime, where a step reads only the active parameters) and all `E` once
`T` is large (the large-batch regime: every expert read, compute-bound).

Unbalanced routing is stated as the hottest expert's share `h` of routed tokens (uniform: `1 / E`).
The shares follow a power law, `p_i` proportional to `(i + 1) ** -a`, with `a` solved so that
`p_0 = h`; each token picks `k` distinct experts, so expert `i` is chosen with probability
`q_i = k * p_i` (`h <= 1 / k` keeps it a probability).

Expert parallelism puts `E / ep` whole experts on each of `ep` GPUs; the step waits for the
slowest, so the busiest GPU sets both the reads (its distinct experts) and the expert compute
(its share of routed tokens; max over mean is the *imbalance*). The experts' placement is drawn
once (a seeded shuffle: experts' popularity is unrelated to their index), unless an imbalance is
stated, in which case every GPU is taken to hold `E / ep` experts chosen with probability
`imbalance * k / E` each: the busiest GPU's reads and compute. The expectation of the busiest
GPU's reads is approximated by the largest of the GPUs' expectations (exact for uniform routing
with a stated imbalance of 1, a lower bound otherwise).
"""

from __future__ import annotations

import numpy as np

PLACEMENT_SEED = 0  # the drawn placement of experts on expert-parallel ranks


def routing_shares(num_experts: int, hottest_share: float | None) -> np.ndarray:
    """Each expert's share of routed tokens (sums to 1), hottest first."""
    e = num_experts
    if hottest_share is None or hottest_share <= 1.0 / e * (1 + 1e-12):
        return np.full(e, 1.0 / e)
    ranks = np.arange(1, e + 1, dtype=float)

    def top(a: float) -> float:
        w = ranks**-a
        return float(w[0] / w.sum())

    lo, hi = 0.0, 1.0
    while top(hi) < hottest_share:  # top(a) rises from 1/E towards 1 as a grows
        hi *= 2.0
        if hi > 1e4:
            break
    for _ in range(200):
        mid = (lo + hi) / 2
        if top(mid) < hottest_share:
            lo = mid
        else:
            hi = mid
    w = ranks**-hi
    return w / w.sum()


def replica_shares(shares: np.ndarray, redundant: int) -> np.ndarray:
    """Each physical expert's share of routed tokens when `redundant` replicas are given to the
    hottest experts in turn (as the load balancers place them: DeepSeek's EPLB, SGLang's and
    vLLM's redundant experts), a token going to one of its expert's copies at random."""
    if redundant <= 0:
        return shares
    e = len(shares)
    copies = np.ones(e, dtype=int) + redundant // e
    copies[: redundant % e] += 1  # `shares` runs hottest first
    return np.repeat(shares / copies, copies)


def expected_distinct(q: np.ndarray, tokens: int) -> float:
    """Expected distinct experts that `tokens` independently routed tokens touch."""
    if tokens <= 0:
        return 0.0
    return float(np.sum(-np.expm1(tokens * np.log1p(-np.minimum(q, 1.0 - 1e-15)))))


def _probabilities(q: np.ndarray) -> np.ndarray:
    """Choice probabilities with any of exactly 1 kept (an expert in every token)."""
    return np.minimum(q, 1.0)


class ExpertRouting:
    """The routed experts of one MoE layer group as the busiest GPU of a step sees them.

    `experts_read(T)` is the expected number of whole experts the busiest GPU reads per MoE
    layer for a step of `T` tokens; `compute_share` is the busiest GPU's share of the routed
    token-expert pairs. With `expert_parallel == 1` the experts are split by tensor over
    `gpus` GPUs, so each GPU reads `1 / gpus` of every touched expert and computes `1 / gpus`
    of every pair."""

    def __init__(
        self,
        num_experts: int,
        experts_per_token: int,
        *,
        hottest_share: float | None = None,
        expert_parallel: int = 1,
        gpus: int = 1,
        imbalance: float | None = None,
        redundant: int = 0,
    ) -> None:
        placed = num_experts + redundant  # physical experts: the model's and their replicas
        if placed % expert_parallel:
            raise ValueError(f"expert_parallel {expert_parallel} must divide {placed}")
        self.num_experts = num_experts
        self.top_k = experts_per_token
        self.expert_parallel = expert_parallel
        self.gpus = gpus
        shares = replica_shares(routing_shares(num_experts, hottest_share), redundant)
        q = _probabilities(experts_per_token * shares)
        self._memo: dict[int, float] = {}
        per_rank = placed // expert_parallel
        if expert_parallel == 1:
            self._ranks = [q]
            self.compute_share = 1.0 / gpus
            self.imbalance = 1.0
        elif imbalance is not None:
            self._ranks = [np.full(per_rank, min(1.0, imbalance * experts_per_token / placed))]
            self.compute_share = imbalance / expert_parallel
            self.imbalance = imbalance
        else:
            order = np.random.default_rng(PLACEMENT_SEED).permutation(placed)
            self._ranks = [q[order[r::expert_parallel]] for r in range(expert_parallel)]
            loads = np.array([s.sum() for s in self._ranks])
            self.compute_share = float(loads.max() / loads.sum())
            self.imbalance = self.compute_share * expert_parallel
        # the per-GPU fraction of each expert read (tensor-split experts: 1 / gpus)
        self._read_fraction = 1.0 / gpus if expert_parallel == 1 else 1.0

    def experts_read(self, tokens: int) -> float:
        """Whole experts' worth of weights the busiest GPU reads per MoE layer (expected)."""
        hit = self._memo.get(tokens)
        if hit is None:
            hit = max(expected_distinct(q, tokens) for q in self._ranks) * self._read_fraction
            if len(self._memo) < 1 << 16:
                self._memo[tokens] = hit
        return hit

    def distinct(self, tokens: int) -> float:
        """Expected distinct experts touched across all GPUs (per MoE layer)."""
        return sum(expected_distinct(q, tokens) for q in self._ranks)
