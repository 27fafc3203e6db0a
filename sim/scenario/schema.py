"""The scenario schema: strict, typed pydantic models for every section of a scenario file.

Unknown keys are rejected, values are range-checked and cross-field rules are model
validators, so a scenario that loads is one the simulator can run. The `policy:` section's
specs are in `sim.scenario.policy_spec` (importers find them here too); loading, overrides,
variants and error reporting live in `sim.scenario.load`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from sim.costs.catalog import HardwareSpec, ModelSpec
from sim.costs.knobs import PricingSpec
from sim.inputs.strict_model import StrictModel
from sim.scenario.control_plane import (
    MAX_INSTANCES,
    MIN_REFRESH_S,
    AdmissionSpec,
    AutoscaleSpec,
)
from sim.scenario.kv_tiers import KVTiersSpec
from sim.scenario.policy_spec import (
    ChunkedPolicySpec,
    ContinuousPolicySpec,
    PolicySpec,
    PreemptionSpec,
    QueueSpec,
    QueueTierSpec,
    StaticPolicySpec,
)
from sim.workload import WorkloadSpec

# A scenario's name is the folder its results go to: a plain folder name, never a path.
MAX_NAME_LENGTH = 100

__all__ = [  # the policies' specs (sim.scenario.policy_spec)
    "ChunkedPolicySpec",
    "ContinuousPolicySpec",
    "PolicySpec",
    "PreemptionSpec",
    "QueueSpec",
    "QueueTierSpec",
    "StaticPolicySpec",
]


class _Strict(StrictModel):
    model_config = ConfigDict(frozen=True)


def check_folder_name(name: str) -> str:
    """`name` unchanged when it is a plain folder name, else ValueError saying why not."""
    if not name:
        raise ValueError("must not be empty")
    if len(name) > MAX_NAME_LENGTH:
        raise ValueError(f"is {len(name)} characters long; at most {MAX_NAME_LENGTH}")
    if "/" in name or "\\" in name:
        raise ValueError(f"{name!r} contains a path separator; a scenario name is a folder name")
    if name in (".", ".."):
        raise ValueError(
            f"{name!r} is not a folder name (it names the folder itself or its parent)"
        )
    if name.startswith("."):
        raise ValueError(f"{name!r} starts with '.' (hidden names are kept for batchsim's work)")
    bad = sorted({ch for ch in name if not (ch.isascii() and (ch.isalnum() or ch in "_.-"))})
    if bad:
        raise ValueError(
            f"{name!r} contains {''.join(bad)!r}; use letters, digits, '_', '.' and '-' only"
        )
    return name


class SLOTargets(_Strict):
    ttft_s: float | None = Field(default=None, gt=0)
    tpot_s: float | None = Field(default=None, gt=0)


class SLOSpec(SLOTargets):
    """Default targets, and per-tier ones (a tier's unset target falls back to the default)."""

    tiers: dict[str, SLOTargets] = Field(default_factory=dict)
    # an agents workload's task done within this many seconds of its start (sim/metrics/tasks.py)
    task_s: float | None = Field(default=None, gt=0, le=1e9)

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
    # TPOT: the time from the first token to the last over the tokens after the first
    # (after_first, this project's definition), or over every output token (per_output_token,
    # the decode time normalized by the output length, as some simulators report it)
    tpot: Literal["after_first", "per_output_token"] = "after_first"
    # the timeline's window (sim/metrics/timeline.py, timeline.csv); None: a round length near
    # 1 % of the arrival span, at least 1 s
    window_s: float | None = Field(default=None, gt=0, le=86400)


EngineName = Literal["vllm", "sglang", "trt-llm", "atom"]


class EngineSpec(_Strict):
    # the serving engine: its host time per step and kernel floors price `profile: events`
    # (sim/costs/step_events.py); None prices as vLLM
    name: EngineName | None = None
    version: str | None = Field(default=None, min_length=1, max_length=64)
    # jump over runs of identical decode steps (exact; off only to check that it is exact)
    coalesce_decode_steps: bool = True
    # engine effects priced on top of every instance's profile (CUDA-graph padding, token
    # padding, CPU overhead: sim/costs/knobs.py); the fields given here win over a profile's own
    pricing: PricingSpec | None = None
    # asynchronous scheduling (vLLM's async scheduling, SGLang's and TensorRT-LLM's overlap
    # schedulers): step k+1 is planned when step k launches, so a request that arrives while a
    # step runs joins the step after next (sim/core/lookahead.py). Unset: the engine's default
    # at its version under the counted-events step model, off under other profiles
    # (sim/scenario/engine_loop.py); the resolved scenario says which
    async_scheduling: bool | None = None
    # the serving front end's time per request (API server: tokenization, hand-off to the engine
    # core): a request reaches the scheduler this long after it arrives, and its TTFT, queue
    # delay and E2E include it
    frontend_s: float = Field(default=0.0, ge=0.0, le=10.0)
    # a cold start (off by default): the instances present at the run's start serve nothing
    # before this time (a benchmark run without warm-up: kernels compiled at their first use,
    # CUDA graphs captured lazily); requests sent meanwhile wait in the queue
    cold_start_s: float = Field(default=0.0, ge=0.0, le=3600.0)
    # the engine preset these fields started from (sim/scenario/engine_preset.py): a shipped
    # name such as vllm-0.11_h100-sxm, or a preset file
    preset: str | None = Field(default=None, min_length=1)
    # set from the preset: the profile its kernel correction (pricing.gpu_time_scale) was fitted
    # on, and how much of the preset applies: "all" on that profile, "engine terms only" on
    # another (the correction is dropped; host time and front end transfer), "front end and
    # graph sizes only" on a profile with its own host term (sim/scenario/engine_preset.py)
    preset_profile: str | None = Field(default=None, min_length=1, max_length=200)
    preset_scope: (
        Literal["all", "engine terms only", "front end and graph sizes only"] | None
    ) = None


Role = Literal["serve", "prefill", "decode"]
RouterName = Literal[
    "round_robin",
    "least_outstanding_requests",
    "least_outstanding_tokens",
    "least_kv",
    "random",
    "prefix_affinity",
    "session_sticky",
    "slo_headroom",
]


class InstanceGroupSpec(_Strict):
    """`count` identical instances; unset fields take the scenario's top-level values."""

    name: str | None = None
    # instances at the start; 0 only for an autoscaled group with min 0, which starts with none
    # and scales out when the first request waits at the gateway (docs/autoscaling.md)
    count: int = Field(default=1, ge=0, le=MAX_INSTANCES)
    hardware: HardwareSpec | None = None
    policy: PolicySpec | None = None
    profile: str | dict[str, Any] | None = None
    # add and remove instances of this group during the run (sim/scenario/control_plane.py);
    # `count` is how many it starts with
    autoscale: AutoscaleSpec | None = None

    @model_validator(mode="after")
    def _count_in_range(self) -> InstanceGroupSpec:
        a = self.autoscale
        if a is None and self.count == 0:
            raise ValueError("count 0 starts a group with no instance: only an autoscaled group "
                             "(autoscale.min 0) may start empty")  # fmt: skip
        if a is not None and not a.min <= self.count <= a.max:
            raise ValueError(
                f"count ({self.count}) is outside autoscale's [min, max] = [{a.min}, {a.max}]"
            )
        return self


class RouterOptions(_Strict):
    """Weights of the `prefix_affinity` router's score (cached fraction against load)."""

    hit_weight: float = Field(default=1.0, ge=0, le=1e6)
    load_weight: float = Field(default=1.0, ge=0, le=1e6)
    # what the router sees of the engines: their loads as last scraped, every `refresh_s`
    # seconds (0: exact at each decision), and their prefix caches as of `kv_event_lag_s` ago
    refresh_s: float = Field(default=0.0, ge=0, le=3600)
    kv_event_lag_s: float = Field(default=0.0, ge=0, le=3600)

    @field_validator("refresh_s")
    @classmethod
    def _refresh(cls, value: float) -> float:
        if 0 < value < MIN_REFRESH_S:
            raise ValueError(f"must be 0 (exact loads) or at least {MIN_REFRESH_S:g} s, got "
                             f"{value:g}")  # fmt: skip
        return value


class ClusterSpec(_Strict):
    router: RouterName = "least_outstanding_requests"
    router_options: RouterOptions = RouterOptions()
    # load shedding at the gateway (sim/scenario/control_plane.py); None: every request queues
    admission: AdmissionSpec | None = None
    instances: list[InstanceGroupSpec] = Field(min_length=1)


class LinkSpec(_Strict):
    # KV transfer: bytes / bandwidth + latency; transfers queue FIFO over `num_links` links
    bandwidth_gb_per_s: float = Field(default=25.0, gt=0)  # GB/s (1e9 bytes), per link
    latency_s: float = Field(default=0.0, ge=0)
    num_links: int = Field(default=1, gt=0)
    # direct: over the link above; store: through kv_tiers.remote, written by the prefill
    # instance and read by the decode one at the store's figures (the two above go unused)
    via: Literal["direct", "store"] = "direct"


class PoolSpec(InstanceGroupSpec):
    router: RouterName = "least_outstanding_requests"


class DisaggregationSpec(_Strict):
    prefill: PoolSpec
    decode: PoolSpec = PoolSpec(router="least_kv")
    link: LinkSpec = LinkSpec()

    @model_validator(mode="after")
    def _pools_start_serving(self) -> DisaggregationSpec:
        # a request is checked against the decode pools' KV at its arrival: each pool starts
        # with an instance (an autoscaled pool with min 0 may still scale in to zero)
        for role, pool in (("prefill", self.prefill), ("decode", self.decode)):
            if pool.count == 0:
                raise ValueError(f"{role}.count: a P/D pool starts with at least one instance "
                                 "(count 0 is for a cluster group)")  # fmt: skip
        if self.decode.router == "slo_headroom":
            raise ValueError("decode.router: slo_headroom ranks instances by the TTFT they "
                             "predict, and a decode pool predicts none (the prefill pool "
                             "gives the first token): use least_kv or a load router")  # fmt: skip
        return self


class Scenario(_Strict):
    name: str
    description: str = ""
    seed: int = Field(default=0, ge=0)
    workload: WorkloadSpec
    model: ModelSpec
    hardware: HardwareSpec
    # the step-cost model. Unset: the default, counted events with fitted unit costs for the
    # model, GPU, layout and `engine.name` (sim/costs/step_events.py; the same as "events");
    # "roofline" (the teaching form T_step = T_mem + B * T_flop at datasheet rates), a profile
    # file (relative to the scenario's folder) or inline coefficients
    profile: str | dict[str, Any] | None = None
    policy: PolicySpec
    slo: SLOSpec = SLOSpec()
    metrics: MetricsSpec = MetricsSpec()
    engine: EngineSpec = EngineSpec()
    # several colocated instances behind a router (default: one instance)
    cluster: ClusterSpec | None = None
    # prefill and decode on separate pools joined by a KV link (exclusive with `cluster`)
    disaggregation: DisaggregationSpec | None = None
    # KV memory below the GPU: host DRAM, local NVMe, a shared store (sim/scenario/kv_tiers.py)
    kv_tiers: KVTiersSpec | None = None

    _name_is_a_folder = field_validator("name")(check_folder_name)

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
        if self.kv_tiers is not None and self.kv_tiers.given():
            for key, policy in self.policies():
                if policy.name == "static":
                    raise ValueError(
                        f"kv_tiers needs prefix caching, which {key} (static batching) does not "
                        "have: use a continuous or chunked policy"
                    )
                if not policy.prefix_caching:
                    raise ValueError(
                        f"kv_tiers needs prefix caching: set {key}.prefix_caching: true "
                        "(a tier below the GPU holds blocks by content hash)"
                    )
            sizes = sorted({p.block_size for _, p in self.policies()})
            if self.kv_tiers.remote is not None and len(sizes) > 1:
                raise ValueError(
                    "kv_tiers.remote is shared by every instance: their policies need one "
                    f"block_size (found {', '.join(map(str, sizes))})"
                )
        link = self.disaggregation.link if self.disaggregation is not None else None
        if link is not None and link.via == "store" and (
            self.kv_tiers is None or self.kv_tiers.remote is None
        ):
            raise ValueError(
                "disaggregation.link.via: store needs kv_tiers.remote (the shared store the KV "
                "goes through)"
            )
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
        speculative = policy.speculative
        if speculative is not None and tiers is not None:
            for tier in speculative.acceptance.tiers:
                if tier not in tiers:
                    raise ValueError(
                        f"{key}.speculative.acceptance.tiers: {tier!r} is not a tier of the "
                        f"workload ({', '.join(tiers)})"
                    )
    for tier in tiers or ():
        if spec.slo.tiers and tier not in spec.slo.tiers:
            raise ValueError(f"slo.tiers lacks tier {tier!r} of the workload")
    admission = spec.cluster.admission if spec.cluster is not None else None
    if admission is not None and tiers is not None:
        for tier in admission.tiers:
            if tier not in tiers:
                raise ValueError(
                    f"cluster.admission.tiers: {tier!r} is not a tier of the workload "
                    f"({', '.join(tiers)})"
                )
