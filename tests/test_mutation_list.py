"""The mutation check's list (`benchmarks/mutations.py`) still fits the code it mutates.

The check itself takes minutes and is run by hand; what can rot without anyone running it is
the list: a refactor that moves the text a mutation replaces would make the script refuse to
start, and a test file that disappears would quietly shrink what it runs. Both fail here, and
applying every mutation to a copy of its file must change that file and keep it valid Python.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load() -> ModuleType:
    name = "batchsim_benchmark_mutations"
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks/mutations.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


mutations = _load()


def test_the_list_covers_each_area_of_the_core() -> None:
    names = [m.name for m in mutations.MUTATIONS]
    assert len(names) == len(set(names))
    for area in ("budget", "lru", "victim", "acceptance", "sketch", "runs"):
        assert sum(name.startswith(area) for name in names) >= 2, area


@pytest.mark.parametrize("mutation", mutations.MUTATIONS, ids=lambda m: m.name)
def test_each_mutation_applies_once_and_its_tests_exist(mutation: object) -> None:
    m = mutation
    assert mutations.occurrences(m) == 1, f"{m.file} no longer holds {m.old!r} exactly once"
    source = (ROOT / m.file).read_text(encoding="utf-8")
    mutated = source.replace(m.old, m.new, 1)
    assert mutated != source
    ast.parse(mutated)  # a mutant that does not even parse would be killed for nothing
    assert m.tests and all((ROOT / t).is_file() for t in m.tests), m.tests
