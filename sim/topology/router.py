"""Routers: which instance of a pool gets the next request.

A router is one small class: it declares what it reads of the instances (class attributes,
below) and chooses from the `Signals` of one decision (an arrival at the gateway, or a finished
prompt whose KV must move to a decode instance) an index. Ties go to the lowest index, so a
choice is a pure function of the signals (and, for `random`, of the run's seeded routing
stream). `ROUTERS` maps each name of the schema's `RouterName` to its class; `make_router`
builds one.

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

What a router declares, and what the gateway (`sim.topology.gateway`) makes of it:

* `reads_load`: it reads the instances' loads (scraped every `refresh_s` seconds, where set);
* `reads_kv`: it reads their KV blocks, so loads are read settled (a `LoadView`);
* `reads_prefixes`: it reads prefix hits (late by `kv_event_lag_s`, where set);
* `reads_ttft`: it reads the predicted TTFT (scraped backlogs, where `refresh_s` is set);
* `ranks_by`: the one number of each instance a load-balancing choice ranks by: "requests"
  (waiting + running), "tokens" (outstanding) or "kv" (the fraction of KV blocks in use);
  None for the others;
* `index`: the index the gateway keeps for it on exact signals: a `LoadIndex` by "requests",
  "tokens" or "kv" (`sim.topology.load_index`), "ttft" for a `TtftIndex`
  (`sim.topology.ttft_index`), or None. Where the gateway keeps it, `Signals.indexed` is True
  and `least` (or `fastest`) answers from it.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import ClassVar, Protocol, cast

import numpy as np


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


def rank_of(load: WorkView, by: str) -> float:
    """The number `by` ("requests", "tokens" or "kv") of one load (kv: a `LoadView`)."""
    if by == "requests":
        return load.num_waiting + load.num_running
    if by == "tokens":
        return load.outstanding_tokens
    kv = cast(LoadView, load)
    return kv.kv_blocks_used / max(1, kv.kv_blocks_total)


class Signals(Protocol):
    """What a router reads at one decision: the gateway's `Decision` (`sim.topology.gateway`),
    the KV link's `Loads`. A protocol, so that a compiled router takes a test's stand-in."""

    @property
    def num_instances(self) -> int: ...

    @property
    def candidates(self) -> Sequence[int] | None:
        """The candidates; None: every instance."""
        ...

    @property
    def session(self) -> int:
        """The request's session; -1: none."""
        ...

    @property
    def indexed(self) -> bool:
        """Whether `least` (or `fastest`) answers from the index the router keeps."""
        ...

    def pool(self) -> Sequence[int]:
        """The candidates in index order."""
        ...

    def load(self, i: int) -> WorkView:
        """Instance i's load (a `LoadView` for a router that `reads_kv`)."""
        ...

    def number(self, i: int, by: str) -> float:
        """Instance i's number `by` (`Router.ranks_by`)."""
        ...

    def hit(self, i: int) -> float:
        """The fraction of the request's prompt instance i has cached."""
        ...

    def may_hit(self, i: int) -> bool:
        """False only where `hit(i)` is 0."""
        ...

    def least(self, candidates: Sequence[int] | None) -> int:
        """The candidate with the least number the router ranks by, ties to the lowest index."""
        ...

    def ttft(self, i: int) -> float:
        """The request's predicted TTFT on instance i."""
        ...

    def fastest(self, candidates: Sequence[int] | None) -> int:
        """The candidate with the least predicted TTFT, ties to the lowest index."""
        ...


def pool_of(num_instances: int, candidates: Sequence[int] | None) -> Sequence[int]:
    """The candidates in index order (None: every instance)."""
    return range(num_instances) if candidates is None else sorted(candidates)


class Loads:
    """Signals of whole loads only (`loads(i)`: instance i's), no session, no index: what the
    KV link hands its decode router. No prefix is seen cached, and nothing predicts a TTFT."""

    def __init__(
        self,
        num_instances: int,
        candidates: Sequence[int] | None,
        loads: Callable[[int], WorkView],
    ) -> None:
        self.num_instances = num_instances
        self.candidates = candidates
        self.loads = loads
        self.session = -1
        self.indexed = False

    def pool(self) -> Sequence[int]:
        return pool_of(self.num_instances, self.candidates)

    def load(self, i: int) -> WorkView:
        return self.loads(i)

    def number(self, i: int, by: str) -> float:
        return rank_of(self.loads(i), by)

    def hit(self, i: int) -> float:
        return 0.0

    def may_hit(self, i: int) -> bool:
        return False

    def least(self, candidates: Sequence[int] | None) -> int:
        raise ValueError("no load index")

    def ttft(self, i: int) -> float:
        raise ValueError("the router needs the predicted TTFT of each instance")

    def fastest(self, candidates: Sequence[int] | None) -> int:
        raise ValueError("no TTFT index")


class Router:
    """The strategy's contract: its declarations (module docstring) and `pick`."""

    name: ClassVar[str] = ""
    reads_load: ClassVar[bool] = True
    reads_kv: ClassVar[bool] = False
    reads_prefixes: ClassVar[bool] = False
    reads_ttft: ClassVar[bool] = False
    ranks_by: ClassVar[str | None] = None

    def __init__(
        self, rng: np.random.Generator, hit_weight: float = 1.0, load_weight: float = 1.0
    ) -> None:
        self.rng = rng
        self.hit_weight = hit_weight
        self.load_weight = load_weight

    @property
    def index(self) -> str | None:
        """The index the gateway keeps for this router on exact signals (module docstring)."""
        return self.ranks_by

    def pick(self, s: Signals) -> int:
        """Index of the chosen instance among `s.candidates` (default: all of them)."""
        raise NotImplementedError


