"""Routers: which instance of a pool gets the next request.

A router sees each candidate instance's `Load` at the moment of the decision (an arrival, or a
finished prompt whose KV must move to a decode instance) and returns an index. Ties go to the
lowest index, so a choice is a pure function of the loads (and, for `random`, of the run's
seeded routing stream).

* `round_robin`: in turn, regardless of load.
* `least_outstanding_requests`: fewest requests waiting or running.
* `least_outstanding_tokens`: fewest tokens still to compute (prompts not yet prefilled plus
  output tokens not yet generated), the load a request really adds.
* `least_kv`: lowest fraction of KV blocks in use.
* `random`: uniformly at random.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, Protocol

import numpy as np

RouterName = Literal[
    "round_robin", "least_outstanding_requests", "least_outstanding_tokens", "least_kv", "random"
]


class LoadView(Protocol):
    """What routers read of an instance (`sim.core.engine.Load`)."""

    @property
    def num_waiting(self) -> int: ...

    @property
    def num_running(self) -> int: ...

    @property
    def outstanding_tokens(self) -> int: ...

    @property
    def kv_blocks_used(self) -> int: ...

    @property
    def kv_blocks_total(self) -> int: ...


_KEYS: dict[str, Callable[[LoadView], float]] = {
    "least_outstanding_requests": lambda load: load.num_waiting + load.num_running,
    "least_outstanding_tokens": lambda load: load.outstanding_tokens,
    "least_kv": lambda load: load.kv_blocks_used / max(1, load.kv_blocks_total),
}


class Router:
    def __init__(self, name: RouterName, rng: np.random.Generator) -> None:
        self.name = name
        self.rng = rng
        self._next = 0

    @property
    def needs_load(self) -> bool:
        return self.name in _KEYS

    def pick(
        self,
        num_instances: int,
        loads: Callable[[int], LoadView] | None = None,
        candidates: Sequence[int] | None = None,
    ) -> int:
        """Index of the chosen instance among `candidates` (default: all `num_instances`);
        `loads(i)` gives instance i's load, needed by the load-aware routers only."""
        pool = sorted(range(num_instances) if candidates is None else candidates)
        if len(pool) == 1:
            return pool[0]
        if self.name == "round_robin":  # the next instance in turn that is a candidate
            for k in range(num_instances):
                i = (self._next + k) % num_instances
                if i in pool:
                    self._next = i + 1
                    return i
        if self.name == "random":
            return pool[int(self.rng.integers(len(pool)))]
        if loads is None:
            raise ValueError(f"router {self.name} needs the instances' loads")
        key = _KEYS[self.name]
        return min(pool, key=lambda i: key(loads(i)))  # min keeps the first (lowest) on ties
