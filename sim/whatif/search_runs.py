"""Where a deployment search's phases run, and how their results are kept for resuming.

A phase is a list of `Task`s (one per configuration) run by `search_probe.run_task` on the local
process pool or on Ray (`sim.whatif.sweep_backends`, the sweep's backends). As each finishes its
result is saved to `<out>/configs/<task id>.json` (a temporary file renamed into place, so a file
that exists is whole); a rerun reads those back, checked (`sim.whatif.search_records`: one that
does not validate is recomputed and counted), and runs only the others. A task's id hashes the
whole question (scenario mapping, rate, SLOs, seeds, limits), the configuration, the
phase and the starting estimate, so a saved result is reused only for the very same work, and a
changed question recomputes instead of mixing old and new. Like a sweep's fingerprint, the id
does not cover files the scenario refers to (a trace): run with `resume=False` (`--fresh`) after
changing one.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sim.io.destination import mark_sweep_folder
from sim.whatif.search_probe import Task, run_task
from sim.whatif.search_records import check_record
from sim.whatif.sweep_backends import Progress, local_pool, ray_session, run_local, run_ray
from sim.whatif.sweep_store import write_atomic

Result = dict[str, Any]


def digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Store:
    """Phase results saved as they finish (`configs/<task id>.json`), read back on a rerun.

    A saved record is checked (`search_records.check_record`) before it is reused: one that does
    not validate is recomputed, and `invalid` keeps `(file name, why)` of each, so the search can
    say how many were; `unsaved` names the results that could not be saved because something
    other than a file (a folder) holds their place, which is left as it is."""

    def __init__(self, out: Path | None, resume: bool) -> None:
        self.folder = out / "configs" if out is not None else None
        self.resume = resume
        self.invalid: list[tuple[str, str]] = []
        self.unsaved: list[str] = []

    def load(self, task: Task) -> Result | None:
        if self.folder is None or not self.resume:
            return None
        path = self.folder / f"{task.id}.json"
        if not os.path.lexists(path):
            return None  # never saved: run it
        if not path.is_file():  # a folder, or a pipe that reading would wait on forever
            self.invalid.append((path.name, "a folder or special file, not a file"))
            return None
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            # unreadable, not UTF-8 or not JSON (a damaged file): run it again
            self.invalid.append((path.name, f"not readable JSON ({exc})"[:200]))
            return None
        problem = check_record(record, task)
        if problem is not None:
            self.invalid.append((path.name, problem[:200]))
            return None
        result: Result = record["result"]
        return result

    def save(self, task: Task, result: Result) -> None:
        if self.folder is None:
            return
        path = self.folder / f"{task.id}.json"
        if os.path.lexists(self.folder) and not self.folder.is_dir():
            self.unsaved.append(path.name)  # `configs` is a file: nowhere to save
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        mark_sweep_folder(self.folder.parent, "search")
        if path.is_dir() and not path.is_symlink():
            self.unsaved.append(path.name)  # not ours to remove: the result is used unsaved
            return
        record = {
            "id": task.id,
            "phase": task.phase,
            "configuration": task.config.label,
            "result": result,
        }
        text = json.dumps(record, indent=1, allow_nan=False)
        write_atomic(path, lambda p: p.write_text(text))


class Runner:
    """Runs phases on one backend; with Ray, one session serves every phase."""

    def __init__(
        self, store: Store, backend: str, workers: int, address: str | None, progress: bool
    ) -> None:
        self.store, self.backend, self.workers = store, backend, workers
        self.address, self.progress = address, progress

    @contextmanager
    def session(self) -> Iterator[None]:
        ray = self.backend == "ray"
        with ray_session(self.address, self.workers) if ray else local_pool(self.workers):
            yield

    def run(self, tasks: list[Task], desc: str) -> dict[str, Result]:
        """Every task's result by task id: the saved ones read back, the others run."""
        done: dict[str, Result] = {}
        for task in tasks:
            saved = self.store.load(task)
            if saved is not None:
                done[task.id] = saved
        todo = [t for t in tasks if t.id not in done]
        bar = Progress(
            len(tasks),
            initial=len(tasks) - len(todo),
            enabled=self.progress,
            desc=desc,
            unit="configuration",
        )

        def finished(task: Task, result: Result) -> None:
            done[task.id] = result
            self.store.save(task, result)
            bar.tick()

        size = min(self.workers, max(len(todo), 1))
        try:
            if self.backend == "ray":
                run_ray(todo, run_task, size, self.address, finished)
            else:
                run_local(todo, run_task, size, finished)
        finally:
            bar.close()
        return done
