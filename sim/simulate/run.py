"""One variant's run on a workload (`VariantRun`): its clock, records, cluster and arrivals,
built once and run to the end.

With tables, every record is kept and the result holds the tables; streamed (`tables=False`),
each instance hands its step rows and gaps over as it fills its share (`streamed_rows`), the
request log hands its rows over, and the run folds every chunk into a `StreamSummary`: memory
stays flat in the number of requests and the fleet's size. A lone instance pulls its own
arrivals (`pulls_arrivals`); a fleet's known arrivals are pulled by its clock
(`sim.core.clock.Clock.pull`); closed-loop turns, known only as earlier turns end, are pushed
by the arrival source's SimPy process.

Progress: with a `progress` callback, a watcher thread wakes every `PROGRESS_WALL_S` seconds of
wall-clock time and reports the simulated time and the requests done. It lives outside the SimPy
environment and only reads state, so it changes neither the schedule nor the results, and its
cost is bounded by wall time, whatever the simulated time spans (a run over 10^9 simulated
seconds costs it nothing more). Without a callback there is no watcher at all.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

import numpy as np
import pandas as pd

from sim.core.arrivals import Source
from sim.core.clock import Clock
from sim.core.instance import Instance
from sim.core.recorder import ItlLog, RequestLog, StepLog
from sim.metrics.results import VariantResult
from sim.metrics.streaming import StreamSummary
from sim.scenario.load import ResolvedScenario
from sim.simulate.results import context_of, streamed_result, tables_result
from sim.simulate.tables import requests_table
from sim.topology.cluster import Cluster, build_cluster
from sim.workload.stream import Workload

ProgressFn = Callable[[str], None]
PROGRESS_WALL_S = 1.0


class _Watcher:
    """Reports progress from a thread every `PROGRESS_WALL_S` wall-clock seconds (see above)."""

    def __init__(
        self, clock: Callable[[], float], log: RequestLog, total: int, name: str,
        progress: ProgressFn,
    ) -> None:  # fmt: skip
        self.clock, self.log, self.total, self.name = clock, log, total, name
        self.progress = progress
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="batchsim-progress", daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(PROGRESS_WALL_S):
            done = self.log.num_done  # finished or rejected: an int the run only increments
            self.progress(
                f"{self.name}: {self.clock():.1f} s simulated, {done}/{self.total} requests done"
            )

    def __enter__(self) -> _Watcher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


class VariantRun:
    """One variant's run (see the module docstring): `run()` once, for its `VariantResult`."""

    def __init__(
        self,
        resolved: ResolvedScenario,
        workload: Workload,
        progress: ProgressFn | None = None,
        *,
        tables: bool = True,
    ) -> None:
        self.resolved = resolved
        self.workload = workload
        self.progress = progress
        self.tables = tables
        spec = resolved.spec
        self.tpot = spec.metrics.tpot
        self.env = Clock()
        self.total = total = workload.num_requests
        self.stream: StreamSummary | None = None
        if tables:
            self.log = RequestLog(total)
        else:
            self.log = RequestLog(total, on_full=self._take_requests)
            self.rows = streamed_rows(resolved)
        routing_rng = np.random.default_rng([spec.seed, 1])  # its own stream: routers only
        self.cluster = build_cluster(
            self.env, resolved, routing_rng, self.log, None if tables else self._records,
            requests=workload.arrays, num_requests=total,
        )  # fmt: skip
        self.context = context_of(resolved, self.cluster)
        if not tables:
            link = self.cluster.link
            shape = workload.shape
            self.stream = StreamSummary(
                self.context, shape.first_s, shape.last_s if shape.all_known else math.inf,
                shape.last_s, link.num_links if link is not None else 0,
                window_s=spec.metrics.window_s,
            )  # fmt: skip
        self.source = self._arrivals()

    def _arrivals(self) -> Source:
        """The arrival source, and who pulls it: the lone instance, the clock, or (closed-loop
        turns) its own SimPy process."""
        workload, cluster, log = self.workload, self.cluster, self.log
        pulled = pulls_arrivals(cluster, workload)
        by_clock = not pulled and clock_pulls(workload)
        source = Source(
            self.env, workload, cluster.dispatch, push=not (pulled or by_clock),
            frontend_s=self.resolved.spec.engine.frontend_s, release=not self.tables,
        )  # fmt: skip
        if pulled:
            cluster.instances[0].feed = source.pulled()
        elif by_clock:  # a fleet's known arrivals
            self.env.pull(source.pulled(), cluster.dispatch)
        if workload.closed_loop:

            def follow(instance: Instance) -> None:  # a finished turn sends the session's next
                instance.on_finish = source.turn_finished

            cluster.each_instance(follow)
            log.on_rejected = source.turn_rejected  # and so does a refused one
        return source

    # -- a streamed run's records, handed over as they fill ----------------------------------

    def _take_requests(self, log: RequestLog) -> None:
        assert self.stream is not None
        self.stream.add_requests(requests_table(self.source.window, log, self.tpot))

    def _records(self, index: int) -> tuple[StepLog, ItlLog]:
        return (
            StepLog(index, on_full=self._take_steps, capacity=self.rows),
            ItlLog(on_full=self._take_gaps, capacity=self.rows),
        )

    def _take_steps(self, steps: StepLog) -> None:
        assert self.stream is not None
        self.stream.add_steps(steps.instance, pd.DataFrame(steps.columns(), copy=False))

    def _take_gaps(self, itl: ItlLog) -> None:
        assert self.stream is not None
        self.stream.add_itl(*itl.arrays())

    # -- the run ------------------------------------------------------------------------------

    def _clock_s(self) -> float:
        """The simulated time reached (an instance running ahead of the clock knows a later)."""
        return max(self.env.now, *(instance.engine.now for instance in self.cluster.instances))

    def run(self) -> VariantResult:
        """Run every request to its end, and the result."""
        log, total = self.log, self.total
        if self.progress is not None:
            watcher = _Watcher(self._clock_s, log, total, self.resolved.variant, self.progress)
            with watcher:
                self.env.run()
        else:
            self.env.run()
        if log.num_done != total:  # the loop only stops when the queues drain
            missing = total - log.num_done
            raise AssertionError(f"{missing} requests never finished in {self.resolved.variant}")
        counters: dict[str, float] = {**self.workload.notes}
        if self.stream is not None:
            return streamed_result(
                self.resolved, self.cluster, log, self.stream, self.context, counters
            )
        table = requests_table(self.source.window, log, self.tpot)
        return tables_result(self.resolved, self.cluster, table, counters)


