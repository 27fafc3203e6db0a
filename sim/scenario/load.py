"""Scenarios: one what-if described in YAML, validated strictly at load.

A scenario names a workload, a model, a GPU, a step-cost profile, a policy with its limits and
the SLO targets. `variants` are named override sets applied to the same base; every variant runs
on the very same requests (the workload is generated once per distinct workload and seed).
`--set a.b=c` edits the raw YAML before validation, so it reaches any field, variants included
(`sim.scenario.overrides`, which also holds the rule by which variants merge).

Files are read as strict YAML (`sim.inputs`: no duplicate keys, bounded aliases and nesting,
UTF-8 errors located). Every problem is a `ScenarioError` naming the file, the key path and the
reason; schema problems are all listed at once, in plain words (`sim.inputs.messages`). A
scenario also accepts a mapping or an already loaded `ScenarioSet` (`load_any`), so notebooks
never need a temporary file.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sim.costs.catalog import HardwareSpec, ModelSpec, Placement
from sim.costs.figures import (
    InstanceFigures,
    LayoutProblem,
    ModelFigures,
    resolve_instance,
    resolve_model,
)
from sim.costs.memory_tiers import TierGeometry
from sim.costs.profile import BUILTIN_PROFILES, Profile, is_builtin, resolve_profile
from sim.errors import ScenarioError
from sim.inputs.messages import as_error, blamed_on, problems
from sim.inputs.strict_yaml import load_yaml
from sim.inputs.text import check_regular_file, read_text
from sim.scenario.control_plane import AutoscaleSpec
from sim.scenario.engine_limits import engine_limits, engine_memory
from sim.scenario.engine_loop import resolve_engine_loop
from sim.scenario.engine_preset import apply_engine_preset, scope_preset
from sim.scenario.overrides import (
    apply_overrides,
    merge,
    parse_set,
    set_path,
)
from sim.scenario.schema import (
    ChunkedPolicySpec,
    ContinuousPolicySpec,
    InstanceGroupSpec,
    LinkSpec,
    Role,
    Scenario,
    StaticPolicySpec,
    check_tiers,
)
from sim.workload.budget import memory_problem
from sim.workload.forecast import forecast_of
from sim.workload.stream import WorkloadPlan, plan_of

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
    "load_any",
    "load_scenario",
    "load_scenario_dict",
    "merge",
    "parse_set",
    "set_path",
]


@dataclass(frozen=True)
class ResolvedGroup:
    """One instance group with its own hardware, policy and profile resolved, and what its
    instances are in figures (`figures`: KV per token, the pool's blocks, FLOP/s, price) and
    their KV tiers below the GPU (`tiers`), worked out once: building the instances and the
    summary read these, not the catalog."""

    role: Role
    name: str
    count: int
    hardware: HardwareSpec
    policy: StaticPolicySpec | ContinuousPolicySpec | ChunkedPolicySpec
    profile: Profile
    figures: InstanceFigures
    # the tiers of each instance, fastest first (with prefix caching and `kv_tiers` only)
    tiers: tuple[TierGeometry, ...] = ()
    # P/D through the shared store (`disaggregation.link.via: store`): each instance's path
    store: TierGeometry | None = None
    # speculative decoding with a draft model: the draft's step costs on this group's GPU
    draft_profile: Profile | None = None
    # instances added and removed during the run (sim/scenario/control_plane.py)
    autoscale: AutoscaleSpec | None = None


@dataclass(frozen=True)
class ResolvedScenario:
    """A validated variant with everything it refers to loaded."""

    variant: str
    spec: Scenario
    profile: Profile
    base_dir: Path
    raw: dict[str, Any]  # the merged YAML mapping this variant was validated from
    model_figures: ModelFigures  # the model's weight bytes and FLOPs per token
    # whether its spec alone draws the workload, and the tiers of its requests
    workload_plan: WorkloadPlan
    groups: tuple[ResolvedGroup, ...] = ()

    @property
    def num_instances(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def regenerates_workload(self) -> bool:
        """Whether a streamed run of this variant generates its workload as it goes
        (`sim.workload.stream`): a synthetic workload whose requests nothing needs before the
        run (per-request speculative acceptance rates are drawn for all of them up front)."""
        speculative = (g.policy.speculative for g in self.groups)
        whole = any(s is not None and s.per_request for s in speculative)
        return self.workload_plan.streams and not whole


@dataclass(frozen=True)
class ScenarioSet:
    name: str
    variants: list[ResolvedScenario]
    file: str
    # the mapping it was loaded from (overrides applied, variants included) and where its
    # relative paths resolve: what a sweep or a capacity search edits and loads again
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    base_dir: Path | None = None
    # whether running every variant keeping its tables fits in memory, worked out at load
    # (`tables_checked`; a set built by hand is checked when it runs): None, or (key, reason)
    tables_problem: tuple[str, str] | None = None
    tables_checked: bool = False

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


def _where(path: str, variant: str | None, override: dict[str, Any]) -> tuple[str, str]:
    """Key path and a note naming the variant: blame the override when it set that key, the
    base when the override does not touch it, and say "in variant" when the two combine."""
    if variant is None:
        return path, ""
    node: Any = override
    for depth, key in enumerate(path.split(".")):
        if isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]  # a list the variant gives replaces the base's whole list
            continue
        if not isinstance(node, dict) or key not in node:
            return path, f" (in variant {variant!r})" if depth else ""
        node = node[key]
    return f"variants.{variant}.{path}", ""


def _validate(
    raw: dict[str, Any], file: str, variant: str | None, override: dict[str, Any]
) -> Scenario:
    try:
        return Scenario.model_validate(raw)
    except ValidationError as exc:
        found = []
        for path, reason in problems(exc, Scenario):
            where, note = _where(path, variant, override)
            found.append((where, reason + note))
        raise as_error(found, file) from None


def read_scenario(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The mapping of a scenario file, not yet validated (strict YAML: see sim.inputs)."""
    file = str(path)
    raw = load_yaml(read_text(Path(path), "scenario file"), file)
    if not isinstance(raw, dict):
        raise ScenarioError("a scenario must be a YAML mapping", file=file)
    return raw


def load_scenario(
    path: str | os.PathLike[str], overrides: list[str] | tuple[str, ...] = ()
) -> ScenarioSet:
    """Read, override, merge variants, validate and resolve a scenario file."""
    return load_scenario_dict(
        read_scenario(path),
        file=str(path),
        base_dir=Path(path).resolve().parent,
        overrides=overrides,
    )


def load_any(
    scenario: ScenarioSet | Mapping[str, Any] | str | os.PathLike[str],
    overrides: list[str] | tuple[str, ...] = (),
) -> ScenarioSet:
    """A scenario from a file path, a mapping (relative paths from the working folder) or an
    already loaded `ScenarioSet` (`overrides` then apply to the mapping it was loaded from)."""
    if isinstance(scenario, ScenarioSet):
        if not overrides:
            return scenario
        raw, file, base_dir = source_of(scenario)
        return load_scenario_dict(raw, file=file, base_dir=base_dir, overrides=overrides)
    if isinstance(scenario, Mapping):
        return load_scenario_dict(dict(scenario), overrides=overrides)
    if isinstance(scenario, (str, os.PathLike)):
        return load_scenario(scenario, overrides)
    raise TypeError(
        f"expected a scenario path, a mapping or a ScenarioSet, not {type(scenario).__name__}"
    )


def source_of(
    scenario: ScenarioSet | Mapping[str, Any] | str | os.PathLike[str],
    overrides: list[str] | tuple[str, ...] = (),
) -> tuple[dict[str, Any], str, Path]:
    """(raw mapping with `overrides` applied, file label, base folder) of any scenario source:
    what sweeps and capacity searches edit before loading each point."""
    if isinstance(scenario, ScenarioSet):
        if not scenario.raw:
            raise ScenarioError("this ScenarioSet was built by hand: pass its file or mapping")
        raw, file = copy.deepcopy(scenario.raw), scenario.file
        base_dir = scenario.base_dir or Path.cwd()
    elif isinstance(scenario, Mapping):
        raw, file, base_dir = copy.deepcopy(dict(scenario)), "<scenario>", Path.cwd()
    elif isinstance(scenario, (str, os.PathLike)):
        raw, file = read_scenario(scenario), os.fspath(scenario)
        base_dir = Path(scenario).resolve().parent
    else:
        raise TypeError(
            f"expected a scenario path, a mapping or a ScenarioSet, not {type(scenario).__name__}"
        )
    apply_overrides(raw, overrides)
    return raw, file, base_dir


def load_scenario_dict(
    raw: dict[str, Any],
    *,
    file: str = "<scenario>",
    base_dir: Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> ScenarioSet:
    raw = copy.deepcopy(raw)
    apply_overrides(raw, overrides)
    source = copy.deepcopy(raw)
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
    workloads = [v.spec.workload for v in resolved]
    too_big = memory_problem(
        workloads,
        seeds=[v.spec.seed for v in resolved],
        generated=[v.regenerates_workload for v in resolved],
    )
    if too_big is not None:
        raise ScenarioError(too_big[1], file=file, path=too_big[0])
    return ScenarioSet(
        name=resolved[0].spec.name, variants=resolved, file=file, raw=source, base_dir=base_dir,
        tables_problem=memory_problem(workloads, tables=True), tables_checked=True,
    )  # fmt: skip


def _resolve(
    name: str,
    variant: str | None,
    raw: dict[str, Any],
    override: dict[str, Any],
    file: str,
    base_dir: Path,
) -> ResolvedScenario:
    try:
        raw = apply_engine_preset(raw, base_dir)
    except ScenarioError as exc:
        if exc.file is None:
            where, note = _where(exc.path, variant, override) if exc.path else (None, "")
            raise ScenarioError(exc.reason + note, file=file, path=where) from None
        raise
    spec = _validate(raw, file, variant, override)
    counted = spec.profile is None or spec.profile == "events"
    memory = engine_memory(spec.hardware, spec.engine.name, counted, spec.model)
    if memory is not spec.hardware:
        spec = spec.model_copy(update={"hardware": memory})
    try:
        model = resolve_model(spec.model, spec.hardware)
    except LayoutProblem as exc:
        path, note = _where("model", variant, override)
        raise ScenarioError(str(exc) + note, file=file, path=path) from None
    path, note = _where("profile", variant, override)
    speculative = spec.policy.speculative
    looped = resolve_engine_loop(  # before the profile: its host time hides behind the GPU's
        spec.engine, spec.profile is None or spec.profile == "events",
        speculative.method if speculative is not None and speculative.active else None,
        spec.hardware.pipeline_parallel,
    )  # fmt: skip
    overlapped = bool(looped.async_scheduling)
    unset_policy = spec.policy  # each group's limits are its own GPU's (engine_limits)
    limited = _limits(unset_policy, spec, spec.hardware, counted, "policy", variant, override, file)
    if limited is not spec.policy:
        spec = spec.model_copy(update={"policy": limited})
    profile = _profile(
        spec.profile, spec.model, spec.hardware, base_dir, file, path, note, spec.engine.name,
        placed=model.placed, overlapped=overlapped,
    )  # fmt: skip
    scoped = scope_preset(looped, profile.name, prices_host=profile.source == "roofline")
    if scoped is not spec.engine:
        spec = spec.model_copy(update={"engine": scoped})
    groups = []
    for i, (role, group_name, g) in enumerate(spec.groups()):
        key = f"cluster.instances.{i}" if role == "serve" else f"disaggregation.{role}"
        hw = g.hardware or spec.hardware
        if g.hardware is not None:  # the scenario's hardware has the engine's memory already
            hw = engine_memory(hw, spec.engine.name, counted, spec.model)
        policy_key = f"{key}.policy" if g.policy is not None else "policy"
        policy = _limits(
            g.policy or unset_policy, spec, hw, counted, policy_key, variant, override, file
        )
        speculative = policy.speculative
        # a draft model's weights take memory too, and every token has its KV in the draft
        draft_model = (
            speculative.draft_model if speculative is not None and speculative.active else None
        )
        try:  # the group's layout can serve (the scenario's hardware was checked above)
            figures = resolve_instance(
                spec.model, hw, block_size=policy.block_size, seats=policy.seats,
                stated_blocks=policy.num_gpu_blocks, draft=draft_model, fits=g.hardware is None,
            )  # fmt: skip
        except LayoutProblem as exc:
            blamed = {
                "hardware": f"{key}.hardware",
                "seats": f"{policy_key}.{policy.SEATS_KEY}",
                "draft": f"{policy_key}.speculative.draft_model",
            }
            where, note = _where(blamed[exc.blame], variant, override)
            raise ScenarioError(str(exc) + note, file=file, path=where) from None
        group_profile = profile
        if g.profile is not None or (g.hardware is not None and is_builtin(spec.profile)):
            where, note = _where(f"{key}.profile", variant, override)
            raw_profile = g.profile if g.profile is not None else spec.profile
            group_profile = _profile(
                raw_profile, spec.model, hw, base_dir, file, where, note, spec.engine.name,
                group=True, placed=figures.placed, overlapped=overlapped,
            )  # fmt: skip
        if hw.pipeline_parallel > 1 and spec.kv_tiers is not None and spec.kv_tiers.given():
            where, note = _where(
                f"{key}.hardware" if g.hardware is not None else "hardware", variant, override
            )
            raise ScenarioError(
                "pipeline_parallel > 1 with kv_tiers is not modelled (each virtual engine would "
                f"get the instance's tiers){note}",
                file=file,
                path=f"{where}.pipeline_parallel",
            )
        draft = _draft_profile(
            spec, policy, hw, figures.placed, policy_key, variant, override, file, base_dir
        )
        _check_autoscale(spec, g, hw, key, variant, override, file)
        groups.append(
            ResolvedGroup(
                role,
                group_name,
                g.count,
                hw,
                policy,
                group_profile,
                figures,
                *_tier_geometry(spec, policy, figures),
                draft,
                g.autoscale,
            )
        )
    return ResolvedScenario(
        variant=name, spec=spec, profile=profile, base_dir=base_dir, raw=raw,
        groups=tuple(groups), model_figures=model, workload_plan=plan_of(spec.workload),
    )  # fmt: skip


def _limits(
    policy: Any, spec: Scenario, hw: HardwareSpec, counted: bool, key: str,
    variant: str | None, override: dict[str, Any], file: str,
) -> Any:  # fmt: skip
    """`policy` with the limits it leaves unset taken from the engine (engine_limits)."""
    try:
        return engine_limits(policy, spec.engine.name, hw, counted, spec.model)
    except ValueError as exc:
        where, note = _where(key, variant, override)
        reason = str(exc.errors()[0]["msg"]) if isinstance(exc, ValidationError) else str(exc)
        raise ScenarioError(
            f"{reason.removeprefix('Value error, ')} (the unset limits are vLLM's defaults on "
            f"{hw.name}: set them){note}",
            file=file,
            path=where,
        ) from None


def _tier_geometry(
    spec: Scenario, policy: StaticPolicySpec | ContinuousPolicySpec | ChunkedPolicySpec,
    figures: InstanceFigures,
) -> tuple[tuple[TierGeometry, ...], TierGeometry | None]:  # fmt: skip
    """The group's KV tiers on each instance (a request's KV there is every model's, a draft's
    included), and with P/D through the shared store each instance's path to it (the target's
    KV, handed over). Each GPU has its own path to DRAM and the store."""
    tiers, store = spec.kv_tiers, None
    if tiers is None:
        return (), None
    d = spec.disaggregation
    if d is not None and d.link.via == "store" and tiers.remote is not None:
        store = tiers.remote.geometry(
            "remote", policy.block_size * figures.kv_bytes_per_token, figures.num_gpus
        )
    if not policy.prefix_caching:
        return (), store
    return tiers.geometry(
        policy.block_size * figures.moved_bytes_per_token, figures.num_gpus
    ), store


def _check_autoscale(
    spec: Scenario,
    group: InstanceGroupSpec,
    hw: HardwareSpec,
    key: str,
    variant: str | None,
    override: dict[str, Any],
    file: str,
) -> None:
    """What an autoscaled group needs beyond its own schema."""
    a = group.autoscale
    if a is None:
        return
    where, note = _where(f"{key}.autoscale", variant, override)
    if hw.pipeline_parallel > 1:
        raise ScenarioError(
            "autoscaling instances with pipeline_parallel > 1 is not modelled (each runs as "
            f"several virtual engines){note}",
            file=file,
            path=where,
        )
    if a.mode == "predictive" and forecast_of(spec.workload) is None:
        raise ScenarioError(
            "mode predictive forecasts from the workload's stated rate (workload.arrival: a "
            f"rate or a rate profile); this workload states none{note}",
            file=file,
            path=f"{where}.mode",
        )


def _draft_profile(
    spec: Scenario,
    policy: StaticPolicySpec | ContinuousPolicySpec | ChunkedPolicySpec,
    hw: HardwareSpec,
    placed: Placement | None,
    policy_key: str,
    variant: str | None,
    override: dict[str, Any],
    file: str,
    base_dir: Path,
) -> Profile | None:
    """The step costs of a speculative draft model on `hw` (None without one; `_figures` checked
    that the draft fits next to the target)."""
    speculative = policy.speculative
    if speculative is not None and speculative.method == "mtp" and not spec.model.num_mtp_layers:
        where, note = _where(f"{policy_key}.speculative.method", variant, override)
        raise ScenarioError(
            f"'mtp' drafts with the model's multi-token prediction module, and "
            f"{spec.model.name} has none (num_mtp_layers 0){note}",
            file=file,
            path=where,
        )
    if speculative is None or not speculative.active or speculative.method != "draft":
        return None
    draft = speculative.draft_model
    assert draft is not None  # the schema requires it for method draft
    where, note = _where(f"{policy_key}.speculative.draft_profile", variant, override)
    # unset: the target's step model when that is a built-in one (roofline or counted events),
    # else the default (a file or coefficients measured for the target do not price the draft)
    raw = speculative.draft_profile
    if raw is None and is_builtin(spec.profile):
        raw = spec.profile
    return _profile(
        raw, draft, hw, base_dir, file, where, note,
        placed=placed.draft if placed is not None else None,
    )  # fmt: skip


def _profile(
    raw: str | dict[str, Any] | None,
    model: ModelSpec,
    hw: HardwareSpec,
    base_dir: Path,
    file: str,
    where: str,
    note: str,
    engine: str | None = None,
    *,
    group: bool = False,
    placed: Placement | None = None,
    overlapped: bool = False,
) -> Profile:
    """The step-cost profile `raw` of `model` on `hw`, for the key `where` (`note`: the variant
    it is in): the scenario's, a group's own (`group`: its file is read as it resolves, and a
    problem without a key of its own names none), or a draft model's."""
    if not group and isinstance(raw, str) and raw not in BUILTIN_PROFILES:
        target = Path(raw) if Path(raw).is_absolute() else base_dir / raw
        try:
            check_regular_file(target, "profile file")
        except ScenarioError as exc:
            raise ScenarioError(f"{exc.message()}{note}", file=file, path=where) from None
    try:
        return resolve_profile(
            raw, model, hw, base_dir, key=where, engine=engine, placed=placed,
            overlapped=overlapped,
        )  # fmt: skip
    except ScenarioError as exc:
        if exc.file is None:
            path = exc.path if group else blamed_on(exc, where)
            raise ScenarioError(exc.reason + note, file=file, path=path) from None
        raise
