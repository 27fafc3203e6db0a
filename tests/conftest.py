"""The tests mirror the package layout (tests/core for sim/core, tests/policies for sim/policies,
...); the shared helpers (`factories`, `helpers_sim`, `standin`, the fuzz corpus) and the checks
of the whole project stay at the top. Every test folder is importable by module name, so a test
can use another's fixtures wherever it lives (module names are unique across the folders)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import settings

HERE = Path(__file__).resolve().parent
FOLDERS = sorted(p for p in HERE.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
for folder in [HERE, *FOLDERS]:
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

# Property tests (hypothesis) draw the same examples on every run: a run's verdict depends on
# the code alone, never on which random examples a busy or idle machine got to (`derandomize`;
# no example database, no deadline: a loaded machine slows examples, it does not fail them).
# Each test's budget is its own `max_examples`. To search new examples while developing:
# BATCHSIM_HYPOTHESIS=explore python -m pytest tests/core/test_properties.py
settings.register_profile("derandomized", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("explore", derandomize=False, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("BATCHSIM_HYPOTHESIS", "derandomized"))
