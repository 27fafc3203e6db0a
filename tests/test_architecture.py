"""The architecture's rules, checked on the code itself.

* Layers and forbidden imports (the contracts in pyproject.toml, run with import-linter): a
  package imports only from its own layer or below; `sim` never imports `calibration` or torch;
  policies see only the contract in `sim.core.plan`, never the engine or its state.
* No import cycles between `sim` modules.
* Small parts: no class in `sim` has more than 25 attributes (its own and those of its bases in
  `sim`), so that state is split among parts that each own theirs; no module in `sim` has more
  than 500 lines, data tables aside (`DATA_TABLES`: catalogs of figures, not logic).
* One owner for request state: outside `sim.core`, no code assigns a request's fields, and its
  lifecycle transitions are called only by the engine and the topology (which refuses requests
  no instance could serve and moves them between instances over the KV link).
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
from importlinter import cli

from sim.core.request import Request

ROOT = Path(__file__).resolve().parents[1]
TRANSITIONS = {
    "arrive",
    "reject",
    "admit",
    "compute",
    "finish",
    "preempt_recompute",
    "swap_out",
    "swap_in",
    "hand_off",
    "start_transfer",
    "land",
    "seat",
    "set_kv_blocks",
    "drop_kv",
    "verify",
}


def test_import_contracts_hold() -> None:
    assert cli.lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0


def test_no_import_cycles() -> None:
    graph = grimp.build_graph("sim")
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for nxt in sorted(edges.get(module, ())):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt] if nxt in path else [module, nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[module] = 2

    for module in sorted(graph.modules):
        if module not in state:
            visit(module, [module])
    assert not cycles, cycles


def test_no_module_imports_the_package_root() -> None:
    # `sim/__init__.py` re-exports the top layer: a module below that imports it runs upward
    graph = grimp.build_graph("sim")
    upward = sorted(m for m in graph.modules if "sim" in graph.find_modules_directly_imported_by(m))
    assert not upward, upward


def _python_files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _request_slots() -> list[str]:
    """`Request.__slots__` as written (a compiled build's class has no `__slots__` attribute)."""
    tree = ast.parse((ROOT / "sim/core/request.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == Request.__name__:
            for item in node.body:
                if isinstance(item, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__slots__" for t in item.targets
                ):
                    return list(ast.literal_eval(item.value))
    raise AssertionError("Request declares no __slots__")


def test_request_fields_are_assigned_in_the_core_only() -> None:
    slots = _request_slots()
    fields = set(slots) | {s.lstrip("_") for s in slots}
    assert {"state", "arrival_s", "_kv_blocks"} <= fields
    offenders = []
    for path in _python_files("sim"):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ("sim/core/request.py", "sim/core/decode_batch.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr in fields
                    and not (isinstance(target.value, ast.Name) and target.value.id == "self")
                ):
                    offenders.append(f"{rel}:{node.lineno}: .{target.attr} =")
    assert not offenders, offenders


def test_lifecycle_transitions_are_called_by_the_engine_and_the_topology_only() -> None:
    offenders = []
    for path in _python_files("sim"):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(("sim/core/", "sim/topology/")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in TRANSITIONS
            ):
                offenders.append(f"{rel}:{node.lineno}: .{node.func.attr}(...)")
    assert not offenders, offenders


MAX_ATTRIBUTES = 25


def _is_dataclass(node: ast.ClassDef) -> bool:
    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "dataclass":
            return True
    return False


def _own_attributes(node: ast.ClassDef) -> set[str]:
    """Slots, dataclass and named-tuple fields, and `self.x` assigned in its methods."""
    names: set[str] = set()
    fields = _is_dataclass(node) or any(
        getattr(base, "id", "") in ("NamedTuple", "TypedDict") for base in node.bases
    )
    for item in node.body:
        if isinstance(item, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in item.targets
        ):
            names.update(ast.literal_eval(item.value))
        elif (
            fields
            and isinstance(item, ast.AnnAssign)
            and isinstance(item.target, ast.Name)
            and "ClassVar" not in ast.unparse(item.annotation)
        ):
            names.add(item.target.id)
    for method in node.body:
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for stmt in ast.walk(method):
            targets: list[ast.expr] = []
            if isinstance(stmt, ast.Assign):
                targets = list(stmt.targets)
            elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
                targets = [stmt.target]
            while targets:
                target = targets.pop()
                if isinstance(target, (ast.Tuple, ast.List)):
                    targets.extend(target.elts)
                elif isinstance(target, ast.Starred):
                    targets.append(target.value)
                elif (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                ):
                    names.add(target.attr)
    return names


def class_attributes() -> dict[str, set[str]]:
    """Every class in `sim` ("path:Name") with its attributes and those of its bases in `sim`
    (found by name)."""
    classes: dict[str, tuple[str, ast.ClassDef]] = {}
    for path in _python_files("sim"):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                classes[f"{rel}:{node.name}"] = (rel, node)
    by_name: dict[str, list[ast.ClassDef]] = {}
    for _, node in classes.values():
        by_name.setdefault(node.name, []).append(node)

    def collect(node: ast.ClassDef, seen: set[int]) -> set[str]:
        names = _own_attributes(node)
        for base in node.bases:
            base_name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
            for parent in by_name.get(base_name, []):
                if id(parent) not in seen:
                    names |= collect(parent, seen | {id(parent)})
        return names

    return {key: collect(node, {id(node)}) for key, (_, node) in classes.items()}


def test_the_attribute_count_sees_slots_fields_and_assignments() -> None:
    attributes = class_attributes()
    assert {"state", "_batch", "arrival_s"} <= attributes["sim/core/request.py:Request"]
    assert "kv_blocks_used" in attributes["sim/core/load.py:Load"]  # a dataclass field
    assert {"engine", "_run"} <= attributes["sim/core/instance.py:Instance"]


MAX_MODULE_LINES = 500
DATA_TABLES: frozenset[str] = frozenset()  # modules of figures alone, exempt from the limit


def test_no_module_has_more_than_500_lines() -> None:
    over = {
        str(path.relative_to(ROOT)): n
        for path in sorted((ROOT / "sim").rglob("*.py"))
        if str(path.relative_to(ROOT)) not in DATA_TABLES
        and (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not over, over


def test_no_class_has_more_than_25_attributes() -> None:
    over = {
        key: len(names) for key, names in class_attributes().items() if len(names) > MAX_ATTRIBUTES
    }
    assert not over, over
