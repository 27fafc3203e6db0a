"""Where a run may write, checked before it starts, and what it may ever replace or delete.

A results folder is `<out>/<name>/`. Before anything is simulated, `check_destination` makes
sure that `<out>` is, or can be created as, a writable folder on a real filesystem (not a file,
not a device such as /dev/null, not a pseudo-filesystem such as /proc or /sys), that `<name>` is
a plain folder name (never `.`, `..` or a path), and that an existing `<out>/<name>` is a
folder batchsim wrote itself. A mistake therefore costs seconds, not a whole simulation, and no
input can point the atomic swap at a folder that holds anything else.

Ownership is marked: every folder batchsim builds gets a `MARKER` file (`.batchsim`) the moment
it is created, and only a marked folder is ever replaced or deleted. Results written before
markers existed are recognised by their content (nothing but the files a run writes, among them
`summary.json`). Temporary folders are named `.<name>.batchsim-tmp-<pid>` (being built) and
`.<name>.batchsim-old-<pid>` (the previous results, during the swap) and are marked too; a run
killed outright (SIGKILL, power loss) leaves them behind, and the next run in the same `<out>`
removes those whose process is gone, or puts previous results back when the swap was cut
between its two renames. A folder that merely looks similar but lacks the marker is left alone.

A sweep or search folder (`--out` of `sweep`, `search`) is adopted only when its marker names
that kind; a sweep folder written before markers existed only when it holds exactly what a sweep
writes (`points/` of `<id>.json` files, `sweep.csv`, `sweep.parquet`). Commands that write single
files into a folder (`profile import`, `profile table`, `fit`) check the folder the same way and
replace a file only when batchsim wrote it (`check_file_destination`). The filesystem root is
never an output folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

from sim.errors import ScenarioError

MARKER = ".batchsim"
TMP_TAG, OLD_TAG = "batchsim-tmp", "batchsim-old"
_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?P<tag>batchsim-tmp|batchsim-old)-(?P<pid>\d+)$")
# filesystems whose "files" are kernel interfaces, not storage
_PSEUDO = "proc sysfs devtmpfs devpts cgroup cgroup2 debugfs tracefs securityfs pstore bpf"
PSEUDO_FS = frozenset(f"{_PSEUDO} configfs fusectl mqueue efivarfs binfmt_misc nsfs".split())
# what a results folder holds (for folders written before the marker existed)
_RESULT_FILES = re.compile(
    r"^(summary\.(json|csv)|scenario\.yaml|report\.html|trace\.json|"
    r"(requests|steps|itl)\.(csv|parquet)|[a-z_]+\.(png|svg))$"
)
# what a sweep writes (for sweep folders written before the marker existed)
_SWEEP_FILES = frozenset({"points", "sweep.csv", "sweep.parquet"})
_POINT_FILE = re.compile(r"^[0-9a-f]{12}\.json$")
MAX_MARKER_BYTES = 4096
MAX_FOLDER_NAME = 255
MAX_SUFFIX = 80
_SAFE = re.compile(r"[^A-Za-z0-9_.+-]+")


def check_folder_name(name: str) -> None:
    """A results folder name: one plain path component, never `.`, `..` or hidden."""
    if not name or name in (".", "..") or name.startswith("."):
        raise ScenarioError(f"{name!r} is not a plain folder name", path="name")
    if "/" in name or "\\" in name or "\0" in name or len(name) > MAX_FOLDER_NAME:
        raise ScenarioError(f"{name!r} is not a plain folder name", path="name")


def results_folder_name(name: str, overrides: Sequence[str]) -> str:
    """The results folder of scenario `name` run with `--set` `overrides`.

    Without overrides, `name`. With them, `name--key=value,...` (each key's last part, or its
    whole path where two would read alike; characters a folder name should not hold become `_`),
    or `name--set-<hash>` when that would be longer than `MAX_SUFFIX`; so a modified run never
    replaces the unmodified scenario's results. `--set name=X` chooses the folder: then `name`
    (already X) is used as it is."""
    pairs = [a.partition("=") for a in overrides]
    keys = [key.strip() for key, _, _ in pairs]
    if not overrides or "name" in keys:
        return name
    last = [k.split(".")[-1] for k in keys]
    labels = [
        short if last.count(short) == 1 else key for short, key in zip(last, keys, strict=True)
    ]
    values = [_SAFE.sub("_", value.replace(" ", "")).strip("_") for _, _, value in pairs]
    suffix = ",".join(f"{label}={value}" for label, value in zip(labels, values, strict=True))
    if len(suffix) > MAX_SUFFIX or not suffix:
        suffix = "set-" + hashlib.sha256("\n".join(overrides).encode()).hexdigest()[:10]
    return f"{name}--{suffix}"


def _mount_type(path: Path) -> str | None:
    """The filesystem type of the mount holding `path` (Linux), or None when unknown."""
    try:
        mounts = Path("/proc/self/mounts").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    best, kind = "", None
    target = str(path)
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


def _existing_ancestor(path: Path) -> Path:
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def check_out_folder(out: Path, flag: str = "--out") -> None:
    """`out` is, or can be created as, a writable folder on a real filesystem."""
    out = Path(os.path.abspath(out))
    where = f"{flag} {out}"
    if out == out.parent:  # a run there would scatter its files at the top of the filesystem
        raise ScenarioError(f"{where}: is the filesystem root; choose a folder inside it")
    base = _existing_ancestor(out)
    try:
        mode = os.stat(base).st_mode
    except OSError as exc:
        raise ScenarioError(f"{where}: cannot use {base}: {exc.strerror}") from None
    if base != out and not stat.S_ISDIR(mode):
        raise ScenarioError(f"{where}: {base} is a file, so no folder can be made inside it")
    if base == out and not stat.S_ISDIR(mode):
        kind = "a file" if stat.S_ISREG(mode) else "a device or special file"
        raise ScenarioError(f"{where}: is {kind}, not a folder")
    fs = _mount_type(base.resolve())
    if fs in PSEUDO_FS:
        raise ScenarioError(f"{where}: is on {fs}, a kernel pseudo-filesystem, not storage")
    if not os.access(base, os.W_OK | os.X_OK):
        raise ScenarioError(f"{where}: {base} is not writable")


def is_ours(folder: Path) -> bool:
    """Whether batchsim wrote `folder` (marked, or only holding the files a run writes)."""
    if (folder / MARKER).is_file():
        return True
    try:
        names = [p.name for p in folder.iterdir()]
    except OSError:
        return False
    return "summary.json" in names and all(_RESULT_FILES.match(n) for n in names)


def check_destination(out: Path, name: str, flag: str = "--out") -> Path:
    """`<out>/<name>`, after checking that a run may write it (see the module docstring)."""
    check_folder_name(name)
    check_out_folder(out, flag)
    dest = Path(out) / name
    if os.path.lexists(dest):
        if dest.is_symlink() or not dest.is_dir():
            raise ScenarioError(f"{dest} exists and is not a folder; batchsim will not replace it")
        if any(dest.iterdir()) and not is_ours(dest):
            raise ScenarioError(
                f"{dest} exists and was not written by batchsim (no {MARKER} marker): move it "
                "away or choose another --out"
            )
    return dest


def marker_kind(folder: Path) -> str | None:
    """The kind a folder's marker names (`results`, `sweep`, `search`), "" for a marker that
    does not say, or None when the folder carries no marker."""
    marker = folder / MARKER
    if marker.is_symlink() or not marker.is_file():
        return None
    try:
        with marker.open("rb") as f:
            data = json.loads(f.read(MAX_MARKER_BYTES))
    except (OSError, ValueError):
        return ""
    kind = data.get("batchsim") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) else ""


def _is_legacy_sweep(out: Path) -> bool:
    """A sweep folder from before markers: nothing but what a sweep writes, points included."""
    try:
        names = {p.name for p in out.iterdir()}
        points = out / "points"
        if not names <= _SWEEP_FILES or points.is_symlink() or not points.is_dir():
            return False
        return all(
            _POINT_FILE.match(p.name) and p.is_file() and not p.is_symlink()
            for p in points.iterdir()
        )
    except OSError:
        return False


def check_sweep_folder(out: Path, kind: str = "sweep") -> None:
    """A sweep (or search) folder (`--out`) is created, or is one batchsim wrote, or is empty: a
    sweep adds its files there and rewrites its own table, so it must not land in someone's
    folder. Only a marker of the same kind (or, for a sweep, a pre-marker sweep's exact files)
    makes a folder one batchsim wrote."""
    check_out_folder(out)
    if not out.is_dir() or not any(out.iterdir()):
        return
    found = marker_kind(out)
    if found is None and not (kind == "sweep" and _is_legacy_sweep(out)):
        raise ScenarioError(
            f"--out {out}: exists and is not a batchsim {kind} folder (no {MARKER} marker); "
            "choose another --out"
        )
    if found and found != kind:
        raise ScenarioError(
            f"--out {out}: is a batchsim {found} folder, not a {kind} folder; choose another --out"
        )


def written_by_batchsim(path: Path, max_bytes: int = 64 << 20) -> bool:
    """Whether the YAML file `path` is one batchsim wrote: its `provenance.generator` names
    batchsim (every profile file batchsim writes says so)."""
    import yaml  # only the commands that write profiles need it

    try:
        if path.stat().st_size > max_bytes:
            return False
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return False
    provenance = data.get("provenance") if isinstance(data, dict) else None
    generator = provenance.get("generator") if isinstance(provenance, dict) else None
    return isinstance(generator, str) and "batchsim" in generator


def check_file_destination(
    path: Path, ours: Callable[[Path], bool] = written_by_batchsim, flag: str = "--out"
) -> None:
    """`path` may be written (atomically, by a rename): it is absent, or a regular file that
    `ours` recognises; never a folder, a link or someone else's file."""
    if not os.path.lexists(path):
        return
    if path.is_symlink() or not path.is_file():
        kind = "a link" if path.is_symlink() else "not a file"
        raise ScenarioError(f"{flag}: {path} exists and is {kind}; batchsim will not replace it")
    if not ours(path):
        raise ScenarioError(
            f"{flag}: {path} exists and was not written by batchsim; move it away or choose "
            "another --out"
        )


def mark_sweep_folder(out: Path, kind: str = "sweep") -> None:
    if not (out / MARKER).is_file():
        mark(out, kind)


def mark(folder: Path, kind: str) -> None:
    """Claim a folder batchsim just created."""
    (folder / MARKER).write_text(json.dumps({"batchsim": kind}) + "\n", encoding="utf-8")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def clean_leftovers(parent: Path) -> list[Path]:
    """Remove (or restore) what killed runs left in `parent`; the paths dealt with."""
    handled: list[Path] = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return handled
    for entry in entries:
        found = _LEFTOVER.match(entry.name)
        if not found or entry.is_symlink() or not (entry / MARKER).is_file():
            continue
        pid = int(found["pid"])
        if pid == os.getpid() or _alive(pid):
            continue
        dest = parent / found["name"]
        if found["tag"] == OLD_TAG and not os.path.lexists(dest):
            entry.rename(dest)  # the swap was cut between its renames: these are the results
        else:
            shutil.rmtree(entry, ignore_errors=True)
        handled.append(entry)
    return handled


def temp_paths(dest: Path) -> tuple[Path, Path]:
    """(folder being built, previous results during the swap) for destination `dest`."""
    pid = os.getpid()
    return (
        dest.parent / f".{dest.name}.{TMP_TAG}-{pid}",
        dest.parent / f".{dest.name}.{OLD_TAG}-{pid}",
    )
