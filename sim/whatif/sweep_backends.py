"""Where sweep points run: local processes or a Ray cluster, plus the progress display.

Both backends take the same list of tasks and the same runner (a module-level function, so that
it pickles by reference), and call `on_result(task, result)` in the calling process as each point
finishes; the caller saves it at once, which is what makes an interrupted sweep resumable.

* local: a `ProcessPoolExecutor` with the "spawn" start method. Spawn costs an import of the
  simulator per worker (well under a second) but is safe after threads have started (Ray's, or a
  notebook's) and behaves the same on Linux and macOS. One worker runs in-process, without a pool.
* ray: `ray.init(address=... or a local cluster, num_cpus=workers)`, one remote call per point,
  one CPU each. Ray is imported only here, so it stays an optional dependency. A Ray session that
  is already initialized (a notebook, a test fixture) is reused and left running.

On an error, points not yet started are cancelled; finished ones are on disk. On an interrupt the
local backend also saves the points already running before it stops.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, TypeVar

from sim.errors import ScenarioError

T = TypeVar("T")
R = TypeVar("R")


def default_workers() -> int:
    """CPUs this process may use (the affinity mask in containers), else `os.cpu_count()`."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


class Progress:
    """A tqdm bar when tqdm is installed, else a one-line counter on stderr."""

    def __init__(self, total: int, *, initial: int = 0, enabled: bool = True) -> None:
        self.total, self.count, self.enabled = total, initial, enabled
        self._bar: Any = None
        if not enabled:
            return
        try:
            from tqdm import tqdm
        except ImportError:
            self._show()
            return
        self._bar = tqdm(total=total, initial=initial, unit="point", desc="sweep")

    def _show(self) -> None:
        print(f"\rsweep: {self.count}/{self.total} points", end="", file=sys.stderr, flush=True)

    def tick(self) -> None:
        self.count += 1
        if self._bar is not None:
            self._bar.update(1)
        elif self.enabled:
            self._show()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self.enabled:
            print(file=sys.stderr)


def run_local(
    tasks: list[T], runner: Callable[[T], R], workers: int, on_result: Callable[[T, R], None]
) -> None:
    if workers <= 1 or len(tasks) <= 1:
        for task in tasks:
            on_result(task, runner(task))
        return
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context)
    pending: dict[Future[R], T] = {}
    try:
        pending.update({pool.submit(runner, task): task for task in tasks})
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                on_result(pending.pop(future), future.result())
    except KeyboardInterrupt:
        # points not started are dropped; the running ones would hold up the exit anyway (the
        # pool joins its workers), so wait for them and save them. A second Ctrl-C skips this.
        pool.shutdown(wait=False, cancel_futures=True)
        for future, task in pending.items():
            if not future.cancelled() and future.exception() is None:
                on_result(task, future.result())
        raise
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def run_ray(
    tasks: list[T],
    runner: Callable[[T], R],
    workers: int,
    address: str | None,
    on_result: Callable[[T, R], None],
) -> None:
    try:
        import ray
    except ImportError:
        raise ScenarioError(
            "--backend ray needs Ray: pip install 'ray[default]' (or batchsim[ray])"
        ) from None
    started = not ray.is_initialized()
    if started:
        options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address is None:  # a local cluster sized to the worker count; a remote one is as is
            options["num_cpus"] = workers
        ray.init(address=address, **options)
    remote = ray.remote(num_cpus=1)(runner)
    pending = {remote.remote(task): task for task in tasks}
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                on_result(pending.pop(ref), ray.get(ref))
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    finally:
        if started:
            ray.shutdown()
