"""`--set KEY.PATH=VALUE` overrides and the merge of variants over the base scenario.

An override edits the raw mapping before validation, so it reaches any field, variants included;
its value is read as YAML (strictly: see `sim.inputs.strict_yaml`). A number in the path indexes
a list (`cluster.instances.0.count=4`). `variants.NAME.key=...` must name a variant the scenario
has, since a typo would otherwise add a variant silently; `variants.NAME={...}` adds one on
purpose.

Merge rule: mappings merge key by key, except that a mapping naming a different `name` than the
one it overrides (a different policy, model or GPU) replaces it whole, so that a variant
`policy: {name: static}` does not inherit the continuous policy's limits.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from sim.errors import ScenarioError
from sim.inputs.strict_yaml import load_yaml


def parse_set(assignment: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (["a", "b", "c"], value parsed as a YAML scalar)."""
    if "=" not in assignment:
        raise ScenarioError(f"--set {assignment!r}: expected KEY.PATH=VALUE")
    key, _, text = assignment.partition("=")
    path = key.strip().split(".")
    if not all(path):
        raise ScenarioError(f"--set {assignment!r}: empty key in {key!r}")
    try:
        value = load_yaml(text, "value") if text.strip() else ""
    except ScenarioError as exc:
        where = (exc.file or "").removeprefix("value").lstrip(":")
        at = f" (line:column {where})" if where else ""
        reason = f"the value is not valid YAML{at}: {exc.reason}"
        raise ScenarioError(f"--set {assignment!r}: {reason}") from None
    return path, value


def set_path(raw: dict[str, Any], path: list[str], value: Any) -> None:
    """Set `raw[path[0]][path[1]]... = value`, creating mappings on the way; a number indexes a
    list (`cluster.instances.0.count`)."""
    node: Any = raw
    for i, key in enumerate(path[:-1]):
        where = ".".join(path[: i + 1])
        if isinstance(node, list):
            node = node[_index(node, key, path, where)]
            continue
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if isinstance(child, str) and key in ("model", "hardware", "profile"):
            child = node[key] = {"name": child} if key != "profile" else {"path": child}
        if not isinstance(child, (dict, list)):
            raise ScenarioError(f"cannot set {'.'.join(path)}: {where} is not a mapping")
        node = child
    if isinstance(node, list):
        node[_index(node, path[-1], path, ".".join(path))] = value
    else:
        node[path[-1]] = value


def _index(items: list[Any], key: str, path: list[str], where: str) -> int:
    if not key.isdigit() or int(key) >= len(items):
        raise ScenarioError(
            f"cannot set {'.'.join(path)}: {where} must be an index below {len(items)}"
        )
    return int(key)


def check_variant_overrides(raw: Mapping[str, Any], overrides: list[str] | tuple[str, ...]) -> None:
    """`--set variants.NAME.key=...` may only edit a variant the scenario has: a typo in NAME
    would otherwise create a new variant silently. (`--set variants.NAME={...}` adds one.)"""
    variants = raw.get("variants")
    names = [str(n) for n in variants] if isinstance(variants, dict) else []
    for assignment in overrides:
        path, _ = parse_set(assignment)
        if len(path) > 2 and path[0] == "variants" and path[1] not in names:
            known = ", ".join(names) if names else "none"
            raise ScenarioError(
                f"--set {assignment}: no variant {path[1]!r} in this scenario (variants: "
                f"{known}); to add one, set variants.{path[1]}={{...}}"
            )


def merge(base: Any, override: Any) -> Any:
    """Deep-merge `override` into a copy of `base` (see the module docstring for the rule)."""
    if not isinstance(base, dict) or not isinstance(override, dict):
        return copy.deepcopy(override)
    if "name" in override and "name" in base and override["name"] != base["name"]:
        return copy.deepcopy(override)
    out = copy.deepcopy(base)
    for key, value in override.items():
        out[key] = merge(out[key], value) if key in out else copy.deepcopy(value)
    return out


def apply_overrides(raw: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> None:
    """Apply `--set` assignments to `raw` in place, in order."""
    check_variant_overrides(raw, overrides)
    for assignment in overrides:
        try:
            set_path(raw, *parse_set(assignment))
        except ScenarioError as exc:
            if exc.reason.startswith("--set"):
                raise
            raise ScenarioError(f"--set {assignment}: {exc.reason}") from None
