"""The test suite's own rules: test files share code only through helper modules, and every
scenario a test runs is built by `scenario_factory` (one place that knows a scenario's shape, so
a schema change is made once)."""

from __future__ import annotations

import ast
from pathlib import Path

HERE = Path(__file__).resolve().parent
FACTORY = HERE / "scenario_factory.py"
# a mapping holding all of these keys is a whole scenario
SCENARIO_KEYS = {"model", "hardware", "policy"}


def sources() -> list[Path]:
    return sorted(p for p in HERE.rglob("*.py") if "__pycache__" not in p.parts)


def imported_modules(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_no_test_file_imports_another() -> None:
    test_modules = {p.stem for p in sources() if p.name.startswith("test_")}
    assert len(test_modules) > 50  # the walk found the suite
    offenders = {}
    for p in sources():
        shared = imported_modules(ast.parse(p.read_text())) & test_modules
        if shared:
            offenders[str(p.relative_to(HERE))] = sorted(shared)
    assert offenders == {}


def literal_keys(node: ast.Dict) -> set[str]:
    return {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}


def test_scenarios_are_built_by_the_factory_only() -> None:
    typed = [
        f"{p.relative_to(HERE)}:{node.lineno}"
        for p in sources()
        if p != FACTORY
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.Dict) and literal_keys(node) >= SCENARIO_KEYS
    ]
    assert typed == []


def test_the_layout_checks_can_fail() -> None:
    """The two walks above see what they look for (a check that matches nothing passes)."""
    tree = ast.parse('import test_cli\nraw = {"model": "m", "hardware": "h", "policy": {}}\n')
    assert "test_cli" in imported_modules(tree)
    dicts = [n for n in ast.walk(tree) if isinstance(n, ast.Dict)]
    assert any(literal_keys(d) >= SCENARIO_KEYS for d in dicts)
    assert (
        literal_keys(
            next(
                n
                for n in ast.walk(ast.parse(FACTORY.read_text()))
                if isinstance(n, ast.Dict) and "policy" in literal_keys(n)
            )
        )
        >= SCENARIO_KEYS
    )
