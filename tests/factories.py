"""Small factories for driving policies by hand, without SimPy."""

from __future__ import annotations

from typing import Any

from sim.core.kv_cache import BlockManager
from sim.core.plan import StepPlan
from sim.core.recorder import Recorder, StepTimes
from sim.core.request import Request
from sim.policies import ContinuousPolicy, StaticPolicy


def make_requests(*specs: tuple[int, int], arrival_s: float = 0.0) -> list[Request]:
    """Requests from (prompt tokens, output tokens) pairs, ids in order."""
    return [Request(i, arrival_s, p, o) for i, (p, o) in enumerate(specs)]


def make_continuous(num_blocks: int = 1000, block_size: int = 16, **kw: Any) -> ContinuousPolicy:
    args: dict[str, Any] = dict(
        max_num_seqs=8,
        max_num_batched_tokens=64,
        max_model_len=10_000,
        mode="prefill_first",
        watermark=0.0,
    )
    args.update(kw)
    return ContinuousPolicy(BlockManager(num_blocks, block_size), **args)


def make_static(capacity_tokens: int = 10_000, **kw: Any) -> StaticPolicy:
    args: dict[str, Any] = dict(max_batch_size=2, max_wait_s=0.0, max_model_len=10_000)
    args.update(kw)
    return StaticPolicy(BlockManager(capacity_tokens, 1), **args)


def step(
    policy: Any,
    now: float,
    duration: float = 1.0,
    rec: Recorder | None = None,
    num_steps: int | None = None,
) -> StepPlan | None:
    """Plan one step (or the plan's whole run) at `now`, apply it, return the plan."""
    plan = policy.schedule(now)
    if plan is None:
        return None
    k = plan.num_steps if num_steps is None else num_steps
    policy.apply(plan, k, StepTimes(now, duration, 0.0), rec or Recorder())
    return plan


def tokens(plan: StepPlan | None) -> dict[int, int]:
    """The plan as {request id: tokens}."""
    assert plan is not None
    return {r.id: n for r, n in plan.scheduled.items()}
