"""Step costs from a table profile: tabulated parts inside the grids, the fitted form outside.

Inside the tables a step costs

    linear(num_tokens) + decode_attention(B, L) + sum over prompt chunks prefill_attention(c, p)

where B is the step's decode slots (padding slots included), L their mean cached context before
the step, and (c, p) each chunk's tokens and the tokens cached before it. A part whose table the
profile lacks is priced by the profile's coefficients instead (decode: `t_kv * context`; a chunk:
`t_kv * (p + c) + t_attn * c * (p + c) + t_pair * c * (p + c / 2)`), the same inside and outside.

A step any of whose lookups falls outside its table (beyond an axis, or on a null cell) is priced
whole by the profile's analytic form (`coefficients` in `table.fallback_form`, fitted to the same
data), and counted: `num_extrapolated` is the number of priced runs that were extrapolated, and
`last_extrapolated` says whether the run just priced was.

A step the tables price at or below zero (possible only between grid points of a table whose
attention cells are negative: `sim.costs.tables`) is a `ScenarioError`: the clock must move.

Runs of repeated steps stay exact: in a run B, c and the token count are fixed while L grows by one
per step and a repeated chunk's prefix by c, and the price is linear in both between grid points.
`linear_steps` returns how many steps stay on the same linear piece: up to the next grid point of L
or p inside the tables, or outside them up to where a part could come back inside.
"""

from __future__ import annotations

import math

from sim.costs.cost_model import CostModel
from sim.costs.features import StepFeaturesLike, chunk_shapes
from sim.costs.knobs import BIG
from sim.costs.priced_runs import PricedRuns
from sim.costs.profile import Profile
from sim.costs.tables import INF, GridLookup, dense_linear
from sim.errors import ScenarioError


class TableCostModel(PricedRuns):
    """Prices steps with a table profile (see the module docstring)."""

    has_tables = True

    def __init__(self, profile: Profile) -> None:
        table = profile.table
        if table is None:
            raise ValueError(f"profile {profile.name!r} has no table")
        self.profile = profile
        self.fallback = CostModel(profile)
        self.linear_lo = table.linear.tokens[0]
        self.linear = dense_linear(table.linear)
        self.linear_len = len(self.linear)
        self.decode = GridLookup(table.decode_attention) if table.decode_attention else None
        self.prefill = GridLookup(table.prefill_attention) if table.prefill_attention else None
        c = profile.coefficients
        self.t_kv = float(c.t_kv_s_per_token)
        self.t_attn = float(c.t_attn_s_per_token2)
        self.t_pair = float(c.t_attn_s_per_pair)
        self.num_extrapolated = 0
        self.last_extrapolated = False
        self._last: tuple[StepFeaturesLike | None, int] = (None, 0)

    def _times(self, features: StepFeaturesLike) -> tuple[float, float, int, bool]:
        return self.price(features, features.num_tokens, features.num_seqs)

    def cpu_overhead_s(self, features: StepFeaturesLike) -> float:
        """Host seconds per step: none unless the pricing knobs add some (`sim.costs.knobs`)."""
        return 0.0

    def price(
        self, features: StepFeaturesLike, num_tokens: int, num_seqs: int
    ) -> tuple[float, float, int, bool]:
        """(first step s, increment per repeated step, steps on this linear piece, outside) for
        the linear layers computing `num_tokens` tokens over `num_seqs` slots."""
        k = num_tokens - self.linear_lo
        if k < 0 or k >= self.linear_len:  # the token count is fixed for the run: outside for good
            return self._outside(features, num_tokens, num_seqs, BIG)
        first = self.linear[k]
        increment = 0.0
        steps = BIG
        come_back = BIG  # outside: steps until some part may be inside again
        outside = False
        chunks = chunk_shapes(features) if features.num_prefill_tokens else ()
        repeated = bool(features.attention_growth_per_step) and len(chunks) == 1
        prefill_context = 0
        for c, p in chunks:
            prefill_context += p + c
            if self.prefill is None:
                first += (
                    self.t_kv * (p + c) + self.t_attn * c * (p + c) + self.t_pair * c * (p + c / 2)
                )
                if repeated:
                    increment += self.t_kv * c + (self.t_attn + self.t_pair) * c * c
                continue
            value, slope, bound = self.prefill.at(c, p)
            if value is None:
                outside = True
                if repeated and bound < INF:  # steps while p + (j - 1) c < bound
                    come_back = min(come_back, math.ceil((bound - p) / c))
            else:
                first += value
                if repeated:  # the prefix grows by c per step
                    increment += slope * c
                    steps = min(steps, int((bound - p) // c) + 1)
        slots = features.num_seqs - len(chunks)
        if slots > 0:
            context = features.sum_context_tokens - prefill_context
            growth = features.context_growth_per_step - (chunks[0][0] if repeated else 0)
            if self.decode is None:
                first += self.t_kv * context
                increment += self.t_kv * growth
            else:
                # mean cached tokens per slot before the step; it grows by growth / slots
                value, slope, bound = self.decode.at(slots, context / slots - 1)
                if value is None:
                    outside = True
                    if growth > 0 and bound < INF:  # steps while L < bound
                        come_back = min(
                            come_back, math.ceil(((bound + 1) * slots - context) / growth)
                        )
                else:
                    first += value
                    if growth > 0:  # steps while L <= bound
                        increment += slope * growth / slots
                        steps = min(steps, int(((bound + 1) * slots - context) // growth) + 1)
        if outside:
            return self._outside(features, num_tokens, num_seqs, max(come_back, 1))
        if first <= 0.0:
            # the load-time check holds at grid points; a table whose linear part dips between
            # them can still price a step at no time, which would stop the clock
            raise ScenarioError(
                f"profile {self.profile.name!r}: its table prices a step of {num_tokens} tokens "
                f"over {num_seqs} sequences at {first:g} s; a step must take time (check the "
                "negative attention cells)",
                path="profile.table",
            )
        return first, increment, steps, False

    def _outside(
        self, features: StepFeaturesLike, num_tokens: int, num_seqs: int, steps: int
    ) -> tuple[float, float, int, bool]:
        first, increment, _, _ = self.fallback.price(features, num_tokens, num_seqs)
        return first, increment, steps, True
