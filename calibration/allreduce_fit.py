"""Latency and bandwidth of NCCL all-reduce fitted to Vidur's measured collective timings.

Vidur (microsoft/vidur, MIT) published `network/<node>/all_reduce.csv.gz`: the time in
milliseconds (`time_stats.all_reduce.median`, ...) of one all-reduce of `size` bytes among
`num_workers` GPUs, `devices_per_node` of them in one node. `fit_allreduce` fits
`time = latency + bytes / bus_bandwidth * 2 (n - 1) / n` per worker count, on the rows of one node
(devices_per_node == num_workers: tensor parallelism never leaves the node):

- latency: the median, over message sizes up to `SMALL_BYTES`, of each size's median time. A
  decode step's all-reduce carries batch x hidden x 2 bytes (tens of KiB to a few MiB), so the
  small-message time is the floor every step pays; the bandwidth term at 64 KiB is under 1 us.
- bus bandwidth: a least-squares slope through the rows of at least `LARGE_BYTES`, after the
  latency is taken off (NCCL's "bus bandwidth": ring traffic 2 (n - 1) / n x bytes per GPU).

The numbers behind the roofline's `ALLREDUCE_LATENCY_S` table (sim/costs/profile.py) come from
`python -m calibration.allreduce_fit <vidur>/network/h100_dgx/all_reduce.csv.gz`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sim.errors import ScenarioError

SMALL_BYTES = 64 * 1024
LARGE_BYTES = 16 * 1024 * 1024
COLUMNS = ("num_workers", "devices_per_node", "size", "time_stats.all_reduce.median")


@dataclass(frozen=True)
class AllReduceFit:
    """One worker count's fit: seconds per all-reduce at small sizes, bytes/s of bus bandwidth
    (NaN where no row reaches `LARGE_BYTES`), and how many distinct sizes were measured."""

    num_workers: int
    latency_s: float
    bus_bandwidth_bytes_per_s: float
    num_sizes: int


def fit_allreduce(table: pd.DataFrame, *, file: str | None = None) -> dict[int, AllReduceFit]:
    """Fits per worker count, single-node rows only (see the module docstring)."""
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise ScenarioError(f"missing column(s) {', '.join(missing)}", file=file)
    for column in COLUMNS:
        values = pd.to_numeric(table[column], errors="coerce")
        bad = ~np.isfinite(values) | (values <= 0)
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise ScenarioError(
                f"{column} {table[column].iloc[row]!r} is not a positive number",
                file=file, path=f"row {row + 1}",
            )  # fmt: skip
    one_node = table[table["num_workers"] == table["devices_per_node"]]
    fits = {}
    for workers, rows in one_node.groupby("num_workers"):
        n = int(workers)
        per_size = rows.groupby("size")["time_stats.all_reduce.median"].median() * 1e-3
        small = per_size[per_size.index <= SMALL_BYTES]
        if small.empty:
            continue  # no small message measured: no latency floor to state
        latency = float(small.median())
        large = per_size[per_size.index >= LARGE_BYTES]
        bus = float("nan")
        if len(large) >= 2:
            traffic = large.index.to_numpy(dtype=float) * 2 * (n - 1) / n
            extra = large.to_numpy() - latency
            slope = float(np.dot(traffic, extra) / np.dot(traffic, traffic))  # through 0
            bus = 1 / slope if slope > 0 else float("nan")
        fits[n] = AllReduceFit(n, latency, bus, len(per_size))
    return fits


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    for name in args:
        path = Path(name)
        for fit in fit_allreduce(pd.read_csv(path), file=str(path)).values():
            print(
                f"{path.parent.name} tp{fit.num_workers}: latency {fit.latency_s * 1e6:.1f} us, "
                f"bus bandwidth {fit.bus_bandwidth_bytes_per_s / 1e9:.0f} GB/s "
                f"({fit.num_sizes} sizes)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
