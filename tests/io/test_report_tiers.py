"""KV tiers in the side-by-side table (terminal and HTML report): hit rate by tier, traffic per
tier, load wait and the fleet's price with the tiers' rent, only for the tiers a run has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers_results import TIERED, results_folder, tiered_results

from sim.io.output import write_results
from sim.io.report import TIERS_CAPTION, TIERS_NOTE
from sim.metrics.side_by_side import TIER_ROWS, format_summary, side_by_side
from sim.scenario.kv_tiers import KVTiersSpec, tiers_cost_per_hour
from sim.scenario.load import load_scenario_dict

GIB = 2**30


def table_rows(text: str) -> dict[str, list[str]]:
    """The terminal table's rows: label -> cells (labels may contain single spaces)."""
    rows = {}
    for line in text.splitlines()[2:]:
        label, *cells = re.split(r"\s{2,}", line.strip())
        rows[label] = cells
    return rows


def test_the_table_shows_each_tier_the_run_has() -> None:
    res = tiered_results()
    summary = res.summary()
    s = summary.loc["tiered"]
    rows = table_rows(format_summary(summary))
    assert rows["prefix hit % GPU"] == [f"{100 * s['kv_token_hit_rate_gpu']:.1f}", "-"]
    assert rows["prefix hit % DRAM"] == [f"{100 * s['kv_token_hit_rate_dram']:.1f}", "-"]
    assert rows["prefix hit % remote"] == [f"{100 * s['kv_token_hit_rate_remote']:.1f}", "-"]
    assert rows["DRAM read GiB"] == [f"{s['kv_dram_read_bytes'] / GIB:.2f}", "-"]
    assert rows["remote written GiB"] == [f"{s['kv_remote_written_bytes'] / GIB:.2f}", "-"]
    assert rows["KV load wait s"] == [f"{s['kv_load_wait_s']:.3f}", "-"]
    assert s["kv_token_hit_rate_dram"] > 0 and s["kv_load_wait_s"] > 0
    # the tiers' rows add up to the prefix hit % row above them
    parts = sum(s[f"kv_token_hit_rate_{k}"] for k in ("gpu", "dram", "remote"))
    assert parts == pytest.approx(s["prefix_cache_hit_rate"])
    # no NVMe tier, no NVMe rows
    assert not any("NVMe" in label for label in rows)
    # tier rows come after every other row, in TIER_ROWS order
    labels = list(rows)
    shown = [label for label, *_ in TIER_ROWS if label in rows]
    assert labels[-len(shown) :] == shown


def test_the_fleet_price_row_includes_the_tiers_rent() -> None:
    summary = tiered_results().summary()
    rent = tiers_cost_per_hour(KVTiersSpec.model_validate(TIERED["kv_tiers"]), 1)
    assert rent > 0.05  # 2 GiB of DRAM and 8 GiB of remote store show in cents per hour
    price = summary["fleet_usd_per_hour"]
    assert price["tiered"] - price["gpu-only"] == pytest.approx(rent)
    table = side_by_side(summary)
    assert table.loc["fleet $/h incl. KV tiers"].tolist() == pytest.approx(price.tolist())


def test_a_run_without_tiers_has_no_tier_rows() -> None:
    summary = tiered_results().summary().loc[["gpu-only"]]
    rows = table_rows(format_summary(summary))
    assert "prefix hit %" in rows
    assert not set(rows) & {label for label, *_ in TIER_ROWS}


def test_the_report_shows_the_tiers_and_says_the_price_includes_their_rent(
    tmp_path: Path,
) -> None:
    scenario_yaml = load_scenario_dict(TIERED).dump()
    folder = write_results(tiered_results(), tmp_path / "tiered", scenario_yaml, plots=True)
    text = (folder / "report.html").read_text()
    summary = text[text.index('<table class="summary">') : text.index("</table>")]
    s = tiered_results().summary().loc["tiered"]
    hit = f"{100 * s['kv_token_hit_rate_remote']:.1f}"
    assert f"<td>prefix hit % remote</td><td>{hit}</td><td>-</td>" in summary
    assert "<td>KV load wait s</td>" in summary and "<td>NVMe read GiB</td>" not in summary
    assert TIERS_NOTE in text and "include the tiers' rent" in TIERS_NOTE
    timeline = text[text.index('<figure id="plot-timeline">') :]
    assert TIERS_CAPTION in timeline[: timeline.index("</figure>")]


def test_a_report_without_tiers_has_none_of_it(tmp_path: Path) -> None:
    text = (results_folder(tmp_path, plots=False) / "report.html").read_text()
    assert "prefix hit % GPU" not in text and TIERS_NOTE not in text
