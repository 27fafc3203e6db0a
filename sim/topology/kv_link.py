"""The KV link of prefill/decode disaggregation (DistServe, Splitwise).

A prompt that completes on a prefill instance is handed off: its KV stays there (and counts
against that instance's memory) until the link has moved it to a decode instance.

* transfers start in FIFO order, at most `num_links` at once, each taking `KV bytes / bandwidth +
  latency`, the bytes being what the prompt's KV takes on the decode instance;
* a transfer starts only when some decode instance can reserve blocks for the prompt's KV (the
  decode pool's router picks among those that can); until then the KV stays on the prefill
  instance (backpressure), and later prompts queue behind it;
* when it lands, the prefill instance frees the blocks and the decode instance takes the request
  (it joins the batch when a seat is free).

`link.via: store` moves the KV through the shared store (`kv_tiers.remote`; Mooncake's store)
instead: the prefill instance writes it (`latency + bytes / write bandwidth`, its own bytes and
its own path to the store), then the decode instance reads it (`latency + bytes / read
bandwidth`, its bytes and path). The prefill instance frees its blocks once the write is done;
the rest is as above (FIFO over `num_links` transfers at once, the decode blocks reserved at the
start). The store's figures are the remote tier's (`sim.costs.memory_tiers.TierGeometry`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Sequence
from typing import Any, Protocol

import simpy

from sim.core.instance import Instance
from sim.core.request import Request
from sim.scenario.load import LinkSpec
from sim.topology.router import Loads, Router


class StorePath(Protocol):
    """One instance's path to the shared store (`sim.costs.memory_tiers.TierGeometry`)."""

    @property
    def read_bytes_per_s(self) -> float: ...

    @property
    def write_bytes_per_s(self) -> float: ...

    @property
    def latency_s(self) -> float: ...


class KVLink:
    """FIFO KV transfers from prefill to decode instances over `num_links` parallel links."""

    def __init__(
        self,
        env: simpy.Environment,
        spec: LinkSpec,
        decode: list[Instance],
        router: Router,
        store: Sequence[StorePath] | None = None,
        serving: Callable[[], Sequence[int] | None] | None = None,
    ) -> None:
        """`store`: each instance's path to the shared store, by instance index (`via: store`;
        None: over the link); `serving`: the indices of the decode instances that take
        transfers now (an autoscaled pool's; None, or a call answering None: every one)."""
        self.env = env
        self.bandwidth = spec.bandwidth_gb_per_s * 1e9
        self.latency_s = spec.latency_s
        self.num_links = spec.num_links
        self.free_links = spec.num_links
        self.decode = decode
        self.router = router
        self.store = store
        self.pending: deque[tuple[Request, Instance]] = deque()
        self.busy_s = 0.0
        self.serving = serving

    def add_decode(self, instance: Instance) -> None:
        """A decode instance launched during the run (it takes transfers once serving)."""
        self.decode.append(instance)

    def can_ever_take(self, req: Request) -> bool:
        """Whether some decode instance could ever hold the request's whole sequence."""
        return any(inst.can_ever_take(req) for inst in self.decode)

    def collect(self, prefill: Instance) -> None:
        """After a prefill instance's step: queue the prompts it handed off."""
        handed = prefill.take_handoffs()
        if handed:
            self.pending.extend((req, prefill) for req in handed)
            self.start()

    def capacity_freed(self, _decode: Instance) -> None:
        if self.pending:
            self.start()

    def start(self) -> None:
        """Start transfers in FIFO order while a link and a decode instance's blocks allow."""
        while self.pending and self.free_links:
            req, source = self.pending[0]
            loads = [inst.load() for inst in self.decode]  # settled: as step by step
            needs = [inst.transfer_blocks(req) for inst in self.decode]
            fits = [
                i
                for i, (need, load) in enumerate(zip(needs, loads, strict=True))
                if need <= load.kv_blocks_total - load.kv_blocks_used
            ]
            now_serving = self.serving() if self.serving is not None else None
            if now_serving is not None:
                serving = set(now_serving)
                fits = [i for i in fits if self.decode[i].index in serving]
            if not fits:
                return  # backpressure: the head waits on its prefill instance, and so do the rest
            chosen = self.router.pick(Loads(len(self.decode), fits, loads.__getitem__))
            target = self.decode[chosen]
            blocks = needs[chosen]
            target.reserve(blocks)
            self.pending.popleft()
            self.free_links -= 1
            if self.store is not None:
                write_s, read_s = self.store_seconds(req, source, target)
                req.start_transfer(self.env.now, target.index)
                self.env.process(self._via_store(req, source, target, blocks, write_s, read_s))
                continue
            nbytes = req.num_computed_tokens * target.kv_spec.bytes_per_token
            duration = nbytes / self.bandwidth + self.latency_s
            req.start_transfer(self.env.now, target.index)
            self.env.process(self._transfer(req, source, target, blocks, duration))

    def store_seconds(
        self, req: Request, source: Instance, target: Instance
    ) -> tuple[float, float]:
        """Seconds to write the request's KV to the store from `source` and to read it from
        there into `target` (each side's bytes per token and path)."""
        assert self.store is not None
        tokens = req.num_computed_tokens
        out, into = self.store[source.index], self.store[target.index]
        write_s = out.latency_s + tokens * source.kv_spec.bytes_per_token / out.write_bytes_per_s
        read_s = into.latency_s + tokens * target.kv_spec.bytes_per_token / into.read_bytes_per_s
        return write_s, read_s

    def _via_store(
        self, req: Request, source: Instance, target: Instance, blocks: int, write_s: float,
        read_s: float,
    ) -> Generator[simpy.events.Event, Any, None]:  # fmt: skip
        yield self.env.timeout(write_s)
        source.release(req)  # written: the prefill instance's copy is no longer needed
        yield self.env.timeout(read_s)
        self.busy_s += write_s + read_s
        self.free_links += 1
        target.receive(req, blocks)
        self.start()

    def _transfer(
        self, req: Request, source: Instance, target: Instance, blocks: int, duration: float
    ) -> Generator[simpy.events.Event, Any, None]:
        yield self.env.timeout(duration)
        self.busy_s += duration
        self.free_links += 1
        source.release(req)
        target.receive(req, blocks)
        self.start()
