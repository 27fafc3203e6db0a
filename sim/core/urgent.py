"""A SimPy timeout processed before NORMAL events of the same instant: arrivals come before steps.

Its own module, left out of the compiled build (`sim.compiled`): it subclasses SimPy's `Event`, a
class from outside that build, which mypyc would compile against an untyped base."""

from __future__ import annotations

import simpy
from simpy.core import URGENT
from simpy.events import Event


class UrgentTimeout(Event):
    """A timeout processed before NORMAL events of the same instant (arrivals before steps)."""

    def __init__(self, env: simpy.Environment, delay: float) -> None:
        super().__init__(env)
        self._ok = True
        self._value = None
        env.schedule(self, URGENT, delay)
