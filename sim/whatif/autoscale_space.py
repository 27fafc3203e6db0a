"""The space of an autoscaling search (`batchsim search --autoscale SPACE`): instance types and
autoscaling policies, expanded into candidates.

```yaml
gpus: [h100-sxm, a100-80g]       # instance types (default: the scenario's hardware)
signals:                          # signal -> the targets to try (target tracking)
  running: [16, 32, 48]
  queue_length: [2, 8]
thresholds:                       # optional: step scaling, signal -> [scale_in_below,
  running: [[8, 40], [16, 48]]    #   scale_out_above] pairs to try
step: [1, 2]                      # instances added or removed per threshold decision
min: [1, 2]                       # each value is tried
max: 16                           # the most instances a policy may run (also the static bound)
scale_in_cooldown_s: [120, 600]
scale_out_cooldown_s: 60
interval_s: 15
predictive:                       # optional: predictive candidates (forecast + running signal)
  capacity_rps: [4, 6]            # requests per second one instance serves within the SLOs
  headroom: 1.2
  target: 32                      # the running-requests target it also tracks
provisioning: {scheduling_s: 30, load_bandwidth_gb_per_s: 2, warmup_s: 60}
router: least_outstanding_tokens
```

A candidate is one instance type with one autoscaling policy (sim/scenario/control_plane.py).
The scenario's own cluster, hardware and instance counts are replaced by the candidate's; its
workload (a rate profile, or a trace), model, policy and SLO targets are kept.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, field_validator

from sim.errors import ScenarioError
from sim.inputs.messages import as_error, problems
from sim.inputs.strict_model import StrictModel
from sim.inputs.strict_yaml import load_yaml
from sim.inputs.text import check_regular_file, read_text
from sim.scenario.control_plane import MAX_INSTANCES, MIN_PERIOD_S, ProvisioningSpec, Signal
from sim.scenario.schema import RouterName

MAX_CANDIDATES = 10_000


class _Strict(StrictModel):
    model_config = ConfigDict(frozen=True)


def _listed(value: Any) -> Any:
    return value if isinstance(value, list) else [value]


class PredictiveSpace(_Strict):
    capacity_rps: list[float] = Field(min_length=1)
    headroom: float = Field(default=1.2, ge=1, le=10)
    target: float = Field(gt=0, le=1e9)

    _lists = field_validator("capacity_rps", mode="before")(_listed)

    @field_validator("capacity_rps")
    @classmethod
    def _positive(cls, values: list[float]) -> list[float]:
        for v in values:
            if not 0 < v <= 1e6:
                raise ValueError(f"{v} is outside (0, 1000000]")
        return values


class AutoscaleSpace(_Strict):
    gpus: list[str] | None = Field(default=None, min_length=1)
    signals: dict[Signal, list[float]] = Field(default_factory=dict)
    thresholds: dict[Signal, list[tuple[float, float]]] = Field(default_factory=dict)
    step: list[int] = Field(default_factory=lambda: [1], min_length=1)
    min: list[int] = Field(default_factory=lambda: [1], min_length=1)
    max: int = Field(default=16, gt=0, le=MAX_INSTANCES)
    scale_in_cooldown_s: list[float] = Field(default_factory=lambda: [300.0], min_length=1)
    scale_out_cooldown_s: list[float] = Field(default_factory=lambda: [60.0], min_length=1)
    interval_s: float = Field(default=15.0, ge=MIN_PERIOD_S, le=86400)
    tolerance: float = Field(default=0.1, ge=0, le=10)
    predictive: PredictiveSpace | None = None
    provisioning: ProvisioningSpec = ProvisioningSpec()
    router: RouterName = "least_outstanding_tokens"

    _lists = field_validator(
        "gpus", "min", "step", "scale_in_cooldown_s", "scale_out_cooldown_s", mode="before"
    )(_listed)

    @field_validator("signals", mode="before")
    @classmethod
    def _signal_lists(cls, value: Any) -> Any:
        if isinstance(value, dict):
            value = {k: _listed(v) for k, v in value.items()}
            for signal, targets in value.items():
                if any(isinstance(t, bool) for t in targets):
                    raise ValueError(f"{signal}: a target is a number, not true or false")
        return value

    @field_validator("signals")
    @classmethod
    def _targets(cls, value: dict[str, list[float]]) -> dict[str, list[float]]:
        for signal, targets in value.items():
            if not targets:
                raise ValueError(f"{signal}: give at least one target")
            for t in targets:
                if not 0 < t <= 1e9:
                    raise ValueError(f"{signal}: target {t} is outside (0, 1e9]")
                if signal == "kv_use" and t > 1:
                    raise ValueError(f"kv_use: target {t} is a fraction, at most 1")
        return value

    @field_validator("thresholds", mode="before")
    @classmethod
    def _pair_lists(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for signal, pairs in value.items():
                if not isinstance(pairs, list) or not all(
                    isinstance(p, list) and len(p) == 2 for p in pairs
                ):
                    raise ValueError(f"{signal}: a list of [scale_in_below, scale_out_above] pairs")
                if any(isinstance(x, bool) for p in pairs for x in p):
                    raise ValueError(f"{signal}: a threshold is a number, not true or false")
        return value

    @field_validator("thresholds")
    @classmethod
    def _bands(
        cls, value: dict[str, list[tuple[float, float]]]
    ) -> dict[str, list[tuple[float, float]]]:
        for signal, pairs in value.items():
            if not pairs:
                raise ValueError(f"{signal}: give at least one [scale_in_below, scale_out_above]")
            for below, above in pairs:
                if not 0 <= below < above <= 1e9:
                    raise ValueError(
                        f"{signal}: [{below:g}, {above:g}] must have 0 <= scale_in_below < "
                        "scale_out_above <= 1e9"
                    )
                if signal == "kv_use" and above > 1:
                    raise ValueError(f"kv_use: threshold {above:g} is a fraction, at most 1")
        return value

    @field_validator("step")
    @classmethod
    def _steps(cls, value: list[int]) -> list[int]:
        for v in value:
            if not 0 < v <= MAX_INSTANCES:
                raise ValueError(f"{v} is outside [1, {MAX_INSTANCES}]")
        return value

    @field_validator("min")
    @classmethod
    def _mins(cls, value: list[int]) -> list[int]:
        for v in value:
            if not 0 <= v <= MAX_INSTANCES:
                raise ValueError(f"{v} is outside [0, {MAX_INSTANCES}]")
        return value

    @field_validator("scale_in_cooldown_s", "scale_out_cooldown_s")
    @classmethod
    def _cooldowns(cls, value: list[float]) -> list[float]:
        for v in value:
            if not 0 <= v <= 86400:
                raise ValueError(f"{v} is outside [0, 86400] seconds")
        return value


@dataclass(frozen=True)
class Candidate:
    """One instance type with one autoscaling policy: `autoscale` is the group's mapping."""

    id: str
    gpu: str
    autoscale: dict[str, Any]

    @property
    def start(self) -> int:
        """Instances at the start: the policy's minimum, at least one."""
        return max(1, int(self.autoscale["min"]))


