"""Arrival-rate profiles (`process: profile`): the integrated rate and its inverse, and arrivals
that follow the profile in distribution (counts per window against Lambda over the window),
drawn deterministically, from inline points or a csv, in open-loop and session workloads, and
sized before generation."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import TypeAdapter
from scenario_factory import run, scenario
from scipy import stats

from sim.errors import ScenarioError
from sim.workload import WorkloadSpec, generate_requests
from sim.workload.arrivals import sample_arrivals
from sim.workload.budget import expected_requests
from sim.workload.rate_profile import Diurnal, PiecewiseLinear, curve_of
from sim.workload.spec import ArrivalSpec, ProfileArrival

ARRIVAL: TypeAdapter[Any] = TypeAdapter(ArrivalSpec)
HOUR = 3600.0
DAY = 86_400.0


def profile(rate: dict[str, Any], **arrival: Any) -> ProfileArrival:
    spec = ARRIVAL.validate_python({"process": "profile", "rate": rate, **arrival})
    assert isinstance(spec, ProfileArrival)
    return spec


def arrivals(
    spec: ProfileArrival,
    seed: int,
    num: int | None = None,
    duration: float | None = None,
    base_dir: Path | None = None,
) -> np.ndarray:
    return sample_arrivals(spec, np.random.default_rng(seed), num, duration, base_dir=base_dir)


DIURNAL = {"shape": "diurnal", "mean_rate": 2.0, "peak_to_trough": 4.0, "peak_at_s": 14 * HOUR}
RAMP = {"shape": "ramp", "from_rate": 2.0, "to_rate": 18.0, "over_s": 1000.0}
SPIKES = {
    "shape": "spikes",
    "base_rate": 2.0,
    "spikes": [{"at_s": 300.0, "rate": 50.0, "for_s": 10.0}, {"at_s": 100.0, "rate": 0.0,
                                                              "for_s": 50.0}],
}  # fmt: skip
# a jump at 10 s, a stretch of zero rate from 20 to 30 s, then flat at 4
POINTS = {"shape": "piecewise", "points": [[0, 1], [10, 5], [10, 2], [20, 0], [30, 0], [40, 4]]}
LENGTHS = {"prompt_tokens": {"dist": "fixed", "value": 64},
           "output_tokens": {"dist": "fixed", "value": 4}}  # fmt: skip


SHAPES = {"diurnal": DIURNAL, "ramp": RAMP, "spikes": SPIKES, "piecewise": POINTS}


@pytest.mark.parametrize("shape", SHAPES)
def test_integral_is_the_area_under_the_rate_and_the_inverse_round_trips(shape: str) -> None:
    curve = curve_of(profile(SHAPES[shape], scale=1.5))
    end = 3 * DAY if shape == "diurnal" else 2000.0
    grid = np.linspace(0.0, end, 400_001)
    # the midpoint rule on a fine grid: exact on linear pieces, and every knot (each jump)
    # falls on a grid point
    rate = curve.rate(grid)
    middle = curve.rate((grid[1:] + grid[:-1]) / 2)
    area = np.concatenate([[0.0], np.cumsum(np.diff(grid) * middle)])
    lam = curve.integral(grid)
    np.testing.assert_allclose(lam, area, rtol=1e-6, atol=1e-6)
    assert np.all(rate >= 0) and np.all(np.diff(lam) >= 0)
    # Lambda(Lambda^-1(y)) = y, and Lambda^-1(Lambda(t)) = t wherever the rate is above 0
    y = np.linspace(0.0, float(lam[-1]), 100_001)[:-1]
    np.testing.assert_allclose(curve.integral(curve.inverse(y)), y, rtol=1e-12, atol=1e-7)
    live = grid[rate > 1e-3]
    np.testing.assert_allclose(curve.inverse(curve.integral(live)), live, rtol=1e-9, atol=1e-6)


def test_diurnal_rate_has_its_mean_peak_and_trough() -> None:
    curve = curve_of(profile(DIURNAL))
    assert isinstance(curve, Diurnal)
    # a = (4 - 1) / (4 + 1): peak 2 x 1.6 at 14 h, trough 2 x 0.4 twelve hours later
    np.testing.assert_allclose(curve.rate(np.array([14 * HOUR, 2 * HOUR])), [3.2, 0.8])
    np.testing.assert_allclose(curve.expected(DAY), 2.0 * DAY)
    np.testing.assert_allclose(curve.expected(2.5 * DAY) - curve.expected(0.5 * DAY), 2 * 2 * DAY)


def test_zero_stretches_get_no_arrivals_and_the_inverse_skips_them() -> None:
    curve = curve_of(profile(POINTS))
    assert isinstance(curve, PiecewiseLinear)
    at_20 = curve.expected(20.0)
    assert curve.expected(30.0) == at_20  # no area under the pause
    # the unit clock just short of that level maps before the pause, at it or past it after
    assert curve.inverse(np.array([at_20 - 1e-9]))[0] == pytest.approx(20.0, abs=1e-3)
    assert curve.inverse(np.array([at_20]))[0] == 30.0
    assert curve.inverse(np.array([at_20 + 1e-9]))[0] == pytest.approx(30.0, abs=1e-3)
    times = arrivals(profile(POINTS), 5, duration=200.0)
    assert not np.any((times > 20.0) & (times < 30.0))
    # 5 arrivals/s on the ramp just before the jump, 2 just after it
    many = np.concatenate([arrivals(profile(POINTS), seed, duration=20.0) for seed in range(200)])
    before = np.count_nonzero((many >= 9.0) & (many < 10.0))
    after = np.count_nonzero((many >= 10.0) & (many < 11.0))
    assert before == pytest.approx(200 * 4.8, rel=0.1)  # mean rate 4.8 over [9, 10)
    assert after == pytest.approx(200 * 1.9, rel=0.15)  # 2 -> 1.8 over [10, 11)


def test_diurnal_arrivals_per_hour_match_lambda_over_each_hour() -> None:
    spec = profile({**DIURNAL, "mean_rate": 20.0})
    curve = curve_of(spec)
    times = arrivals(spec, 11, duration=DAY)
    edges = np.arange(25) * HOUR
    counts = np.histogram(times, bins=edges)[0]
    expected = np.diff(curve.integral(edges))
    chi2 = float(np.sum((counts - expected) ** 2 / expected))
    # 24 Poisson counts: a chi-square with 24 degrees of freedom; 1 in 10,000 exceeds this
    assert chi2 < stats.chi2.ppf(0.9999, 24)
    # a flat rate would not fit: the busiest hour is near 14 h, the quietest near 2 h
    flat = np.full(24, counts.sum() / 24)
    assert float(np.sum((counts - flat) ** 2 / flat)) > 1000
    assert np.argmax(counts) in (13, 14) and np.argmin(counts) in (1, 2)
    assert counts.max() / counts.min() == pytest.approx(3.9, rel=0.1)  # hour means: ~3.9


def test_a_flat_piecewise_profile_is_a_poisson_process_of_its_rate() -> None:
    spec = profile({"shape": "piecewise", "points": [[0, 5.0], [100, 5.0]]})
    times = arrivals(spec, 3, num=40_000)
    gaps = np.diff(np.concatenate([[0.0], times]))
    assert len(times) == 40_000 and np.all(gaps >= 0)
    assert gaps.mean() == pytest.approx(0.2, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.02)
    # the gaps are exponential: a Kolmogorov-Smirnov test against Exp(mean 0.2)
    assert stats.kstest(gaps, "expon", args=(0, 0.2)).pvalue > 1e-3
    # the same as process: poisson in distribution: counts per second are Poisson(5)
    counts = np.bincount(times.astype(int))[:-1]
    assert counts.var() / counts.mean() == pytest.approx(1.0, rel=0.1)


def test_a_ramp_puts_the_expected_share_of_arrivals_in_its_second_half() -> None:
    spec = profile(RAMP)
    times = arrivals(spec, 7, duration=1000.0)
    first = np.count_nonzero(times < 500.0)
    second = np.count_nonzero(times >= 500.0)
    # Lambda(500) = 2 x 500 + 0.016 x 500^2 / 2 = 3000; Lambda(1000) = 10000
    assert abs(first - 3000) < 4 * math.sqrt(3000)
    assert abs(second - 7000) < 4 * math.sqrt(7000)
    assert second / first == pytest.approx(7 / 3, rel=0.06)
    # after the ramp the rate stays at to_rate
    later = arrivals(spec, 7, duration=3000.0)
    tail = np.count_nonzero(later >= 1000.0)
    assert abs(tail - 18 * 2000) < 4 * math.sqrt(18 * 2000)


def test_spikes_add_their_expected_count_in_their_windows() -> None:
    spec = profile(SPIKES)
    runs = [arrivals(spec, seed, duration=600.0) for seed in range(40)]
    spike = np.array([np.count_nonzero((t >= 300) & (t < 310)) for t in runs])
    quiet = np.array([np.count_nonzero((t >= 100) & (t < 150)) for t in runs])
    rest = np.array([np.count_nonzero((t >= 400) & (t < 500)) for t in runs])
    assert spike.mean() == pytest.approx(500, rel=0.03)  # 50/s for 10 s, not 2/s
    assert quiet.sum() == 0  # a spike of rate 0 is a pause
    assert rest.mean() == pytest.approx(200, rel=0.05)
    total = np.array([len(t) for t in runs])
    # 2/s over 600 s, plus 48/s over 10 s, minus 2/s over 50 s
    assert total.mean() == pytest.approx(1200 + 480 - 100, rel=0.02)


def test_same_seed_same_arrivals_and_chunks_do_not_change_them() -> None:
    spec = profile({**DIURNAL, "mean_rate": 15.0})
    # an expected 1.3 million arrivals: more than one chunk of draws (2^20)
    first = arrivals(spec, 9, duration=DAY)
    again = arrivals(spec, 9, duration=DAY)
    np.testing.assert_array_equal(first, again)
    assert len(first) > (1 << 20) and np.all(np.diff(first) >= 0) and first[-1] < DAY
    other = arrivals(spec, 10, duration=DAY)
    assert len(other) != len(first) or not np.array_equal(other, first)
    # a count cap takes a prefix of the same arrivals
    capped = arrivals(spec, 9, num=1000, duration=DAY)
    np.testing.assert_array_equal(capped, first[:1000])
    # with a count alone, the same unit-rate clock gives the same first arrivals
    np.testing.assert_array_equal(arrivals(spec, 9, num=5000), first[:5000])


def test_scale_multiplies_the_profile() -> None:
    scaled = arrivals(profile(DIURNAL, scale=3.0), 4, duration=DAY)
    tripled = arrivals(profile({**DIURNAL, "mean_rate": 6.0}), 4, duration=DAY)
    np.testing.assert_allclose(scaled, tripled, rtol=1e-12)
    assert len(scaled) == pytest.approx(6.0 * DAY, rel=0.01)


def test_a_csv_profile_equals_the_same_points_inline(tmp_path: Path) -> None:
    lines = "".join(f"{t},{r}\n" for t, r in POINTS["points"])
    (tmp_path / "day.csv").write_text("rate,time_s\n" + "\n".join(
        ",".join(reversed(line.split(","))) for line in lines.splitlines()) + "\n\n")  # fmt: skip
    inline = arrivals(profile(POINTS), 2, duration=500.0)
    from_file = arrivals(
        profile({"shape": "piecewise", "csv": "day.csv"}), 2, duration=500.0, base_dir=tmp_path
    )
    np.testing.assert_array_equal(from_file, inline)
    assert len(inline) > 1000


def test_a_profile_that_ends_stops_its_arrivals() -> None:
    ending = profile({"shape": "piecewise", "points": [[0, 10], [50, 10], [60, 0]]})
    curve = curve_of(ending)
    assert curve.total == pytest.approx(550.0) and curve.end_s == 60.0
    counts = [len(t) for t in (arrivals(ending, s, duration=1e6) for s in range(30))]
    assert max(arrivals(ending, 0, duration=1e6)) < 60.0
    assert np.mean(counts) == pytest.approx(550, rel=0.03)
    with pytest.raises(ValueError, match="falls to 0 for good"):
        rate = ending.rate.model_dump()
        WorkloadSpec.model_validate(
            {"num_requests": 10, "arrival": {"process": "profile", "rate": rate}, **LENGTHS}
        )


def test_a_csv_profile_that_ends_needs_a_duration(tmp_path: Path) -> None:
    (tmp_path / "r.csv").write_text("time_s,rate\n0,3\n10,0\n")
    spec = profile({"shape": "piecewise", "csv": "r.csv"})
    with pytest.raises(ScenarioError, match="falls to 0 for good at 10 s") as info:
        arrivals(spec, 1, num=10, base_dir=tmp_path)
    assert info.value.path == "workload.duration_s"
    assert len(arrivals(spec, 1, num=10, duration=100.0, base_dir=tmp_path)) <= 10


def test_budget_estimates_the_count_from_the_integrated_rate() -> None:
    day = {"duration_s": DAY, "arrival": {"process": "profile", "rate": DIURNAL}, **LENGTHS}
    count, key = expected_requests(WorkloadSpec.model_validate(day)) or (0.0, "")
    expected = 2.0 * DAY
    assert key == "workload.duration_s"
    assert count == pytest.approx(expected + 6 * math.sqrt(expected))
    capped = WorkloadSpec.model_validate({**day, "num_requests": 100})
    assert expected_requests(capped) == (100.0, "workload.num_requests")
    by_file = {**day, "arrival": {"process": "profile", "rate": {"shape": "piecewise",
                                                                "csv": "r.csv"}}}  # fmt: skip
    # a csv is read at generation: by duration alone the spec cannot size it
    assert expected_requests(WorkloadSpec.model_validate(by_file)) is None
    assert expected_requests(WorkloadSpec.model_validate({**by_file, "num_requests": 7})) == (
        7.0,
        "workload.num_requests",
    )


def test_sessions_start_by_a_profile() -> None:
    workload = {
        "duration_s": 1000.0,
        "sessions": {
            "arrival": {"process": "profile", "rate": RAMP},
            "turns": {"dist": "fixed", "value": 2},
            "first_prompt": {"dist": "fixed", "value": 32},
            "user_tokens": {"dist": "fixed", "value": 8},
            "output_tokens": {"dist": "fixed", "value": 4},
            "think_time": {"dist": "fixed", "value_s": 1.0},
        },
    }
    spec = WorkloadSpec.model_validate(workload)
    arrays = generate_requests(spec, np.random.default_rng(3), Path("."))
    starts = arrays.arrival_s[~np.isnan(arrays.arrival_s)]
    assert len(arrays) == 2 * len(starts)  # the later turns wait for the run
    first = np.count_nonzero(starts < 500.0)
    second = np.count_nonzero(starts >= 500.0)
    assert abs(first - 3000) < 4 * math.sqrt(3000) and abs(second - 7000) < 4 * math.sqrt(7000)
    assert starts.max() < 1000.0


def test_a_scenario_with_a_diurnal_profile_runs_end_to_end() -> None:
    workload = {
        "duration_s": 120.0,
        "arrival": {"process": "profile", "scale": 2.0,
                    "rate": {"shape": "diurnal", "mean_rate": 1.5, "peak_to_trough": 5.0,
                             "period_s": 60.0, "peak_at_s": 15.0}},
        "prompt_tokens": {"dist": "fixed", "value": 64},
        "output_tokens": {"dist": "fixed", "value": 4},
    }  # fmt: skip
    raw = scenario(policy={"name": "continuous", "max_num_seqs": 16}, workload=workload, seed=5)
    result = run(raw)
    requests = result.requests
    spec = WorkloadSpec.model_validate(workload)
    expected = generate_requests(spec, np.random.default_rng(5), Path(".")).arrival_s
    assert result.num_requests == len(expected)
    assert abs(len(expected) - 360) < 4 * math.sqrt(360)  # 3/s on average over 120 s
    np.testing.assert_allclose(np.sort(requests["arrival_s"].to_numpy()), expected)
    # twice as many arrivals in the half-periods around the peaks (at 15 s and 75 s)
    phase = np.mod(expected, 60.0)
    near_peak = np.count_nonzero(np.abs(phase - 15.0) < 15.0)
    assert near_peak > 1.5 * (len(expected) - near_peak)
    assert requests["finish_s"].notna().all()
