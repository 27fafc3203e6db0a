"""What a GPU costs to rent and how much power it draws: the defaults behind a fleet's dollars
per hour, dollars per million output tokens and joules per output token.

Prices are on-demand list prices per GPU-hour of specialist GPU clouds (eight-GPU SXM nodes
divided by eight where the GPU is sold that way), rounded to the cent, as published around
`PRICES_AS_OF`; the source of each is in the table. They are defaults, not quotes: prices differ
between providers (hyperscalers list the same GPUs at two to four times these figures), regions,
commitments and months, so override them for your own question: `hardware: {name: h100-sxm,
usd_per_gpu_hour: 2.2}` in a scenario, or the same mapping in a search space's `gpus`.

Power: `tdp_w` is the datasheet's maximum board power (thermal design power) per GPU (SXM
modules for the SXM parts). `idle_w` is not a datasheet figure: it is `IDLE_FRACTION` of the TDP,
the draw of an idle GPU with a model loaded and its clocks up (nvidia-smi readings of idle A100
and H100 SXM boards are typically 15-25 % of TDP). Override either per GPU like the price.

Energy model (sim/metrics/fleet.py): an instance of `g` GPUs busy `b` seconds of a span of `L`
seconds draws on average `g * (idle_w + (tdp_w - idle_w) * b / L)` watts: idle power all the time,
plus the dynamic part (TDP minus idle) weighted by the fraction of time it runs steps. A busy GPU
is taken to draw its full TDP whatever the step (memory-bound decode steps draw less in practice),
so the estimate leans high for decode-heavy work.
"""

from __future__ import annotations

from dataclasses import dataclass

PRICES_AS_OF = "2025-06"
IDLE_FRACTION = 0.2


@dataclass(frozen=True)
class GpuEconomics:
    """Price per GPU-hour (US dollars) and board power per GPU (watts); NaN where unknown."""

    usd_per_gpu_hour: float
    tdp_w: float
    idle_w: float


def _gpu(usd_per_gpu_hour: float, tdp_w: float) -> GpuEconomics:
    return GpuEconomics(usd_per_gpu_hour, tdp_w, round(IDLE_FRACTION * tdp_w, 1))


# catalog GPU -> defaults. Prices: on-demand list prices as of PRICES_AS_OF (source per row);
# TDP: the vendor datasheet's maximum board power.
DEFAULT_ECONOMICS: dict[str, GpuEconomics] = {
    # Lambda on-demand A100 SXM 40GB, 1x instance; datasheet 400 W (SXM4)
    "a100-40g": _gpu(1.29, 400.0),
    # Lambda on-demand 8x A100 SXM 80GB node per GPU; datasheet 400 W (SXM4)
    "a100-80g": _gpu(1.79, 400.0),
    # RunPod on-demand A40 48GB (secure cloud); datasheet 300 W
    "a40": _gpu(0.44, 300.0),
    # Lambda on-demand 8x H100 SXM node per GPU; datasheet up to 700 W (SXM5)
    "h100-sxm": _gpu(2.99, 700.0),
    # Lambda on-demand H100 PCIe, 1x instance; datasheet 350 W
    "h100-pcie": _gpu(2.49, 350.0),
    # RunPod on-demand H200 SXM (secure cloud); datasheet up to 700 W (SXM)
    "h200": _gpu(3.99, 700.0),
    # RunPod on-demand L40S (secure cloud); datasheet 350 W
    "l40s": _gpu(0.86, 350.0),
    # Lambda on-demand 8x B200 SXM node per GPU; HGX B200 datasheet up to 1,000 W per GPU
    "b200": _gpu(4.99, 1000.0),
    # CoreWeave on-demand GB200 NVL72 instance, $42.00 an hour for 4 GPUs (2025), per GPU;
    # NVIDIA GB200 NVL72 specifications: configurable up to 1,200 W per GPU (nvidia-smi's cap)
    "gb200": _gpu(10.50, 1200.0),
    # RunPod on-demand B300 (secure cloud), $7.89 per GPU-hour (listed 2026-09; Hyperstack $7.40,
    # Nebius $7.85 the same month); HGX B300: configurable up to 1,100 W per GPU
    "b300": _gpu(7.89, 1100.0),
    # Verda on-demand GB300 SXM6 288GB, $9.06 per GPU-hour (listed 2026-09; the larger clouds
    # quote GB300 NVL72 on request only); GB300 NVL72: up to 1,400 W per GPU
    "gb300": _gpu(9.06, 1400.0),
    # Vultr on-demand MI300X, $1.85 per GPU-hour (listed 2025-2026); datasheet 750 W
    "mi300x": _gpu(1.85, 750.0),
    # TensorWave on-demand MI325X, $1.95 per GPU-hour (listed 2026); datasheet 1,000 W
    "mi325x": _gpu(1.95, 1000.0),
    # No on-demand list price found; assumed: the B200's $4.99 times the MI300X / H100 SXM price
    # ratio of this table (1.85 / 2.99), as AMD parts rent below their NVIDIA peers. Datasheet
    # 1,400 W (liquid-cooled; the air-cooled MI350X is 1,000 W)
    "mi355x": _gpu(3.09, 1400.0),
    # RunPod on-demand RTX 4090 24GB, $0.60 per GPU-hour (listed 2026-03); 450 W board power
    "rtx-4090": _gpu(0.60, 450.0),
}

UNKNOWN = GpuEconomics(float("nan"), float("nan"), float("nan"))


def economics(
    name: str,
    usd_per_gpu_hour: float | None = None,
    tdp_w: float | None = None,
    idle_w: float | None = None,
) -> GpuEconomics:
    """The figures given, else the defaults of catalog GPU `name` (NaN for other GPUs).

    An idle figure missing beside a given TDP is `IDLE_FRACTION` of that TDP."""
    base = DEFAULT_ECONOMICS.get(name, UNKNOWN)
    tdp = base.tdp_w if tdp_w is None else tdp_w
    if idle_w is None:
        idle_w = base.idle_w if tdp_w is None else round(IDLE_FRACTION * tdp, 1)
    price = base.usd_per_gpu_hour if usd_per_gpu_hour is None else usd_per_gpu_hour
    return GpuEconomics(price, tdp, idle_w)
