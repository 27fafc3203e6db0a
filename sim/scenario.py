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
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from sim.catalog import HardwareSpec, ModelSpec, check_fits
from sim.errors import ScenarioError
from sim.profile import Profile, resolve_profile
from sim.workload import WorkloadSpec


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class QueueTierSpec(_Strict):
    rank: int = Field(default=0, ge=0)  # strict priority: lower rank first
    weight: float = Field(default=1.0, gt=0)  # weighted shares: admissions in this proportion


class QueueSpec(_Strict):
    """`policy.queue`: the waiting-queue order (sim/queues.py)."""

    order: Literal["fcfs", "sjf", "priority", "edf"] = "fcfs"
    # sjf: sort on the true output length or on the workload's predicted one
    length: Literal["known", "predicted"] = "known"
    # sjf: tokens, priority: ranks, taken off a request's key per second it has waited
    aging_per_s: float = Field(default=0.0, ge=0)
    priority_mode: Literal["strict", "weighted"] = "strict"
    # rank and weight of each tier (every workload tier must be listed for `priority`)
    tiers: dict[str, QueueTierSpec] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _tiers_for_priority(self) -> QueueSpec:
        if self.order == "priority" and not self.tiers:
            raise ValueError("order 'priority' needs policy.queue.tiers (rank/weight per tier)")
        return self


class PreemptionSpec(_Strict):
    """`policy.preemption` (continuous and chunked); the string form names just the mode."""

    mode: Literal["recompute", "swap"] = "recompute"
    victim: Literal["last_admitted", "lowest_priority", "most_kv"] = "last_admitted"
    swap_bandwidth_gb_per_s: float = Field(default=25.0, gt=0)  # GPU <-> host, 1e9 bytes/s
    host_memory_gb: float = Field(default=64.0, gt=0)  # swap space; full: fall back to recompute


def _preemption_from_str(value: object) -> object:
    return {"mode": value} if isinstance(value, str) else value


class StaticPolicySpec(_Strict):
    name: Literal["static"]
    max_batch_size: int = Field(default=16, gt=0)
    # start a partial batch once the oldest request has waited this long (0: whenever idle)
    max_wait_s: float = Field(default=0.0, ge=0)
    # contiguous reservation per request: prompt + true output, or the model's context limit
    kv_reservation: Literal["output", "max_model_len"] = "output"
    # pad every prompt of a batch to the longest one (HF-style padded prefill)
    pad_prompts: bool = False
    queue: QueueSpec = QueueSpec()


class ContinuousPolicySpec(_Strict):
    name: Literal["continuous"]
    max_num_seqs: int = Field(default=256, gt=0)
    max_num_batched_tokens: int = Field(default=8192, gt=0)
    mode: Literal["prefill_first", "mixed"] = "prefill_first"
    block_size: int = Field(default=16, gt=0)
    # fraction of KV blocks kept free when admitting (vLLM's default is 0.01)
    watermark: float = Field(default=0.01, ge=0, lt=1)
    preemption: PreemptionSpec = PreemptionSpec()
    # paged: blocks on demand; max_length: max_model_len tokens reserved at admission;
    # exact: prompt + true output reserved at admission (an oracle)
    kv_reservation: Literal["paged", "max_length", "exact"] = "paged"
    queue: QueueSpec = QueueSpec()

    _preemption_str = field_validator("preemption", mode="before")(_preemption_from_str)

    @model_validator(mode="after")
    def _budget_holds_every_decode(self) -> ContinuousPolicySpec:
        if self.mode == "mixed" and self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be at least "
                f"max_num_seqs ({self.max_num_seqs}) in mixed mode: every running request "
                "decodes each step"
            )
        return self


class ChunkedPolicySpec(_Strict):
    """Sarathi-Serve: decodes first, then prompt chunks fill the rest of the token budget."""

    name: Literal["chunked"]
    max_num_seqs: int = Field(default=256, gt=0)
    # the per-step token budget that decodes and prompt chunks share
    max_num_batched_tokens: int = Field(default=2048, gt=0)
    # prompts that may get a chunk in one step (None: as many as the budget allows)
    max_prefill_seqs: int | None = Field(default=None, gt=0)
    block_size: int = Field(default=16, gt=0)
    watermark: float = Field(default=0.01, ge=0, lt=1)
    preemption: PreemptionSpec = PreemptionSpec()
    # paged: blocks on demand; max_length: max_model_len tokens reserved at admission;
    # exact: prompt + true output reserved at admission (an oracle)
    kv_reservation: Literal["paged", "max_length", "exact"] = "paged"
    queue: QueueSpec = QueueSpec()

    _preemption_str = field_validator("preemption", mode="before")(_preemption_from_str)

    @model_validator(mode="after")
    def _budget_holds_every_decode(self) -> ChunkedPolicySpec:
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be at least "
                f"max_num_seqs ({self.max_num_seqs}): every running request decodes each step"
            )
        return self


PolicySpec = Annotated[
    StaticPolicySpec | ContinuousPolicySpec | ChunkedPolicySpec, Field(discriminator="name")
]


class SLOTargets(_Strict):
    ttft_s: float | None = Field(default=None, gt=0)
    tpot_s: float | None = Field(default=None, gt=0)


