"""The gateway's index of instance loads: the least-loaded candidate without reading them all.

A least-load router (`least_outstanding_requests`, `least_outstanding_tokens`, `least_kv`, and
`session_sticky` placing a session's first turn) wants the candidate with the least of one number
(`Router.ranks_by`), ties to the lowest index. Reading that number of every candidate at every
arrival makes each arrival cost as much as the fleet is large. `LoadIndex` keeps instead a heap
of lower bounds, one per instance, that the instances keep valid:

* an instance's number can fall below its bound only through its own steps: requests finish and
  tokens are computed when a run's steps are applied. So the instance tells the index
  (`Instance.on_load`) when a run starts and when it ends, and when a request is queued or lands
  (its number rose: the bound is still valid, a fresh one is tighter);
* the bound of an instance told since the last decision is read again then
  (`Instance.load_floor`): its number itself for requests, and for the tokens of an instance with
  no run in flight (those bounds are exact: no read is needed); during a run, the tokens left
  now, which no step changes before the next one ends, exact until then (`expiry`; from the
  run's last step on, until the run ends and tells). The same read gives the least the tokens
  can fall to before the run ends (`floor`): when the next step ends the index puts that floor
  in place of the number, without reading the instance, and reads it only if a decision pops
  it. A fleet whose router evens out the loads has many instances within a few steps' tokens
  of the least, but the steps that end between two decisions grow with the fleet: reading each
  instance whose step ended (the number, exact again) made a decision cost as much as the fleet
  is large, while reading only the floors a decision pops costs the few near the least;
* a decision pops bounds in (bound, index) order and reads the exact number
  (`Instance.num_outstanding`, `Instance.work_left`) of each popped candidate whose bound is not
  exact, until the next bound is above the best number found (or equal, at a higher index).
  Every instance not popped has a bound, hence a number, no better than the choice: the answer
  is the full scan's, exactly (tests/topology/test_load_index.py checks it against the scan at
  every decision).

The fraction of KV blocks in use (`least_kv`) is the other way round: a run's steps only take
blocks (requests finish, and are preempted, only where a run ends or starts), so the fraction an
instance showed when last read is a lower bound until it next tells (`Instance.kv_floor`: the
blocks in use as applied, without applying the run in flight; exact with no run in flight or
speculating; a speculative run may free the blocks of rejected drafts and has no bound). Reading
it exactly (`Instance.kv_fraction`) applies the steps that ended, as the full scan does; the
instance read then counts as told, so that its next bound is that reading.

A decision then costs the few candidates whose bounds are near the least, and the instances that
told since the last decision, not the fleet. An entry popped for an instance that is not a
candidate (draining, retired, provisioning) is set aside until the candidates change, so a day's
retired instances are not popped at every decision.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Protocol

from sim.topology.told_index import ToldIndex, Watched

FOREVER_S = float("inf")


class Indexed(Watched, Protocol):
    """What the index reads of an instance (`sim.core.instance.Instance`)."""

    def num_outstanding(self) -> int: ...

    def work_left(self) -> int: ...

    def load_floor(self, tokens: bool) -> tuple[int, float, bool, int]: ...

    def kv_fraction(self) -> float: ...

    def kv_floor(self) -> tuple[float, bool]: ...


class LoadIndex(ToldIndex[Indexed]):
    """Lower bounds of each instance's load, by (bound, index) (see the module docstring)."""

    def __init__(self, rank: str) -> None:
        if rank not in ("requests", "tokens", "kv"):
            raise ValueError(f"a load index ranks by requests, tokens or kv, not {rank!r}")
        super().__init__(0.0)
        self.tokens = rank == "tokens"
        self.kv = rank == "kv"
        self.heap: list[tuple[float, int, int]] = []  # (bound, index, version)
        self.exact: list[bool] = []  # each watched instance's bound is its number now
        self.expiry: list[tuple[float, int, int]] = []  # (until, index, version) of bounds
        self.floor: list[float] = []  # each one's least before it next tells (tokens)

    def _grow(self) -> None:
        self.exact.append(False)
        self.floor.append(0.0)

    def _push(self, entry: tuple[float, int, int]) -> None:
        heapq.heappush(self.heap, entry)

    def _refresh(self) -> None:
        instances, bound, version, heap = self.instances, self.bound, self.version, self.heap
        tokens, kv = self.tokens, self.kv
        b: float
        for i in self.told:
            instance = instances[i]
            assert instance is not None
            self.is_told[i] = False
            if kv:
                b, self.exact[i] = instance.kv_floor()
                until = FOREVER_S
            else:
                n, until, self.exact[i], least = instance.load_floor(tokens)
                b = float(n)  # exact: loads are far below 2**53
                self.floor[i] = float(least)
            if b != bound[i] or version[i] < 0 or until < FOREVER_S:  # else its entry stands
                bound[i] = b
                version[i] += 1
                heapq.heappush(heap, (b, i, version[i]))
                if until < FOREVER_S:
                    heapq.heappush(self.expiry, (until, i, version[i]))
        self.told.clear()

    def _compact(self) -> None:
        """Rebuild the heap once it holds mostly superseded entries."""
        instances, bound, version = self.instances, self.bound, self.version
        if len(self.heap) > 4 * len(instances) + 64:
            self.parked.clear()  # every instance's entry is in the new heap
            watched = [i for i, x in enumerate(instances) if x is not None]
            self.heap = [(bound[i], i, version[i]) for i in watched]
            heapq.heapify(self.heap)

    def best(self, candidates: Sequence[int] | None) -> int:
        """The candidate (default: every watched instance) with the least number, ties to the
        lowest index: what `min(sorted(candidates), key=number)` gives."""
        expiry, env = self.expiry, self.env
        if expiry and env is not None:
            now = env.now
            while expiry and expiry[0][0] <= now:  # a step ended: its floor stands in
                _, i, v = heapq.heappop(expiry)
                if v == self.version[i] and not self.is_told[i]:
                    self._stand_in(i)
        if self.told:
            self._refresh()
        self._compact()
        allowed = self._allowed_now(candidates)
        heap, version, instances, tokens = self.heap, self.version, self.instances, self.tokens
        exact, kv = self.exact, self.kv
        popped: list[tuple[float, int, int]] = []
        best_value = 0.0
        best_index = -1
        value: float
        while heap:
            entry = heap[0]
            b, i, v = entry
            if best_index >= 0 and (b > best_value or (b == best_value and i > best_index)):
                break  # every entry left is no better than the choice
            heapq.heappop(heap)
            if v != version[i]:
                continue  # superseded: dropped
            if allowed is not None and i not in allowed:
                self.parked[i] = entry
                continue
            popped.append(entry)
            if exact[i]:
                value = b
            else:
                instance = instances[i]
                assert instance is not None
                if kv:
                    value = instance.kv_fraction()
                    self.changed(instance)  # its next bound: this reading
                elif tokens:
                    n, until, is_exact, least = instance.load_floor(True)
                    if is_exact:  # the number until `until`: its entry from now on
                        value = float(n)
                        self.floor[i] = float(least)
                        self.exact[i] = True
                        popped.pop()
                        v = version[i] = version[i] + 1
                        entry = (value, i, v)
                        popped.append(entry)
                        self.bound[i] = value
                        if until < FOREVER_S:
                            heapq.heappush(self.expiry, (until, i, v))
                    else:
                        value = float(instance.work_left())
                else:
                    value = float(instance.work_left() if tokens else instance.num_outstanding())
            if best_index < 0 or value < best_value or (value == best_value and i < best_index):
                best_value, best_index = value, i
        for entry in popped:
            heapq.heappush(heap, entry)
        if best_index < 0:
            raise ValueError("no candidate instance is indexed")
        return best_index

    def _stand_in(self, i: int) -> None:
        """Instance `i`'s exact tokens expired (a step of its run ended): its floor, the least
        it can show before it next tells, becomes its bound, until a decision reads it."""
        b = self.floor[i]
        self.exact[i] = False
        self.bound[i] = b
        self.version[i] += 1
        heapq.heappush(self.heap, (b, i, self.version[i]))
