"""What a fleet costs and draws: dollars per hour and per million output tokens, watts and joules
per output token.

The fleet is every instance of the run (both pools of a disaggregated one), each of
`tensor_parallel` GPUs with its price per GPU-hour and board power (`SummaryContext.fleet`,
defaults in sim/costs/prices.py). Rented GPUs cost the same busy or idle, so

    fleet_usd_per_hour            = sum over instances of GPUs * usd_per_gpu_hour
                                    + the rent of the KV tiers below the GPU (host DRAM and NVMe
                                      per instance, a shared store once; sim/scenario/kv_tiers.py)
    usd_per_million_output_tokens = fleet_usd_per_hour / 3600 / output_tokens_per_s * 1e6

Power follows the model stated in sim/costs/prices.py: idle power all the time plus the dynamic
part (TDP - idle) weighted by the fraction of the span each instance is busy,

    fleet_power_w             = sum of GPUs * (idle_w + (tdp_w - idle_w) * busy_s / span_s)
    energy_per_output_token_j = fleet_power_w / output_tokens_per_s

with the span from the first arrival to the last step's end (that of `busy_fraction`). Both
per-token figures divide a rate of spending by the measured output throughput (the window of
`output_tokens_per_s`), so they describe the steady state the window measures. An instance that
never ran a step still costs its rent and draws its idle power.

An autoscaled fleet (`ctx.lifetimes`) bills each instance for its own lifetime, from its launch
to its retirement (or the run's end, the last step's end or retirement, whichever is later):

    fleet_usd                 = sum over instances of GPUs * usd_per_gpu_hour * lifetime_h
                                + the shared store's rent over the run
    fleet_usd_per_hour        = fleet_usd / run_h         (the run from 0 to its end)
    fleet_kwh                 = sum of GPUs * (idle_w * lifetime_s + (tdp_w - idle_w) * busy_s)
                                / 3.6e6
    fleet_power_w             = fleet_kwh * 3.6e6 / run_s
    instance_hours, mean_instances (instance_hours / run_h), peak_instances (most billed at once)

and `fleet_usd_per_day` is fleet_usd_per_hour * 24. A fixed fleet's summary keeps the formulas
above and has none of these keys.
"""

from __future__ import annotations

import math

from sim.metrics.context import SummaryContext
from sim.metrics.steps import StepTotals

FLEET_METRICS = (
    "num_gpus",
    "fleet_usd_per_hour",
    "usd_per_million_output_tokens",
    "fleet_power_w",
    "energy_per_output_token_j",
)


def _per_token(rate: float, tokens_per_s: float) -> float:
    return rate / tokens_per_s if tokens_per_s > 0 else math.nan


def fleet_summary(
    totals: dict[int, StepTotals],
    ctx: SummaryContext,
    first_arrival_s: float,
    output_tokens_per_s: float,
) -> dict[str, float]:
    """The fleet metrics (`FLEET_METRICS`) from per-instance step totals (see the docstring)."""
    if not ctx.fleet:
        return {"num_gpus": 0, **{key: math.nan for key in FLEET_METRICS[1:]}}
    if ctx.lifetimes:
        return _over_lifetimes(totals, ctx, output_tokens_per_s)
    active = [t for t in totals.values() if t.num_steps > 0 or t.busy_s > 0]
    end = max((t.end_s for t in active), default=math.nan)
    start = first_arrival_s
    if math.isnan(start) and active:
        start = min(t.start_s for t in active)
    span = end - start
    usd_per_hour = sum(gpus * price for gpus, price, _, _ in ctx.fleet) + ctx.memory_usd_per_hour
    power = 0.0
    for index, (gpus, _, tdp, idle) in enumerate(ctx.fleet):
        own = totals.get(index)
        busy = own.busy_s if own is not None else 0.0
        fraction = min(busy / span, 1.0) if span > 0 else math.nan
        power += gpus * (idle + (tdp - idle) * fraction)
    return {
        "num_gpus": sum(gpus for gpus, *_ in ctx.fleet),
        "fleet_usd_per_hour": usd_per_hour,
        "usd_per_million_output_tokens": _per_token(usd_per_hour / 3600 * 1e6, output_tokens_per_s),
        "fleet_power_w": power,
        "energy_per_output_token_j": _per_token(power, output_tokens_per_s),
    }


def _over_lifetimes(
    totals: dict[int, StepTotals], ctx: SummaryContext, output_tokens_per_s: float
) -> dict[str, float]:
    """The fleet metrics of an autoscaled run (see the module docstring)."""
    ends = [t.end_s for t in totals.values() if t.num_steps > 0 or t.busy_s > 0]
    retired = [r for _, r in ctx.lifetimes if not math.isnan(r)]
    end = max([*ends, *retired, 0.0])
    usd = ctx.memory_usd_per_hour * end / 3600
    joules = 0.0
    instance_s = 0.0
    edges: list[tuple[float, int]] = []
    for index, ((gpus, price, tdp, idle), (launch, retire)) in enumerate(
        zip(ctx.fleet, ctx.lifetimes, strict=True)
    ):
        stop = end if math.isnan(retire) else retire
        life = max(0.0, stop - launch)
        own = totals.get(index)
        busy = own.busy_s if own is not None else 0.0
        usd += gpus * price * life / 3600
        joules += gpus * (idle * life + (tdp - idle) * min(busy, life))
        instance_s += life
        edges += [(launch, 1), (stop, -1)]
    live = peak = 0
    for _, change in sorted(edges):  # a retirement at t sorts before a launch at t
        live += change
        peak = max(peak, live)
    usd_per_hour = usd / (end / 3600) if end > 0 else math.nan
    power = joules / end if end > 0 else math.nan
    return {
        "num_gpus": sum(gpus for gpus, *_ in ctx.fleet),
        "fleet_usd_per_hour": usd_per_hour,
        "usd_per_million_output_tokens": _per_token(usd_per_hour / 3600 * 1e6, output_tokens_per_s),
        "fleet_power_w": power,
        "energy_per_output_token_j": _per_token(power, output_tokens_per_s),
        "fleet_usd": usd,
        "fleet_usd_per_day": usd_per_hour * 24,
        "fleet_kwh": joules / 3.6e6,
        "instance_hours": instance_s / 3600,
        "mean_instances": instance_s / end if end > 0 else math.nan,
        "peak_instances": float(peak),
    }
