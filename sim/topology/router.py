"""Routers: which instance of a pool gets the next request.

A router sees each candidate instance's load (a `WorkView`; a `LoadView` for `least_kv`) at the
moment of the decision (an arrival, or a finished prompt whose KV must move to a decode
instance) and returns an index. Ties go to the lowest index, so a choice is a pure function of
the loads (and, for `random`, of the run's seeded routing stream).

* `round_robin`: in turn, regardless of load.
* `least_outstanding_requests`: fewest requests waiting or running.
* `least_outstanding_tokens`: fewest tokens still to compute (prompts not yet prefilled plus
  output tokens not yet generated), the load a request really adds.
* `least_kv`: lowest fraction of KV blocks in use.
* `random`: uniformly at random.
* `prefix_affinity`: the best score `hit_weight * f - load_weight * w`, `f` the fraction of the
  request's prompt the instance has in its prefix cache, `w` its outstanding tokens over the
  busiest candidate's (weights from the scenario's `router_options`).
* `session_sticky`: every turn of a session where its first turn went (that one, and requests
  without a session, by least outstanding tokens), so a conversation finds its KV cached.
* `slo_headroom`: the most headroom `target - ttft(i)` against the request's TTFT target, `ttft(i)`
  the gateway's prediction of its TTFT on instance i (`sim.topology.signals`); when no candidate
  meets the target, the least predicted TTFT; without a target, the least predicted TTFT. With
  one target per request the three orders agree: the choice is the least predicted TTFT, and
  the target says only whether it is met.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from sim.scenario.schema import RouterName


class WorkView(Protocol):
    """What routers other than `least_kv` read of an instance (`sim.core.instance.WorkLoad`)."""

    @property
    def num_waiting(self) -> int: ...

    @property
    def num_running(self) -> int: ...

    @property
    def outstanding_tokens(self) -> int: ...


class LoadView(WorkView, Protocol):
    """What `least_kv` reads besides (`sim.core.instance.Load`)."""

    @property
    def kv_blocks_used(self) -> int: ...

    @property
    def kv_blocks_total(self) -> int: ...


_KEYS: dict[str, Callable[[Any], float]] = {  # least_kv's load is a LoadView
    "least_outstanding_requests": lambda load: load.num_waiting + load.num_running,
    "least_outstanding_tokens": lambda load: load.outstanding_tokens,
    "least_kv": lambda load: load.kv_blocks_used / max(1, load.kv_blocks_total),
}


class Router:
    def __init__(
        self,
        name: RouterName,
        rng: np.random.Generator,
        hit_weight: float = 1.0,
        load_weight: float = 1.0,
    ) -> None:
        self.name = name
        self.rng = rng
        self.hit_weight = hit_weight
        self.load_weight = load_weight
        self._next = 0
        self._home: dict[int, int] = {}  # session -> the instance its first turn went to

    @property
    def needs_load(self) -> bool:
        return self.name in _KEYS or self.name in (
            "prefix_affinity", "session_sticky", "slo_headroom"
        )  # fmt: skip

    @property
    def ranks_by(self) -> str | None:
        """What a load-balancing choice of this router ranks the candidates by, where one number
        of each instance is all it reads: "requests" (waiting + running), "tokens"
        (outstanding) or "kv" (the fraction of KV blocks in use); None for the others. A caller
        that reads that number directly passes it to `pick` as `key`, instead of whole loads."""
        if self.name == "least_outstanding_requests":
            return "requests"
        if self.name in ("least_outstanding_tokens", "session_sticky"):
            return "tokens"
        if self.name == "least_kv":
            return "kv"
        return None

    @property
    def needs_kv(self) -> bool:
        """Whether it reads the instances' KV blocks (a `LoadView`, not only a `WorkView`)."""
        return self.name == "least_kv"

    def pick(
        self,
        num_instances: int,
        loads: Callable[[int], WorkView] | None = None,
        candidates: Sequence[int] | None = None,
        *,
        hit: Callable[[int], float] | None = None,
        session: int = -1,
        ttft: Callable[[int], float] | None = None,
        target: float | None = None,
        key: Callable[[int], float] | None = None,
        least: Callable[[Sequence[int] | None], int] | None = None,
        may_hit: Callable[[int], bool] | None = None,
        fastest: Callable[[Sequence[int] | None], int] | None = None,
    ) -> int:
        """Index of the chosen instance among `candidates` (default: all `num_instances`);
        `loads(i)` gives instance i's load (load-aware routers), `hit(i)` the fraction of the
        request's prompt instance i has cached (prefix affinity), `session` its session,
        `ttft(i)` its predicted TTFT on instance i and `target` its TTFT target (slo_headroom);
        `key(i)`, where given, the number `ranks_by` names (prefix affinity: the outstanding
        tokens), read in place of `loads(i)`;
        `least(candidates)`, where given, the candidate with the least of that number (ties: the
        lowest index) from an index kept as the loads change (`sim.topology.load_index`);
        `may_hit(i)`, where given with `least` and `key` (prefix affinity), False only where
        `hit(i)` is 0: then only the instances it admits and the least loaded are scored;
        `fastest(candidates)`, where given (slo_headroom), the candidate with the least
        predicted TTFT, ties to the lowest index, from an index kept as the instances step
        (`sim.topology.ttft_index`)."""
        sticky = self.name == "session_sticky" and session >= 0
        indexed = may_hit is not None and least is not None and key is not None
        if indexed and self.name == "prefix_affinity" and self.load_weight > 0:
            assert may_hit is not None and least is not None and key is not None
            return self._affinity_indexed(num_instances, candidates, key, hit, least, may_hit)
        if least is not None and self.ranks_by is not None:
            home = self._home.get(session, -1) if sticky else -1
            if home >= 0 and (candidates is None or home in candidates):
                return home
            chosen = least(candidates)
            if sticky:
                self._home[session] = chosen
            return chosen
        pool: Sequence[int] = range(num_instances) if candidates is None else sorted(candidates)
        if sticky and self._home.get(session) in pool:
            return self._home[session]
        if self.name == "slo_headroom" and len(pool) > 1:
            if fastest is not None:
                return fastest(candidates)
            if ttft is None:
                raise ValueError("router slo_headroom needs the predicted TTFT of each instance")
            return self._headroom(pool, ttft, target)
        one = len(pool) == 1
        chosen = pool[0] if one else self._choose(num_instances, pool, loads, hit, key)
        if sticky:
            self._home[session] = chosen
        return chosen

    def _choose(
        self,
        num_instances: int,
        pool: Sequence[int],
        loads: Callable[[int], WorkView] | None,
        hit: Callable[[int], float] | None,
        key: Callable[[int], float] | None,
    ) -> int:
        if self.name == "round_robin":  # the next instance in turn that is a candidate
            for k in range(num_instances):
                i = (self._next + k) % num_instances
                if i in pool:
                    self._next = i + 1
                    return i
        if self.name == "random":
            return pool[int(self.rng.integers(len(pool)))]
        if key is not None and self.ranks_by is not None:
            return min(pool, key=key)  # min keeps the first (lowest) on ties
        if self.name == "prefix_affinity" and key is not None:
            return self._affinity(pool, key, hit)
        if loads is None:
            raise ValueError(f"router {self.name} needs the instances' loads")
        if self.name == "prefix_affinity":
            return self._affinity(pool, lambda i: loads(i).outstanding_tokens, hit)
        # session_sticky places a session's first turn (and requests without one) by load
        rank = _KEYS.get(self.name, _KEYS["least_outstanding_tokens"])
        return min(pool, key=lambda i: rank(loads(i)))

    def _affinity(
        self,
        pool: Sequence[int],
        tokens: Callable[[int], float],
        hit: Callable[[int], float] | None,
        scored: Sequence[int] | None = None,
    ) -> int:
        """The best of cached prefix and load (SGLang's cache-aware router, llm-d's prefix
        scorer): score = hit_weight * cached fraction - load_weight * outstanding tokens over
        the busiest candidate's; `tokens(i)` instance i's outstanding tokens. `scored`, where
        given (in index order), the candidates among which the best is (`_affinity_indexed`)."""
        work = {i: tokens(i) for i in pool}
        busiest = max(work.values()) or 1
        among = pool if scored is None else scored
        cached = {i: hit(i) if hit is not None else 0.0 for i in among}

        def score(i: int) -> float:
            return self.hit_weight * cached[i] - self.load_weight * work[i] / busiest

        return max(among, key=lambda i: (score(i), -i))  # ties: the lowest index

    def _affinity_indexed(
        self,
        num_instances: int,
        candidates: Sequence[int] | None,
        tokens: Callable[[int], float],
        hit: Callable[[int], float] | None,
        least: Callable[[Sequence[int] | None], int],
        may_hit: Callable[[int], bool],
    ) -> int:
        """`_affinity`'s choice, scoring only the candidates that may have a prefix cached and
        the least loaded one. With `load_weight` > 0 every other candidate scores
        `-load_weight * w / busiest` (no hit), at best the least loaded one's, which `least`
        gives (ties: the lowest index, as `_affinity`'s); so the best of all is among those
        scored. With none that may have a hit the least loaded is the choice, whatever the
        busiest is, and no candidate's load is read."""
        pool: Sequence[int] = range(num_instances) if candidates is None else sorted(candidates)
        if len(pool) == 1:
            return pool[0]
        chosen = least(candidates)
        scored = [i for i in pool if may_hit(i)]
        if not scored:
            return chosen
        if chosen not in scored:
            bisect.insort(scored, chosen)
        return self._affinity(pool, tokens, hit, scored)

    @staticmethod
    def _headroom(pool: Sequence[int], ttft: Callable[[int], float], target: float | None) -> int:
        """The candidate with the most headroom against `target` among those that meet it, else
        (none meets it, or no target) the least predicted TTFT; ties: the lowest index. With
        one target both are the least predicted TTFT (taken as such, so that headroom rounded
        alike for two predictions does not decide by index)."""
        return min(pool, key=lambda i: (ttft(i), i))
