"""Deployment search over a band on the GPU step time (`search(..., robust=X)`): the robust
choice meets the SLOs when rerun at the slow end, the nominal choice and the flips it names,
pruning against the exhaustive search, saved results, and a search without a band unchanged.

At 9.5 requests/s the hand space (tests/helpers_search.py) needs `ceil(9.5 * step)` instances:

    GPU   tp  step    at nominal        at the slow end of +-10 % (step x 1.1)
    slow  1   0.100   0.95: 1 ($1.00)   1.045: 2 ($2.00)
    fast  1   0.050   0.475: 1 ($1.40)  0.5225: 1 ($1.40)
    slow  2   0.050   1 ($2.00)         1 ($2.00)
    fast  2   0.025   1 ($2.80)         1 ($2.80)
    bad   2   0.100   1 ($4.00)         2 ($8.00)

One slow GPU is the cheapest at nominal with 5 % to spare; over the band it falls behind (a
request every 105 ms, a step of 110 ms), so the robust choice is one fast GPU, 40 % dearer.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
from helpers_search import GPUS, HAND_SLO, hand_scenario, hand_space

from sim.errors import ScenarioError
from sim.simulate import simulate
from sim.whatif.search import search

RATE = 9.5
SLOW, FAST = "slow tp1 | colocated | static batch=1", "fast tp1 | colocated | static batch=1"
BAD = "bad tp2 | colocated | static batch=1"
# the table of a search without a band, column for column (the hand space lists no tiers)
PLAIN_COLUMNS = [
    "rank", "configuration", "status", "instances", "prefill", "decode", "num_gpus",
    "fleet_usd_per_hour", "usd_per_million_output_tokens", "energy_per_output_token_j",
    "fleet_power_w", "slo_attainment", "goodput_rps", "ttft_p99_s", "tpot_p99_s", "e2e_p99_s",
    "pareto", "unit_completed_rps", "units_at_least", "num_probes", "confirmed", "note", "gpu",
    "tensor_parallel", "data_parallel", "pipeline_parallel", "expert_parallel", "layout",
    "policy", "config_id", "queue_p99_s",
]  # fmt: skip


def _rerun(gpu: dict[str, Any], instances: int, scale: float, seed: int) -> dict[str, float]:
    """The hand scenario on `instances` of `gpu` (tp1) at the test's rate with every step's GPU
    time times `scale`, built here from scratch (not by the search), simulated."""
    raw = hand_scenario()
    raw["seed"] = seed
    raw["hardware"] = copy.deepcopy(gpu)
    raw["workload"]["arrival"]["rate"] = RATE
    raw["cluster"] = {"router": "round_robin", "instances": [{"count": instances}]}
    raw["engine"] = {"pricing": {"gpu_time_scale": scale}}
    result = simulate(raw, tables=False)
    summary: dict[str, float] = result["default"].summary()
    return summary


@pytest.fixture(scope="module")
def robust() -> Any:
    return search(hand_scenario(), hand_space(), [HAND_SLO], rate=RATE, robust=10, workers=1)


def test_the_robust_choice_meets_the_slos_when_rerun_at_the_slow_end(robust: Any) -> None:
    best = robust.best
    assert best is not None
    assert (best["configuration"], best["instances"]) == (FAST, 1)
    assert best["fleet_usd_per_hour"] == pytest.approx(1.4)
    assert best["slow_queue_p99_s"] <= 0.001
    fast, slow = GPUS[1], GPUS[0]
    for seed in robust.question["seeds"]:
        for scale in (1.0, 1.1, 0.9):  # every point the search judged, rerun independently
            assert _rerun(fast, 1, scale, seed)["queue_p99_s"] <= 0.001, (seed, scale)
    # the nominal choice holds at nominal and falls behind at the slow end: a real flip
    assert _rerun(slow, 1, 1.0, 0)["queue_p99_s"] <= 0.001
    assert _rerun(slow, 1, 1.1, 0)["queue_p99_s"] > 0.05  # the queue grows all run long
    assert _rerun(slow, 2, 1.1, 0)["queue_p99_s"] <= 0.001  # two slow GPUs hold over the band


def test_the_nominal_choice_differs_and_its_flip_is_marked(robust: Any) -> None:
    table = robust.table.set_index("configuration")
    # the slow GPU's nominal fleet (one) fails at the slow end: it flips, and needs two
    assert bool(table.loc[SLOW, "flips"])
    assert (table.loc[SLOW, "nominal_instances"], table.loc[SLOW, "instances"]) == (1, 2)
    assert table.loc[SLOW, "nominal_fleet_usd_per_hour"] == pytest.approx(1.0)
    assert table.loc[SLOW, "fleet_usd_per_hour"] == pytest.approx(2.0)
    assert table.loc[SLOW, "nominal_rank"] == 1 and table.loc[FAST, "nominal_rank"] == 2
    assert not bool(table.loc[FAST, "flips"])
    assert table.loc[FAST, "nominal_instances"] == table.loc[FAST, "instances"] == 1
    report = robust.robustness()
    assert report["nominal_choice"] == {"configuration": SLOW, "instances": 1, "num_gpus": 1,
                                        "value": pytest.approx(1.0)}  # fmt: skip
    assert report["robust_choice"]["configuration"] == FAST
    assert report["differs"] is True
    assert report["cost_pct"] == pytest.approx(40.0)
    assert report["scales"] == [1.0, 1.1, 0.9]
    assert report["flipped"] == [SLOW] and robust.counts["flips"] == 1
    assert "1 of 3 nominal fleets flip" in robust.describe()


def test_the_pruned_band_search_keeps_the_exhaustive_answers(robust: Any) -> None:
    full = search(hand_scenario(), hand_space(), [HAND_SLO], rate=RATE, robust=10,
                  exhaustive=True, workers=1)  # fmt: skip
    assert full.counts["pruned"] == 0 and robust.counts["pruned"] >= 1
    assert full.robustness()["robust_choice"] == robust.robustness()["robust_choice"]
    assert full.robustness()["nominal_choice"] == robust.robustness()["nominal_choice"]
    # every fleet the pruned search sized is the one the exhaustive search found, both ways
    both = robust.ranked.merge(full.ranked, on="configuration", suffixes=("", "_full"))
    assert len(both) == len(robust.ranked) == 3
    assert (both["instances"] == both["instances_full"]).all()
    assert (both["nominal_instances"] == both["nominal_instances_full"]).all()
    assert (both["flips"] == both["flips_full"]).all()
    # what it pruned is dearer than both choices, at nominal and over the band
    gone = robust.table.loc[robust.table["status"] == "dominated", "configuration"]
    dearer = full.ranked[full.ranked["configuration"].isin(set(gone))]
    assert len(dearer) >= 1
    assert (dearer["fleet_usd_per_hour"] > 1.4).all()
    assert (dearer["nominal_fleet_usd_per_hour"] > 1.0).all()
    # the bad GPU's tp2 unit flips too (one holds at nominal, two over the band), for $8/h
    bad = full.table.set_index("configuration").loc[BAD]
    assert bool(bad["flips"]) and (bad["nominal_instances"], bad["instances"]) == (1, 2)


def test_the_nominal_half_of_a_band_search_is_the_search_without_one() -> None:
    plain = search(hand_scenario(), hand_space(), [HAND_SLO], exhaustive=True, workers=1)
    band = search(hand_scenario(), hand_space(), [HAND_SLO], exhaustive=True, robust=5,
                  workers=1)  # fmt: skip
    merged = plain.ranked.merge(band.table, on="configuration", suffixes=("", "_band"))
    assert len(merged) == 5
    assert (merged["instances"] == merged["nominal_instances"]).all()
    assert list(merged["fleet_usd_per_hour"]) == pytest.approx(
        list(merged["nominal_fleet_usd_per_hour"])
    )
    # at 42 req/s every hand fleet has more to spare than 5 % (the least: 5 slow GPUs for 4.2
    # steps at a time, 19 %), so none flips
    assert not band.table["flips"].fillna(False).any()


def test_without_a_band_the_table_and_files_are_those_of_before(tmp_path: Path) -> None:
    result = search(hand_scenario(), hand_space(), [HAND_SLO], workers=1, out=tmp_path / "s")
    assert list(result.table.columns) == PLAIN_COLUMNS
    assert result.robustness() is None
    assert "robust_percent" not in result.question and "flips" not in result.counts
    assert "band" not in result.describe()
    document = json.loads((tmp_path / "s" / "search.json").read_text())
    assert set(document) == {"question", "counts", "described"}
    header = (tmp_path / "s" / "search.csv").read_text().splitlines()[0]
    assert header.split(",") == PLAIN_COLUMNS
    # the saved results keep their names: a fleet result without `band`
    records = [json.loads(p.read_text()) for p in (tmp_path / "s" / "configs").glob("*.json")]
    assert records and all("band" not in r["result"] for r in records)


def test_a_band_search_resumes_and_recomputes_a_result_without_its_band(tmp_path: Path) -> None:
    out = tmp_path / "s"
    args = (hand_scenario(), hand_space(), [HAND_SLO])
    first = search(*args, rate=RATE, robust=10, workers=1, out=out)
    again = search(*args, rate=RATE, robust=10, workers=1, out=out)
    assert again.counts["recomputed"] == 0
    assert again.table.drop(columns="num_probes").equals(first.table.drop(columns="num_probes"))
    document = json.loads((out / "search.json").read_text())
    assert document["robustness"]["cost_pct"] == pytest.approx(40.0)
    assert document["question"]["robust_percent"] == 10
    fleets = [p for p in (out / "configs").glob("*.json")
              if json.loads(p.read_text())["phase"] == "fleet"]  # fmt: skip
    record = json.loads(fleets[0].read_text())
    del record["result"]["band"]
    fleets[0].write_text(json.dumps(record))
    third = search(*args, rate=RATE, robust=10, workers=1, out=out)
    assert third.counts["recomputed"] == 1
    assert "band" in third.counts["first_recomputed"]
    assert third.robustness() == first.robustness()
    # the same folder searched without the band does not reuse the band's results, nor they its
    plain = search(*args, rate=RATE, workers=1, out=out)
    assert plain.counts["recomputed"] == 0 and plain.best["configuration"] == SLOW


@pytest.mark.parametrize("value", [0, 100, -1, math.nan, math.inf, "abc", True])
def test_a_bad_band_is_refused_naming_the_flag(value: Any) -> None:
    with pytest.raises(ScenarioError, match="--robust") as err:
        search(hand_scenario(), hand_space(), [HAND_SLO], robust=value, workers=1)
    assert "percentage above 0 and below 100" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_band_end_out_of_the_scale_range_is_refused_before_anything_runs() -> None:
    raw = {**hand_scenario(), "engine": {"pricing": {"gpu_time_scale": 8.0}}}
    with pytest.raises(ScenarioError, match=r"--robust 30: configuration .* at 1\.3 x"):
        search(raw, hand_space(), [HAND_SLO], robust=30, workers=1)


def test_band_bounds_set_aside_only_what_can_be_neither_choice() -> None:
    from sim.whatif.search_prune import BandBounds, Unit, band_unit, units_at_least
    from sim.whatif.search_space import Config

    def unit(name: str, price: float, completed: float) -> Unit:
        hardware = {"name": "h100-sxm", "usd_per_gpu_hour": price}
        config = Config(name, name, hardware, 1, "colocated", 0, 0, {"name": "continuous"}, name)
        passes = completed >= 40.0
        return Unit(config, completed, passes, units_at_least(40.0, completed, passes))

    nominal = [unit("a", 1.0, 40.0), unit("b", 1.5, 40.0), unit("c", 3.0, 40.0)]
    slow = [unit("a", 1.0, 8.0), unit("b", 1.5, 40.0), unit("c", 3.0, 40.0)]
    over = [band_unit(n, s) for n, s in zip(nominal, slow, strict=True)]
    assert [u.units_at_least for u in over] == [4, 1, 1]  # a needs 4 units over the band
    bounds = BandBounds(nominal, over, "cost")
    assert [u.config.id for u in bounds.next_wave()] == ["b"]  # the lowest band bound: $1.5
    assert bounds.band_start(nominal[0]) == 4
    bounds.found_both("b", 1.5, 1.5)
    # a: $1 at nominal (may be the nominal choice) is kept though $4 over the band; c is not
    assert set(bounds.pruned) == {"c"}
    assert "over the band" in bounds.pruned["c"][1]
    assert [u.config.id for u in bounds.next_wave()] == ["a"]
