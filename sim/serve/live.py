"""The simulated engine on the wall clock: requests join it as they arrive, tokens leave it as
the simulation emits them (`batchsim serve`, `sim.serve.server`).

`LiveEngine` holds one clock (`sim.core.clock.Clock`, a SimPy environment) with a scenario's
cluster, built as `run` builds it (`sim.topology.cluster.build_cluster`), but with no workload:
each request is created when it arrives, at the simulated time of the wall clock (`now_s`:
seconds since the start times `speed`), and reaches the scheduler `engine.frontend_s` later,
with the URGENT priority arrivals have. So the record is the one `run` makes of the same
arrivals (tests/serve/test_live.py replays it offline).

Time only moves forward to the clock: `advance` runs SimPy until `now_s` (SimPy's `until` event
keeps an instance from running ahead past it), then settles every instance, which applies the
steps that ended by now, and tells each live request how many tokens it has. Steps that end
later are not applied: an arrival may still cut their run. `next_s` is the next instant
anything can happen: the next SimPy event or the end of a step under way, where tokens leave.
The driver (`sim.serve.server`) calls `advance` at that instant and whenever a request arrives.

An engine of fixed instances may also take requests on one instance of the caller's choice
(`submit(..., instance=i)`: `--per-instance`, an external router decides).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.core.arrivals import ChunkWindow
from sim.core.clock import Clock
from sim.core.recorder import RequestLog
from sim.core.request import ABORTED, FINISHED, REJECTED, RUNNING, WAITING, Request
from sim.core.urgent import UrgentTimeout
from sim.metrics.results import Results, VariantResult
from sim.scenario.load import ResolvedScenario
from sim.serve.record import Meter, Taps
from sim.simulate.results import tables_result
from sim.simulate.tables import requests_table
from sim.topology.cluster import Cluster, build_cluster
from sim.workload.arrays import RequestArrays

ENDED = (FINISHED, REJECTED)
# rows of the request log held before they become a block of the requests table
LOG_BLOCK = 4096
MAX_REQUESTS = 1 << 27  # requests one engine takes in its life (the log's bit per request)


@dataclass(frozen=True)
class EngineState:
    """What `/metrics` reads of the engine at a scrape (vLLM's gauges and counters)."""

    num_running: int
    num_waiting: int
    kv_usage: float  # fraction of the GPU KV blocks in use
    prefix_queries: int  # prompt tokens looked up in the prefix cache
    prefix_hits: int  # of them, found cached
    num_preemptions: int


class Live:
    """One request as the server follows it: the engine's request and what it has sent."""

    __slots__ = ("aborting", "counted", "meter", "notify", "req", "sent", "source_id")

    def __init__(self, req: Request, notify: Callable[[], None], source_id: str,
                 meter: Meter | None = None) -> None:  # fmt: skip
        self.req = req
        self.meter = meter  # told of its tokens and its end (`sim.serve.record`)
        self.counted = 0  # output tokens the meter has been told of
        self.notify = notify  # called when it is placed, has new tokens, or has ended
        self.sent = 0  # output tokens the server has been told of
        self.aborting = False
        self.source_id = source_id

    @property
    def num_tokens(self) -> int:
        """Output tokens the simulation has emitted by now."""
        return self.req.num_output_tokens

    @property
    def ended(self) -> bool:
        return self.req.state in ENDED

    @property
    def rejected(self) -> str:
        """Why the engine refused it ("" when it did not)."""
        return self.req.reject_reason if self.req.state == REJECTED else ""

    @property
    def num_cached_tokens(self) -> int:
        """Prompt tokens it found in the prefix cache (0 when the engine caches none)."""
        return min(self.req.num_cached_tokens, self.req.num_prompt_tokens)

    @property
    def emitted_s(self) -> float:
        """When the simulation emitted its latest output token."""
        req = self.req
        return req.first_token_s if req.num_output_tokens == 1 else req.last_token_s


class LiveEngine:
    """A scenario's cluster on the wall clock (see the module docstring)."""

    def __init__(
        self,
        resolved: ResolvedScenario,
        *,
        speed: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        max_requests: int = MAX_REQUESTS,
    ) -> None:
        if not speed > 0 or math.isinf(speed):
            raise ValueError(f"speed must be a positive finite number, not {speed}")
        self.resolved = resolved
        spec = resolved.spec
        self.speed = speed
        self.clock = clock
        self.env = Clock()
        self.max_requests = max_requests
        self.log = RequestLog(max_requests, on_full=self._take_block, capacity=LOG_BLOCK)
        rng = np.random.default_rng([spec.seed, 1])
        self.taps = Taps()  # who hears of each instance's steps and gaps (`watch`)
        self.cluster: Cluster = build_cluster(
            self.env, resolved, rng, self.log, records=self.taps.records,
            num_requests=max_requests,
        )  # fmt: skip
        self.frontend_s = spec.engine.frontend_s
        self.tpot = spec.metrics.tpot
        self.live: dict[int, Live] = {}  # requests not yet ended, by id
        self._aborts: list[Live] = []  # asked to abort, not yet where an instance can drop it
        # what each request was, for the requests table (`_served`)
        self._arrival: list[float] = []
        self._prompt: list[int] = []
        self._output: list[int] = []
        self._source: list[str] = []
        self._sessions: dict[str, int] = {}  # a client's session label -> its number
        self._pulled = 0
        self.window = ChunkWindow(self._served(), release=True)
        self._blocks: list[pd.DataFrame] = []
        self._ended_preemptions = 0  # preemptions of the requests that have ended
        self.started = clock()

    # -- time ------------------------------------------------------------------------------------

    def now_s(self) -> float:
        """Simulated seconds now: wall seconds since the start times the speed."""
        return (self.clock() - self.started) * self.speed

    def wall_of(self, sim_s: float) -> float:
        """The clock reading at which simulated time `sim_s` comes."""
        return self.started + sim_s / self.speed

    def advance(self) -> None:
        """Run the simulation to now and tell every live request whose tokens moved or that
        ended (see the module docstring)."""
        env = self.env
        target = self.now_s()
        if target > env.now:
            self._run_to(target)
        for instance in self.cluster.instances:
            instance.settle()
        if self._aborts:
            self._aborts = [live for live in self._aborts if not self._drop(live)]
        self._tell_all()

    def _tell_all(self) -> None:
        """Notify every live request whose tokens moved or that ended; forget the ended."""
        ended = []
        for rid, live in self.live.items():  # every stream at every step's end: kept lean
            req = live.req
            meter = live.meter
            if meter is not None and req.num_output_tokens > live.counted:
                meter.tokens(req, live.counted)
                live.counted = req.num_output_tokens
            if req.state in ENDED:
                if meter is not None:
                    meter.ended(req)
                live.notify()
                self._ended_preemptions += req.num_preemptions
                ended.append(rid)
            elif req.num_output_tokens > live.sent:
                live.notify()
        for rid in ended:
            del self.live[rid]

    def _run_to(self, target: float) -> None:
        """SimPy's `run(until=target)`, but leaving no trace: SimPy 4.1 puts its stop event back
        in the queue (to run its other callbacks later), where `next_s` would find it."""
        env = self.env
        stop = UrgentTimeout(env, target - env.now)  # before the steps that end at target
        env.run(until=stop)
        queue = env._queue
        for k, entry in enumerate(queue):
            if entry[3] is stop:
                queue[k] = queue[-1]
                queue.pop()
                heapq.heapify(queue)
                break

    def next_s(self) -> float:
        """The next simulated instant something can happen: a SimPy event, or the end of a
        step under way (where tokens are emitted); inf when idle with nothing pending."""
        soonest = self.env.peek()
        for instance in self.cluster.instances:
            if instance.step_grid()[3] > 0:
                soonest = min(soonest, instance.step_end_s())
        return soonest

    # -- requests --------------------------------------------------------------------------------

    def submit(
        self,
        num_prompt_tokens: int,
        max_output_tokens: int,
        notify: Callable[[], None],
        *,
        content: np.ndarray | None = None,
        instance: int | None = None,
        source_id: str = "",
        arrived_s: float | None = None,
        meter: Meter | None = None,
        session: str = "",
    ) -> Live:
        """A request arrives now, or at simulated time `arrived_s` when the server saw it
        come in (before reading its body), unless the simulation is already past that: it
        reaches the scheduler `frontend_s` later (the cluster's router decides, or `instance`).
        `content`: its prompt's token ids (prefix caching); `meter` is told of its tokens and
        its end (`sim.serve.record`); `session`: the client's label of its task or chat ("":
        none), one number per label for the routers that keep a session on one instance."""
        now = self.now_s()
        target = now if arrived_s is None else min(arrived_s, now)
        if target > self.env.now:
            self._run_to(target)
        rid = len(self._arrival)
        if rid >= self.max_requests:
            raise OverflowError(f"the engine has taken its {self.max_requests} requests")
        at = self.env.now
        ids = content if content is not None else ()
        label = self._sessions.setdefault(session, len(self._sessions)) if session else -1
        req = Request(
            rid, at, num_prompt_tokens, max_output_tokens, session=label,
            content=ids, content_unit=1 if len(ids) else 0, content_tokens=len(ids),
        )  # fmt: skip
        self._arrival.append(at)
        self._prompt.append(num_prompt_tokens)
        self._output.append(max_output_tokens)
        if not source_id.isascii():  # the results hold UTF-8 text: anything else escaped
            source_id = source_id.encode("utf-8", "backslashreplace").decode("utf-8")
        self._source.append(source_id or f"req-{rid}")
        live = Live(req, notify, source_id, meter)
        self.live[rid] = live
        dispatch = self.cluster.dispatch
        if instance is not None:
            dispatch = self.cluster.instances[instance].submit
        event = UrgentTimeout(self.env, at + self.frontend_s - self.env.now)

        def arrive(_: object) -> None:
            dispatch(req)
            live.notify()  # placed (or refused): a stream's headers can go out

        event.callbacks.append(arrive)
        return live

    def abort(self, live: Live) -> None:
        """Its client has gone: the request leaves the engine where it is, or as soon as it
        reaches an instance's queue or batch (counted as aborted)."""
        if live.ended or live.aborting:
            return
        live.aborting = True
        if not self._drop(live):
            self._aborts.append(live)

    def _drop(self, live: Live) -> bool:
        req = live.req
        if req.state in (FINISHED, REJECTED):
            return True
        if req.state not in (WAITING, RUNNING) or req.instance < 0:
            return False  # at the gateway, swapped, or between P/D instances: later
        where = req.decode_instance if req.decode_instance >= 0 else req.instance
        return self.cluster.instances[where].abort(req)

    # -- what /metrics reads ----------------------------------------------------------------------

    def state(self, only: int | None = None) -> EngineState:
        """vLLM's gauges and counters over every instance (or instance `only`), as of now."""
        running = waiting = used = total = queries = hit_tokens = 0
        instances = self.cluster.instances
        for instance in instances if only is None else instances[only : only + 1]:
            load = instance.load()
            running += load.num_running
            waiting += load.num_waiting
            pool = instance.pool
            used += pool.num_used
            total += pool.num_total
            if pool.caching:
                stats = pool.cache_stats()
                queries += int(stats["tokens"])
                hits = stats["gpu"] + sum(v for k, v in stats.items() if k.startswith("loaded_"))
                hit_tokens += int(hits) * pool.block_size
        preempted = self._ended_preemptions
        for live in self.live.values():
            preempted += live.req.num_preemptions
        return EngineState(
            running, waiting, used / total if total else 0.0, queries, hit_tokens, preempted
        )

    def cache_config(self, only: int | None = None) -> dict[str, str]:
        """vLLM's `CacheConfig.metrics_info()` of the KV pool of instance `only` (None: the
        first; an empty dict while there is none): the labels of `vllm:cache_config_info`."""
        instances = self.cluster.instances
        if not instances:
            return {}
        pool = instances[only or 0].pool
        return {"block_size": str(pool.block_size), "cache_dtype": "auto",
                "enable_prefix_caching": str(pool.caching), "num_cpu_blocks": "None",
                "num_gpu_blocks": str(pool.num_total)}  # fmt: skip

    def num_instances(self) -> int:
        return len(self.cluster.instances)

    def watch(self, meter: Meter, instance: int | None = None) -> None:
        """`meter` hears of the steps and inter-token gaps of instance `instance` (None: of
        every instance) as they are applied (`sim.serve.record.Taps`)."""
        self.taps.watch(meter, instance)

    def caches_prefixes(self) -> bool:
        """Whether any instance keeps a prefix cache (requests then report cached tokens)."""
        return any(i.caches_prefixes() for i in self.cluster.instances)

    # -- the record --------------------------------------------------------------------------------

    def _served(self) -> Iterator[tuple[int, RequestArrays]]:
        """The requests created so far and not yet handed to the table, as workload chunks
        (`ChunkWindow` pulls one when the log hands over rows of requests it lacks)."""
        while True:
            first, last = self._pulled, len(self._arrival)
            self._pulled = last
            n = last - first
            yield first, RequestArrays(
                arrival_s=np.asarray(self._arrival[first:last], dtype=float),
                prompt_tokens=np.asarray(self._prompt[first:last], dtype=np.int64),
                output_tokens=np.asarray(self._output[first:last], dtype=np.int64),
                class_index=np.zeros(n, dtype=np.int64),
                class_names=("default",),
                source_id=np.asarray(self._source[first:last], dtype=object),
            )

    def _take_block(self, log: RequestLog) -> None:
        # a copy: the log's columns are reused for its next block
        self._blocks.append(requests_table(self.window, log, self.tpot).copy())

    def _strand(self) -> None:
        """Every request still live leaves now, aborted, from wherever it is."""
        for live in self.live.values():
            live.req.abort(self.env.now, stranded=True)
            self.log.record(live.req)

    def close(self, name: str) -> Results:
        """Stop taking requests: every request still in the engine is aborted now, or where it
        next can be (nothing is lost), with no wait on the clock, and the run's tables are
        built as `run` builds them. One the simulation can no longer move (it has no event
        left) leaves where it is, aborted then (`_strand`)."""
        self.advance()
        for live in list(self.live.values()):
            self.abort(live)
        env = self.env
        while True:
            for instance in self.cluster.instances:
                instance.settle()
            self._aborts = [live for live in self._aborts if not self._drop(live)]
            self._tell_all()
            if not self.live:
                break
            if env.peek() == math.inf:
                self._strand()
                continue
            env.step()
        self.log.hand_over()
        if self._blocks:
            table = pd.concat(self._blocks, ignore_index=True).sort_values("id", ignore_index=True)
        else:  # no request at all
            table = requests_table(self.window, self.log, self.tpot)
        aborted = float((table["reject_reason"] == ABORTED).sum())
        result: VariantResult = tables_result(
            self.resolved, self.cluster, table, {"aborted_requests": aborted}
        )
        return Results(scenario_name=name, variants={self.resolved.variant: result})
