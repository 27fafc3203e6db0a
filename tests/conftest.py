"""The tests mirror the package layout (tests/core for sim/core, tests/policies for sim/policies,
...); the shared helpers (`factories`, `helpers_sim`, `standin`, the fuzz corpus) and the checks
of the whole project stay at the top. Every test folder is importable by module name, so a test
can use another's fixtures wherever it lives (module names are unique across the folders)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FOLDERS = sorted(p for p in HERE.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
for folder in [HERE, *FOLDERS]:
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