class RoundRobin(Router):
    name = "round_robin"
    reads_load = False

    def __init__(
        self, rng: np.random.Generator, hit_weight: float = 1.0, load_weight: float = 1.0
    ) -> None:
        super().__init__(rng, hit_weight, load_weight)
        self._next = 0

    def pick(self, s: Signals) -> int:
        pool = s.pool()
        if len(pool) == 1:  # returned as is, without moving the turn
            return pool[0]
        n = s.num_instances
        for k in range(n):  # the next instance in turn that is a candidate
            i = (self._next + k) % n
            if i in pool:
                self._next = i + 1
                return i
        raise ValueError("no candidate instance")


class Random(Router):
    name = "random"
    reads_load = False

    def pick(self, s: Signals) -> int:
        pool = s.pool()
        if len(pool) == 1:  # no draw
            return pool[0]
        return pool[int(self.rng.integers(len(pool)))]


class LeastLoad(Router):
    """The candidate with the least `ranks_by`, ties to the lowest index."""

    def pick(self, s: Signals) -> int:
        if s.indexed:
            return s.least(s.candidates)
        pool = s.pool()
        if len(pool) == 1:
            return pool[0]
        by = self.ranks_by
        assert by is not None
        return min(pool, key=lambda i: s.number(i, by))  # min keeps the first on ties


class LeastOutstandingRequests(LeastLoad):
    name = "least_outstanding_requests"
    ranks_by = "requests"


class LeastOutstandingTokens(LeastLoad):
    name = "least_outstanding_tokens"
    ranks_by = "tokens"


class LeastKv(LeastLoad):
    name = "least_kv"
    reads_kv = True
    ranks_by = "kv"


class SessionSticky(LeastOutstandingTokens):
    """A session's turns where its first went; that one, and requests without a session, by
    least outstanding tokens."""

    name = "session_sticky"

    def __init__(
        self, rng: np.random.Generator, hit_weight: float = 1.0, load_weight: float = 1.0
    ) -> None:
        super().__init__(rng, hit_weight, load_weight)
        self._home: dict[int, int] = {}  # session -> the instance its first turn went to

    def pick(self, s: Signals) -> int:
        session = s.session
        if session < 0:
            return super().pick(s)
        home = self._home.get(session, -1)
        if home >= 0 and (s.candidates is None or home in s.candidates):
            return home
        chosen = super().pick(s)
        self._home[session] = chosen
        return chosen


class PrefixAffinity(Router):
    """The best of cached prefix and load (SGLang's cache-aware router, llm-d's prefix scorer):
    score = hit_weight * cached fraction - load_weight * outstanding tokens over the busiest
    candidate's; ties to the lowest index."""

    name = "prefix_affinity"
    reads_prefixes = True

    @property
    def index(self) -> str | None:
        return "tokens" if self.load_weight > 0 else None

    def pick(self, s: Signals) -> int:
        if s.indexed and self.load_weight > 0:
            return self._indexed(s)
        pool = s.pool()
        if len(pool) == 1:
            return pool[0]
        return self._best(pool, s, pool)

    def _best(self, pool: Sequence[int], s: Signals, among: Sequence[int]) -> int:
        """The best score among `among` (in index order), the busiest of all `pool`."""
        work = {i: s.number(i, "tokens") for i in pool}
        busiest = max(work.values()) or 1
        cached = {i: s.hit(i) for i in among}

        def score(i: int) -> float:
            return self.hit_weight * cached[i] - self.load_weight * work[i] / busiest

        return max(among, key=lambda i: (score(i), -i))  # ties: the lowest index

    def _indexed(self, s: Signals) -> int:
        """`_best`'s choice, scoring only the candidates that may have a prefix cached and the
        least loaded one. With `load_weight` > 0 every other candidate scores
        `-load_weight * w / busiest` (no hit), at best the least loaded one's, which `least`
        gives (ties: the lowest index, as `_best`'s); so the best of all is among those scored.
        With none that may have a hit the least loaded is the choice, whatever the busiest is,
        and no candidate's load is read."""
        pool = s.pool()
        if len(pool) == 1:
            return pool[0]
        chosen = s.least(s.candidates)
        scored = [i for i in pool if s.may_hit(i)]
        if not scored:
            return chosen
        if chosen not in scored:
            bisect.insort(scored, chosen)
        return self._best(pool, s, scored)


class SloHeadroom(Router):
    """The least predicted TTFT, ties to the lowest index (module docstring: with one target
    both orders agree, and taken as such, headroom rounded alike for two predictions does not
    decide by index)."""

    name = "slo_headroom"
    reads_prefixes = True
    reads_ttft = True

    @property
    def index(self) -> str | None:
        return "ttft"

    def pick(self, s: Signals) -> int:
        pool = s.pool()
        if len(pool) == 1:
            return pool[0]
        if s.indexed:
            return s.fastest(s.candidates)
        return min(pool, key=lambda i: (s.ttft(i), i))


# one line per router: the schema's `RouterName` lists the same names
ROUTERS: dict[str, type[Router]] = {
    "round_robin": RoundRobin,
    "least_outstanding_requests": LeastOutstandingRequests,
    "least_outstanding_tokens": LeastOutstandingTokens,
    "least_kv": LeastKv,
    "random": Random,
    "prefix_affinity": PrefixAffinity,
    "session_sticky": SessionSticky,
    "slo_headroom": SloHeadroom,
}


def make_router(
    name: str, rng: np.random.Generator, hit_weight: float = 1.0, load_weight: float = 1.0
) -> Router:
    """The router `name` (a `RouterName`), drawing from `rng` (`random`)."""
    cls = ROUTERS.get(name)
    if cls is None:
        raise ValueError(f"unknown router {name!r}; known: {', '.join(ROUTERS)}")
    return cls(rng, hit_weight, load_weight)
