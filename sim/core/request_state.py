"""A request's lifecycle states, their names, and the reason given a request its client gave
up on. The methods of `Request` (`sim.core.request`) move it between them:

    WAITING --admit--> RUNNING --finish--> FINISHED
       ^                | |  \
       |   preempt_recompute |   hand_off --> HANDOFF --start_transfer--> TRANSFERRING
       +----------------+ |                                                   |
    SWAPPED <--swap_out---+   (swap_in: back to RUNNING)      land --> ARRIVED --seat--> RUNNING
    WAITING --reject--> REJECTED (at arrival: no schedule could ever complete it)
"""

from __future__ import annotations

# lifecycle states (small ints: compared on hot paths)
WAITING, RUNNING, SWAPPED, HANDOFF, TRANSFERRING, ARRIVED, FINISHED, REJECTED = range(8)
ABORTED = "aborted by its client"  # the reject reason of a request its client gave up on
STATE_NAMES = (
    "waiting",
    "running",
    "swapped",
    "handoff",
    "transferring",
    "arrived",
    "finished",
    "rejected",
)
