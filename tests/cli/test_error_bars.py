"""Error bars of `batchsim run`: `--seeds N` (the mean over seeds and its 95 % t interval) and
`--band X` (the range over the GPU step time +-X %, and SLO verdicts that flip within it)."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from fuzz_corpus import BASE

from sim.cli.main import main
from sim.metrics.intervals import mean_interval, t_975
from sim.simulate import simulate
from sim.whatif.error_bars import COLUMNS, headline_metrics

# 97.5 % quantiles of Student's t (standard tables; above 30 computed to six decimals)
KNOWN_T = {1: 12.706205, 2: 4.302653, 5: 2.570582, 10: 2.228139, 29: 2.045230, 30: 2.042272,
           31: 2.039513, 40: 2.021075, 60: 2.000298, 120: 1.979930, 999: 1.962341}  # fmt: skip


@pytest.mark.parametrize(("df", "expected"), sorted(KNOWN_T.items()))
def test_t_quantiles_match_the_tables(df: int, expected: float) -> None:
    assert t_975(df) == pytest.approx(expected, abs=2e-6)


def test_t_quantiles_match_scipy_where_it_is_installed() -> None:
    stats = pytest.importorskip("scipy.stats")
    worst = max(abs(t_975(df) - float(stats.t.ppf(0.975, df))) for df in range(1, 1000))
    assert worst < 1e-6


def test_the_interval_of_a_mean() -> None:
    iv = mean_interval([1.0, 2.0, 3.0])  # s = 1, so the half-width is t(2) / sqrt(3)
    assert (iv.mean, iv.min, iv.max, iv.n) == (2.0, 1.0, 3.0, 3)
    assert iv.half_width == pytest.approx(4.302653 / math.sqrt(3), rel=1e-9)
    assert (iv.low, iv.high) == pytest.approx((2.0 - 2.4841377, 2.0 + 2.4841377), abs=1e-6)
    same = mean_interval([5.0, None, 5.0, math.nan])  # undefined values are left out
    assert (same.mean, same.low, same.high, same.n) == (5.0, 5.0, 5.0, 2)
    one = mean_interval([4.0])
    assert one.mean == 4.0 and math.isnan(one.low) and one.n == 1
    assert mean_interval([None]).n == 0 and math.isnan(mean_interval([]).mean)


def _scenario(tmp_path: Path, raw: dict[str, Any]) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _run(path: Path, out: Path, *flags: str) -> pd.DataFrame:
    argv = ["run", str(path), "--out", str(out), "-q", "--no-plots", "--tables", "summary"]
    assert main([*argv, "--workers", "1", *flags]) == 0
    folders = [p for p in out.iterdir() if not p.name.startswith(".")]
    assert len(folders) == 1
    return pd.read_csv(folders[0] / "intervals.csv")


def _rows(table: pd.DataFrame, source: str, variant: str) -> pd.DataFrame:
    rows = table[(table["source"] == source) & (table["variant"] == variant)]
    return rows.set_index("metric")


def test_seeds_give_the_mean_of_separate_runs_on_each_variants_seeds(tmp_path: Path) -> None:
    raw = copy.deepcopy(BASE)  # seed 1; variant b draws from its own seed, 7
    raw["variants"]["b"]["seed"] = 7
    path = _scenario(tmp_path, raw)
    table = _run(path, tmp_path / "out", "--seeds", "3")
    assert set(table["source"]) == {"seeds"}
    runs = [
        simulate(path, overrides=[f"seed={1 + k}", f"variants.b.seed={7 + k}"]).summary()
        for k in range(3)
    ]
    metrics = headline_metrics(runs[0])
    assert {"ttft_p99_s", "goodput_rps", "energy_per_output_token_j"} <= set(metrics)
    for variant in ("a", "b"):
        rows = _rows(table, "seeds", variant)
        assert list(rows.index) == metrics
        for metric in metrics:
            values = np.array([float(r.at[variant, metric]) for r in runs])
            row = rows.loc[metric]
            assert row["mean"] == np.mean(values), metric
            assert (row["min"], row["max"], row["n"]) == (values.min(), values.max(), 3)
            half = t_975(2) * np.std(values, ddof=1) / math.sqrt(3)
            assert row["ci_high"] - row["mean"] == pytest.approx(half, rel=1e-9, abs=1e-15)
    # the seeds really differ: the mean latency is no single run's
    ttft = [float(r.at["b", "ttft_p99_s"]) for r in runs]
    assert len(set(ttft)) == 3


def test_the_band_ends_are_runs_at_the_scaled_gpu_time_composed_with_the_scenarios(
    tmp_path: Path,
) -> None:
    path = _scenario(tmp_path, BASE)
    scale = "engine.pricing.gpu_time_scale"
    table = _run(path, tmp_path / "out", "--band", "10", "--set", f"{scale}=2")
    nominal, slow = (simulate(path, overrides=[f"{scale}={s}"]).summary() for s in (2, 2.2))
    fast = simulate(path, overrides=[f"{scale}=1.8"]).summary()
    for variant in ("a", "b"):
        rows = _rows(table, "band", variant)
        for metric in ("tpot_p50_s", "e2e_p99_s", "itl_p99_s"):
            low, mid, high = (float(s.at[variant, metric]) for s in (fast, nominal, slow))
            assert low < mid < high, (variant, metric)
            row = rows.loc[metric]
            assert (row["min"], row["mean"], row["max"], row["n"]) == (low, mid, high, 3)
            assert (row["ci_low"], row["ci_high"]) == (low, high)
        tokens = [float(s.at[variant, "output_tokens_per_s"]) for s in (fast, nominal, slow)]
        throughput = rows.loc["output_tokens_per_s"]  # a range, whichever run it came from
        assert (throughput["min"], throughput["max"]) == (min(tokens), max(tokens))
        assert not bool(rows["slo_flips"].iloc[0])  # 100 % at every end: nothing flips


def test_both_flags_write_each_sources_rows_with_the_columns(tmp_path: Path) -> None:
    path = _scenario(tmp_path, BASE)
    table = _run(path, tmp_path / "out", "--seeds", "2", "--band", "5")
    expected = ["variant", "metric", "mean", "ci_low", "ci_high", "min", "max", "n", "source"]
    assert list(table.columns) == [*expected, "slo_flips"] == list(COLUMNS)
    metrics = headline_metrics(simulate(path).summary())
    assert len(table) == 2 * 2 * len(metrics)  # sources x variants x metrics
    for source, n in (("seeds", 2), ("band", 3)):
        rows = table[table["source"] == source]
        assert set(rows["variant"]) == {"a", "b"} and set(rows["n"]) == {n}
    assert table[table["source"] == "seeds"]["slo_flips"].isna().all()
    assert table[table["source"] == "band"]["slo_flips"].notna().all()
    # the first seed's ordinary outputs are there too
    folder = tmp_path / "out" / "fuzz"
    assert {"summary.json", "report.html", "scenario.yaml", ".batchsim"} <= {
        p.name for p in folder.iterdir()
    }
    # worker processes give the same table
    again = _run(path, tmp_path / "out2", "--seeds", "2", "--band", "5", "--workers", "2")
    pd.testing.assert_frame_equal(table, again)


def test_a_flip_is_reported_when_the_slow_end_misses_the_slo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = copy.deepcopy(BASE)
    raw["metrics"] = {"warmup_s": 0.0}
    raw["slo"] = {"ttft_s": 100.0, "tpot_s": 100.0}
    path = _scenario(tmp_path, raw)
    worst = simulate(path).variants["a"].requests["tpot_s"].max()
    tight = worst * 1.05  # met at nominal; the slow end's steps take 10 % longer
    raw["slo"]["tpot_s"] = float(tight)
    raw["variants"]["b"]["slo"] = {"ttft_s": 100.0, "tpot_s": 100.0}  # met everywhere
    path = _scenario(tmp_path, raw)
    slow = simulate(path, overrides=["engine.pricing.gpu_time_scale=1.1"]).summary()
    assert slow.at["a", "slo_attainment"] < 1.0  # the construction works
    out = tmp_path / "out"
    argv = ["run", str(path), "--out", str(out), "--no-plots", "--band", "10", "--workers", "1"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    table = pd.read_csv(out / "fuzz" / "intervals.csv")
    flips = _rows(table, "band", "a")["slo_flips"]
    assert flips.astype(bool).all()
    assert not _rows(table, "band", "b")["slo_flips"].astype(bool).any()
    attainment = _rows(table, "band", "a").loc["slo_attainment"]
    assert attainment["mean"] == 1.0 and attainment["min"] == slow.at["a", "slo_attainment"]
    assert "a: the SLO verdict flips within ±10 % GPU time: met at nominal" in printed
    assert "b: the SLO verdict" not in printed
    assert "nominal [range] with each step's GPU time ±10 %" in printed


def test_the_printed_table_shows_the_half_width(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _scenario(tmp_path, BASE)
    argv = ["run", str(path), "--out", str(tmp_path / "out"), "--no-plots", "--workers", "1"]
    assert main([*argv, "--seeds", "3"]) == 0
    printed = capsys.readouterr().out
    table = pd.read_csv(tmp_path / "out" / "fuzz" / "intervals.csv")
    row = _rows(table, "seeds", "b").loc["e2e_p99_s"]
    cell = f"{row['mean']:.3f} ± {(row['ci_high'] - row['ci_low']) / 2:.3f}"
    line = next(x for x in printed.splitlines() if x.startswith("E2E p99 s"))
    assert line.rstrip().endswith(cell)
    assert "over 3 seeds (seed + 0..2)" in printed
    assert "and 2 more runs for error bars" in printed


def test_a_band_beyond_the_scales_bounds_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _scenario(tmp_path, BASE)
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "-q", "--band", "95"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("batchsim: error: --band 95: ") and "gpu_time_scale" in err
    assert len(err.splitlines()) == 1
    assert not out.exists() or not any(out.iterdir())
