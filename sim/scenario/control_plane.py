"""The control plane's schema: autoscaling an instance group, admitting requests, and what the
router sees of the engines.

Autoscaling (`autoscale:` on a group of `cluster.instances`, or on `disaggregation.prefill` /
`disaggregation.decode`, each pool scaled on its own). Every `interval_s` the group's autoscaler
reads its signal over the group's serving instances and decides a desired count:

* `mode: target` (target tracking, as the Kubernetes HPA and AWS target tracking do):
  `desired = ceil(serving * signal / target)`, left alone while `|signal / target - 1|` is
  within `tolerance`;
* `mode: threshold` (step scaling): `step` more instances while the signal is above
  `scale_out_above`, `step` fewer while it is below `scale_in_below`;
* `mode: predictive`: the count the rate profile asks for `lead_s` ahead (default: the
  provisioning delay), `ceil(rate(t + lead) * headroom / capacity_rps)`, never below what the
  reactive rule (target tracking on the signal) asks for now.

The count stays within `[min, max]`; scaling out waits `scale_out_cooldown_s` after the last
scale-out, scaling in `scale_in_cooldown_s` after the last scaling of either kind. `min: 0`
scales to zero: an arrival that finds no instance serving waits at the gateway and launches one.

A launched instance is billed from its launch and serves after its provisioning delay,
`scheduling_s + weight bytes / load_bandwidth + warmup_s` (defaults below), with an empty prefix
cache. A removed instance drains: it receives nothing new, finishes the requests it holds (none
migrate), and is billed until its last one ends.

Signals, each averaged over the group's serving instances at the decision: `queue_length`
(requests waiting), `running` (requests running), `kv_use` (fraction of KV blocks in use),
`ttft` (mean TTFT, seconds, of the requests whose first token came in the last `window_s`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StrictInt, model_validator

from sim.inputs.strict_model import StrictModel

# Provisioning defaults: a pod scheduled onto a node that already has free GPUs (a new node adds
# minutes), weights read from a network volume or local NVMe cache at about 2 GB/s, and vLLM's
# start-up after loading (torch.compile and CUDA-graph capture without a compile cache), which
# public measurements put at tens of seconds to minutes (Tensorfuse, "Reducing GPU cold start
# time when using vLLM", 2025, Llama-3.1-8B on L40S; "Breaking the Ice: Analyzing Cold Start
# Latency in vLLM", MLSys 2026).
DEFAULT_SCHEDULING_S = 30.0
DEFAULT_LOAD_BANDWIDTH_GB_PER_S = 2.0
DEFAULT_WARMUP_S = 60.0
MAX_INSTANCES = 4096
MIN_PERIOD_S = 0.01  # the shortest autoscaler interval or signal window
MIN_REFRESH_S = 1e-3  # the shortest load scrape of a router (0: exact at each decision)
MAX_TICKS = 2_000_000  # events one periodic timer may add to a run (a day at 43 ms)

Signal = Literal["queue_length", "running", "kv_use", "ttft"]


class _Strict(StrictModel):
    model_config = ConfigDict(frozen=True)


class ProvisioningSpec(_Strict):
    """How long a launched instance takes to serve: scheduling + weights / bandwidth + warm-up."""

    scheduling_s: float = Field(default=DEFAULT_SCHEDULING_S, ge=0, le=86400)
    load_bandwidth_gb_per_s: float = Field(default=DEFAULT_LOAD_BANDWIDTH_GB_PER_S, gt=0, le=1e4)
    warmup_s: float = Field(default=DEFAULT_WARMUP_S, ge=0, le=86400)

    def delay_s(self, weight_bytes: float) -> float:
        """Seconds from launch to serving for an instance that loads `weight_bytes`."""
        return self.scheduling_s + weight_bytes / (self.load_bandwidth_gb_per_s * 1e9) + (
            self.warmup_s
        )


class AutoscaleSpec(_Strict):
    """A group's autoscaler (see the module docstring); the group's `count` is where it starts."""

    mode: Literal["target", "threshold", "predictive"] = "target"
    signal: Signal = "queue_length"
    target: float | None = Field(default=None, gt=0, le=1e9)  # target and predictive modes
    tolerance: float = Field(default=0.1, ge=0, le=10)
    scale_out_above: float | None = Field(default=None, ge=0, le=1e9)  # threshold mode
    scale_in_below: float | None = Field(default=None, ge=0, le=1e9)
    step: int = Field(default=1, gt=0, le=MAX_INSTANCES)
    min: int = Field(default=1, ge=0, le=MAX_INSTANCES)
    max: int = Field(default=8, gt=0, le=MAX_INSTANCES)
    # floors: a control loop ticking faster than 10 ms is no autoscaler's (Kubernetes' HPA
    # syncs every 15 s); the number of ticks over the run is also capped (`timer_problem`)
    interval_s: float = Field(default=15.0, ge=MIN_PERIOD_S, le=86400)
    window_s: float = Field(default=60.0, ge=MIN_PERIOD_S, le=86400)  # the ttft signal's window
    scale_out_cooldown_s: float = Field(default=60.0, ge=0, le=86400)
    scale_in_cooldown_s: float = Field(default=300.0, ge=0, le=86400)
    # predictive mode: requests per second one instance serves within the SLOs, the margin over
    # the forecast, and how far ahead it looks (None: the provisioning delay)
    capacity_rps: float | None = Field(default=None, gt=0, le=1e6)
    headroom: float = Field(default=1.0, ge=1, le=10)
    lead_s: float | None = Field(default=None, ge=0, le=86400)
    provisioning: ProvisioningSpec = ProvisioningSpec()

    @model_validator(mode="after")
    def _consistent(self) -> AutoscaleSpec:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max})")
        if self.mode in ("target", "predictive") and self.target is None:
            raise ValueError(f"mode {self.mode} needs target (the signal's set point)")
        if self.mode == "threshold":
            if self.scale_out_above is None or self.scale_in_below is None:
                raise ValueError("mode threshold needs scale_out_above and scale_in_below")
            if self.scale_in_below >= self.scale_out_above:
                raise ValueError(
                    f"scale_in_below ({self.scale_in_below}) must be below scale_out_above "
                    f"({self.scale_out_above})"
                )
        elif self.scale_out_above is not None or self.scale_in_below is not None:
            raise ValueError(
                "scale_out_above and scale_in_below belong to mode threshold; mode "
                f"{self.mode} uses target"
            )
        if self.mode == "predictive" and self.capacity_rps is None:
            raise ValueError(
                "mode predictive needs capacity_rps (requests per second per instance)"
            )
        if self.mode != "predictive" and (self.capacity_rps is not None or self.lead_s is not None):
            raise ValueError("capacity_rps and lead_s belong to mode predictive")
        return self


class AdmissionSpec(_Strict):
    """Load shedding at the gateway: a request whose chosen instance already has
    `max_waiting` requests waiting is rejected (reason `shed: queue full`); `tiers` sets the
    limit per SLO tier (a tier not named takes `max_waiting`; None: no limit)."""

    max_waiting: int | None = Field(default=None, ge=0, le=10**7)
    tiers: dict[str, Annotated[StrictInt, Field(ge=0, le=10**7)]] = Field(default_factory=dict)

    def limit(self, tier: str) -> int | None:
        return self.tiers.get(tier, self.max_waiting)


def timer_problem(period_s: float, span_s: float) -> str | None:
    """Why a timer of `period_s` over a run whose arrivals span `span_s` would add too many
    events (one per period), or None."""
    if period_s > 0 and span_s / period_s > MAX_TICKS:
        return (f"{period_s:g} s ticks more than {MAX_TICKS:,} times over the run's "
                f"{span_s:g} s of arrivals; use at least {span_s / MAX_TICKS:.3g} s")
    return None
