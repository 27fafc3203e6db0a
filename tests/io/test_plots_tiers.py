"""The timeline's panel of KV tiers below the GPU: exact held counts on a hand-made table (a
shared store counted once, per-instance tiers summed), the lines of a small tiered run against
its step table, and no panel at all for a run without tiers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from helpers_results import tiered_results

from sim.io.plots import MAX_POINTS, timeline_figure


def tier_lines(fig: Any) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The tier panel's lines by label, (x, y); none when the figure has no such panel."""
    tiers = [ax for ax in fig.axes if ax.get_ylabel() == "blocks held"]
    if not tiers:
        return {}
    return {
        str(line.get_label()): (np.asarray(line.get_xdata()), np.asarray(line.get_ydata()))
        for line in tiers[0].get_lines()
    }


def at(line: tuple[np.ndarray, np.ndarray], t: float) -> float:
    """The line's value on the bin that starts at time t."""
    x, y = line
    return float(y[np.searchsorted(x, t - 1e-9)])


def test_tier_counts_hold_until_the_next_count_shared_store_once() -> None:
    # instance 0 steps [0, 1) and [2, 3), instance 1 steps [0.5, 2); each row counts at its end
    steps = pd.DataFrame(
        {"variant": "v", "instance": [0, 1, 0], "start_s": [0.0, 0.5, 2.0],
         "end_s": [1.0, 2.0, 3.0], "num_seqs": 1, "num_waiting": 0, "kv_blocks_used": 1,
         "kv_dram_blocks": [2, 1, 4], "kv_nvme_blocks": 0, "kv_remote_blocks": [3, 4, 5]}
    )  # fmt: skip
    fig = timeline_figure(steps)
    # batch size, KV use and the tiers: no request ever waited, so no queue panel
    assert len(fig.axes) == 3 and fig.axes[2].get_ylabel() == "blocks held"
    assert fig.axes[2].get_xlabel() == "simulated time (s)" and fig.axes[1].get_xlabel() == ""
    lines = tier_lines(fig)
    assert list(lines) == ["v: DRAM", "v: remote"]  # NVMe held nothing: no line
    dram, remote = lines["v: DRAM"], lines["v: remote"]
    assert len(dram[0]) == MAX_POINTS + 1
    # DRAM, per instance and summed: nothing until 1, then 2 (instance 0), then 2 + 1 from 2
    assert [at(dram, t) for t in (0.5, 1.5, 2.5)] == pytest.approx([0.0, 2.0, 3.0])
    # the remote store: each count is all of it, the latest one stands (3 from 1, 4 from 2)
    assert [at(remote, t) for t in (0.5, 1.5, 2.5)] == pytest.approx([0.0, 3.0, 4.0])
    assert fig.axes[2].get_lines()[1].get_linestyle() == ":"


def held_integral(steps: pd.DataFrame, column: str) -> float:
    """Block-seconds of a tier on one instance: each count held from its group's end to the
    next group's end (the last one to the end of the run: nothing after it)."""
    rows = steps.sort_values("end_s", kind="stable")
    end = rows["end_s"].to_numpy(dtype=float)
    return float((rows[column].to_numpy(dtype=float)[:-1] * np.diff(end)).sum())


def test_a_tiered_run_draws_each_tier_it_filled() -> None:
    res = tiered_results()
    summary = res["tiered"].summary()
    steps = res["tiered"].steps
    assert summary["kv_block_hit_rate_remote"] > 0 and summary["kv_dram_blocks"] > 0
    fig = timeline_figure(res.steps, {"tiered": 120, "gpu-only": 120})
    lines = tier_lines(fig)
    assert list(lines) == ["tiered: DRAM", "tiered: remote"]  # none for the run without tiers
    span = steps["end_s"].max() - steps["start_s"].min()
    for kind, label in (("dram", "DRAM"), ("remote", "remote")):
        y = lines[f"tiered: {label}"][1]
        column = f"kv_{kind}_blocks"
        # the time-weighted line keeps the step table's block-seconds, and ends at the count
        # the run ended with (what the summary reports as held)
        assert float(np.mean(y[:-1])) * span == pytest.approx(held_integral(steps, column))
        assert y[-1] == pytest.approx(summary[column])
        assert np.nanmax(y) <= steps[column].max() + 1e-6


def test_a_run_without_tiers_keeps_three_panels() -> None:
    res = tiered_results()
    plain = res.steps[res.steps["variant"] == "gpu-only"]
    fig = timeline_figure(plain, {"gpu-only": 120})
    assert len(fig.axes) == 3 and tier_lines(fig) == {}
    assert tuple(fig.get_size_inches()) == (12, 9)
    assert fig.axes[2].get_xlabel() == "simulated time (s)"
    labels = [str(line.get_label()) for ax in fig.axes for line in ax.get_lines()]
    assert not any(kind in label for label in labels for kind in ("DRAM", "NVMe", "remote"))
    # a table from before tiers existed (no tier columns) plots the same three panels
    older = plain.drop(columns=["kv_load_s", "kv_dram_blocks", "kv_nvme_blocks",
                                "kv_remote_blocks"])  # fmt: skip
    again = timeline_figure(older, {"gpu-only": 120})
    assert len(again.axes) == 3
    for a, b in zip(fig.axes, again.axes, strict=True):
        for la, lb in zip(a.get_lines(), b.get_lines(), strict=True):
            assert np.array_equal(la.get_ydata(), lb.get_ydata())
