"""What the gateway's two indexes (`sim.topology.load_index`, `sim.topology.ttft_index`) keep
alike: the instances watched, by index; each one's latest bound and the version that makes its
older heap entries stale; the instances that told (`Instance.on_load`) since the last decision,
to read again then; and the entries of instances that were not candidates when met (draining,
retired, still provisioning), set aside until the candidates change, so that a fleet's retired
instances are not met again at every decision. Each index keeps its own heaps and says how an
entry goes back into them (`_push`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar


class Clock(Protocol):
    @property
    def now(self) -> float: ...


class Watched(Protocol):
    """What every index reads of an instance (`sim.core.instance.Instance`)."""

    @property
    def index(self) -> int: ...

    @property
    def env(self) -> Clock: ...


W = TypeVar("W", bound=Watched)


class ToldIndex(Generic[W]):
    """The instances an index watches and what they told (see the module docstring)."""

    def __init__(self, first_bound: float) -> None:
        self.first_bound = first_bound  # a watched instance's bound before it is first read
        self.env: Clock | None = None  # the run's clock, the instances' own
        self.instances: list[W | None] = []  # by instance index; None: not watched
        self.bound: list[float] = []  # each watched instance's latest bound
        # an entry (bound, index, version) counts while its version is its instance's latest
        self.version: list[int] = []
        self.told: list[int] = []  # instances that told since the last decision
        self.is_told: list[bool] = []
        self._seen: Sequence[int] | None = None  # the candidates of the last decision
        self._seen_len = -1
        self._allowed: set[int] = set()
        self.parked: dict[int, tuple[float, int, int]] = {}

    def watch(self, instance: W) -> None:
        """Index `instance` (the gateway sets its `on_load` to `changed`)."""
        i = instance.index
        if self.env is None:
            self.env = instance.env
        while len(self.instances) <= i:
            self.instances.append(None)
            self.bound.append(self.first_bound)
            self.version.append(-1)
            self.is_told.append(False)
            self._grow()
        self.instances[i] = instance
        self._watched(instance)
        self.changed(instance)

    def _grow(self) -> None:
        """One more instance slot in the index's own per-instance lists."""

    def _watched(self, instance: W) -> None:
        """`instance` joined the index."""

    def changed(self, instance: W) -> None:
        """`instance` told: read its bound again at the next decision."""
        i = instance.index
        if not self.is_told[i]:
            self.is_told[i] = True
            self.told.append(i)

    def _push(self, entry: tuple[float, int, int]) -> None:
        """Put `entry` back into the index's heaps."""
        raise NotImplementedError

    def _candidate_set(self, candidates: Sequence[int]) -> set[int]:
        # a fleet's list of serving instances is replaced when one is added and shrinks in
        # place when one leaves (`sim.topology.scaling.Fleet`): the same list at the same
        # length holds the same instances
        if candidates is not self._seen or len(candidates) != self._seen_len:
            self._seen, self._seen_len = candidates, len(candidates)
            self._allowed = allowed = set(candidates)
            self._unpark([i for i in self.parked if i in allowed])
        return self._allowed

    def _allowed_now(self, candidates: Sequence[int] | None) -> set[int] | None:
        """The decision's candidates as a set (None: every instance, all unparked)."""
        if candidates is None:
            if self.parked:  # every instance is a candidate again
                self._unpark(list(self.parked))
            return None
        return self._candidate_set(candidates)

    def _unpark(self, indices: list[int]) -> None:
        for i in indices:
            entry = self.parked.pop(i)
            if entry[2] == self.version[i]:  # else superseded by an entry in a heap
                self._push(entry)
