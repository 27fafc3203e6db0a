"""The policy contract the engine drives, and the checks every policy shares.

A policy owns its queues and its KV pool. The engine calls `add_request` on each arrival,
`schedule` at each step boundary (None: nothing to run now), `apply` when the planned run is over,
and `next_wakeup_s` when idle, for policies that act on timers (static batching's `max_wait_s`).
"""

from __future__ import annotations

from typing import Protocol

from sim.core.kv_cache import BlockManager
from sim.core.kv_usage import KVUsage
from sim.core.plan import StepPlan
from sim.core.recorder import Recorder, StepTimes
from sim.core.request import Request


class Policy(Protocol):
    kv: BlockManager

    @property
    def num_waiting(self) -> int: ...

    @property
    def num_running(self) -> int: ...

    def add_request(self, req: Request, now: float) -> bool:
        """Queue an arriving request; False when it can never be served (it is rejected)."""
        ...

    def schedule(self, now: float) -> StepPlan | None: ...

    def apply(self, plan: StepPlan, num_steps: int, times: StepTimes, rec: Recorder) -> KVUsage:
        """Apply a run of `num_steps` steps; return the KV blocks held during its last step
        (before the requests it finished release theirs), the block-seconds held over the
        whole run, and the stored and fragment token-seconds (sim/core/kv_usage.py), all exact, so
        KV metrics do not depend on how steps are grouped."""
        ...

    def next_wakeup_s(self, now: float) -> float | None: ...

    def outstanding_tokens(self) -> int:
        """Tokens still to compute for every request here (what token-aware routers balance)."""
        ...

    def num_active_seqs(self, plan: StepPlan) -> int:
        """Slots of the plan that do useful work (static batching pads the rest)."""
        ...


def never_fits(req: Request, *, max_model_len: int, kv_capacity_tokens: int) -> bool:
    """True for a request no schedule can complete: longer than the model's context limit, or
    whose whole sequence exceeds the KV pool (it would preempt itself forever)."""
    total = req.num_prompt_tokens + req.max_output_tokens
    return total > max_model_len or total > kv_capacity_tokens
