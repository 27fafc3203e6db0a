"""setuptools, plus mypy (for mypyc) in the build environment when BATCHSIM_COMPILE=1 asks for
the compiled core (`sim/compiled.py`); a plain install needs nothing more than setuptools.

An editable install is never compiled: Python would load the extensions instead of the edited
sources, so edits would silently not run."""

from __future__ import annotations

import os
import runpy
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the backend's other hooks, unchanged)

# the variable's name, from the module that lists the compiled modules (standard library only)
ENV = runpy.run_path(os.path.join(os.path.dirname(__file__), "..", "sim", "compiled.py"))["ENV"]
COMPILER = ["mypy==2.4.1"]  # the mypyc the compiled core is tested with


def _compiling() -> bool:
    return os.environ.get(ENV) == "1"


# setuptools' own hooks would run setup.py, which imports mypyc before it is installed; the
# project declares no setup_requires, so they have nothing else to add


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    return list(COMPILER) if _compiling() else []


def _refuse_editable() -> None:
    if _compiling():
        raise SystemExit(
            f"{ENV}=1 builds the compiled core for a plain install (pip install .), not an "
            "editable one: Python would load the compiled modules, not your edits"
        )


def get_requires_for_build_editable(config_settings: dict[str, Any] | None = None) -> list[str]:
    _refuse_editable()  # the first hook pip calls for an editable install
    return []


def build_editable(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    _refuse_editable()
    return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
