"""What a summary needs beyond the tables: SLOs, exclusion windows, hardware figures, prices."""

from __future__ import annotations

from dataclasses import dataclass

from sim.metrics.tiers import TierTargets


@dataclass(frozen=True)
class SummaryContext:
    """What `summarize` needs beyond the tables: SLOs, exclusion windows and hardware numbers."""

    slo_ttft_s: float | None  # SLO targets; None = no target on that metric
    slo_tpot_s: float | None
    warmup_s: float  # exclude requests arriving in the first warmup_s of the arrival span
    cooldown_s: float  # ... and in the last cooldown_s
    flops_per_token: float  # 2 * parameters
    weight_bytes: float
    kv_bytes_per_token: float
    peak_flops: float  # per instance
    hbm_bandwidth_bytes_per_s: float
    kv_blocks_total: int  # per instance; contiguous allocators use block_size 1 token
    block_size: int
    num_instances: int = 1
    # per instance index: (kv_blocks_total, peak_flops, hbm bandwidth, kv_bytes_per_token,
    # block_size), so heterogeneous clusters weigh each instance by its own figures; empty:
    # every instance has the values above
    instances: tuple[tuple[int, float, float, float, int], ...] = ()
    num_links: int = 0  # KV-transfer links of a disaggregated cluster
    # per-tier SLO targets (tier, ttft_s, tpot_s), defaults already filled in
    slo_tiers: TierTargets = ()
    # per instance index: (GPUs, US dollars per GPU-hour, TDP and idle watts per GPU), for the
    # fleet's price and energy (sim.metrics.fleet); empty: unknown, those metrics are NaN
    fleet: tuple[tuple[int, float, float, float], ...] = ()
    # per instance index of an autoscaled fleet: (launch_s, retire_s), retire NaN when alive at
    # the end; empty: every instance lives the whole run (sim.metrics.fleet)
    lifetimes: tuple[tuple[float, float], ...] = ()
    # KV tiers below the GPU: their rent, dollars per hour (sim/scenario/kv_tiers.py)
    memory_usd_per_hour: float = 0.0
    # whether an instance decodes speculatively: the summary then has the spec_* metrics
    speculative: bool = False
    # an agents workload's task target (`slo.task_s`, sim/metrics/tasks.py); None: none
    slo_task_s: float | None = None
