"""Reading a user's text file (scenario, profile, trace), with one clear error for each way it
can fail.

The file is read as bytes and decoded here rather than by `open(..., encoding=...)`, so that a
file that is not UTF-8 is reported with the line, column and byte that break it, instead of a
`UnicodeDecodeError` deep inside a parser. A leading byte-order mark is accepted (editors on
Windows write one). Anything that is not a regular file (a folder, a device such as /dev/zero,
a FIFO) is refused before it is opened, since reading a device could block or never end.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sim.errors import ScenarioError

# Scenario and profile files are a few kilobytes; a much larger one is not what the user meant
# (or is hostile), and parsing it would only waste memory.
MAX_YAML_BYTES = 16 * 1024 * 1024
# a trace read whole (CSV, Azure, Mooncake): above this the text alone would take most of a
# workstation's memory before it is parsed; cut a window of it first (`head`, `split`)
MAX_TRACE_BYTES = 2 * 1024**3


def check_regular_file(path: Path, what: str) -> None:
    """Raise a ScenarioError unless `path` names an existing regular file."""
    file = str(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ScenarioError(f"{what} not found", file=file) from None
    except NotADirectoryError:
        raise ScenarioError(f"{what} not found (a parent is not a folder)", file=file) from None
    except PermissionError:
        raise ScenarioError(f"cannot read {what}: permission denied", file=file) from None
    except OSError as exc:
        raise ScenarioError(f"cannot read {what}: {exc.strerror or exc}", file=file) from None
    if stat.S_ISDIR(mode):
        raise ScenarioError(f"is a folder; expected a {what}", file=file)
    if not stat.S_ISREG(mode):
        raise ScenarioError(f"is not a regular file; expected a {what}", file=file)


def read_text(path: str | Path, what: str, *, max_bytes: int | None = MAX_YAML_BYTES) -> str:
    """The UTF-8 text of `path`; `what` names the file in errors ("scenario file")."""
    path = Path(path)
    check_regular_file(path, what)
    file = str(path)
    try:
        size = path.stat().st_size
        if max_bytes is not None and size > max_bytes:
            raise ScenarioError(
                f"{what} is {size / 2**20:.1f} MiB; at most {max_bytes / 2**20:.0f} MiB expected",
                file=file,
            )
        data = path.read_bytes()
    except PermissionError:
        raise ScenarioError(f"cannot read {what}: permission denied", file=file) from None
    except OSError as exc:
        raise ScenarioError(f"cannot read {what}: {exc.strerror or exc}", file=file) from None
    return decode_utf8(data, file)


def decode_utf8(data: bytes, file: str) -> str:
    """Decode UTF-8 (a leading BOM allowed); a bad byte is reported by line, column and offset."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        start = exc.start
        line = data.count(b"\n", 0, start) + 1
        column = start - (data.rfind(b"\n", 0, start) + 1) + 1
        raise ScenarioError(
            f"not UTF-8 text: byte 0x{data[start]:02x} at column {column} (byte offset {start}); "
            "save the file as UTF-8",
            file=file,
            path=f"line {line}",
        ) from None
