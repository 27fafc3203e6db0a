"""The stored runs behind the quoted figures: each shipped-scenario variant a quote reads, run
once with this code and kept in `tests/quoted_runs.json` under a key of everything that can
change its numbers, so that the check of the figures reads a run instead of repeating it.

What can change a run's numbers, and is in its key:
- the repository files the runs used: every module of the package they imported and every data
  file they opened (scenarios, profiles, the package's tables), listed in the store by path and
  hashed by content; a change anywhere else (the CLI, the server, the searches) keeps the key;
- the files outside the repository a run opened (a public trace), by content;
- the Python version and the versions of the libraries that compute a run.

A stored run is used only when its key is the key of the files here; otherwise the run is
repeated (the check never reads a stale number, it only takes longer), and
`python tests/quoted_figures.py` stores it again. Which core computed a stored run does not
matter: both cores give identical answers (tests/test_compiled.py, `batchsim regress`), and
tests/test_quoted_figures.py repeats some stored runs on whichever core runs it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "tests" / "quoted_runs.json"
LIBRARIES = ("numpy", "simpy", "pandas", "pydantic", "pyyaml")

Summary = dict[str, float]


def _ours(path: Path, root: Path = ROOT) -> str | None:
    """`path` relative to the repository when a run can depend on it (not the tests, hidden
    folders such as virtual environments, or bytecode caches), else None."""
    if not path.is_relative_to(root):
        return None
    parts = path.relative_to(root).parts
    hidden = any(p.startswith(".") or p == "__pycache__" for p in parts)
    if not parts or parts[0] == "tests" or hidden:
        return None
    return "/".join(parts)


# --- the files this process opened ----------------------------------------------------------

_opened: set[str] = set()  # repository files opened inside a `recording()` since `track()`
_tracked_since: list[float] = []  # when `track()` was called
_recording: list[set[str]] = []  # per open `recording()` block: files outside the repository


def _external(path: Path) -> bool:
    """A file outside the repository, Python's libraries and the kernel's folders."""
    if path.is_relative_to(ROOT) or str(path).startswith(("/proc/", "/sys/", "/dev/")):
        return False
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path}
    return not any(p and path.is_relative_to(p) for p in prefixes) and path.is_file()


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" or not isinstance(args[0], (str, os.PathLike)):
        return
    if not _recording:  # only what a run opens: not the documents a check reads
        return
    path = Path(os.path.abspath(os.fsdecode(args[0])))
    ours = _ours(path)
    if ours is not None:
        _opened.add(ours)
    elif _external(path):
        for reads in _recording:
            reads.add(os.path.relpath(path, ROOT))


@functools.cache
def track() -> None:
    """Record from now on the files this process opens (a process that stores runs calls it
    before its first run; a check that only reads the store does not need it)."""
    _tracked_since.append(time.time())
    sys.addaudithook(_audit)


@contextlib.contextmanager
def recording() -> Iterator[set[str]]:
    """The files opened outside the repository (and outside Python's libraries) inside the
    block, relative to the repository."""
    reads: set[str] = set()
    _recording.append(reads)
    try:
        yield reads
    finally:
        _recording.remove(reads)


def used_files(root: Path = ROOT) -> set[str]:
    """The repository files this process's runs used: the modules it imported and the files
    opened inside `recording()` blocks."""
    files = set(_opened)
    for module in list(sys.modules.values()):
        name = getattr(module, "__file__", None)
        if name:
            ours = _ours(Path(name).resolve(), root)
            if ours is not None:
                files.add(ours)
    return {f for f in files if (root / f).is_file()}


# --- keys -----------------------------------------------------------------------------------


@functools.cache
def code_key(files: tuple[str, ...], root: Path = ROOT) -> str | None:
    """A digest of the versions of Python and the libraries and of `files` (path and content);
    None when one of the files is gone."""
    digest = hashlib.sha256(f"python {sys.version_info[0]}.{sys.version_info[1]}".encode())
    for library in LIBRARIES:
        digest.update(f"\n{library} {metadata.version(library)}".encode())
    for name in files:
        path = root / name
        if not path.is_file():
            return None
        digest.update(f"\n{name}\n".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def run_key(files: tuple[str, ...], reads: list[str], root: Path = ROOT) -> str | None:
    """The key of a run that used the repository's `files` and read `reads` outside it (paths
    relative to `root`); None when one of them is gone."""
    code = code_key(files, root)
    if code is None:
        return None
    digest = hashlib.sha256(code.encode())
    for name in reads:
        path = root / name
        if not path.is_file():
            return None
        digest.update(f"\n{name}\n".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


# --- the store ------------------------------------------------------------------------------


class Store:
    """name -> run, read from a JSON file (the repository files the runs used, and each run's
    key, outside reads and summary); `save` writes the runs asked for in this process."""

    def __init__(self, path: Path = STORE, root: Path = ROOT) -> None:
        self.path, self.root = path, root
        stored = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        self.files: tuple[str, ...] = tuple(stored.get("files", ()))
        self.runs: dict[str, dict[str, Any]] = stored.get("runs", {})
        self.used: set[str] = set()
        self.hits = self.misses = 0

    def get(self, name: str, compute: Callable[[], tuple[Summary, set[str]]]) -> Summary:
        """The stored run `name` when its key is the key of the files here, else `compute()`
        (the summary and the files it read outside the repository)."""
        self.used.add(name)
        if self.current(name):
            self.hits += 1
            return dict(self.runs[name]["summary"])
        self.misses += 1
        start = time.perf_counter()
        summary, reads = compute()
        seconds = round(time.perf_counter() - start, 1)
        self.runs[name] = {"key": None, "reads": sorted(reads), "seconds": seconds,
                           "summary": summary}  # fmt: skip
        return summary

    def current(self, name: str) -> bool:
        """Whether the stored run `name` is the run of the files here."""
        run = self.runs.get(name)
        return run is not None and run_key(self.files, run["reads"], self.root) == run["key"]

    def save(self) -> None:
        """(After `track()` and the runs.) Write the runs asked for in this process, keyed by
        the files the stored runs and this process used (a run read from the store used files
        that are unchanged since)."""
        if not self.misses and set(self.runs) == self.used:
            return
        # the files of the stored runs that still exist (a module removed since is in no key)
        kept = {f for f in self.files if (self.root / f).is_file()}
        files = tuple(sorted(kept | used_files(self.root)))
        since = _tracked_since[0] if _tracked_since else float("inf")  # untracked: no runs read
        changed = [f for f in files if (self.root / f).stat().st_mtime >= since]
        if changed:  # the runs may have read the old content: a key of the new would lie
            raise RuntimeError(
                f"{', '.join(changed[:3])} changed while the runs ran: nothing stored, run again"
            )
        runs = {}
        for name in sorted(self.used):
            run = self.runs[name]
            runs[name] = {**run, "key": run_key(files, run["reads"], self.root)}
        text = json.dumps({"files": files, "runs": runs}, indent=1, sort_keys=True) + "\n"
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(self.path)
        self.files, self.runs = files, runs

    def __str__(self) -> str:
        text = f"quoted runs: {self.hits} read from {self.path.name}, {self.misses} run here"
        if self.misses:
            text += " (stored again by: python tests/quoted_figures.py)"
        return text
