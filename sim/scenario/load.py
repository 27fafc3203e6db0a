"""Scenarios: one what-if described in YAML, validated strictly at load.

A scenario names a workload, a model, a GPU, a step-cost profile, a policy with its limits and
the SLO targets. `variants` are named override sets applied to the same base; every variant runs
on the very same requests (the workload is generated once per distinct workload and seed).
`--set a.b=c` edits the raw YAML before validation, so it reaches any field, variants included.

Override rule: mappings merge key by key, except that a mapping naming a different `name` than
the one it overrides (a different policy, model or GPU) replaces it whole, so that a variant
`policy: {name: static}` does not inherit the continuous policy's limits.

Every problem is a `ScenarioError` naming the file, the key path and the reason.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    ValidationError,
)

from sim.costs.catalog import HardwareSpec, check_fits
from sim.costs.profile import Profile, resolve_profile
from sim.errors import ScenarioError
from sim.scenario.schema import (
    ChunkedPolicySpec,
    ContinuousPolicySpec,
    LinkSpec,
    Role,
    Scenario,
    StaticPolicySpec,
    check_tiers,
)

# the schema's names that callers reach through this module
__all__ = [
    "ChunkedPolicySpec",
    "ContinuousPolicySpec",
    "LinkSpec",
    "ResolvedGroup",
    "ResolvedScenario",
    "Scenario",
    "ScenarioSet",
    "StaticPolicySpec",
    "check_tiers",
    "load_scenario",
    "load_scenario_dict",
    "merge",
    "parse_set",
    "set_path",
]


@dataclass(frozen=True)
class ResolvedGroup:
    """One instance group with its own hardware, policy and profile resolved."""

    role: Role
    name: str
    count: int
    hardware: HardwareSpec
    policy: StaticPolicySpec | ContinuousPolicySpec | ChunkedPolicySpec
    profile: Profile


@dataclass(frozen=True)
class ResolvedScenario:
    """A validated variant with everything it refers to loaded."""

    variant: str
    spec: Scenario
    profile: Profile
    base_dir: Path
    raw: dict[str, Any]  # the merged YAML mapping this variant was validated from
    groups: tuple[ResolvedGroup, ...] = ()

    @property
    def num_instances(self) -> int:
        return sum(g.count for g in self.groups)


@dataclass(frozen=True)
class ScenarioSet:
    name: str
    variants: list[ResolvedScenario]
    file: str

    def dump(self) -> str:
        """The resolved scenario as YAML: every variant with all defaults filled in."""
        doc = {
            v.variant: {
                **v.spec.model_dump(mode="json"),
                "profile": v.profile.model_dump(mode="json"),
            }
            for v in self.variants
        }
        return yaml.safe_dump(
            {"scenario": self.name, "source": self.file, "variants": doc}, sort_keys=False
        )


def parse_set(assignment: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (["a", "b", "c"], value parsed as a YAML scalar)."""
    if "=" not in assignment:
        raise ScenarioError(f"--set {assignment!r}: expected KEY.PATH=VALUE")
    key, _, text = assignment.partition("=")
    path = key.strip().split(".")
    if not all(path):
        raise ScenarioError(f"--set {assignment!r}: empty key in {key!r}")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError as exc:
        raise ScenarioError(f"--set {assignment!r}: value is not valid YAML ({exc})") from None
    return path, value


