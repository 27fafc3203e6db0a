"""The parts of a variant's resolution that each instance group repeats, and where a problem
is blamed.

`_limits` fills the limits a policy leaves unset from the engine's defaults on the group's GPU;
`_profile` resolves a step-cost profile (the scenario's, a group's own, or a speculative draft
model's through `_draft_profile`); `_tier_geometry` sizes the group's KV tiers below the GPU and
its path to the shared store; `_check_autoscale` holds what an autoscaled group needs beyond its
schema. Each problem is a `ScenarioError` on the key `_where` names: the variant's override when
it set that key, the base otherwise. `sim.scenario.load` calls them as it resolves a variant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sim.costs.catalog import HardwareSpec, ModelSpec, Placement
from sim.costs.figures import InstanceFigures
from sim.costs.memory_tiers import TierGeometry
from sim.costs.profile import BUILTIN_PROFILES, Profile, is_builtin, resolve_profile
from sim.errors import ScenarioError
from sim.inputs.messages import blamed_on
from sim.inputs.text import check_regular_file
from sim.scenario.engine_limits import engine_limits
from sim.scenario.schema import (
    ChunkedPolicySpec,
    ContinuousPolicySpec,
    InstanceGroupSpec,
    Scenario,
    StaticPolicySpec,
)
from sim.workload.forecast import forecast_of


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
