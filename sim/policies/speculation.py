"""Which decoding requests speculate in a step, and with how many lookahead tokens.

Speculative decoding (`policy.speculative`, `sim.scenario.speculative`) is decided here and
applied by the engine (`sim.core.speculative_step`). A step's decoding requests speculate
unless it is switched off:

* for the whole step while `disable_by_batch_size` or more requests run when it is planned (vLLM's
  `running_queue_size >= disable_by_batch_size`), and then the plain decode path is planned, runs
  of identical decode steps included;
* for a request whose acceptance over its last `acceptance_window` verify steps (measured by the
  engine, `Request.spec_recent_acceptance`) is below `min_acceptance_rate`: it decodes one token
  a step from then on, never proposing again (so its window never moves).

A speculating request proposes k tokens, fewer when less is left: at most its output left minus
one (the target's own token always comes on top, and a request never emits past its length),
the token budget left after every decoding request's own token (verification tokens count against
`max_num_batched_tokens`; running requests come before new prompt chunks, as in vLLM), and what
the free KV blocks hold beyond its next token's block. Speculation never preempts: lookahead takes
only blocks that are free. Requests are served in admission order; swapped-in and seated
requests join from their next step.

A step in which speculation is on (by batch size) is planned alone (`repeat` 1), whether or not
a request ends up speculating: whether one can depends on free blocks and tokens left, which
change step by step.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from sim.core.plan import InstanceView
from sim.core.request import Request


class SpeculationRule:
    def __init__(
        self,
        num_speculative_tokens: int,
        *,
        disable_by_batch_size: int | None = None,
        min_acceptance_rate: float | None = None,
    ) -> None:
        if num_speculative_tokens < 1:
            raise ValueError("speculation needs at least one speculative token")
        self.k = num_speculative_tokens
        self.disable_by_batch_size = disable_by_batch_size
        self.min_acceptance_rate = min_acceptance_rate

    def active(self, view: InstanceView) -> bool:
        """Whether the step planned now may speculate (by batch size)."""
        limit = self.disable_by_batch_size
        return limit is None or len(view.running) < limit

    def lookahead(
        self,
        view: InstanceView,
        skip: Set[Request],
        budget: int,
        free_blocks: int,
        planned: Mapping[Request, int],
    ) -> tuple[dict[Request, int], int, int]:
        """Each speculating request's k, and the budget and free blocks left. `skip`: requests
        evicted by this plan; `planned`: blocks already planned for a request this step."""
        out: dict[Request, int] = {}
        if budget <= 0:
            return out, budget, free_blocks
        kv = view.kv
        bs = kv.block_size
        floor = self.min_acceptance_rate
        for req in view.running:
            if not req.is_decoding or req in skip:
                continue
            left = req.max_output_tokens - req.num_output_tokens - 1
            k = self.k if self.k < left else left
            if k <= 0:
                continue
            if floor is not None and req.spec_recent_acceptance < floor:
                continue  # NaN (window not full yet) compares False: it keeps speculating
            if k > budget:
                k = budget
            computed = req.num_computed_tokens
            # blocks it holds once its own next token has its room
            held = max(req.kv_blocks + planned.get(req, 0), -(-(computed + 1) // bs))
            room = (held + free_blocks) * bs - computed - 1
            if k > room:
                k = room
                if k <= 0:
                    continue
            need = -(-(computed + 1 + k) // bs) - held
            if need > 0:
                free_blocks -= need
            out[req] = k
            budget -= k
            if budget <= 0:
                break
        return out, budget, free_blocks
