"""The gateway of a colocated cluster: where each arrival goes.

The gateway asks its `Serving` (the fleet: which instances take new requests now) for the
candidates and its router for the choice among them, then submits the request there. A static
fleet's candidates are every instance, always; an autoscaled fleet's are those ready and not
draining (`sim.topology.scaling`).

When no instance serves (a fleet scaled to zero, or every instance still provisioning) an
arrival waits at the gateway, in arrival order, and the fleet is told (`Serving.starved`) so it
can launch one; the fleet calls `release` when an instance becomes ready, and the waiting
requests are routed then. Their TTFT counts the wait.

What the router sees of the instances (`sim.topology.signals`): their loads exact at each
decision (queues and outstanding tokens read without applying the steps in flight,
`Instance.work_load`, unless the router reads KV blocks, which those steps change; prefix
hits settle only a run whose steps could change them; least-load routers, `least_kv` among
them, read an index the instances keep, `sim.topology.load_index` (`least_kv` settling only the
candidates near the least), and so does `prefix_affinity`, which then reads the
hits only of the instances that may hold the request's first block and of the least loaded),
or as last scraped every `router_options.refresh_s` seconds; their prefix caches exact, or as
KV events `router_options.kv_event_lag_s` late show them (routers `prefix_affinity` and
`slo_headroom`); and for `slo_headroom`, each instance's predicted TTFT for the request against
its tier's TTFT target.

Admission (`cluster.admission`): once the router has chosen, a request whose instance has at
least its tier's limit of requests waiting, as the gateway sees that instance's load (scraped
ones with `refresh_s > 0`), is rejected with the reason `shed: queue full`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

from sim.core.instance import Instance, Load, WorkLoad
from sim.core.recorder import RequestLog
from sim.core.request import Request
from sim.scenario.control_plane import AdmissionSpec
from sim.scenario.schema import RouterOptions, SLOSpec
from sim.topology.load_index import LoadIndex
from sim.topology.router import Router, WorkView, pool_of, rank_of
from sim.topology.signals import LaggedPrefixes, Scraper, predicted_ttft, read_backlog
from sim.topology.ttft_index import TtftIndex

SHED = "shed: queue full"


class Serving(Protocol):
    """Which instances take new requests (`sim.topology.scaling.Fleet`)."""

    def candidates(self) -> Sequence[int] | None:
        """Indices of the instances that take new requests now; None: every instance."""
        ...

    def starved(self) -> None:
        """A request is waiting and no instance serves."""
        ...


class Gateway:
    """Routes each arrival of a colocated cluster (see the module docstring)."""

    def __init__(
        self,
        instances: list[Instance],
        router: Router,
        serving: Serving,
        log: RequestLog,
        *,
        options: RouterOptions | None = None,
        admission: AdmissionSpec | None = None,
        slo: SLOSpec | None = None,
    ) -> None:
        self.instances = instances  # every instance ever launched, by index (the fleet appends)
        self.router = router
        self.serving = serving
        self.log = log
        self.options = options if options is not None else RouterOptions()
        self.admission = admission
        self.slo = slo if slo is not None else SLOSpec()
        self.held: deque[Request] = deque()
        opts = self.options
        self.scraper: Scraper | None = None
        if opts.refresh_s > 0 and (router.reads_load or admission is not None):
            self.scraper = Scraper(
                instances, opts.refresh_s, lambda: bool(self.held), backlog=router.reads_ttft
            )
        self.prefixes: LaggedPrefixes | None = None
        if opts.kv_event_lag_s > 0 and router.reads_prefixes:
            self.prefixes = LaggedPrefixes(instances, opts.kv_event_lag_s)
        # on exact signals, the index the router keeps, which the instances tell (`watch`): the
        # least of one number of each instance (`sim.topology.load_index`), or the least
        # predicted TTFT from the steps under way (`sim.topology.ttft_index`); a prefix router
        # reads prefix hits only where one may be (`Instance.may_cache_prefix`), unless a shared
        # KV tier makes one instance's settling change another's cache (`watch`)
        self.index: LoadIndex | None = None
        self.ttft_index: TtftIndex | None = None
        kind = router.index
        if kind is not None and self.scraper is None and self.prefixes is None:
            if kind == "ttft":
                self.ttft_index = TtftIndex()
            else:
                self.index = LoadIndex(kind)
        self.caching = False  # some watched instance keeps a prefix cache

    def watch(self, instance: Instance) -> None:
        """Route to `instance` (one of the start, or launched later): with an index, the
        instance tells it when its load can fall."""
        index = self.index
        if index is not None:
            index.watch(instance)
            instance.on_load = index.changed
        ttft_index = self.ttft_index
        if ttft_index is not None:
            ttft_index.watch(instance)
            instance.on_load = ttft_index.changed
        self.caching = self.caching or instance.caches_prefixes()
        indexed = index is not None or ttft_index is not None
        if indexed and self.router.reads_prefixes and instance.shares_kv_tier():  # full scans
            self.index = None
            self.ttft_index = None
            for watched in (*self.instances, instance):
                watched.on_load = None

    def _load(self, i: int) -> Load:
        return self.instances[i].load()

    def _work_load(self, i: int) -> WorkLoad:
        return self.instances[i].work_load()

    def cached_tokens(self, req: Request, i: int) -> int:
        if self.prefixes is not None:
            return self.prefixes.cached_tokens(req, i)
        return self.instances[i].cached_prefix_tokens(req)

    def dispatch(self, req: Request) -> None:
        candidates = self.serving.candidates()
        if candidates is not None and not candidates:
            self.held.append(req)
            self.serving.starved()
            return
        self._route(req, candidates)

    def _route(self, req: Request, candidates: Sequence[int] | None) -> None:
        if self.scraper is not None:
            self.scraper.at_decision()
        s = Decision(self, req, candidates)
        self._submit(req, self.router.pick(s), s)

    def _fastest(
        self, req: Request, candidates: Sequence[int] | None, ttft: Callable[[int], float]
    ) -> int:
        """The candidate with the least predicted TTFT (`ttft`), from the TTFT index: the
        candidates that may have a prefix cached are predicted here, the rest by the index
        with nothing cached."""
        index = self.ttft_index
        assert index is not None
        instances = self.instances
        best_s, best_index = math.inf, -1
        predicted: list[int] = []
        if self.caching:
            for i in range(len(instances)) if candidates is None else candidates:
                if instances[i].may_cache_prefix(req):
                    predicted.append(i)
                    value = ttft(i)
                    if value < best_s or (value == best_s and i < best_index):
                        best_s, best_index = value, i
        now = instances[0].env.now
        prompt = req.num_prompt_tokens

        def uncached(i: int) -> float:
            instance = instances[i]
            return predicted_ttft(read_backlog(instance), now, prompt, instance.prefill_seconds)

        floor_s = index.floor(prompt)
        return index.best(candidates, floor_s, uncached, best_s, best_index, predicted)

    def _submit(self, req: Request, index: int, s: Decision) -> None:
        """Submit `req` to instance `index`, unless admission sheds it there."""
        if self.admission is not None:
            limit = self.admission.limit(req.tier)
            if limit is not None and s.load(index).num_waiting >= limit:
                req.reject(SHED)
                self.log.record(req)
                return
        if self.prefixes is not None:
            self.prefixes.routed(req, index)
        self.instances[index].submit(req)

    def release(self) -> None:
        """An instance became ready: route the requests waiting at the gateway, in order."""
        candidates = self.serving.candidates()
        while self.held and (candidates is None or candidates):
            self._route(self.held.popleft(), candidates)

    @property
    def num_held(self) -> int:
        return len(self.held)


class Decision:
    """What the gateway's router sees at one decision, for `req` (`sim.topology.router.Signals`;
    the module docstring): loads as last scraped, or exact (settled where the router reads KV
    blocks); the number it ranks by read directly; prefix hits as KV events show them, or
    exact; predicted TTFTs; and the gateway's index, where it keeps one."""

    def __init__(self, gateway: Gateway, req: Request, candidates: Sequence[int] | None) -> None:
        self.gateway = gateway
        self.req = req
        self.num_instances = len(gateway.instances)
        self.candidates = candidates
        self.session = req.session
        self.indexed = gateway.index is not None or gateway.ttft_index is not None

    def pool(self) -> Sequence[int]:
        return pool_of(self.num_instances, self.candidates)

    def load(self, i: int) -> WorkView:
        gateway = self.gateway
        if gateway.scraper is not None:
            return gateway.scraper.load(i)
        # KV blocks in use are read settled, which the steps in flight change
        return gateway._load(i) if gateway.router.reads_kv else gateway._work_load(i)

    def number(self, i: int, by: str) -> float:
        gateway = self.gateway
        if gateway.scraper is not None or by == "kv":
            return rank_of(self.load(i), by)
        instance = gateway.instances[i]  # the one number, read without a whole load
        return instance.num_outstanding() if by == "requests" else instance.work_left()

    def hit(self, i: int) -> float:
        req = self.req
        return self.gateway.cached_tokens(req, i) / req.num_prompt_tokens

    def may_hit(self, i: int) -> bool:
        return self.gateway.instances[i].may_cache_prefix(self.req)

    def least(self, candidates: Sequence[int] | None) -> int:
        index = self.gateway.index
        assert index is not None
        return index.best(candidates)

    def ttft(self, i: int) -> float:
        gateway, req = self.gateway, self.req
        instances, scraper = gateway.instances, gateway.scraper
        seen = scraper.backlog(i) if scraper is not None else read_backlog(instances[i])
        own = req.num_prompt_tokens - gateway.cached_tokens(req, i)
        now = instances[0].env.now
        return predicted_ttft(seen, now, own, instances[i].prefill_seconds)

    def fastest(self, candidates: Sequence[int] | None) -> int:
        return self.gateway._fastest(self.req, candidates, self.ttft)
