"""Plots: PNG files are written, axes carry the expected labels, the timeline bins exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers_results import make_results
from helpers_tables import make_context, make_itl, make_requests, make_steps

from sim.io.plots import (
    MAX_POINTS,
    _held_until_next_step,
    binned_mean,
    latency_cdf_figure,
    plot_latency_cdfs,
    plot_timeline,
    save_plots,
    timeline_figure,
)
from sim.metrics.results import VariantResult

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_png(path: Path) -> None:
    assert path.is_file() and path.stat().st_size > 1000
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_save_plots_writes_pngs(tmp_path: Path) -> None:
    paths = save_plots(make_results(), tmp_path, formats=("png",))
    assert [p.name for p in paths] == ["latency_cdf.png", "timeline.png", "slots.png"]
    for path in paths:
        assert_png(path)


def test_latency_cdf_axes_and_lines() -> None:
    fig = latency_cdf_figure(make_results().requests)
    axes = fig.get_axes()
    assert [ax.get_xlabel() for ax in axes] == ["TTFT (s)", "TPOT (ms)", "E2E latency (s)"]
    assert all(ax.get_ylabel() == "fraction of requests" for ax in axes)
    ttft = axes[0]
    legend = ttft.get_legend()
    assert legend is not None
    assert [t.get_text() for t in legend.get_texts()] == ["continuous", "static"]
    # the CDF of the 4 served requests ends at 1 at their largest TTFT
    x, y = (np.asarray(a, dtype=float) for a in ttft.get_lines()[0].get_data())
    assert y[-1] == pytest.approx(1.0) and x[-1] == pytest.approx(1.0)
    assert ttft.get_xscale() == "log"  # .1 s to 3 s spans more than a decade


def test_timeline_axes_and_kv_percent() -> None:
    results = make_results()
    fig = timeline_figure(results.steps, {"continuous": 10, "static": 20})
    ax_batch, ax_queue, ax_kv = fig.get_axes()
    assert ax_batch.get_ylabel() == "batch size (sequences)"
    assert ax_queue.get_ylabel() == "queue length (requests)"
    assert ax_kv.get_ylabel() == "KV blocks used (% of capacity)"
    assert ax_kv.get_xlabel() == "simulated time (s)"
    # 6 of 10 blocks during the decode run; 6 of 20 for the variant with twice the capacity
    kv_lines = ax_kv.get_lines()
    assert np.nanmax(kv_lines[0].get_ydata()) == pytest.approx(60.0)
    assert np.nanmax(kv_lines[1].get_ydata()) == pytest.approx(30.0)
    assert np.nanmax(ax_batch.get_lines()[0].get_ydata()) == pytest.approx(4.0)
    plain = timeline_figure(results.steps).get_axes()[2]
    assert plain.get_ylabel() == "KV blocks used (blocks)"


def test_binned_mean_is_exact_time_weighted_mean() -> None:
    start, end = np.array([0.0, 0.5]), np.array([1.0, 2.0])
    means = binned_mean(start, end, np.array([2.0, 4.0]), np.array([0.0, 0.5, 1.0, 2.0]))
    assert means.tolist() == pytest.approx([2.0, 6.0, 4.0])
    # a bin half covered by a step averages in the idle half as zero
    assert binned_mean(start[:1], end[:1], np.array([2.0]), np.array([0.5, 1.5])).tolist() == (
        pytest.approx([1.0])
    )


def test_plot_functions_write_files(tmp_path: Path) -> None:
    results = make_results()
    plot_latency_cdfs(results.requests, tmp_path / "cdf.png")
    plot_timeline(results.steps, tmp_path / "tl.png")
    assert_png(tmp_path / "cdf.png")
    assert_png(tmp_path / "tl.png")


def test_large_timeline_plots_draw_bins_not_steps(tmp_path: Path) -> None:
    """A million steps are drawn as at most MAX_POINTS bins per line (what keeps the plot fast,
    whatever the run's length: the time it takes belongs in benchmarks/, not in a test)."""
    n = 1_000_000
    rng = np.random.default_rng(0)
    durations = rng.uniform(0.01, 0.03, n)
    start = np.concatenate(([0.0], np.cumsum(durations)[:-1]))
    steps = pd.DataFrame(
        {"variant": "big", "instance": rng.integers(0, 4, n), "start_s": start,
         "end_s": start + durations, "num_seqs": rng.integers(1, 256, n),
         "num_waiting": rng.integers(0, 50, n), "kv_blocks_used": rng.integers(0, 1000, n)}
    )  # fmt: skip
    figure = timeline_figure(steps, {"big": 1000})
    lines = [line for ax in figure.axes for line in ax.get_lines()]
    assert len(lines) == 3
    assert all(len(line.get_xdata()) == MAX_POINTS + 1 for line in lines)
    # the binned batch size keeps the time-weighted mean of the steps (every bin equally long)
    batch = lines[0].get_ydata()[:-1]
    exact = float((steps["num_seqs"] * durations).sum() / durations.sum())
    assert float(np.mean(batch)) == pytest.approx(exact, rel=1e-3)
    plot_timeline(steps, tmp_path / "big.png", {"big": 1000})
    assert_png(tmp_path / "big.png")


def test_empty_variant_still_plots(tmp_path: Path) -> None:
    results = make_results()
    empty = VariantResult(
        "empty", make_requests([]), make_steps().iloc[:0], make_itl().iloc[:0], make_context()
    )
    results.variants["empty"] = empty
    assert len(save_plots(results, tmp_path)) == 6
    assert_png(tmp_path / "timeline.png")


def test_queue_holds_until_the_instance_steps_again() -> None:
    # instance 0 steps at [0, 1) and [3, 4); instance 1 at [0.5, 2); interleaved input order
    instance = np.array([0.0, 1.0, 0.0])
    start, end = np.array([0.0, 0.5, 3.0]), np.array([1.0, 2.0, 4.0])
    assert _held_until_next_step(instance, start, end).tolist() == [3.0, 2.0, 4.0]
