"""The day-long profile calibrated to a trace (`sim.workload.day_profile`, `batchsim workload
day-profile`): its mean, its smooth component's swing and peak hour, the trace's burstiness
carried over, determinism under the seed, and the csv read back by the piecewise reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.cli.main import main
from sim.errors import ScenarioError
from sim.workload.arrivals import sample_arrivals
from sim.workload.day_profile import HOUR_S, day_profile, measure_trace
from sim.workload.rate_profile import PiecewiseLinear, read_rate_csv
from sim.workload.spec import ProfileArrival

DAY = 86_400.0
BIN = 60.0
BASE_RATE = 40.0  # the fixture's mean requests/s: 2,400 a minute, Poisson noise CV 2 %
DESIGNED_CV = 0.3


def minute_factors(seed: int = 3, minutes: int = 60) -> np.ndarray:
    """The fixture's designed per-minute rate factors: lognormal, mean 1, CV exactly 0.3."""
    raw = np.random.default_rng(seed).lognormal(0.0, 0.3, size=minutes)
    centred = (raw - raw.mean()) / raw.std()
    return 1.0 + DESIGNED_CV * centred


def fixture_arrivals(factors: np.ndarray, rate: float = BASE_RATE, seed: int = 5) -> np.ndarray:
    """A trace whose rate is `rate x factors[j]` in minute j: Poisson counts, uniform times."""
    rng = np.random.default_rng(seed)
    counts = rng.poisson(rate * BIN * factors)
    times = [j * BIN + np.sort(rng.uniform(0.0, BIN, n)) for j, n in enumerate(counts)]
    out = np.concatenate(times)
    return out - out[0]


def write_trace(path: Path, arrivals: np.ndarray) -> Path:
    rows = "".join(f"{t!r},100,10\n" for t in arrivals.tolist())
    path.write_text("arrival_s,prompt_tokens,output_tokens\n" + rows)
    return path


@pytest.fixture(scope="module")
def arrivals() -> np.ndarray:
    return fixture_arrivals(minute_factors())


def test_mean_rate_is_r_and_the_smooth_part_has_ratio_p_peaking_at_hour_h(
    arrivals: np.ndarray,
) -> None:
    profile = day_profile(arrivals, mean_rate=37.0, peak_to_trough=4.0, peak_hour=9.5)
    assert profile.mean_rate() == pytest.approx(37.0, rel=1e-9)
    assert profile.smooth.max() / profile.smooth.min() == pytest.approx(4.0, rel=1e-4)
    centres = (profile.edges[:-1] + profile.edges[1:]) / 2
    assert abs(centres[np.argmax(profile.smooth)] - 9.5 * HOUR_S) <= BIN
    assert abs(centres[np.argmin(profile.smooth)] - 21.5 * HOUR_S) <= BIN
    widths = np.diff(profile.edges)
    assert float(np.sum(widths * profile.smooth)) / DAY == pytest.approx(1.0, abs=1e-9)
    # hourly means follow the cosine (each hour holds about one turned copy of the trace)
    hourly = profile.rates.reshape(24, 60).mean(axis=1)
    assert abs(int(hourly.argmax()) - 9) <= 2 and abs(int(hourly.argmin()) - 21) <= 2
    assert 3.0 < hourly.max() / hourly.min() < 5.0


def test_burst_factor_has_the_fixtures_cv_without_its_poisson_noise(arrivals: np.ndarray) -> None:
    shape = measure_trace(arrivals, BIN)
    assert shape.bins == 59  # the last minute is partial: left out
    assert shape.mean_rate == pytest.approx(BASE_RATE, rel=0.02)
    noise = 1 / np.sqrt(BASE_RATE * BIN)
    assert shape.bin_cv == pytest.approx(np.hypot(DESIGNED_CV, noise), abs=0.02)
    assert shape.burst_cv == pytest.approx(DESIGNED_CV, abs=0.02)
    assert shape.burst_cv < shape.bin_cv
    assert shape.factors.mean() == pytest.approx(1.0, abs=1e-12)
    # the day's rates over the smooth curve carry the same burstiness, tiled
    profile = day_profile(arrivals, peak_to_trough=3.0)
    ratio = profile.rates / profile.smooth
    assert ratio.std() / ratio.mean() == pytest.approx(shape.burst_cv, rel=0.05)
    # every minute's factor appears in order inside some copy (a circular turn of the trace)
    first = profile.burst[:59]
    turned = [np.roll(shape.factors, -k) for k in range(59)]
    assert any(np.array_equal(first, t) for t in turned)


