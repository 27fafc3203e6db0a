"""Scenarios: one what-if described in YAML, validated strictly at load.

A scenario names a workload, a model, a GPU, a step-cost profile, a policy with its limits and
the SLO targets. `variants` are named override sets applied to the same base; every variant runs
on the very same requests (the workload is generated once per distinct workload and seed).
`--set a.b=c` edits the raw YAML before validation, so it reaches any field, variants included
(`sim.scenario.overrides`, which also holds the rule by which variants merge).

Files are read as strict YAML (`sim.inputs`: no duplicate keys, bounded aliases and nesting,
UTF-8 errors located). Every problem is a `ScenarioError` naming the file, the key path and the
reason; schema problems are all listed at once, in plain words (`sim.inputs.messages`). What each
instance group resolves (limits, profiles, KV tiers) is in `sim.scenario.resolve_parts`. A
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

from sim.costs.catalog import MODELS, HardwareSpec
from sim.costs.figures import (
    InstanceFigures,
    LayoutProblem,
    ModelFigures,
    resolve_instance,
    resolve_model,
)
from sim.costs.hf_config import expand_model
from sim.costs.memory_tiers import TierGeometry
from sim.costs.profile import Profile, is_builtin
from sim.errors import ScenarioError
from sim.inputs.messages import as_error, problems
from sim.inputs.strict_yaml import load_yaml
from sim.inputs.text import read_text
from sim.scenario.control_plane import AutoscaleSpec
from sim.scenario.engine_limits import engine_memory
from sim.scenario.engine_loop import resolve_engine_loop
from sim.scenario.engine_preset import apply_engine_preset, scope_preset
from sim.scenario.overrides import (
    apply_overrides,
    merge,
    parse_set,
    set_path,
)
from sim.scenario.resolve_parts import (
    _check_autoscale,
    _draft_profile,
    _limits,
    _profile,
    _tier_geometry,
    _where,
)
from sim.scenario.schema import (
    ChunkedPolicySpec,
    ContinuousPolicySpec,
    LinkSpec,
    Role,
    Scenario,
    StaticPolicySpec,
    check_tiers,
)
from sim.workload.budget import memory_problem
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
        raw = expand_model(raw, base_dir, MODELS)
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
