"""What routers read of an instance's load (`sim.core.instance.Instance.load`, `work_load`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Load:
    """An instance's load at one instant, for routing decisions."""

    num_waiting: int
    num_running: int
    outstanding_tokens: int  # prompt tokens not yet prefilled + output tokens not yet generated
    kv_blocks_used: int
    kv_blocks_total: int


@dataclass(frozen=True, slots=True)
class WorkLoad:
    """An instance's queues and outstanding work at one instant (`Load` less its KV blocks):
    what most routers read, known without applying the run in flight (`work_load`)."""

    num_waiting: int
    num_running: int
    outstanding_tokens: int
