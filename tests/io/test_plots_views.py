"""Slot timeline and sweep plots: reconstructed slot intervals, figure axes, files on disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from helpers_results import tiny_results
from matplotlib.collections import PolyCollection

from sim.io.plots import save_plots
from sim.io.plots_slots import assign_slots, default_window, occupancy, slot_timeline_figure
from sim.io.plots_sweep import goodput_figure, throughput_latency_figure

NAN = np.nan


def requests_frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    cols = ["id", "instance", "arrival_s", "first_scheduled_s", "finish_s", "decode_instance",
            "transfer_end_s"]  # fmt: skip
    return pd.DataFrame(rows, columns=cols).assign(variant="v")


def test_assign_slots_is_interval_partitioning() -> None:
    start = np.array([0.0, 1.0, 2.0, 2.0, 5.0])
    end = np.array([2.0, 3.0, 4.0, 6.0, 6.0])
    # [0,2) frees slot 0 exactly when two intervals start at 2; the lowest free slot goes first
    assert assign_slots(start, end).tolist() == [0, 1, 0, 2, 0]


def test_static_members_hold_their_slot_until_the_batch_ends() -> None:
    frame = requests_frame([
        (0, 0, 0.0, 1.0, 2.0, -1, NAN),  # batch A: ends at 5
        (1, 0, 0.5, 1.0, 5.0, -1, NAN),
        (2, 0, 0.7, 5.0, 6.0, -1, NAN),  # batch B, alone
        (3, 1, 0.0, 0.0, 9.0, -1, NAN),  # another instance
        (4, 0, 0.9, NAN, NAN, -1, NAN),  # rejected
    ])  # fmt: skip
    static = occupancy(frame, 0, static=True)
    assert static["id"].tolist() == [0, 1, 2]
    assert static["busy_end_s"].tolist() == [2.0, 5.0, 6.0]
    assert static["end_s"].tolist() == [5.0, 5.0, 6.0]
    continuous = occupancy(frame, 0, static=False)
    assert continuous["end_s"].tolist() == [2.0, 5.0, 6.0]


def test_disaggregated_occupancy_splits_prefill_and_decode() -> None:
    frame = requests_frame([(0, 0, 0.0, 0.5, 3.0, 1, 1.2), (1, 0, 0.1, 0.6, 2.0, 1, 1.4)])
    prefill = occupancy(frame, 0, static=False)
    assert prefill["start_s"].tolist() == [0.5, 0.6]
    assert prefill["busy_end_s"].tolist() == [1.2, 1.4]  # KV held until transferred
    decode = occupancy(frame, 1, static=False)
    assert decode["start_s"].tolist() == [1.2, 1.4]
    assert decode["end_s"].tolist() == [3.0, 2.0]


def test_default_window_counts_each_request_once() -> None:
    frame = pd.DataFrame({"id": [0, 1, 2, 0, 1, 2], "arrival_s": [0.0, 1.0, 4.0] * 2})
    assert default_window(frame, 2) == (0.0, 1.0)


def test_slot_timeline_of_a_real_run_shows_padding_only_for_static() -> None:
    results = tiny_results()
    fig = slot_timeline_figure(results.requests, {"static": True, "continuous": False})
    ax_static, ax_cont = fig.get_axes()
    assert ax_static.get_title() == "static: batch slots of instance 0"
    assert ax_cont.get_title() == "continuous: batch slots of instance 0"
    assert ax_static.get_ylabel() == "batch slot"
    assert ax_cont.get_xlabel() == "simulated time (s)"
    boxes = [
        [c for c in ax.collections if isinstance(c, PolyCollection)] for ax in (ax_static, ax_cont)
    ]
    assert len(boxes[0]) == 2 and len(boxes[1]) == 1  # static: busy boxes and padding boxes
    assert len(boxes[0][1].get_paths()) > 0
    # never more slots than the batch limit of 8
    assert ax_static.get_ylim()[1] <= 7.6 and ax_cont.get_ylim()[1] <= 7.6


def sweep_frame() -> pd.DataFrame:
    rows = []
    for variant, scale in (("continuous", 1.0), ("chunked", 0.9)):
        for b in (1, 4, 16, 64):
            rows.append({"variant": variant, "policy.max_num_seqs": b,
                         "output_tokens_per_s": scale * 1000 * b / (1 + 0.05 * b),
                         "tpot_p50_s": 0.01 + 0.0005 * b})  # fmt: skip
    for variant, knee in (("static", 2.0), ("continuous", 6.0)):
        for rate in (1.0, 2.0, 4.0, 8.0):
            rows.append({"variant": variant, "workload.arrival.rate": rate,
                         "goodput_rps": min(rate, knee) * (0.9 if rate > knee else 1.0),
                         "slo_attainment": 1.0 if rate <= knee else 0.5})  # fmt: skip
    return pd.DataFrame(rows)


def test_throughput_latency_figure_axes_and_points() -> None:
    frame = sweep_frame().dropna(subset=["policy.max_num_seqs"])
    fig = throughput_latency_figure(frame)
    ax_curve, ax_batch, ax_lat = fig.get_axes()
    assert ax_curve.get_xlabel() == "tpot_p50 (ms)"
    assert ax_curve.get_ylabel() == "output_tokens_per_s (tokens/s)"
    assert ax_batch.get_xlabel() == "policy.max_num_seqs (sequences)"
    assert ax_batch.get_xscale() == "log"
    lines = ax_curve.get_lines()
    assert len(lines) == 2
    x, y = (np.asarray(a, dtype=float) for a in lines[0].get_data())
    assert x.tolist() == pytest.approx([10.5, 12.0, 18.0, 42.0])  # TPOT in ms, B ascending
    assert y[-1] == pytest.approx(64000 / 4.2)
    labels = sorted(t.get_text() for t in ax_curve.texts)
    assert labels.count("B=64") == 2 and len(labels) == 8
    assert len(ax_lat.get_lines()) == 2


def test_goodput_figure_has_a_line_per_policy_and_the_diagonal() -> None:
    frame = sweep_frame().dropna(subset=["workload.arrival.rate"])
    fig = goodput_figure(frame)
    ax_good, ax_att = fig.get_axes()
    assert ax_good.get_xlabel() == "arrival rate (requests/s)"
    assert ax_good.get_ylabel() == "goodput (requests/s meeting every SLO)"
    assert ax_att.get_ylabel() == "SLO attainment (% of requests)"
    legend = ax_good.get_legend()
    assert legend is not None
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts == ["static", "continuous", "every request meets its SLO"]
    static = np.asarray(ax_good.get_lines()[0].get_ydata(), dtype=float)
    assert static.tolist() == pytest.approx([1.0, 2.0, 1.8, 1.8])
    assert np.asarray(ax_att.get_lines()[1].get_ydata()).tolist() == [100, 100, 100, 50]


def test_sweep_figure_names_a_missing_column() -> None:
    with pytest.raises(KeyError, match=r"policy\.max_num_seqs"):
        throughput_latency_figure(pd.DataFrame({"variant": ["a"]}))


def test_save_plots_writes_png_and_svg_of_a_real_run(tmp_path: Path) -> None:
    paths = save_plots(tiny_results(), tmp_path)
    assert [p.name for p in paths] == ["latency_cdf.png", "latency_cdf.svg", "timeline.png",
                                       "timeline.svg", "slots.png", "slots.svg"]  # fmt: skip
    for path in paths:
        data = path.read_bytes()
        assert len(data) > 5000
        if path.suffix == ".png":
            assert data[:8] == b"\x89PNG\r\n\x1a\n"
        else:
            assert b"<svg" in data[:2000] and data.rstrip().endswith(b"</svg>")
    # the static variant's padding is hatched in the slot chart
    assert b"<pattern" in (tmp_path / "slots.svg").read_bytes()


def test_slot_timeline_of_a_disaggregated_decode_instance() -> None:
    results = tiny_results(disaggregated=True)
    window = (0.0, float(results.requests["finish_s"].max()))
    fig = slot_timeline_figure(results.requests, {"pd": False}, instance=1, window=window)
    (ax,) = fig.get_axes()
    assert ax.get_title() == "pd: batch slots of instance 1"
    (boxes,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(boxes.get_paths()) == (results.requests["decode_instance"] == 1).sum()
