"""Axis units and tick labels of the plots (not their pixels): TPOT and ITL in ms, TTFT in ms
where sub-second, one time unit per axis, and log axes labelled with plain numbers at a few
major ticks (minor ticks unlabelled, so labels cannot overlap)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from matplotlib.axis import Axis
from scenario_factory import continuous, poisson, run, scenario

from sim.io.plot_units import latency_unit, time_unit
from sim.io.plots import latency_cdf_figure, timeline_figure
from sim.io.plots_slots import slot_timeline_figure
from sim.io.plots_timeline import over_time_figure
from sim.io.replay_output import cdf_figure, scatter_figure

RNG = np.random.default_rng(3)
N = 200


def labels(axis: Axis, which: str = "major") -> list[str]:
    """The tick labels the axis shows in its view (the formatter's text of each tick)."""
    locator = axis.get_major_locator() if which == "major" else axis.get_minor_locator()
    formatter = axis.get_major_formatter() if which == "major" else axis.get_minor_formatter()
    low, high = sorted(axis.get_view_interval())
    ticks = [t for t in locator() if low <= t <= high]
    if hasattr(formatter, "set_locs"):
        formatter.set_locs(ticks)
    return [formatter(t, i) for i, t in enumerate(ticks)]


def assert_readable_log_axis(axis: Axis) -> None:
    assert axis.get_scale() == "log"
    shown = labels(axis)
    assert 2 <= len(shown) <= 10, shown
    assert [float(text) for text in shown] == sorted({float(text) for text in shown})
    assert all(text == "" for text in labels(axis, "minor"))


def requests_table() -> pd.DataFrame:
    ttft = RNG.uniform(0.02, 0.9, N)  # sub-second, 1.7 decades: a log axis
    tpot = RNG.uniform(0.010, 0.016, N)
    e2e = ttft + 300 * tpot
    return pd.DataFrame({"variant": "v", "id": np.arange(N), "ttft_s": ttft, "tpot_s": tpot,
                         "e2e_s": e2e})  # fmt: skip


def test_latency_units() -> None:
    assert latency_unit("tpot", [2.5]) == (1000.0, "ms")  # per-token: ms whatever the value
    assert latency_unit("ttft", [0.05, 0.9]) == (1000.0, "ms")
    assert latency_unit("ttft", [0.05, 1.5]) == (1.0, "s")
    assert time_unit(300) == (1.0, "s") and time_unit(1500) == (60.0, "min")


def test_the_latency_cdfs_give_tpot_and_sub_second_ttft_in_ms() -> None:
    fig = latency_cdf_figure(requests_table())
    ttft, tpot, e2e = fig.axes
    assert ttft.get_xlabel() == "TTFT (ms)" and tpot.get_xlabel() == "TPOT (ms)"
    assert e2e.get_xlabel() == "E2E latency (s)"
    assert_readable_log_axis(ttft.xaxis)
    low, high = tpot.get_xlim()
    assert 9 < low < high < 17  # milliseconds, not 0.0125 s
    assert all(len(text) <= 5 for text in labels(tpot.xaxis))


class _Run(SimpleNamespace):
    """The measured side a replay's plots read: latencies per request, and its length."""

    def __len__(self) -> int:
        return len(self.ttft_s)


def replay_result() -> SimpleNamespace:
    table = requests_table()
    run = _Run(ttft_s=table["ttft_s"].to_numpy() * 1.1, tpot_s=table["tpot_s"].to_numpy() * 0.95,
               e2e_s=table["e2e_s"].to_numpy())  # fmt: skip
    variants = {"v": SimpleNamespace(requests=table)}
    return SimpleNamespace(run=run, results=SimpleNamespace(variants=variants))


@pytest.mark.parametrize("figure", [scatter_figure, cdf_figure])
def test_the_replay_plots_use_ms_and_readable_log_ticks(figure: object) -> None:
    fig = figure(replay_result())  # type: ignore[operator]
    ttft, tpot, e2e = fig.axes
    assert ttft.get_xlabel().endswith("TTFT (ms)") and tpot.get_xlabel().endswith("TPOT (ms)")
    assert e2e.get_xlabel().endswith("E2E (s)")
    for ax in (ttft, tpot, e2e):
        assert_readable_log_axis(ax.xaxis)
        if figure is scatter_figure:
            assert ax.get_ylabel().startswith("simulated ") and ax.get_ylabel()[-4:] in (
                "(ms)", " (s)")  # fmt: skip
            assert_readable_log_axis(ax.yaxis)


def test_time_axes_share_the_over_time_plots_unit() -> None:
    start = np.arange(0.0, 1500.0, 1.0)
    steps = pd.DataFrame({"variant": "v", "start_s": start, "end_s": start + 0.5,
                          "num_seqs": 4, "num_waiting": 0, "kv_blocks_used": 10})  # fmt: skip
    fig = timeline_figure(steps, {"v": 100})
    assert fig.axes[-1].get_xlabel() == "simulated time (min)"
    shown = labels(fig.axes[-1].xaxis)
    assert shown[:3] == ["0", "5", "10"]  # whole minutes, from data in seconds
    result = run(scenario(workload=poisson(1500, 1.0), policy=continuous(), profile=None,
                          metrics={"window_s": 60}))  # fmt: skip
    over = over_time_figure({"v": result.timeline()}, {"v": result.fleet_events})
    assert over.axes[-1].get_xlabel() == "time (min)"
    assert [ax.get_ylabel() for ax in over.axes if "TTFT" in ax.get_ylabel()] == ["TTFT p90 (ms)"]
    requests = pd.DataFrame({"variant": "v", "id": [0, 1], "instance": 0, "arrival_s": [0.0, 1.0],
                             "first_scheduled_s": [0.0, 1.0], "finish_s": [2.0, 3.0],
                             "rejected": False})  # fmt: skip
    slots = slot_timeline_figure(requests, {"v": False})
    assert slots.axes[0].get_xlabel() == "simulated time (s)"