def set_path(raw: dict[str, Any], path: list[str], value: Any) -> None:
    node = raw
    for i, key in enumerate(path[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if isinstance(child, str) and key in ("model", "hardware", "profile"):
            child = node[key] = {"name": child} if key != "profile" else {"path": child}
        if not isinstance(child, dict):
            where = ".".join(path[: i + 1])
            raise ScenarioError(f"cannot set {'.'.join(path)}: {where} is not a mapping")
        node = child
    node[path[-1]] = value


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


def _format_loc(loc: tuple[Any, ...]) -> str:
    # pydantic puts the union member's tag in the location (policy.continuous.max_num_seqs)
    parts = [str(p) for p in loc if not (isinstance(p, str) and p in _TAGS)]
    return ".".join(parts)


_TAGS = {
    "static",
    "continuous",
    "chunked",
    "poisson",
    "gamma",
    "constant",
    "fixed",
    "uniform",
    "lognormal",
    "empirical",
    "str",
    "dict[str,any]",
    "function-after[_check_heads(), ModelSpec]",
}


def _where(path: str, variant: str | None, override: dict[str, Any]) -> tuple[str, str]:
    """Key path and a note naming the variant: blame the override when it set that key."""
    if variant is None:
        return path, ""
    node: Any = override
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return path, f" (in variant {variant!r})"
        node = node[key]
    return f"variants.{variant}.{path}", ""


def _validate(
    raw: dict[str, Any], file: str, variant: str | None, override: dict[str, Any]
) -> Scenario:
    try:
        return Scenario.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        more = f" (and {len(exc.errors()) - 1} more problems)" if len(exc.errors()) > 1 else ""
        path, note = _where(_format_loc(err["loc"]), variant, override)
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif err["type"] == "missing":
            msg = "required key is missing"
        if isinstance(err.get("input"), (int, float, str)) and err["type"] != "missing":
            msg += f" (got {err['input']!r})"
        raise ScenarioError(msg + note + more, file=file, path=path or None) from None


def load_scenario(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> ScenarioSet:
    """Read, override, merge variants, validate and resolve a scenario file."""
    file = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario: {exc.strerror}", file=file) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"not valid YAML: {exc}", file=file) from None
    if not isinstance(raw, dict):
        raise ScenarioError("a scenario must be a YAML mapping", file=file)
    return load_scenario_dict(
        raw, file=file, base_dir=Path(path).resolve().parent, overrides=overrides
    )


def load_scenario_dict(
    raw: dict[str, Any],
    *,
    file: str = "<scenario>",
    base_dir: Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> ScenarioSet:
    raw = copy.deepcopy(raw)
    for assignment in overrides:
        set_path(raw, *parse_set(assignment))
    base_dir = base_dir or Path.cwd()
    variants_raw = raw.pop("variants", None) or {}
    if not isinstance(variants_raw, dict):
        raise ScenarioError(
            "must map variant names to override mappings", file=file, path="variants"
        )
    resolved = []
    if not variants_raw:
        resolved.append(_resolve("default", None, raw, {}, file, base_dir))
    for name, override in variants_raw.items():
        if override is not None and not isinstance(override, dict):
            raise ScenarioError(
                "a variant must be a mapping of overrides", file=file, path=f"variants.{name}"
            )
        merged = merge(raw, override or {})
        if "variants" in merged:
            raise ScenarioError("variants cannot nest", file=file, path=f"variants.{name}")
        resolved.append(_resolve(str(name), str(name), merged, override or {}, file, base_dir))
    return ScenarioSet(name=resolved[0].spec.name, variants=resolved, file=file)


def _resolve(
    name: str,
    variant: str | None,
    raw: dict[str, Any],
    override: dict[str, Any],
    file: str,
    base_dir: Path,
) -> ResolvedScenario:
    spec = _validate(raw, file, variant, override)
    try:
        check_fits(spec.model, spec.hardware)
    except ValueError as exc:
        path, note = _where("model", variant, override)
        raise ScenarioError(str(exc) + note, file=file, path=path) from None
    path, note = _where("profile", variant, override)
    if isinstance(spec.profile, str) and spec.profile != "roofline":
        target = Path(spec.profile) if Path(spec.profile).is_absolute() else base_dir / spec.profile
        if not target.is_file():
            raise ScenarioError(f"profile file not found: {target}{note}", file=file, path=path)
    try:
        profile = resolve_profile(spec.profile, spec.model, spec.hardware, base_dir, key=path)
    except ScenarioError as exc:
        if exc.file is None:
            raise ScenarioError(exc.reason + note, file=file, path=exc.path or path) from None
        raise
    groups = []
    for i, (role, group_name, g) in enumerate(spec.groups()):
        key = f"cluster.instances.{i}" if role == "serve" else f"disaggregation.{role}"
        hw = g.hardware or spec.hardware
        if g.hardware is not None:
            try:
                check_fits(spec.model, hw)
            except ValueError as exc:
                where, note = _where(f"{key}.hardware", variant, override)
                raise ScenarioError(str(exc) + note, file=file, path=where) from None
        group_profile = profile
        if g.profile is not None or (g.hardware is not None and spec.profile == "roofline"):
            where, note = _where(f"{key}.profile", variant, override)
            raw_profile = g.profile if g.profile is not None else spec.profile
            try:
                group_profile = resolve_profile(raw_profile, spec.model, hw, base_dir, key=where)
            except ScenarioError as exc:
                if exc.file is None:
                    raise ScenarioError(exc.reason + note, file=file, path=exc.path) from None
                raise
        groups.append(
            ResolvedGroup(role, group_name, g.count, hw, g.policy or spec.policy, group_profile)
        )
    return ResolvedScenario(
        variant=name, spec=spec, profile=profile, base_dir=base_dir, raw=raw, groups=tuple(groups)
    )
