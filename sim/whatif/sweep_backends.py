"""Where sweep points run: local processes or a Ray cluster, plus the progress display.

Both backends take the same list of tasks and the same runner (a module-level function, so that
it pickles by reference), and call `on_result(task, result)` in the calling process as each point
finishes; the caller saves it at once, which is what makes an interrupted sweep resumable.

* local: a `ProcessPoolExecutor` with the "spawn" start method. Spawn costs an import of the
  simulator per worker (well under a second) but is safe after threads have started (Ray's, or a
  notebook's) and behaves the same on Linux and macOS. One worker runs in-process, without a pool.
  A search runs several batches inside `local_pool`, which keeps one pool for all of them.
  A spawned worker normally re-imports the parent's `__main__` script, which in a plain script
  without an `if __name__ == "__main__":` guard runs the sweep again inside every worker (and
  breaks the pool). The runner never needs `__main__`, so workers are started with it hidden.
* ray: `ray.init(address=... or a local cluster, num_cpus=workers)`, one remote call per point,
  one CPU each. Ray is imported only here, so it stays an optional dependency. A Ray session that
  is already initialized (a notebook, a test fixture) is reused and left running. An `--address`
  is probed first with a plain TCP connection (`CONNECT_TIMEOUT_S`): Ray's own client retries an
  unreachable address for a minute or more, and a `ray://` address needs the Ray client extra
  (grpc), whose absence is a one-line error rather than an ImportError deep inside Ray.

On an error, points not yet started are cancelled; finished ones are on disk. On an interrupt the
local backend also saves the points already running before it stops.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from sim.errors import ScenarioError

T = TypeVar("T")
R = TypeVar("R")
CONNECT_TIMEOUT_S = 3.0


def default_workers() -> int:
    """CPUs this process may use (the affinity mask in containers), else `os.cpu_count()`."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


class Progress:
    """A tqdm bar when tqdm is installed, else a one-line counter on stderr."""

    def __init__(
        self,
        total: int,
        *,
        initial: int = 0,
        enabled: bool = True,
        desc: str = "sweep",
        unit: str = "point",
    ) -> None:
        self.total, self.count, self.enabled = total, initial, enabled
        self.desc, self.unit = desc, unit
        self._bar: Any = None
        if not enabled:
            return
        try:
            from tqdm import tqdm
        except ImportError:
            self._show()
            return
        self._bar = tqdm(total=total, initial=initial, unit=unit, desc=desc)

    def _show(self) -> None:
        line = f"\r{self.desc}: {self.count}/{self.total} {self.unit}s"
        print(line, end="", file=sys.stderr, flush=True)

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


@contextmanager
def _main_hidden() -> Iterator[None]:
    """Hide `__main__`'s file and spec, which spawn uses to re-import it in each worker."""
    main = sys.modules.get("__main__")
    keys = ("__file__", "__spec__")
    saved: dict[str, Any] = {k: main.__dict__[k] for k in keys if main and k in main.__dict__}
    try:
        if main is not None:
            main.__dict__.pop("__file__", None)
            main.__dict__["__spec__"] = None
        yield
    finally:
        if main is not None:
            main.__dict__.pop("__spec__", None)
            main.__dict__.update(saved)


@dataclass
class _Held:
    """The pool a `local_pool` block holds (started by the first batch that needs one)."""

    workers: int
    pool: ProcessPoolExecutor | None = None


_held: list[_Held] = []


@contextmanager
def local_pool(workers: int) -> Iterator[None]:
    """One pool of worker processes for every `run_local` call inside the block: a search runs
    its points in several batches (candidates, probes, checks on other seeds), and a pool per
    batch would start its workers, and import the simulator in each, once per batch. The pool
    starts with the first batch that needs one and is shut down when the block ends."""
    _held.append(_Held(workers))
    try:
        yield
    finally:
        pool = _held.pop().pool
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def _spawned(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))


def _pool(workers: int) -> tuple[ProcessPoolExecutor, bool]:
    """A pool of at least `workers` processes and whether it is the held one (kept after the
    batch)."""
    if _held and _held[-1].workers >= workers:
        held = _held[-1]
        if held.pool is None:
            held.pool = _spawned(held.workers)
        return held.pool, True
    return _spawned(workers), False


def run_local(
    tasks: list[T], runner: Callable[[T], R], workers: int, on_result: Callable[[T, R], None]
) -> None:
    if workers <= 1 or len(tasks) <= 1:
        for task in tasks:
            on_result(task, runner(task))
        return
    pool, held = _pool(workers)
    pending: dict[Future[R], T] = {}
    try:
        with _main_hidden():  # the workers start during the first submit
            pending.update({pool.submit(runner, task): task for task in tasks})
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                on_result(pending.pop(future), future.result())
    except KeyboardInterrupt:
        # points not started are dropped; the running ones would hold up the exit anyway (the
        # pool joins its workers), so wait for them and save them. A second Ctrl-C skips this.
        _cancel(pool, held, pending)
        for future, task in pending.items():
            if not future.cancelled() and future.exception() is None:
                on_result(task, future.result())
        raise
    except BaseException:
        _cancel(pool, held, pending)
        raise
    if not held:
        pool.shutdown(wait=True)


def _cancel(pool: ProcessPoolExecutor, held: bool, pending: dict[Future[R], T]) -> None:
    """Drop the points not started: the batch's own pool is shut down; a held one keeps
    running (its block shuts it down) and only this batch's futures are cancelled."""
    if held:
        for future in pending:
            future.cancel()
    else:
        pool.shutdown(wait=False, cancel_futures=True)


def check_ray(address: str | None) -> None:
    """Ray is installed and `address` (if any) looks reachable; else a one-line ScenarioError."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ScenarioError(
            "--backend ray needs Ray: pip install 'ray[default]' (or batchsim[ray])"
        ) from None
    check_ray_address(address)


def check_ray_address(address: str | None) -> None:
    """Refuse, quickly and in one line, an address Ray could not use (see the module docstring)."""
    if address is None or address in ("auto", "local"):
        return
    target = address
    if address.startswith("ray://"):
        try:
            import grpc  # noqa: F401  (what the Ray client needs)
        except ImportError:
            raise ScenarioError(
                f"--address {address}: a ray:// address needs the Ray client: "
                "pip install 'ray[client]'"
            ) from None
        target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise ScenarioError(f"--address {address!r}: expected HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host.strip("[]"), int(port)), CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise ScenarioError(
            f"--address {address}: no Ray cluster reachable there within {CONNECT_TIMEOUT_S:g} s "
            f"({exc.strerror or exc})"
        ) from None


@contextmanager
def ray_session(address: str | None, workers: int) -> Iterator[Any]:
    """Ray, initialized for the block (and shut down after it) unless a session already runs,
    which is reused and left running; several `run_ray` calls inside share one start."""
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
        check_ray_address(address)
        try:
            ray.init(address=address, **options)
        except (ConnectionError, RuntimeError, TimeoutError, ValueError) as exc:
            where = f"at {address}" if address else "locally"
            reason = " ".join(str(exc).split())[:300]
            raise ScenarioError(f"--backend ray: cannot start Ray {where}: {reason}") from None
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def run_ray(
    tasks: list[T],
    runner: Callable[[T], R],
    workers: int,
    address: str | None,
    on_result: Callable[[T, R], None],
) -> None:
    with ray_session(address, workers) as ray:
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
