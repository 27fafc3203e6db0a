"""Batch-slot timeline: which request held which batch slot of one instance, over time.

The engine keeps no per-slot record, so the chart is reconstructed from the requests table.
Each request occupies a slot of its instance from `first_scheduled_s` until it stops doing useful
work (`finish_s`; on a prefill instance of a disaggregated pair, when its KV has left:
`transfer_end_s`; on a decode instance it arrives at `transfer_end_s`). Under static batching a
member keeps its slot until the whole batch ends (the latest finish among the requests that
started with it: a static batch is the set of requests of one instance sharing
`first_scheduled_s`); the time between its own finish and the batch end is padding, drawn
hatched; the wait in the queue is a thin line leading up to the slot (head-of-line blocking
shows as long lines ending at a batch start). Slots are then assigned greedily (interval
partitioning: each interval, in start order, takes the lowest-numbered slot free at its start),
which needs exactly as many slots as the largest number of requests resident at once.

Approximations, stated: a preempted request is drawn holding its slot from first schedule to
finish (the table does not record when it was out), and a request's prefill is not separated from
its decode here (the trace export shows phases).

For readability the chart is capped to a time window (by default the span in which the first
`max_requests` requests arrive), the same for every variant so that panels line up.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from sim.io.plot_units import time_axis, time_unit

DEFAULT_MAX_REQUESTS = 120


def occupancy(requests: pd.DataFrame, instance: int, *, static: bool) -> pd.DataFrame:
    """Slot intervals on `instance`: `id, arrival_s, start_s, busy_end_s, end_s`.

    Padding is `busy_end_s..end_s`; `arrival_s` is when the request reached this instance's queue
    (on a decode instance: when its KV arrived, so no wait).

    Rows are sorted by start; rejected and never-scheduled requests are left out.
    """
    # decode_instance is -1 (or missing) unless the request moved to a decode pool
    decode = requests["decode_instance"] if "decode_instance" in requests.columns else None
    disaggregated = decode is not None and bool((decode.fillna(-1) >= 0).any())
    frames = []
    here = requests[(requests["instance"] == instance) & requests["first_scheduled_s"].notna()]
    if disaggregated:
        # prefill side: the KV stays until the transfer has finished
        held = here["transfer_end_s"].fillna(here["finish_s"])
        frames.append(pd.DataFrame({"id": here["id"], "arrival_s": here["arrival_s"],
                                    "start_s": here["first_scheduled_s"],
                                    "busy_end_s": held}))  # fmt: skip
        assert decode is not None
        there = requests[(decode == instance) & requests["transfer_end_s"].notna()]
        frames.append(pd.DataFrame({"id": there["id"], "arrival_s": there["transfer_end_s"],
                                    "start_s": there["transfer_end_s"],
                                    "busy_end_s": there["finish_s"]}))  # fmt: skip
    else:
        frames.append(pd.DataFrame({"id": here["id"], "arrival_s": here["arrival_s"],
                                    "start_s": here["first_scheduled_s"],
                                    "busy_end_s": here["finish_s"]}))  # fmt: skip
    out = pd.concat(frames, ignore_index=True).dropna(subset=["busy_end_s"])
    out["end_s"] = out["busy_end_s"]
    if static and not disaggregated and len(out):
        out["end_s"] = out.groupby("start_s")["busy_end_s"].transform("max")
    return out.sort_values(["start_s", "id"], ignore_index=True)


def assign_slots(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Interval partitioning: slot index per interval (inputs sorted by start)."""
    slots = np.zeros(len(start), dtype=np.int64)
    busy: list[tuple[float, int]] = []  # (end, slot) of intervals still resident
    free: list[int] = []
    next_slot = 0
    for i, (s, e) in enumerate(zip(start.tolist(), end.tolist(), strict=True)):
        while busy and busy[0][0] <= s:  # a slot freed at t can be taken at t
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            slot = heapq.heappop(free)
        else:
            slot, next_slot = next_slot, next_slot + 1
        slots[i] = slot
        heapq.heappush(busy, (e, slot))
    return slots


def default_window(requests: pd.DataFrame, max_requests: int) -> tuple[float, float]:
    """From the first arrival to the arrival of the `max_requests`-th request."""
    # variants share their requests: count each id once
    unique = requests.drop_duplicates("id") if "id" in requests.columns else requests
    arrivals = np.sort(unique["arrival_s"].dropna().to_numpy(dtype=float))
    if arrivals.size == 0:
        return 0.0, 1.0
    last = arrivals[min(max_requests, arrivals.size) - 1]
    return float(arrivals[0]), float(max(last, arrivals[0] + 1e-6))


