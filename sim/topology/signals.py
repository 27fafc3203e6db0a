"""What a colocated cluster's gateway sees of its instances (`sim.topology.gateway`).

Three views, each exact when its option is at its default:

* `Scraper` (`router_options.refresh_s > 0`): the gateway sees every instance's load as last
  scraped. Scrapes happen at the instants `k * refresh_s` (k = 0, 1, ...), all instances at once,
  so a decision at time t sees the loads at the latest multiple of `refresh_s` at or before t.
  A SimPy timer takes them on time; it stops when no request is in flight anywhere (no instance
  holds one and none waits at the gateway) and restarts at the next arrival, which then scrapes
  at once if a scrape instant passed meanwhile (nothing changed since the timer stopped, so the
  loads read then are those of that instant). Between scrapes the router does not see its own
  decisions, as with a gateway that scrapes the engines' metrics endpoints. An instance launched
  after the latest scrape is read when the router first asks for it, and then stays as read.
* `LaggedPrefixes` (`router_options.kv_event_lag_s > 0`): the gateway keeps, per instance, an
  index of the block hashes it routed there, each prompt's blocks entered `kv_event_lag_s` after
  its first token (its KV exists once its prompt is prefilled) and a finished sequence's blocks
  `kv_event_lag_s` after it finished, as KV events (vLLM's `BlockStored`) reach a router late.
  The cached prefix the router sees is the shorter of the index's leading run and the instance's
  exact cached prefix now: stored blocks show up late, removed ones at once (an approximation:
  a real router would also see evictions late, and keep offering blocks already gone).
* `predicted_ttft` (router `slo_headroom`): an arrival's TTFT on an instance is predicted as the
  rest of the step under way plus the prefill of every prompt token ahead of it (waiting or
  prefilling there) and of its own prompt past its cached prefix, at that instance's prefill
  rate (`Instance.prefill_seconds`). Decode steps interleaved with that prefill are left
  out, so the prediction is a lower bound on a busy instance; with `refresh_s > 0` it is made
  from the last scrape (a step under way then that has ended since counts as over).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from sim.core.instance import Instance, Load
from sim.core.request import REJECTED, Request


@dataclass(frozen=True, slots=True)
class Backlog:
    """What `slo_headroom` reads of an instance at one instant."""

    prefill_tokens: int  # prompt tokens still to prefill there
    step_end_s: float  # when its step under way ends (the instant itself when idle)


def read_backlog(instance: Instance) -> Backlog:
    return Backlog(instance.prefill_backlog(), instance.step_end_s())


class Scraper:
    """Every instance's load (and backlog) as of the latest scrape (see the module docstring)."""

    def __init__(
        self,
        instances: list[Instance],
        refresh_s: float,
        busy: Callable[[], bool],
        backlog: bool = False,
    ) -> None:
        if refresh_s <= 0:
            raise ValueError(f"refresh_s must be positive, not {refresh_s}")
        self.instances = instances
        self.env = instances[0].env
        self.refresh_s = refresh_s
        self.busy = busy  # whether a request waits at the gateway
        self.with_backlog = backlog
        self.tick = -1  # k of the latest scrape, at k * refresh_s
        self.loads: dict[int, Load] = {}
        self.backlogs: dict[int, Backlog] = {}
        self.num_scrapes = 0
        self._timer: Any = None

    def _tick_of(self, t: float) -> int:
        """The k of the latest multiple k * refresh_s at or before t."""
        r = self.refresh_s
        k = math.floor(t / r)
        while (k + 1) * r <= t:
            k += 1
        while k > 0 and k * r > t:
            k -= 1
        return k

    def _scrape(self, tick: int) -> None:
        self.tick = tick
        self.num_scrapes += 1
        self.loads = {}
        self.backlogs = {}
        for i in range(len(self.instances)):
            self._read(i)

    def _read(self, i: int) -> None:
        instance = self.instances[i]
        self.loads[i] = instance.load()
        if self.with_backlog:
            self.backlogs[i] = read_backlog(instance)

    def at_decision(self) -> None:
        """A routing decision now: make sure the latest scrape is this instant's."""
        tick = self._tick_of(self.env.now)
        if tick > self.tick:
            self._scrape(tick)
        if self._timer is None:
            self._timer = self.env.process(self._run())

    def _in_flight(self) -> bool:
        return self.busy() or any(inst.holds_requests() for inst in self.instances)

    def _run(self) -> Generator[Any, Any, None]:
        env = self.env
        while True:
            yield env.timeout(max(0.0, (self.tick + 1) * self.refresh_s - env.now))
            tick = self._tick_of(env.now)
            if tick > self.tick:
                self._scrape(tick)
            if not self._in_flight():
                self._timer = None
                return

    def load(self, i: int) -> Load:
        if i not in self.loads:  # launched after the latest scrape
            self._read(i)
        return self.loads[i]

    def backlog(self, i: int) -> Backlog:
        if i not in self.backlogs:
            self._read(i)
        return self.backlogs[i]


class LaggedPrefixes:
    """Each instance's prefix cache as KV events late by `lag_s` show it (module docstring)."""

    def __init__(self, instances: list[Instance], lag_s: float) -> None:
        self.instances = instances
        self.lag_s = lag_s
        self.index: dict[int, set[int]] = {}  # instance -> block hashes the router knows of
        self.pending: dict[int, list[tuple[Request, int]]] = {}  # (request, blocks entered)

    def routed(self, req: Request, i: int) -> None:
        """`req` was submitted to instance i."""
        self.pending.setdefault(i, []).append((req, 0))

    def _catch_up(self, i: int, now: float) -> set[int]:
        known = self.index.setdefault(i, set())
        pending = self.pending.get(i)
        if not pending:
            return known
        lag = self.lag_s
        bs = self.instances[i].pool.block_size
        left: list[tuple[Request, int]] = []
        for req, entered in pending:
            if req.state == REJECTED:
                continue
            blocks = entered
            if req.finish_s + lag <= now:  # NaN (not finished) compares False
                blocks = (req.num_known_tokens - 1) // bs
            elif req.first_token_s + lag <= now:
                blocks = req.num_prompt_tokens // bs
            if blocks > entered:
                known.update(req.block_hashes(bs)[:blocks])
            if not req.finish_s + lag <= now:
                left.append((req, blocks))
        self.pending[i] = left
        return known

    def cached_tokens(self, req: Request, i: int) -> int:
        """Tokens of `req`'s prompt instance i's cache holds as the router sees it now."""
        instance = self.instances[i]
        exact = instance.cached_prefix_tokens(req)
        if exact == 0:
            return 0
        known = self._catch_up(i, instance.env.now)
        bs = instance.pool.block_size
        run = 0
        for block_hash in req.block_hashes(bs)[: exact // bs]:
            if block_hash not in known:
                break
            run += 1
        return run * bs


def predicted_ttft(
    backlog: Backlog, now: float, own_tokens: int, prefill_seconds: Callable[[int], float]
) -> float:
    """Seconds to an arrival's first token on an instance (module docstring): `own_tokens` the
    prompt tokens it must prefill there (past its cached prefix)."""
    wait = max(0.0, backlog.step_end_s - now)
    return wait + prefill_seconds(backlog.prefill_tokens + max(0, own_tokens))
