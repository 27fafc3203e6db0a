"""Chunked prefill (Sarathi-Serve): decodes first, then prompt chunks fill the token budget.

Each step every running request decodes one token; what is left of `max_num_batched_tokens` goes
to prompt chunks: first the prompts already in progress (admission order), then new ones from
the waiting queue, at most `max_prefill_seqs` prompts per step. A long prompt spreads over
several steps, so running decodes never wait for it; a chunk's attention reads everything
computed before it (priced by the cost model), so chunking is not free. While one prompt's
chunks fill the whole budget the steps repeat (same decodes, same chunk), and the plan says so.
Speculative decoding's lookahead tokens come out of the budget before the chunks
(`sim.policies.speculation`).
"""

from __future__ import annotations

from sim.core.plan import InstanceView, StepPlan
from sim.policies.iteration import Draft, IterationPolicy


class ChunkedPolicy(IterationPolicy):
    chunked = True

    def schedule(self, view: InstanceView) -> StepPlan | None:
        quick = self.decode_only(view)
        if quick is not None:
            return quick
        d = Draft(view)
        self.seat_arrived(d)
        self.plan_decodes(d)
        self.plan_swap_ins(d)
        budget = self.plan_speculation(d, self.max_num_batched_tokens - d.num_decodes)
        budget = self.plan_continued(d, budget)
        self.plan_admissions(d, budget, d.num_decodes)
        if not d.num_decodes and not d.prefill:
            return d.plan(decode=False) if d.preempt else None
        if len(d.prefill) == 1 and not d.preempt and not d.swap_in and not d.spec_on:
            ((req, chunk),) = d.prefill.items()
            if chunk + d.num_decodes == self.max_num_batched_tokens:
                # the chunk fills the budget: nobody else can get tokens, and the same chunk
                # repeats while the prompt lasts (the engine stops at any finish or block need)
                remaining = req.num_remaining
                if req in d.cached or req in d.loaded:  # it starts from its cached prefix
                    hits = d.cached.get(req, 0) + d.loaded.get(req, 0)
                    remaining -= hits * view.kv.block_size
                repeat = max(1, remaining // chunk)
                return d.plan(decode=True, repeat=repeat, interruptible=False)
        return self.finish_plan(d)