def _boxes(left: np.ndarray, right: np.ndarray, slot: np.ndarray) -> np.ndarray:
    """Rectangles (n, 4, 2) spanning left..right in time and slot +- 0.4."""
    low, high = slot - 0.4, slot + 0.4
    return np.stack([np.stack([left, low], 1), np.stack([right, low], 1),
                     np.stack([right, high], 1), np.stack([left, high], 1)], 1)  # fmt: skip


def _draw(ax: Axes, table: pd.DataFrame, window: tuple[float, float]) -> int:
    """Draw the slots of `table` overlapping `window`; return the number of slots shown."""
    lo, hi = window
    table = table[(table["end_s"] > lo) & (table["start_s"] < hi)]
    if table.empty:
        ax.text(0.5, 0.5, "no requests in this window", transform=ax.transAxes, ha="center")
        return 0
    slot = table["slot"].to_numpy(dtype=float)
    start, busy_end, end = (table[c].to_numpy(dtype=float)
                            for c in ("start_s", "busy_end_s", "end_s"))  # fmt: skip
    # one collection per kind keeps drawing fast however many requests are shown
    # the wait before the slot: a thin line from arrival to start, at the slot it will take
    ax.hlines(
        slot,
        table["arrival_s"].to_numpy(dtype=float),
        start,
        color="0.4",
        linewidth=0.8,
        zorder=0.5,
    )
    colors = [f"C{int(i) % 10}" for i in table["id"]]
    ax.add_collection(PolyCollection(list(_boxes(start, busy_end, slot)), facecolors=colors,
                                     edgecolors="white", linewidths=0.3))  # fmt: skip
    pad = end > busy_end
    if pad.any():
        ax.add_collection(PolyCollection(list(_boxes(busy_end[pad], end[pad], slot[pad])),
                                         facecolors="0.85", edgecolors="0.5", hatch="///",
                                         linewidths=0.3))  # fmt: skip
    return int(slot.max()) + 1


def slot_timeline_figure(
    requests: pd.DataFrame,
    static_variants: Mapping[str, bool],
    *,
    instance: int = 0,
    max_requests: int = DEFAULT_MAX_REQUESTS,
    window: tuple[float, float] | None = None,
) -> Figure:
    """One panel per variant: the batch slots of `instance` over a common time window.

    `static_variants` lists the variants to draw (in order), each mapped to whether its policy is
    static batching (padding is then drawn until its batch ends).
    """
    names = [str(n) for n in static_variants]
    frames = {n: requests[requests["variant"] == n] for n in names}
    if window is None:
        window = default_window(requests[requests["variant"].isin(names)], max_requests)
    fig = Figure(figsize=(13, 2.2 + 2.6 * max(len(names), 1)), layout="constrained")
    axes = fig.subplots(max(len(names), 1), 1, sharex=True, squeeze=False)[:, 0]
    for ax, name in zip(axes, names, strict=False):
        table = occupancy(frames[name], instance, static=static_variants[name])
        table["slot"] = assign_slots(table["start_s"].to_numpy(dtype=float),
                                     table["end_s"].to_numpy(dtype=float))  # fmt: skip
        num_slots = _draw(ax, table, window)
        ax.set_title(f"{name}: batch slots of instance {instance}")
        ax.set_ylabel("batch slot")
        ax.set_ylim(-0.6, max(num_slots, 1) - 0.4)
        ax.grid(True, axis="x", alpha=0.3)
    axes[-1].set_xlim(*window)
    time_axis(axes[-1], window[1] - window[0])
    handles = [Line2D([], [], color="0.4", linewidth=0.8, label="waiting in the queue"),
               Patch(facecolor="C0", label="request in its slot (colour per request)"),
               Patch(facecolor="0.85", edgecolor="0.5", hatch="///",
                     label="padding: finished, slot held until the batch ends")]  # fmt: skip
    fig.legend(handles=handles, loc="outside lower center", ncols=3)
    span = window[1] - window[0]
    unit, name = time_unit(span) if math.isfinite(span) else (1.0, "s")
    fig.suptitle(f"Batch slots over the first {span / unit:.3g} {name} (up to {max_requests} "
                 "arrivals)"
                 if math.isfinite(span) else "Batch slots")  # fmt: skip
    return fig