class SLOSpec(SLOTargets):
    """Default targets, and per-tier ones (a tier's unset target falls back to the default)."""

    tiers: dict[str, SLOTargets] = Field(default_factory=dict)

    def targets(self, tier: str) -> tuple[float | None, float | None]:
        own = self.tiers.get(tier)
        if own is None:
            return self.ttft_s, self.tpot_s
        ttft = own.ttft_s if own.ttft_s is not None else self.ttft_s
        return ttft, own.tpot_s if own.tpot_s is not None else self.tpot_s


class MetricsSpec(_Strict):
    # requests arriving in the first warmup_s / last cooldown_s are left out of the statistics
    warmup_s: float = Field(default=0.0, ge=0)
    cooldown_s: float = Field(default=0.0, ge=0)


class EngineSpec(_Strict):
    # jump over runs of identical decode steps (exact; off only to check that it is exact)
    coalesce_decode_steps: bool = True


Role = Literal["serve", "prefill", "decode"]
RouterName = Literal[
    "round_robin", "least_outstanding_requests", "least_outstanding_tokens", "least_kv", "random"
]


class InstanceGroupSpec(_Strict):
    """`count` identical instances; unset fields take the scenario's top-level values."""

    name: str | None = None
    count: int = Field(default=1, gt=0)
    hardware: HardwareSpec | None = None
    policy: PolicySpec | None = None
    profile: str | dict[str, Any] | None = None


class ClusterSpec(_Strict):
    router: RouterName = "least_outstanding_requests"
    instances: list[InstanceGroupSpec] = Field(min_length=1)


class LinkSpec(_Strict):
    # KV transfer: bytes / bandwidth + latency; transfers queue FIFO over `num_links` links
    bandwidth_gb_per_s: float = Field(default=25.0, gt=0)  # GB/s (1e9 bytes), per link
    latency_s: float = Field(default=0.0, ge=0)
    num_links: int = Field(default=1, gt=0)


class PoolSpec(InstanceGroupSpec):
    router: RouterName = "least_outstanding_requests"


class DisaggregationSpec(_Strict):
    prefill: PoolSpec
    decode: PoolSpec = PoolSpec(router="least_kv")
    link: LinkSpec = LinkSpec()


class Scenario(_Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    seed: int = Field(default=0, ge=0)
    workload: WorkloadSpec
    model: ModelSpec
    hardware: HardwareSpec
    # "roofline", a profile file (relative to the scenario's folder) or inline coefficients
    profile: str | dict[str, Any] = "roofline"
    policy: PolicySpec
    slo: SLOSpec = SLOSpec()
    metrics: MetricsSpec = MetricsSpec()
    engine: EngineSpec = EngineSpec()
    # several colocated instances behind a router (default: one instance)
    cluster: ClusterSpec | None = None
    # prefill and decode on separate pools joined by a KV link (exclusive with `cluster`)
    disaggregation: DisaggregationSpec | None = None

    @model_validator(mode="after")
    def _one_topology(self) -> Scenario:
        if self.cluster is not None and self.disaggregation is not None:
            raise ValueError("give either cluster or disaggregation, not both")
        if self.disaggregation is not None:
            for pool in ("prefill", "decode"):
                policy = getattr(self.disaggregation, pool).policy or self.policy
                if policy.name == "static":
                    raise ValueError(f"disaggregation.{pool}: static batching cannot be split")
        check_tiers(self, self.workload.tier_names())
        return self

    def policies(
        self,
    ) -> list[tuple[str, StaticPolicySpec | ContinuousPolicySpec | ChunkedPolicySpec]]:
        """(key path, spec) of the top-level policy and of every group that sets its own."""
        out: list[tuple[str, Any]] = [("policy", self.policy)]
        for role, _, g in self.groups():
            if g.policy is not None:
                out.append(
                    (
                        f"disaggregation.{role}.policy"
                        if role != "serve"
                        else "cluster.instances.policy",
                        g.policy,
                    )
                )
        return out

    def groups(self) -> list[tuple[Role, str, InstanceGroupSpec]]:
        """(role, group name, spec) for each instance group; role is serve|prefill|decode."""
        if self.disaggregation is not None:
            d = self.disaggregation
            return [
                ("prefill", d.prefill.name or "prefill", d.prefill),
                ("decode", d.decode.name or "decode", d.decode),
            ]
        if self.cluster is not None:
            return [
                ("serve", g.name or f"group{i}", g) for i, g in enumerate(self.cluster.instances)
            ]
        return [("serve", "default", InstanceGroupSpec())]


def check_tiers(spec: Scenario, tiers: list[str] | None) -> None:
    """Every workload tier must be in `slo.tiers` (when given) and in the queue's tier table
    (priority order); EDF needs a TTFT target. `tiers` None: not known before generation."""
    for key, policy in spec.policies():
        queue = policy.queue
        if queue.order == "edf" and spec.slo.ttft_s is None and not spec.slo.tiers:
            raise ValueError(f"{key}.queue.order 'edf' needs slo.ttft_s or slo.tiers")
        for tier in tiers or ():
            if queue.order == "priority" and tier not in queue.tiers:
                raise ValueError(f"{key}.queue.tiers lacks tier {tier!r} of the workload")
    for tier in tiers or ():
        if spec.slo.tiers and tier not in spec.slo.tiers:
            raise ValueError(f"slo.tiers lacks tier {tier!r} of the workload")


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