# a streamed run's records held at once, shared by the instances (each hands its step rows and
# gaps over when it holds its share): memory stays flat in the fleet's size as in its requests
STREAMED_ROWS = 1 << 18
MIN_STREAMED_ROWS, MAX_STREAMED_ROWS = 1 << 10, 1 << 16


def streamed_rows(resolved: ResolvedScenario) -> int:
    """Step rows (and gap entries) each instance of a streamed run holds before handing them
    over: `STREAMED_ROWS` over the most instances the fleet can hold (an autoscaled group's
    `max`), between `MIN_STREAMED_ROWS` and `MAX_STREAMED_ROWS` (the records' own default)."""
    most = sum(
        max(g.count, g.autoscale.max if g.autoscale is not None else 0) for g in resolved.groups
    )
    return min(MAX_STREAMED_ROWS, max(MIN_STREAMED_ROWS, STREAMED_ROWS // max(1, most)))


def clock_pulls(workload: Workload) -> bool:
    """Whether the fleet's clock pulls the arrivals (`sim.core.clock.Clock.pull`): known ones,
    no closed-loop sessions (whose turns the source's SimPy process pushes); the same schedule
    either way (tests/core/test_clock.py)."""
    return workload.sessions is None


def pulls_arrivals(cluster: Cluster, workload: Workload) -> bool:
    """Whether the lone instance pulls its arrivals itself (`sim.core.arrivals.ArrivalFeed`): no
    SimPy event per arrival or run; the same schedule as arrivals pushed by the source."""
    return cluster.direct and workload.sessions is None
