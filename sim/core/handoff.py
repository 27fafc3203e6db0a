"""An instance's side of P/D serving: the prompts it hands off and the requests that land here.

In a P/D topology (`sim.topology.topologies`, `sim.topology.kv_link`) a prefill instance hands a
request off once its prompt is done: its KV waits here for the link (`handing`), and the link
takes the new ones (`take_new`) and later says when they have left (`release`). A decode instance
sets blocks aside for a transfer that starts (`reserve`), and a request lands with them
(`land`), waiting in `arrived` until its policy seats it. `HandOff` owns that state; an instance
outside P/D serving has one that is never used.
"""

from __future__ import annotations

from collections import deque

from sim.core.request import Request


class HandOff:
    """The P/D hand-off state of one instance (see the module docstring)."""

    def __init__(self, hands_off: bool = False, receives: bool = False) -> None:
        self.hands_off = hands_off  # prefill instance: finished prompts leave for the link
        self.receives = receives  # decode instance: requests land with their KV
        self._handing: list[Request] = []  # prompt done, KV waiting for the link
        self._new: list[Request] = []  # handed off, not yet taken by the link
        self._arrived: deque[Request] = deque()  # KV landed, waiting for a seat
        self._reserved_blocks = 0  # set aside for transfers in flight

    def arrived(self) -> deque[Request]:
        """The landed requests waiting for a seat, in landing order (the policy's view)."""
        return self._arrived

    def handed_off(self) -> list[Request]:
        """The handed-off requests whose KV is still here, in hand-off order."""
        return self._handing

    def hand_off(self, req: Request, end: float) -> None:
        """A prefill instance's request emitted its first token at `end`: it leaves for the
        link."""
        req.hand_off(end)
        self._handing.append(req)
        self._new.append(req)

    def take_new(self) -> list[Request]:
        """The prompts handed off since the last call, in order."""
        new, self._new = self._new, []
        return new

    def release(self, req: Request) -> None:
        """A handed-off request's KV has left (the instance frees its blocks)."""
        self._handing.remove(req)

    def reserve(self, num_blocks: int) -> None:
        """Blocks taken from the pool for a transfer that starts now."""
        self._reserved_blocks += num_blocks

    def land(self, req: Request, num_blocks: int, now: float) -> None:
        """A transferred request lands at `now` holding `num_blocks` of the reserved blocks."""
        self._reserved_blocks -= num_blocks
        req.land(now, num_blocks)
        self._arrived.append(req)

    def seat(self, req: Request) -> None:
        """The policy seats `req`, which must be the first landed request."""
        arrived = self._arrived
        if not arrived or arrived[0] is not req:
            raise AssertionError(f"seat for request {req.id} out of order")
        arrived.popleft()
        req.seat()

    def holds_requests(self) -> bool:
        """Whether a request is handed off and not yet gone, landed or on its way here."""
        return bool(self._handing or self._arrived or self._reserved_blocks)
