"""Continuous (iteration-level) batching with a paged KV cache: Orca and vLLM.

Every step, finished requests have already left (their blocks freed), running requests get one
decode token each, and waiting requests join while `max_num_seqs`, the token budget
`max_num_batched_tokens` and free KV blocks allow (`sim.policies.iteration`). Prompts run whole;
two modes say how they share a step with decodes:

* `prefill_first` (vLLM before chunked prefill): if any waiting request can be admitted, the step
  runs only whole-prompt prefills and every running request stalls for it;
* `mixed` (Orca's selective batching): decodes first, then whole prompts fill the rest of the
  budget in the same step.

When a decode needs a block and none is free, a victim is preempted (`sim.policies.preemption`).
With speculative decoding, decoding requests' lookahead tokens come from the budget before
prompts in `mixed` mode (`sim.policies.speculation`); `prefill_first` steps never decode.
"""

from __future__ import annotations

from typing import Literal

from sim.core.plan import InstanceView, StepPlan
from sim.policies.iteration import Draft, IterationPolicy, Limits

Mode = Literal["prefill_first", "mixed"]


class ContinuousPolicy(IterationPolicy):
    def __init__(self, limits: Limits, mode: Mode = "prefill_first") -> None:
        super().__init__(limits)
        if mode not in ("prefill_first", "mixed"):
            raise ValueError(f"unknown continuous batching mode {mode!r}")
        self.mode = mode

    def schedule(self, view: InstanceView) -> StepPlan | None:
        quick = self.decode_only(view)
        if quick is not None:
            return quick
        d = Draft(view)
        self.seat_arrived(d)
        budget = self.max_num_batched_tokens
        if self.mode == "prefill_first":
            self.plan_admissions(d, budget, 0)
            if d.prefill:
                return d.plan(decode=False)  # prompts alone; running requests stall
            self.plan_decodes(d)
            self.plan_swap_ins(d)
            self.plan_speculation(d, budget - d.num_decodes)
        else:
            self.plan_decodes(d)
            self.plan_swap_ins(d)
            budget = self.plan_speculation(d, budget - d.num_decodes)
            budget = self.plan_continued(d, budget)
            self.plan_admissions(d, budget, d.num_decodes)
        if not d.num_decodes and not d.prefill:
            # nothing to run: a request that preempted itself with nothing else runnable; the
            # eviction still happens (the engine records it with the next step)
            return d.plan(decode=False) if d.preempt else None
        return self.finish_plan(d)
