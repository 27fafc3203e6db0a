"""Asynchronous scheduling: the step after the one in flight is already scheduled.

vLLM V1 with async scheduling (`EngineCore.step_with_batch_queue`, vllm/v1/engine/core.py: a
batch queue of two), SGLang's overlap scheduler (`Scheduler.event_loop_overlap`) and
TensorRT-LLM's overlap executor (`PyExecutor._executor_loop_overlap`) schedule step k+1 as soon
as step k is launched, so that the host's scheduling and input preparation run while the GPU
computes. A request that reaches the scheduler while step k runs was not there when step k+1
was scheduled: it joins step k+2 at the earliest. An idle engine schedules it at once, and so
does one whose step k+1 would have been empty (nothing was launched).

`Lookahead` holds those requests for their instance (`sim.core.instance`): the instance says
when a step starts and ends; a request submitted while one is in flight is held (`hold`); at a
step boundary those that reached the scheduler by the start of the step just ended are due
(`due`), and all of them when the engine has nothing else to run (`release_all`).
"""

from __future__ import annotations

from collections import deque

from sim.core.request import Request

FOREVER_S = float("inf")
INSTANT_S = 1e-9  # two times closer than this are one instant (float rounding of step ends)


class Lookahead:
    """The requests an asynchronous scheduler has not seen yet, and the step boundary it is at."""

    __slots__ = ("_enabled", "_frontend_s", "_held", "_last_end_s", "_last_start_s", "busy",
                 "work")  # fmt: skip

    def __init__(self, frontend_s: float = 0.0, enabled: bool = True) -> None:
        self._enabled = enabled  # False: a synchronous loop, which never holds a request
        # a request reaches the scheduler `frontend_s` after its arrival (engine.frontend_s)
        self._frontend_s = frontend_s
        self._held: deque[Request] = deque()  # in the order they reached the scheduler
        self._last_start_s = -FOREVER_S  # the last step applied: its start and end
        self._last_end_s = -FOREVER_S
        self.busy = False  # a step is in flight, or one just ended and the next is planned
        self.work = 0  # the held requests' tokens to compute (what token-aware routers see)

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, req: Request) -> None:
        """`req` reached the scheduler while a step was in flight."""
        self._held.append(req)
        self.work += req.remaining_work

    def drop(self, req: Request) -> bool:
        """`req` leaves, if held, before the scheduler saw it (its client gave up): whether it
        was held."""
        if req not in self._held:
            return False
        self._held.remove(req)
        self.work -= req.remaining_work
        return True

    def launched(self) -> bool:
        """A step was launched: while it runs, arrivals are held. Whether requests are held now
        (then it must be the run's only step: they join the next one)."""
        self.busy = self._enabled
        return bool(self._held)

    def stepped(self, start_s: float, end_s: float) -> None:
        """A run was applied: its last step started at `start_s` and ended at `end_s`."""
        self._last_start_s = start_s
        self._last_end_s = end_s

    def idle(self) -> None:
        """The engine has nothing to run: the next request is scheduled when it comes."""
        self.busy = False

    def due(self, now_s: float) -> list[Request]:
        """The held requests the step planned at `now_s` may take: at the boundary of the step
        just applied, those that reached the scheduler before that step started (the later
        ones missed the step scheduled then, which starts now; one that came at that very
        instant came after it, as a closed-loop client's next request comes after the output
        of the step before, which the engine emits once it has launched the next); at any
        other instant all of them."""
        held = self._held
        if now_s != self._last_end_s:
            return self.release_all()
        # before the start by more than a rounding error: a closed-loop arrival computed as that
        # step's end, a few ulps either side of its start, came at that very instant
        cutoff = self._last_start_s - INSTANT_S
        out = []
        while held and held[0].arrival_s + self._frontend_s < cutoff:
            req = held.popleft()
            self.work -= req.remaining_work
            out.append(req)
        return out

    def release_all(self) -> list[Request]:
        """Every held request (the engine would otherwise idle: it schedules them now)."""
        out = list(self._held)
        self._held.clear()
        self.work = 0
        return out