def read_space(path: str | Path) -> AutoscaleSpace:
    """The space file, checked; every problem one line naming the file and the field."""
    file = str(path)
    check_regular_file(Path(path), "--autoscale")
    data = load_yaml(read_text(Path(path), file), file)
    if not isinstance(data, dict):
        raise ScenarioError("an autoscaling space is a mapping of keys", file=file)
    try:
        space = AutoscaleSpace.model_validate(data)
    except ValidationError as exc:
        raise as_error(problems(exc, AutoscaleSpace), file) from None
    if not space.signals and not space.thresholds and space.predictive is None:
        raise ScenarioError(
            "give signals (target tracking), thresholds (step scaling) or predictive",
            file=file,
            path="signals",
        )
    if max(space.min) > space.max:
        raise ScenarioError(f"a min ({max(space.min)}) is above max ({space.max})", file=file,
                            path="min")  # fmt: skip
    total = count_candidates(space)
    if total > MAX_CANDIDATES:  # counted from the axes' lengths: nothing is built first
        raise ScenarioError(f"{total:,} candidates; at most {MAX_CANDIDATES:,}", file=file)
    return space


def count_candidates(space: AutoscaleSpace) -> int:
    """How many candidates `candidates` would give, from the axes' lengths alone."""
    per_base = sum(len(t) for t in space.signals.values())
    per_base += sum(len(p) for p in space.thresholds.values()) * len(space.step)
    if space.predictive is not None:
        per_base += len(space.predictive.capacity_rps)
    bases = len(space.min) * len(space.scale_in_cooldown_s) * len(space.scale_out_cooldown_s)
    return len(space.gpus or [""]) * bases * per_base


def candidates(space: AutoscaleSpace, default_gpu: str) -> list[Candidate]:
    """Every candidate of the space, in a stable order."""
    common = {
        "max": space.max,
        "interval_s": space.interval_s,
        "tolerance": space.tolerance,
        "provisioning": space.provisioning.model_dump(),
    }
    policies: list[dict[str, Any]] = []
    for lo, cool_in, cool_out in itertools.product(
        space.min, space.scale_in_cooldown_s, space.scale_out_cooldown_s
    ):
        base = {**common, "min": lo, "scale_in_cooldown_s": cool_in,
                "scale_out_cooldown_s": cool_out}  # fmt: skip
        for signal, targets in space.signals.items():
            for target in targets:
                policies.append({**base, "mode": "target", "signal": signal, "target": target})
        for signal, pairs in space.thresholds.items():
            for (below, above), step in itertools.product(pairs, space.step):
                policies.append(
                    {**base, "mode": "threshold", "signal": signal, "scale_in_below": below,
                     "scale_out_above": above, "step": step}
                )  # fmt: skip
        if space.predictive is not None:
            p = space.predictive
            for capacity in p.capacity_rps:
                policies.append(
                    {**base, "mode": "predictive", "signal": "running", "target": p.target,
                     "capacity_rps": capacity, "headroom": p.headroom}
                )  # fmt: skip
    out = []
    for gpu in space.gpus or [default_gpu]:
        for policy in policies:
            out.append(Candidate(_name(gpu, policy), gpu, policy))
    return out


def _name(gpu: str, policy: dict[str, Any]) -> str:
    if policy["mode"] == "predictive":
        what = f"predictive-{policy['capacity_rps']:g}rps"
    elif policy["mode"] == "threshold":
        what = (
            f"{policy['signal']}-{policy['scale_in_below']:g}to{policy['scale_out_above']:g}"
            f"-step{policy['step']}"
        )
    else:
        what = f"{policy['signal']}-{policy['target']:g}"
    cool = f"in{policy['scale_in_cooldown_s']:g}s"
    return f"{gpu}_{what}_min{policy['min']}_{cool}_out{policy['scale_out_cooldown_s']:g}s"
