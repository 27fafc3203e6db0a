"""The compiled core (`sim.compiled`): which build runs, and the build's own rules."""

from __future__ import annotations

import os
import runpy
from pathlib import Path

import pytest

from sim.compiled import MODULES, build

ROOT = Path(__file__).resolve().parent.parent


def test_the_build_under_test_is_the_one_expected() -> None:
    # CI runs the suite on a plain install and again on a compiled one, and says which it meant:
    # a compiled stage that silently imported the sources would test nothing compiled
    expected = os.environ.get("BATCHSIM_EXPECT_BUILD")
    if expected is None:
        pytest.skip("BATCHSIM_EXPECT_BUILD not set")
    assert build() == expected


def test_every_compiled_module_exists_and_leaves_out_foreign_bases() -> None:
    assert len(set(MODULES)) == len(MODULES)
    for path in MODULES:
        source = (ROOT / path).read_text()
        assert (ROOT / path).is_file(), path
        # mypyc mis-compiles a class whose base comes from outside the build (sim.core.urgent)
        assert "(Event)" not in source and "(deque" not in source, path


def test_an_editable_install_refuses_to_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = runpy.run_path(str(ROOT / "_build" / "backend.py"))
    monkeypatch.setenv("BATCHSIM_COMPILE", "1")
    for hook in (backend["get_requires_for_build_editable"], backend["build_editable"]):
        with pytest.raises(SystemExit, match="not an editable one"):
            hook("/nonexistent") if hook is backend["build_editable"] else hook()
    assert backend["get_requires_for_build_wheel"]() == backend["COMPILER"]
    monkeypatch.delenv("BATCHSIM_COMPILE")
    assert backend["get_requires_for_build_wheel"]() == []