def test_a_poisson_trace_has_no_burstiness_left() -> None:
    flat = fixture_arrivals(np.ones(60), rate=5.0, seed=11)
    shape = measure_trace(flat, BIN)
    assert shape.bin_cv == pytest.approx(1 / np.sqrt(5.0 * BIN), rel=0.35)
    # what is left is the chance excess of 59 bins' variance over the Poisson share
    mean_count = shape.mean_rate * BIN
    assert shape.burst_cv**2 == pytest.approx(shape.bin_cv**2 - 1 / mean_count, rel=1e-6)
    assert shape.burst_cv < 0.2 * DESIGNED_CV
    assert shape.interarrival_cv == pytest.approx(1.0, abs=0.05)


def test_same_seed_same_profile_other_seed_other_tiling(arrivals: np.ndarray) -> None:
    a = day_profile(arrivals, seed=4).csv_text()
    assert day_profile(arrivals, seed=4).csv_text() == a
    other = day_profile(arrivals, seed=5)
    assert other.csv_text() != a
    assert other.mean_rate() == pytest.approx(day_profile(arrivals, seed=4).mean_rate())


def test_csv_round_trips_through_the_piecewise_reader(arrivals: np.ndarray, tmp_path: Path) -> None:
    profile = day_profile(arrivals, mean_rate=12.5, bin_s=300.0)
    path = tmp_path / "day.csv"
    path.write_text(profile.csv_text())
    times, rates = read_rate_csv(path)
    want_t, want_r = profile.points()
    assert len(times) == 2 * 288
    np.testing.assert_allclose(times, want_t, rtol=0, atol=1e-9)
    np.testing.assert_allclose(rates, want_r, rtol=1e-8)
    curve = PiecewiseLinear(times, rates)
    assert curve.expected(DAY) == pytest.approx(12.5 * DAY, rel=1e-7)
    # each step integrates to its rate times its width (the jumps are exact)
    hour = curve.integral(np.array([10 * HOUR_S, 11 * HOUR_S]))
    assert hour[1] - hour[0] == pytest.approx(300.0 * profile.rates[120:132].sum(), rel=1e-7)


def test_arrivals_drawn_from_the_csv_match_its_integral(tmp_path: Path) -> None:
    trace = fixture_arrivals(minute_factors(minutes=20), rate=10.0)
    profile = day_profile(trace, period_s=1800.0, mean_rate=8.0, peak_hour=0.25, bin_s=30.0)
    (tmp_path / "p.csv").write_text(profile.csv_text())
    spec = ProfileArrival.model_validate(
        {"process": "profile", "rate": {"shape": "piecewise", "csv": "p.csv"}}
    )
    times = sample_arrivals(spec, np.random.default_rng(1), None, 1800.0, base_dir=tmp_path)
    assert abs(len(times) - 8.0 * 1800) < 5 * np.sqrt(8.0 * 1800)
    # peak at 900 s, a = 1/2: the middle half of the period holds 1/2 + a / pi of the arrivals
    middle = np.searchsorted(times, 1350.0) - np.searchsorted(times, 450.0)
    assert middle / len(times) == pytest.approx(0.5 + 0.5 / np.pi, abs=0.03)


def test_options_that_cannot_make_a_profile_name_the_parameter(arrivals: np.ndarray) -> None:
    cases = {
        "peak_hour": {"peak_hour": 24.0},
        "mean_rate": {"mean_rate": 0.0},
        "peak_to_trough": {"peak_to_trough": 0.5},
        "period_s": {"period_s": float("nan")},
        "bin_s": {"bin_s": 0.1},  # 864,000 steps: beyond a profile's points
    }
    for key, options in cases.items():
        with pytest.raises(ScenarioError) as caught:
            day_profile(arrivals, **options)
        assert caught.value.path == key
    with pytest.raises(ScenarioError, match="fewer than 2 bins of 3000 s"):
        day_profile(arrivals, bin_s=3000.0)


