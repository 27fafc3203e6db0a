"""The timeline in a results folder: timeline.csv, fleet_events.csv and the over-time plot."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers_results import make_results
from helpers_tables import make_context, make_requests
from matplotlib.collections import PathCollection

from sim.io.output import write_results
from sim.io.plots_timeline import over_time_figure, plot_over_time, time_unit
from sim.io.report import render_report
from sim.metrics.results import Results, VariantResult
from sim.metrics.timeline import timeline_of_tables

NAN = math.nan
FLEET = ((1, 3.6, 400.0, 100.0), (1, 3.6, 400.0, 100.0))
EVENTS = pd.DataFrame(
    {
        "time_s": [3600.0, 3900.0, 50000.0, 50100.0],
        "group": ["g"] * 4,
        "event": ["launch", "ready", "drain", "retire"],
        "instance": [1, 1, 1, 1],
        "serving": [1, 2, 1, 1],
        "provisioning": [1, 0, 0, 0],
        "draining": [0, 0, 1, 0],
        "signal": [12.0, NAN, 0.5, NAN],
        "desired": [2, 2, 1, 1],
    }
)
INSTANCES = pd.DataFrame(
    {
        "index": [0, 1],
        "group": ["g", "g"],
        "launch_s": [NAN, 3600.0],
        "ready_s": [NAN, 3900.0],
        "drain_s": [NAN, 50000.0],
        "retire_s": [NAN, 50100.0],
    }
)


def day() -> VariantResult:
    """A day of requests on one instance, a second one from hour 1 to hour 13.9."""
    rng = np.random.default_rng(5)
    arrival = np.sort(rng.uniform(0.0, 86400.0, 3000))
    rows = [(i, a, 10, 3, a + 0.05, a + 0.1, a + 0.3, False, 0.1) for i, a in enumerate(arrival)]
    requests = make_requests(rows).assign(tier="default")
    steps = pd.DataFrame({"instance": 0, "start_s": arrival + 0.05, "end_s": arrival + 0.3})
    ctx = make_context(slo_ttft_s=0.2, slo_tpot_s=0.5, fleet=FLEET, num_instances=2)
    return VariantResult("auto", requests, steps, pd.DataFrame({"gap_s": [], "count": []}), ctx,
                         instances=INSTANCES, fleet_events=EVENTS)  # fmt: skip


def test_the_time_axis_reads_in_hours_past_two_hours() -> None:
    assert time_unit(7201.0) == (3600.0, "h")
    assert time_unit(7200.0) == (60.0, "min")
    assert time_unit(601.0) == (60.0, "min")
    assert time_unit(600.0) == (1.0, "s")


def test_a_day_plots_in_hours_with_its_scaling_events() -> None:
    result = day()
    t = result.timeline()
    assert len(t) == 96  # quarter hours
    fig = over_time_figure({"auto": t}, {"auto": EVENTS}, {"auto": 0.2})
    axes = fig.axes
    assert len(axes) == 5
    assert axes[-1].get_xlabel() == "time (h)"
    assert axes[-1].get_xlim() == pytest.approx((0.0, 24.0))
    markers = [c for c in axes[1].collections if isinstance(c, PathCollection)]
    assert len(markers) == 4  # launch, ready, drain, retire
    offsets = np.array([c.get_offsets()[0] for c in markers])
    expected = [[1.0, 1.0], [3900 / 3600, 2.0], [50000 / 3600, 1.0], [50100 / 3600, 1.0]]
    np.testing.assert_allclose(offsets, expected)
    labels = [line.get_label() for line in axes[2].get_lines()]
    assert "TTFT target 200 ms" in labels  # sub-second: in ms
    # two instances billed in the hours the second one lived, one after
    billed = t.set_index("window_start_s")["instances_billed"]
    assert billed[3600.0] == pytest.approx(2.0) and billed[60300.0] == pytest.approx(1.0)
    # rent: $0.001 a second for the first instance over the run, the second over its life
    run_s = t["covered_s"].sum()
    assert t["usd"].sum() == pytest.approx(0.001 * (run_s + (50100 - 3600)))


def test_a_day_of_many_events_leaves_them_to_the_table() -> None:
    t = day().timeline()
    many = pd.concat([EVENTS] * 16, ignore_index=True)  # 64 events: more than are marked
    fig = over_time_figure({"auto": t}, {"auto": many}, {"auto": 0.2})
    fleet_ax = fig.axes[1]
    assert not [c for c in fleet_ax.collections if isinstance(c, PathCollection)]
    assert "fleet_events.csv" in fleet_ax.get_title()


def test_one_window_writes_no_plot(tmp_path: Path) -> None:
    requests = make_requests([(0, 1.0, 10, 3, 1.2, 1.5, 3.5, False, 1.0)])
    t = timeline_of_tables(requests, pd.DataFrame(), make_context(), window_s=60.0)
    assert len(t) == 1
    assert plot_over_time({"a": t}, tmp_path) == []
    assert list(tmp_path.iterdir()) == []


def test_the_folder_has_the_timeline_and_the_scaling_events(tmp_path: Path) -> None:
    results = make_results()
    results.variants["auto"] = day()
    out = write_results(results, tmp_path / "r", "name: r\n")
    table = pd.read_csv(out / "timeline.csv")
    assert table.columns[0] == "variant"
    assert list(pd.unique(table["variant"])) == ["continuous", "static", "auto"]
    auto = table[table["variant"] == "auto"].drop(columns="variant").reset_index(drop=True)
    pd.testing.assert_frame_equal(auto, results["auto"].timeline(), check_dtype=False)
    events = pd.read_csv(out / "fleet_events.csv")
    assert events["variant"].tolist() == ["auto"] * 4
    assert events["event"].tolist() == ["launch", "ready", "drain", "retire"]
    assert (out / "over_time.png").is_file() and (out / "over_time.svg").is_file()
    assert '<figure id="plot-over_time">' in render_report(out)


def test_a_fleet_that_never_changes_writes_no_events_file(tmp_path: Path) -> None:
    results = Results("r", dict(make_results().variants))
    out = write_results(results, tmp_path / "r", "name: r\n", plots=False)
    assert (out / "timeline.csv").is_file()
    assert not (out / "fleet_events.csv").exists()
    assert "plot-over_time" not in render_report(out)
