"""User-facing errors.

A `ScenarioError` is bad input: it carries the file, the key path inside it and the reason, and
the CLI prints it as one line and exits with code 2 (no traceback). Anything else that escapes is a
bug in batchsim and keeps its traceback.
"""

from __future__ import annotations


class ScenarioError(Exception):
    """Invalid user input: `file`, dotted key `path` (or a line number) and the `reason`."""

    def __init__(self, reason: str, *, file: str | None = None, path: str | None = None) -> None:
        self.reason = reason
        self.file = file
        self.path = path
        super().__init__(self.message())

    def message(self) -> str:
        where = ": ".join(part for part in (self.file, self.path) if part)
        return f"{where}: {self.reason}" if where else self.reason

    def with_file(self, file: str) -> ScenarioError:
        """The same error, attributed to `file` when it names none yet."""
        if self.file is not None:
            return self
        return ScenarioError(self.reason, file=file, path=self.path)