def test_cli_writes_the_profile_and_prints_what_it_measured(
    arrivals: np.ndarray, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_trace(tmp_path / "t.csv", arrivals)
    out = tmp_path / "day.csv"
    argv = ["workload", "day-profile", str(trace), "--out", str(out), "--mean-rate", "30"]
    assert main([*argv, "--seed", "2"]) == 0
    printed = capsys.readouterr().out
    shape = measure_trace(arrivals, BIN)
    assert f"mean {shape.mean_rate:.3f} req/s" in printed
    assert f"rate CV {shape.bin_cv:.3f} ({shape.burst_cv:.3f} without Poisson noise)" in printed
    assert f"inter-arrival CV {shape.interarrival_cv:.3f}" in printed
    expected = day_profile(arrivals, mean_rate=30.0, seed=2).csv_text()
    assert out.read_text() == expected
    # a rate profile is replaced; a file of anything else only with --force
    assert main([*argv, "--seed", "3", "-q"]) == 0
    assert out.read_text() == day_profile(arrivals, mean_rate=30.0, seed=3).csv_text()
    other = tmp_path / "notes.csv"
    other.write_text("keep me\n")
    argv[4] = str(other)
    assert main(argv) == 2
    assert "not a rate profile" in capsys.readouterr().err
    assert other.read_text() == "keep me\n"
    assert main([*argv, "--force", "-q"]) == 0
    assert other.read_text().startswith("time_s,rate\n")
    assert [p.name for p in tmp_path.iterdir() if "batchsim-tmp" in p.name] == []


def test_cli_reads_azure_and_mooncake_traces(
    arrivals: np.ndarray, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    short = arrivals[arrivals < 600.0]
    start = np.datetime64("2023-11-16T18:00:00", "ns")
    stamps = start + (short * 1e9).astype("timedelta64[ns]")
    azure = tmp_path / "a.csv"
    azure.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        + "".join(f"{str(s).replace('T', ' ')},100,10\n" for s in stamps)
    )
    moon = tmp_path / "m.jsonl"
    moon.write_text(
        "".join(
            f'{{"timestamp": {int(t * 1000)}, "input_length": 10, "output_length": 5, '
            f'"hash_ids": [1]}}\n'
            for t in short
        )
    )
    for trace in (azure, moon):
        out = tmp_path / f"{trace.stem}-day.csv"
        assert main(["workload", "day-profile", str(trace), "--out", str(out), "-q"]) == 0
        times, rates = read_rate_csv(out)
        assert PiecewiseLinear(times, rates).expected(DAY) == pytest.approx(50.0 * DAY, rel=1e-7)
    assert capsys.readouterr().err == ""


def test_the_shipped_chat_day_profile_reads_back_with_mean_50() -> None:
    path = Path(__file__).parents[2] / "scenarios" / "profiles" / "chat_day.csv"
    times, rates = read_rate_csv(path)
    assert len(times) == 2 * 1440 and times[-1] == DAY
    assert PiecewiseLinear(times, rates).expected(DAY) == pytest.approx(50.0 * DAY, rel=1e-7)
    steps = rates[::2]
    np.testing.assert_array_equal(steps, rates[1::2])  # one-minute steps, flat within
    hourly = steps.reshape(24, 60).mean(axis=1)
    assert abs(int(hourly.argmax()) - 15) <= 2 and abs(int(hourly.argmin()) - 3) <= 2


def test_a_trace_too_large_to_read_whole_is_refused_before_it_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sparse 3 GiB trace (it used to end in MemoryError): the size is checked first, in one
    line naming the file; nothing is written."""
    trace = tmp_path / "big.csv"
    with trace.open("wb") as handle:
        handle.write(b"arrival_s,prompt_tokens,output_tokens\n0,1,1\n")
        handle.truncate(3 * 1024**3)
    out = tmp_path / "day.csv"
    assert main(["workload", "day-profile", str(trace), "--out", str(out), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "big.csv" in err[0] and "3072.0 MiB; at most 2048 MiB" in err[0]
    assert not out.exists()
