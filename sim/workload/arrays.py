"""The requests of a workload as columns: what `generate_requests` makes and a run consumes."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Content:
    """What requests' tokens are, for prefix caching: request i's tokens are described, one
    content id per `unit` tokens, by `ids[offsets[i]:offsets[i + 1]]` (equal ids: equal tokens),
    up to its first `tokens[i]` tokens (its prompt; in a session also its answer). With
    `stops`, request i's ids are `ids[offsets[i]:stops[i]]` instead: the calls of one agent's
    context are views of that context's ids, each as far as its tokens reach."""

    ids: np.ndarray  # int64, flat
    offsets: np.ndarray  # int64, n + 1
    unit: int
    tokens: np.ndarray  # int64, per request
    stops: np.ndarray | None = None  # int64, n: where each request's ids end (None: offsets)

    def of(self, i: int) -> np.ndarray:
        """Request i's content ids (a read-only view)."""
        stop = self.offsets[i + 1] if self.stops is None else self.stops[i]
        return self.ids[self.offsets[i] : stop]


@dataclass(frozen=True)
class Sessions:
    """Multi-turn sessions: each request's session, and (closed loop) the request of its next
    turn (-1: none) with the think time between this turn's finish and that arrival."""

    session: np.ndarray  # int64 per request
    next_turn: np.ndarray | None = None  # int64 per request
    think_s: np.ndarray | None = None  # float64 per request (per node): the wait before it
    names: np.ndarray | None = None  # a trace's session ids by label (None: the labels)
    # a task graph (agents, sim.workload.agents): node i's successors are
    # `successors[successor_offsets[i]:successor_offsets[i + 1]]`, and a node arrives its
    # `think_s` after the last of its `needs` predecessors ended (None: `next_turn` alone).
    # Nodes 0..n-1 are the requests; any after them are gates (a wave's barrier: it passes
    # on, `think_s` after the last node it waits for ended, to the nodes waiting on it).
    successor_offsets: np.ndarray | None = None  # int64, nodes + 1
    successors: np.ndarray | None = None  # int64
    needs: np.ndarray | None = None  # int64 per node: its predecessors
    wave: np.ndarray | None = None  # int64 per request: a rollout's wave (None: no waves)

    def labels_of(self, ids: np.ndarray) -> np.ndarray:
        """The session of each of `ids` as the requests table shows it."""
        labels = self.session[ids]
        return labels if self.names is None else self.names[labels]

    @property
    def closed_loop(self) -> bool:
        return self.next_turn is not None


@dataclass(frozen=True)
class RequestArrays:
    """Columns of a workload; request ids are 0..n-1 in arrival order. Arrays are read-only.

    With closed-loop sessions, a later turn's arrival is not known before the run (it follows
    the previous turn's finish): its `arrival_s` is NaN, and the known arrivals come first."""

    arrival_s: np.ndarray  # float64, non-decreasing, first >= 0 (NaN: a session's later turn)
    prompt_tokens: np.ndarray  # int64 >= 1
    output_tokens: np.ndarray  # int64 >= 1: the true output length of each request
    class_index: np.ndarray  # int64 index into class_names
    class_names: tuple[str, ...]  # ("default",) without a mix, ("trace",) for a trace
    # service tier of each request: index into tier_names (None: every request "default")
    tier_index: np.ndarray | None = None
    tier_names: tuple[str, ...] = ("default",)
    # a predictor's guess of each output length (None: the true length)
    predicted_output_tokens: np.ndarray | None = field(default=None)
    # what the tokens are, for prefix caching (None: every token unique to its request)
    content: Content | None = None
    # multi-turn sessions: a session label per request, and for closed-loop sessions the
    # request of the next turn and its think time (None: independent requests)
    sessions: Sessions | None = None
    # requests a trace had that the workload dropped or clipped (reported in the summary)
    notes: dict[str, int] = field(default_factory=dict)
    # each request's id in the trace it came from (strings; None: no id column)
    source_id: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if self.tier_index is None:
            object.__setattr__(self, "tier_index", np.zeros(n, dtype=np.int64))
        if self.predicted_output_tokens is None:
            object.__setattr__(self, "predicted_output_tokens", self.output_tokens)
        if self.source_id is not None and len(self.source_id) != n:
            raise ValueError(f"source_id has {len(self.source_id)} entries, expected {n}")
        names = ("prompt_tokens", "output_tokens", "class_index", "tier_index")
        for name in (*names, "predicted_output_tokens"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} entries, expected {n}")
        for array in (
            self.arrival_s,
            self.prompt_tokens,
            self.output_tokens,
            self.class_index,
            self.tier_index,
            self.predicted_output_tokens,
        ):
            assert array is not None
            # Shared by every consumer of a run; a stray in-place edit would corrupt them all.
            array.flags.writeable = False

    def __len__(self) -> int:
        return len(self.arrival_s)
