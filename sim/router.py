"""Routers: which instance of a pool gets the next request.

Each router looks at the instances' policies at the moment of the decision (an arrival, or a
finished prompt whose KV must move to a decode instance) and returns an index. Ties go to the
lowest index, so a choice is a pure function of the state (and, for `random`, of the run's
seeded routing stream).

* `round_robin`: in turn, regardless of load.
* `least_outstanding_requests`: fewest requests waiting or running.
* `least_outstanding_tokens`: fewest tokens still to compute (prompts not yet prefilled plus
  output tokens not yet generated), the load a request really adds.
* `least_kv`: lowest fraction of KV blocks in use.
* `random`: uniformly at random.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

import numpy as np

from sim.kv_cache import BlockManager
from sim.request import Request

RouterName = Literal[
    "round_robin", "least_outstanding_requests", "least_outstanding_tokens", "least_kv", "random"
]


class RoutedPolicy(Protocol):
    """What routers read of an instance's policy."""

    kv: BlockManager

    @property
    def num_waiting(self) -> int: ...

    @property
    def num_running(self) -> int: ...

    def outstanding_tokens(self) -> int: ...


def remaining_work(req: Request) -> int:
    """Tokens a request still needs computed: the rest of its prefill and its missing outputs."""
    prefill_left = max(0, req.num_prompt_tokens - req.num_computed_tokens)
    return prefill_left + req.max_output_tokens - req.num_output_tokens


class Router:
    def __init__(self, name: RouterName, rng: np.random.Generator) -> None:
        self.name = name
        self.rng = rng
        self._next = 0

    def pick(
        self, policies: Sequence[RoutedPolicy], candidates: Sequence[int] | None = None
    ) -> int:
        """Index (into `policies`) of the chosen instance among `candidates` (default: all)."""
        pool = list(range(len(policies))) if candidates is None else list(candidates)
        if len(pool) == 1:
            return pool[0]
        if self.name == "round_robin":
            # the next instance in turn that is a candidate
            n = len(policies)
            for k in range(n):
                i = (self._next + k) % n
                if i in pool:
                    self._next = i + 1
                    return i
        if self.name == "random":
            return pool[int(self.rng.integers(len(pool)))]
        if self.name == "least_outstanding_requests":
            return min(pool, key=lambda i: policies[i].num_waiting + policies[i].num_running)
        if self.name == "least_outstanding_tokens":
            return min(pool, key=lambda i: policies[i].outstanding_tokens())
        return min(pool, key=lambda i: policies[i].kv.num_used / max(1, policies[i].kv.num_total))
