"""setuptools, plus mypy (for mypyc) in the build environment when BATCHSIM_COMPILE=1 asks for
the compiled core (`sim/compiled.py`); a plain install needs nothing more than setuptools.

An editable install is never compiled: Python would load the extensions instead of the edited
sources, so edits would silently not run."""

from __future__ import annotations

import os
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the backend's other hooks, unchanged)

ENV = "BATCHSIM_COMPILE"
COMPILER = ["mypy==2.4.1"]  # the mypyc the compiled core is tested with


def _compiling() -> bool:
    return os.environ.get(ENV) == "1"


# setuptools' own hooks would run setup.py, which imports mypyc before it is installed; the
# project declares no setup_requires, so they have nothing else to add


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    return list(COMPILER) if _compiling() else []


def get_requires_for_build_editable(config_settings: dict[str, Any] | None = None) -> list[str]:
    return []


def build_editable(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    if _compiling():
        raise SystemExit(
            f"{ENV}=1 builds the compiled core for a plain install (pip install .), not an "
            "editable one: Python would load the compiled modules, not your edits"
        )
    return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
