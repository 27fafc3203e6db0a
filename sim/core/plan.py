"""The scheduler -> engine contract: one small frozen record per planned step.

A policy returns a `StepPlan`; the engine prices it with the cost model, advances simulated time
and hands it back to the policy to apply. `num_steps > 1` says the same batch repeats for that many
decode steps with nothing but token counts changing (no arrival can join, no request finishes
before the last of them, KV blocks for all of them are already allocated), so the engine can jump
over the whole run with one timeout. Splitting such a run never changes the outcome: each step of
it is exactly what the policy would have planned on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.core.request import Request


@dataclass(frozen=True, slots=True)
class StepPlan:
    # tokens each scheduled request gets in every step of the run (decodes get exactly 1)
    scheduled: dict[Request, int]
    # batch slots the step pays for: scheduled requests plus static batching's padded slots
    num_seqs: int
    # tokens the step computes: prefill tokens + decode tokens + padded slots' tokens
    num_tokens: int
    # prompt (or recompute) tokens among them
    num_prefill_tokens: int
    # useful decode tokens (excludes padding)
    num_decode_tokens: int
    # KV tokens read by attention in the first step: sum over slots of context after the step
    sum_context_tokens: int
    # prefill attention work in the first step: sum over prefill chunks of chunk * context
    prefill_attention_term: int
    # identical decode steps in this run (>= 1); only pure-decode runs repeat
    num_steps: int = 1
    # growth of sum_context_tokens per repeated step (one token per decoding slot)
    context_growth_per_step: int = 0
    # whether a request arriving during the run could join before it ends (engine cuts the run)
    arrivals_can_join: bool = True
    # requests preempted while planning this step (already requeued by the policy)
    preempted: tuple[Request, ...] = field(default=())
    # seconds of KV copies between GPU and host memory (swap-outs of this step's victims and
    # swap-ins of resumed requests) added to the step's duration; only single steps carry them
    swap_s: float = 0.0
