"""The gateway of a colocated cluster: where each arrival goes.

The gateway asks its `Serving` (the fleet: which instances take new requests now) for the
candidates and its router for the choice among them, then submits the request there. A static
fleet's candidates are every instance, always; an autoscaled fleet's are those ready and not
draining (`sim.topology.scaling`).

When no instance serves (a fleet scaled to zero, or every instance still provisioning) an
arrival waits at the gateway, in arrival order, and the fleet is told (`Serving.starved`) so it
can launch one; the fleet calls `release` when an instance becomes ready, and the waiting
requests are routed then. Their TTFT counts the wait.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Protocol

from sim.core.engine import Instance, Load
from sim.core.recorder import RequestLog
from sim.core.request import Request
from sim.scenario.control_plane import AdmissionSpec
from sim.scenario.schema import RouterOptions, SLOSpec
from sim.topology.router import Router


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

    def _load(self, i: int) -> Load:
        return self.instances[i].load()

    def dispatch(self, req: Request) -> None:
        candidates = self.serving.candidates()
        if candidates is not None and not candidates:
            self.held.append(req)
            self.serving.starved()
            return
        self._route(req, candidates)

    def _route(self, req: Request, candidates: Sequence[int] | None) -> None:
        instances = self.instances

        def hit(i: int) -> float:
            return instances[i].cached_prefix_tokens(req) / req.num_prompt_tokens

        index = self.router.pick(
            len(instances), self._load, candidates, hit=hit, session=req.session
        )
        instances[index].submit(req)

    def release(self) -> None:
        """An instance became ready: route the requests waiting at the gateway, in order."""
        candidates = self.serving.candidates()
        while self.held and (candidates is None or candidates):
            self._route(self.held.popleft(), candidates)

    @property
    def num_held(self) -> int:
        return len(self.held)
