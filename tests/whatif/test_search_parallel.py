"""Deployment search over the parallelism of a deployment: the space's data_parallel,
expert_parallel and pipeline_parallel axes (the product they join, the names and columns they
give, what is set aside and why: stages past the layers, no scale-out network, stages meeting KV
tiers), P/D layouts whose pools have parallelism of their own (wide expert parallelism on
decode, stages), GPU counts and prices of tensor x data x pipeline parallel instances, searches
whose cheapest answer is by construction a data- and expert-parallel instance, or one of
pipeline stages, and pruning against the exhaustive search on spaces with the new axes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from helpers_search import (
    GPUS,
    HAND_SLO,
    expected_instances,
    gpu,
    hand_scenario,
    hand_space,
    llama_poisson,
)
from scenario_factory import continuous, poisson, scenario

from sim.costs.catalog import HardwareSpec, ModelSpec
from sim.costs.fits import check_fits
from sim.errors import ScenarioError
from sim.scenario.load import load_scenario_dict
from sim.whatif.search import search
from sim.whatif.search_probe import Prober, scenario_of, unit_counts
from sim.whatif.search_prune import Unit, lower_bound, unit_figures
from sim.whatif.search_question import prepare

# the brief's stand-in for a catalog MoE model: 32 experts, top 4, 16 query and 4 KV heads
SMALL_MOE = {"name": "small-moe", "num_parameters": 4_000_000_000, "num_layers": 16,
             "hidden_size": 2048, "num_attention_heads": 16, "num_kv_heads": 4, "head_dim": 128,
             "max_model_len": 8192, "num_experts": 32, "experts_per_token": 4,
             "moe_intermediate_size": 1024}  # fmt: skip
POLICY = {"name": "continuous", "max_num_seqs": 16}
WIDE_EP = {"prefill": 1, "decode": 2, "prefill_hardware": {"tensor_parallel": 8},
           "decode_hardware": {"data_parallel": 16, "expert_parallel": True}}  # fmt: skip
H200_USD = HardwareSpec.model_validate("h200").economics.usd_per_gpu_hour


def moe_scenario(num_requests: int = 60, rate: float = 10.0) -> dict[str, Any]:
    return scenario(
        name="moe",
        seed=0,
        workload=poisson(num_requests, rate, 200, 20),
        model=SMALL_MOE,
        hardware="h200",
        policy=POLICY,
        profile=None,
    )


def _prepare(scenario: dict[str, Any], space: dict[str, Any]) -> Any:
    return prepare(scenario, space, ["ttft_p99=5"], rate=None, overrides=(), repeats=1,
                   objective="cost")  # fmt: skip


def test_the_parallel_axes_join_the_product_and_name_each_configuration() -> None:
    space = {"gpus": ["h200"], "tensor_parallel": [1, 2], "data_parallel": [1, 4],
             "expert_parallel": [False, True], "layouts": ["colocated", "1p1d"],
             "max_instances": 16}  # fmt: skip
    prepared = _prepare(moe_scenario(), space)
    every = prepared.expanded.every
    assert len(every) == 2 * 2 * 2 * 2  # degrees x data-parallel x expert options x layouts
    assert len({c.id for c in every}) == len({c.label for c in every}) == 16
    seqs = "continuous seqs=16"
    assert [c.label for c in every[:8]] == [
        f"h200 tp1 | colocated | {seqs}", f"h200 tp1 | 1p1d | {seqs}",
        f"h200 tp1 ep1 | colocated | {seqs}", f"h200 tp1 ep1 | 1p1d | {seqs}",
        f"h200 tp1 dp4 | colocated | {seqs}", f"h200 tp1 dp4 | 1p1d | {seqs}",
        f"h200 tp1 dp4 ep4 | colocated | {seqs}", f"h200 tp1 dp4 ep4 | 1p1d | {seqs}",
    ]  # fmt: skip
    # experts whole on the one GPU of a tp1 instance deploy what tp1 deploys: set aside
    aside = {c.label: (why, note) for c, why, note in prepared.expanded.set_aside}
    assert aside == {
        f"h200 tp1 ep1 | colocated | {seqs}": (
            "duplicate", f"the same fleets as h200 tp1 | colocated | {seqs}"),
        f"h200 tp1 ep1 | 1p1d | {seqs}": (
            "duplicate", f"the same fleets as h200 tp1 | 1p1d | {seqs}"),
    }  # fmt: skip
    assert len(prepared.runnable) == 14
    by_label = {c.label: c for c in every}
    widest = by_label[f"h200 tp2 dp4 ep8 | 1p1d | {seqs}"]
    assert widest.hardware == {"name": "h200", "tensor_parallel": 2, "data_parallel": 4,
                               "expert_parallel": 8}  # fmt: skip
    assert (widest.data_parallel, widest.expert_parallel_degree) == (4, 8)
    assert widest.unit_size == 2 and widest.unit_gpus == 2 * 8
    assert by_label[f"h200 tp1 dp4 | colocated | {seqs}"].unit_gpus == 4
    assert by_label[f"h200 tp1 dp4 | colocated | {seqs}"].expert_parallel_degree == 1
    # the size limit counts the new axes before anything is expanded
    big = {**space, "tensor_parallel": [1, 2, 4, 8], "data_parallel": list(range(1, 41)),
           "policies": [{**POLICY, "max_num_seqs": list(range(1, 11))}]}  # fmt: skip
    with pytest.raises(ScenarioError, match=r"6400 configurations \(1 GPUs x 4 degrees x 40 "
                       r"data-parallel degrees x 2 expert-parallel options x 2 layouts x 10 "
                       r"policies\); at most 5000"):  # fmt: skip
        _prepare(moe_scenario(), big)


def test_a_space_that_lists_the_default_axes_gives_the_same_configurations() -> None:
    plain = _prepare(hand_scenario(), hand_space()).expanded.every
    listed = {**hand_space(), "data_parallel": [1], "expert_parallel": [False],
              "pipeline_parallel": [1]}  # fmt: skip
    same = _prepare(hand_scenario(), listed).expanded.every
    assert [(c.id, c.label, c.hardware) for c in same] == [
        (c.id, c.label, c.hardware) for c in plain
    ]
    assert all(not {"data_parallel", "expert_parallel", "pipeline_parallel"} & set(c.hardware)
               for c in plain)  # fmt: skip


def _dense_note(hardware: dict[str, Any]) -> str:
    """check_fits's own reason for the tiny dense model on `hardware`, as the space names it."""
    model = ModelSpec.model_validate(hand_scenario()["model"])
    with pytest.raises(ValueError) as info:
        check_fits(model, HardwareSpec.model_validate(hardware))
    return str(info.value).replace("hardware.", "", 1)


def test_data_and_expert_parallelism_of_a_dense_model_are_set_aside_with_the_reason() -> None:
    space = {**hand_space(), "gpus": GPUS[:1], "data_parallel": [1, 2],
             "expert_parallel": [False, True]}  # fmt: skip
    result = search(hand_scenario(), space, [HAND_SLO], workers=1, repeats=0)
    rows = result.table.set_index("configuration")
    batch = "static batch=1"
    dense = {
        f"slow tp1 ep1 | colocated | {batch}",
        f"slow tp1 dp2 | colocated | {batch}",
        f"slow tp1 dp2 ep2 | colocated | {batch}",
        f"slow tp2 ep2 | colocated | {batch}",
        f"slow tp2 dp2 | colocated | {batch}",
        f"slow tp2 dp2 ep4 | colocated | {batch}",
    }
    assert set(rows.index[rows["status"] == "dense model"]) == dense
    assert result.counts["set_aside_by_reason"] == {"dense model": 6}
    note = rows.loc[f"slow tp1 dp2 | colocated | {batch}", "note"]
    assert note == _dense_note({**GPUS[0], "data_parallel": 2})
    assert note.startswith("data_parallel needs a mixture-of-experts model (tiny is dense")
    assert rows.loc[f"slow tp2 ep2 | colocated | {batch}", "note"] == _dense_note(
        {**GPUS[0], "tensor_parallel": 2, "expert_parallel": 2}
    )
    # on one GPU expert_parallel: true is 1, which check_fits accepts: the space says why not
    one = rows.loc[f"slow tp1 ep1 | colocated | {batch}", "note"]
    assert one.startswith("expert_parallel needs a mixture-of-experts model (tiny is dense")
    # the two degrees a dense model takes are sized as before
    assert rows.loc[f"slow tp1 | colocated | {batch}", "instances"] == expected_instances("slow", 1)
    assert rows.loc[f"slow tp2 | colocated | {batch}", "instances"] == expected_instances("slow", 2)


def test_experts_that_do_not_divide_and_a_missing_scale_out_network_are_set_aside() -> None:
    no_ib = {"name": "h200", "label": "h200-no-ib", "scaleout_bandwidth_bytes_per_s": None}
    skewed = {"name": "h200", "label": "h200-skewed", "expert_imbalance": 2.0}
    space = {"gpus": ["h200", no_ib, skewed], "tensor_parallel": [1], "data_parallel": [3, 16],
             "expert_parallel": [False, True], "max_instances": 16}  # fmt: skip
    prepared = _prepare(moe_scenario(), space)
    aside = {c.label: (why, note) for c, why, note in prepared.expanded.set_aside}
    seqs = "colocated | continuous seqs=16"
    assert aside[f"h200 tp1 dp3 ep3 | {seqs}"] == (
        "cannot shard",
        "expert_parallel (3) must divide small-moe's num_experts (32)",
    )
    assert aside[f"h200-no-ib tp1 dp16 | {seqs}"][0] == "no scale-out network"
    assert "16 GPUs span more than one scale-up domain of 8" in aside[
        f"h200-no-ib tp1 dp16 | {seqs}"][1]  # fmt: skip
    why, note = aside[f"h200-skewed tp1 dp3 | {seqs}"]
    assert why == "cannot shard"
    assert "expert_imbalance (2) cannot exceed expert_parallel (1)" in note
    runnable = {c.label for c in prepared.runnable}
    assert runnable == {f"h200 tp1 dp3 | {seqs}", f"h200 tp1 dp16 | {seqs}",
                        f"h200 tp1 dp16 ep16 | {seqs}", f"h200-no-ib tp1 dp3 | {seqs}",
                        f"h200-skewed tp1 dp16 ep16 | {seqs}"}  # fmt: skip


def test_a_wide_ep_layout_gives_each_pool_its_own_hardware() -> None:
    space = {"gpus": ["h200"], "tensor_parallel": [1], "layouts": ["1p1d", WIDE_EP],
             "max_instances": 16}  # fmt: skip
    prepared = _prepare(moe_scenario(), space)
    config = {c.label: c for c in prepared.runnable}[
        "h200 tp1 | 1p2d[P tp8 / D dp16 ep16] | continuous seqs=16"
    ]
    assert (config.prefill, config.decode, config.unit_size) == (1, 2, 3)
    assert config.unit_gpus == 1 * 8 + 2 * 16
    q = prepared.question
    raw = scenario_of(q, config, unit_counts(config, 2), q.rate_rps, q.seeds[0])
    pools = raw["disaggregation"]
    assert pools["prefill"] == {"router": "least_outstanding_requests", "count": 2,
                                "hardware": {"name": "h200", "tensor_parallel": 8}}  # fmt: skip
    assert pools["decode"] == {
        "router": "least_kv",
        "count": 4,
        "hardware": {
            "name": "h200",
            "tensor_parallel": 1,
            "data_parallel": 16,
            "expert_parallel": 16,
        },
    }
    resolved = load_scenario_dict(raw, file=q.file, base_dir=Path(q.base_dir)).variants[0]
    groups = {g.role: g for g in resolved.groups}
    prefill, decode = groups["prefill"], groups["decode"]
    assert (prefill.count, prefill.hardware.num_gpus, prefill.hardware.expert_parallel) == (2, 8, 1)
    assert (decode.count, decode.hardware.num_gpus, decode.hardware.data_parallel,
            decode.hardware.expert_parallel) == (4, 16, 16, 16)  # fmt: skip
    # a plain xPyD layout: both pools take the configuration's own hardware
    plain = {c.label: c for c in prepared.runnable}["h200 tp1 | 1p1d | continuous seqs=16"]
    raw = scenario_of(q, plain, unit_counts(plain), q.rate_rps, q.seeds[0])
    assert "hardware" not in raw["disaggregation"]["prefill"]
    assert raw["hardware"] == {"name": "h200", "tensor_parallel": 1}
    # a layout giving one pool its own: the other is the configuration's degree
    one = {"prefill": 1, "decode": 1, "decode_hardware": {"data_parallel": 8,
                                                          "expert_parallel": True}}  # fmt: skip
    mixed = _prepare(moe_scenario(), {**space, "tensor_parallel": [2], "layouts": [one]})
    config = mixed.runnable[0]
    assert config.label == "h200 tp2 | 1p1d[D dp8 ep8] | continuous seqs=16"
    assert config.unit_gpus == 2 + 8
    raw = scenario_of(q, config, unit_counts(config), q.rate_rps, q.seeds[0])
    assert raw["hardware"]["tensor_parallel"] == 2 and "hardware" not in raw[
        "disaggregation"]["prefill"]  # fmt: skip


def test_a_pool_with_parallelism_of_its_own_is_checked_and_named_in_the_reason() -> None:
    bad = {"prefill": 1, "decode": 1, "decode_hardware": {"data_parallel": 3,
                                                          "expert_parallel": True}}  # fmt: skip
    space = {"gpus": ["h200"], "tensor_parallel": [1], "layouts": [bad], "max_instances": 16}
    prepared = _prepare(moe_scenario(), space)
    ((_, why, note),) = prepared.expanded.set_aside
    assert why == "cannot shard"
    assert note == "decode pool: expert_parallel (3) must divide small-moe's num_experts (32)"
    dense = {**hand_space(), "layouts": [{"prefill": 1, "decode": 1,
                                          "decode_hardware": {"data_parallel": 2}}],
             "policies": [{"name": "continuous", "max_num_seqs": 1}]}  # fmt: skip
    aside = _prepare(hand_scenario(), dense).expanded.set_aside
    assert {why for _, why, _ in aside} >= {"dense model"}
    assert any(n.startswith("decode pool: data_parallel needs a mixture-of-experts model")
               for _, _, n in aside)  # fmt: skip


def test_gpu_counts_and_prices_count_tensor_times_data_parallel() -> None:
    space = {"gpus": ["h200"], "tensor_parallel": [2], "data_parallel": [4],
             "expert_parallel": [True], "layouts": ["colocated", WIDE_EP],
             "max_instances": 16}  # fmt: skip
    prepared = _prepare(moe_scenario(), space)
    q = prepared.question
    colocated, wide = prepared.runnable
    assert colocated.label == "h200 tp2 dp4 ep8 | colocated | continuous seqs=16"
    for config, gpus in ((colocated, 8), (wide, 8 + 2 * 16)):
        assert config.unit_gpus == gpus
        usd, tdp, idle = unit_figures(config)
        assert tdp == pytest.approx(gpus * 700.0)  # H200 SXM board power
        assert usd == pytest.approx(gpus * H200_USD)
        # the search's price of a unit is the simulator's price of the same fleet
        summary, _ = Prober(q, config).probe(unit_counts(config), q.rate_rps, q.seeds[0])
        assert summary["num_gpus"] == gpus
        assert summary["fleet_usd_per_hour"] == pytest.approx(usd)
        unit = Unit(config, 1.0, False, 3)
        assert lower_bound(unit, "cost") == pytest.approx(3 * gpus * H200_USD)
        assert lower_bound(unit, "energy") == pytest.approx(3 * idle)


# A mixture of experts whose routed experts are 92 % of its 220 MB of weights (bf16): one
# `small` GPU (150 MB) cannot hold it, two can with the experts spread over them (each keeps the
# 19 MB of dense weights: 239 MB in 300 MB); one `big` GPU (400 MB) holds it whole.
TOY_MOE = {"name": "toy-moe", "num_parameters": 110_000_000, "num_layers": 2, "hidden_size": 256,
           "num_attention_heads": 4, "num_kv_heads": 4, "head_dim": 64, "max_model_len": 1000,
           "num_experts": 8, "experts_per_token": 2, "moe_intermediate_size": 8192}  # fmt: skip
SMALL = {**gpu("small", 1e12, 1.0, 150e6), "peak_flops": 1e15}
BIG = {**gpu("big", 1e12, 3.0, 400e6), "peak_flops": 1e15}


def toy_scenario() -> dict[str, Any]:
    return scenario(
        name="toy",
        seed=0,
        workload=poisson(100, 5.0, 20, 5),
        model=TOY_MOE,
        hardware=BIG,
        policy=continuous(max_num_seqs=8),
        profile=None,
    )


def test_the_search_picks_data_and_expert_parallelism_when_it_is_cheaper(tmp_path: Path) -> None:
    """At 5 requests/s of 25 tokens any one instance meets a 1 s TTFT, so each fleet is one
    instance and costs its GPUs: two small GPUs ($2/h, data parallel, experts spread) beat one
    big GPU ($3/h), and a small GPU alone does not fit."""
    space = {"gpus": [SMALL, BIG], "tensor_parallel": [1], "data_parallel": [1, 2],
             "expert_parallel": [False, True], "max_instances": 4}  # fmt: skip
    slos = ["ttft_p99=1"]
    out = tmp_path / "s"
    result = search(toy_scenario(), space, slos, workers=1, repeats=1, out=out)
    best = result.best
    seqs = "colocated | continuous seqs=8"
    assert best is not None and best["configuration"] == f"small tp1 dp2 ep2 | {seqs}"
    assert (best["instances"], best["num_gpus"]) == (1, 2)
    assert best["fleet_usd_per_hour"] == pytest.approx(2.0)
    assert (best["tensor_parallel"], best["data_parallel"], best["expert_parallel"]) == (1, 2, 2)
    rows = result.table.set_index("configuration")
    assert rows.loc[f"small tp1 dp2 | {seqs}", "fleet_usd_per_hour"] == pytest.approx(2.0)
    assert rows.loc[f"small tp1 dp2 | {seqs}", "expert_parallel"] == 1
    status = rows["status"].to_dict()
    assert status[f"small tp1 | {seqs}"] == status[f"small tp1 ep1 | {seqs}"] == "does not fit"
    assert status[f"big tp1 ep1 | {seqs}"] == "duplicate"
    assert {status[f"big tp1 {d}| {seqs}"] for d in ("", "dp2 ", "dp2 ep2 ")} == {"dominated"}
    # the columns of the degree stand together, and the page names the answer
    columns = list(result.table.columns)
    at = columns.index("tensor_parallel")
    assert columns[at : at + 5] == ["tensor_parallel", "data_parallel", "pipeline_parallel",
                                    "expert_parallel", "layout"]  # fmt: skip
    assert f"small tp1 dp2 ep2 | {seqs}" in (out / "report.html").read_text()
    # the exhaustive search sizes what was pruned: dearer, as its bound said
    full = search(toy_scenario(), space, slos, workers=1, repeats=1, exhaustive=True)
    assert full.best is not None and full.best["configuration"] == best["configuration"]
    found = full.ranked.set_index("configuration")
    assert found.loc[f"big tp1 | {seqs}", "fleet_usd_per_hour"] == pytest.approx(3.0)
    assert found.loc[f"big tp1 dp2 ep2 | {seqs}", "fleet_usd_per_hour"] == pytest.approx(6.0)


def _agree(full: Any, pruned: Any) -> None:
    """The pruned search finds the exhaustive one's optimum, sizes the very fleets it found, its
    bounds hold for every true fleet, and what it pruned costs at least the optimum."""
    cheapest = full.ranked["fleet_usd_per_hour"].min()
    assert pruned.best is not None
    assert pruned.best["fleet_usd_per_hour"] == pytest.approx(cheapest)
    # every fleet the pruned search sized is the very fleet the exhaustive one found
    both = pruned.ranked.merge(full.ranked, on="configuration", suffixes=("", "_full"))
    assert len(both) == len(pruned.ranked)
    assert (both["instances"] == both["instances_full"]).all()
    assert (both["num_gpus"] == both["num_gpus_full"]).all()
    # the bound one unit's probe set holds for every configuration's true fleet
    bounds = pruned.table.merge(full.ranked, on="configuration", suffixes=("", "_full"))
    per_unit = bounds["layout"].map(lambda name: 1 if name == "colocated" else 2)
    assert len(bounds) == len(full.ranked)
    assert (bounds["units_at_least"] <= bounds["instances_full"] // per_unit).all()
    # every configuration it pruned costs at least the optimum
    gone = set(pruned.table.loc[pruned.table["status"] == "dominated", "configuration"])
    dearer = full.ranked[full.ranked["configuration"].isin(gone)]["fleet_usd_per_hour"]
    assert len(dearer) == len(gone) and (dearer >= cheapest - 1e-9).all()


def test_pruning_never_removes_the_optimum_with_the_parallel_axes() -> None:
    """A MoE model under load on two GPUs, with data and expert parallelism and a P/D layout
    whose pools have their own: the pruned search finds what the exhaustive one finds."""
    scenario = {**moe_scenario(600, 60.0), "seed": 3, "hardware": "a100-80g",
                "metrics": {"warmup_s": 1, "cooldown_s": 1}}  # fmt: skip
    scenario["workload"] |= {
        "prompt_tokens": {"dist": "lognormal", "median": 1000, "sigma": 0.6, "max": 4000},
        "output_tokens": {"dist": "lognormal", "median": 100, "sigma": 0.6, "max": 400},
    }
    split = {"prefill": 1, "decode": 1, "prefill_hardware": {"tensor_parallel": 2},
             "decode_hardware": {"data_parallel": 2, "expert_parallel": True}}  # fmt: skip
    space = {"gpus": ["l40s", "a100-80g"], "tensor_parallel": [1], "data_parallel": [1, 2],
             "expert_parallel": [False, True], "layouts": ["colocated", "1p1d", split],
             "max_instances": 16}  # fmt: skip
    slos = ["ttft_p99=1", "tpot_p99=0.03"]
    full = search(scenario, space, slos, repeats=1, exhaustive=True, workers=1)
    pruned = search(scenario, space, slos, repeats=1, workers=1)
    assert full.counts["set_aside_by_reason"] == {"duplicate": 10}
    assert pruned.counts["pruned"] >= 8  # the rules did prune
    _agree(full, pruned)
    # GPUs of every found fleet: tensor x data parallel per instance, each pool at its own
    for _, row in full.ranked.iterrows():
        if row["layout"].startswith("1p1d["):  # P tp2 / D dp2 ep2: 4 GPUs per unit
            assert row["num_gpus"] == 4 * row["instances"] // 2
        else:
            assert row["num_gpus"] == row["data_parallel"] * row["instances"]


# Pipeline parallelism (sim/costs/pipeline.py): an instance of pp stages of tp x dp GPUs each
# runs as pp virtual engines.


def test_pipeline_stages_join_the_product_and_name_each_configuration() -> None:
    own = {"prefill": 1, "decode": 1,
           "prefill_hardware": {"tensor_parallel": 4, "pipeline_parallel": 2}}  # fmt: skip
    space = {"gpus": ["h100-sxm"], "tensor_parallel": [1, 4], "pipeline_parallel": [1, 2, 4],
             "layouts": ["colocated", "1p1d", own], "max_instances": 16}  # fmt: skip
    prepared = _prepare(moe_scenario(), space)
    every = prepared.expanded.every
    assert len(every) == 2 * 3 * 3  # degrees x pipeline degrees x layouts
    assert len({c.id for c in every}) == len({c.label for c in every}) == 18
    seqs = "continuous seqs=16"
    # a prefill pool of its own at the configuration's very degree deploys plain 1p1d
    aside = [(c.label, why, note) for c, why, note in prepared.expanded.set_aside]
    assert aside == [(f"h100-sxm tp4 pp2 | 1p1d[P tp4 pp2] | {seqs}", "duplicate",
                      f"the same fleets as h100-sxm tp4 pp2 | 1p1d | {seqs}")]  # fmt: skip
    assert len(prepared.runnable) == 17
    assert [c.label for c in every[3:9]] == [
        f"h100-sxm tp1 pp2 | colocated | {seqs}", f"h100-sxm tp1 pp2 | 1p1d | {seqs}",
        f"h100-sxm tp1 pp2 | 1p1d[P tp4 pp2] | {seqs}", f"h100-sxm tp1 pp4 | colocated | {seqs}",
        f"h100-sxm tp1 pp4 | 1p1d | {seqs}", f"h100-sxm tp1 pp4 | 1p1d[P tp4 pp2] | {seqs}",
    ]  # fmt: skip
    by_label = {c.label: c for c in every}
    plain = by_label[f"h100-sxm tp4 | colocated | {seqs}"]
    assert plain.hardware == {"name": "h100-sxm", "tensor_parallel": 4}
    staged = by_label[f"h100-sxm tp4 pp2 | colocated | {seqs}"]
    assert staged.hardware == {"name": "h100-sxm", "tensor_parallel": 4, "pipeline_parallel": 2}
    assert staged.pipeline_parallel == 2
    assert (staged.instance_gpus, staged.unit_gpus, staged.unit_engines) == (8, 8, 2)
    wide = by_label[f"h100-sxm tp4 pp4 | 1p1d | {seqs}"]  # 16 GPUs an instance, two nodes
    assert (wide.unit_size, wide.unit_gpus, wide.unit_engines) == (2, 32, 8)
    mixed = by_label[f"h100-sxm tp1 pp4 | 1p1d[P tp4 pp2] | {seqs}"]
    assert mixed.prefill_hardware == {"name": "h100-sxm", "tensor_parallel": 4,
                                      "pipeline_parallel": 2}  # fmt: skip
    assert (mixed.unit_gpus, mixed.unit_engines) == (8 + 4, 2 + 4)
    # the size limit counts the pipeline axis before anything is expanded
    big = {**space, "pipeline_parallel": [1, 2, 4, 8],
           "policies": [{**POLICY, "max_num_seqs": list(range(1, 251))}]}  # fmt: skip
    with pytest.raises(ScenarioError, match=r"6000 configurations \(1 GPUs x 2 degrees x 4 "
                       r"pipeline-parallel degrees x 3 layouts x 250 policies\); at most 5000"):
        _prepare(moe_scenario(), big)  # fmt: skip


def _fits_note(model: Any, hardware: dict[str, Any]) -> str:
    """check_fits's own reason for `model` on `hardware`, as the space names it (the degrees by
    the space's keys)."""
    spec, hw = ModelSpec.model_validate(model), HardwareSpec.model_validate(hardware)
    with pytest.raises(ValueError) as info:
        check_fits(spec, hw)
    return re.sub(r"hardware\.(\w+_parallel)", r"\1", str(info.value))


def test_stages_past_the_layers_a_missing_network_and_kv_tiers_are_set_aside() -> None:
    no_ib = {"name": "h100-sxm", "label": "h100-no-ib", "scaleout_bandwidth_bytes_per_s": None}
    caching = {"name": "continuous", "max_num_seqs": 16, "prefix_caching": True}
    space = {"gpus": ["h100-sxm", no_ib], "tensor_parallel": [8], "pipeline_parallel": [1, 2, 32],
             "policies": [caching], "kv_tiers": [None, {"dram": {"capacity_gb": 64}}],
             "max_instances": 16}  # fmt: skip
    prepared = _prepare({**moe_scenario(), "policy": caching}, space)
    aside = {c.label: (why, note) for c, why, note in prepared.expanded.set_aside}
    seqs = "colocated | continuous seqs=16 prefix_caching=True"
    layers = _fits_note(SMALL_MOE, {"name": "h100-sxm", "tensor_parallel": 8,
                                    "pipeline_parallel": 32})  # fmt: skip
    assert layers == "pipeline_parallel (32) exceeds small-moe's 16 layers"
    network = _fits_note(SMALL_MOE, {"name": "h100-sxm", "scaleout_bandwidth_bytes_per_s": None,
                                     "tensor_parallel": 8, "pipeline_parallel": 2})
    assert "the instance's 16 GPUs span more than one scale-up domain of 8" in network
    tiers = ("pipeline_parallel > 1 with kv_tiers is not modelled (each virtual engine would get "
             "the instance's tiers): 2 stages meet the tiers of the space's option dram64")
    assert aside == {
        f"h100-sxm tp8 pp32 | {seqs} | no tiers": ("cannot shard", layers),
        f"h100-sxm tp8 pp32 | {seqs} | dram64": ("cannot shard", layers),
        f"h100-no-ib tp8 pp2 | {seqs} | no tiers": ("no scale-out network", network),
        f"h100-no-ib tp8 pp2 | {seqs} | dram64": ("no scale-out network", network),
        f"h100-no-ib tp8 pp32 | {seqs} | no tiers": ("cannot shard", layers),
        f"h100-no-ib tp8 pp32 | {seqs} | dram64": ("cannot shard", layers),
        f"h100-sxm tp8 pp2 | {seqs} | dram64": ("pipeline with tiers", tiers),
    }  # fmt: skip
    assert {c.label for c in prepared.runnable} == {
        f"h100-sxm tp8 | {seqs} | no tiers", f"h100-sxm tp8 | {seqs} | dram64",
        f"h100-sxm tp8 pp2 | {seqs} | no tiers", f"h100-no-ib tp8 | {seqs} | no tiers",
        f"h100-no-ib tp8 | {seqs} | dram64",
    }  # fmt: skip
    # the scenario's own tiers apply where the space lists none: stages meet them too, in a
    # pool of their own as well
    tiered = {**moe_scenario(), "policy": caching, "kv_tiers": {"dram": {"capacity_gb": 64}}}
    own = {"prefill": 1, "decode": 1, "decode_hardware": {"pipeline_parallel": 2}}
    plain = {"gpus": ["h100-sxm"], "tensor_parallel": [1], "pipeline_parallel": [1, 2],
             "layouts": ["colocated", own], "max_instances": 16}  # fmt: skip
    prepared = _prepare(tiered, plain)
    aside = {c.label: (why, note) for c, why, note in prepared.expanded.set_aside}
    policy = "continuous seqs=16 prefix_caching=True"
    scenario_tiers = tiers.replace("the space's option dram64", "the scenario")
    assert aside == {
        f"h100-sxm tp1 | 1p1d[D tp1 pp2] | {policy}": ("pipeline with tiers", scenario_tiers),
        f"h100-sxm tp1 pp2 | colocated | {policy}": ("pipeline with tiers", scenario_tiers),
        f"h100-sxm tp1 pp2 | 1p1d[D tp1 pp2] | {policy}": ("pipeline with tiers", scenario_tiers),
    }  # fmt: skip
    assert [c.label for c in prepared.runnable] == [f"h100-sxm tp1 | colocated | {policy}"]
    # stages past the layers of a dense model, said the same way
    dense = {**hand_space(), "gpus": GPUS[:1], "tensor_parallel": [1], "pipeline_parallel": [2]}
    ((config, why, note),) = _prepare(hand_scenario(), dense).expanded.set_aside
    assert (config.label, why) == ("slow tp1 pp2 | colocated | static batch=1", "cannot shard")
    assert note == "pipeline_parallel (2) exceeds tiny's 1 layers"


def test_gpu_counts_and_prices_count_every_pipeline_stage() -> None:
    own = {"prefill": 1, "decode": 1,
           "prefill_hardware": {"tensor_parallel": 2, "pipeline_parallel": 2},
           "decode_hardware": {"data_parallel": 4, "expert_parallel": True,
                               "pipeline_parallel": 2}}  # fmt: skip
    space = {"gpus": ["h200"], "tensor_parallel": [2], "data_parallel": [2],
             "expert_parallel": [True], "pipeline_parallel": [2],
             "layouts": ["colocated", "1p2d", own], "max_instances": 16}  # fmt: skip
    prepared = _prepare(moe_scenario(), space)
    q = prepared.question
    colocated, split, pools = prepared.runnable
    assert colocated.label == "h200 tp2 dp2 ep4 pp2 | colocated | continuous seqs=16"
    assert pools.layout == "1p1d[P tp2 pp2 / D dp4 ep4 pp2]"
    for config, gpus, engines in ((colocated, 8, 2), (split, 3 * 8, 3 * 2), (pools, 4 + 8, 4)):
        assert (config.unit_gpus, config.unit_engines) == (gpus, engines)
        usd, tdp, idle = unit_figures(config)
        assert tdp == pytest.approx(gpus * 700.0)  # H200 SXM board power
        assert usd == pytest.approx(gpus * H200_USD)
        # the search's price of a unit is the simulator's price of the same fleet
        raw = scenario_of(q, config, unit_counts(config), q.rate_rps, q.seeds[0])
        resolved = load_scenario_dict(raw, file=q.file, base_dir=Path(q.base_dir)).variants[0]
        assert sum(g.count * g.hardware.num_gpus for g in resolved.groups) == gpus
        assert {g.hardware.pipeline_parallel for g in resolved.groups} == {2}
        summary, _ = Prober(q, config).probe(unit_counts(config), q.rate_rps, q.seeds[0])
        assert summary["num_gpus"] == gpus
        assert summary["fleet_usd_per_hour"] == pytest.approx(usd)
        unit = Unit(config, 1.0, False, 3)
        assert lower_bound(unit, "cost") == pytest.approx(3 * gpus * H200_USD)
        assert lower_bound(unit, "energy") == pytest.approx(3 * idle)


# A dense model of 100 MB (bf8) and 40 layers that one `cheap` GPU (80 MB) cannot hold and two
# can, split by tensor or into two stages. One request of one prompt and one output token is one
# step; the roofline of a step (1 token) is the weights' read at 62.5 GB/s x 0.8 (2 ms on one
# GPU) plus 0.6 ms of host time, plus 5 us per all-reduce (two per layer) or stage hand-over:
#
#     tp2:      1 ms + 80 x 5 us + 0.6 ms = 2.000 ms, one engine an instance
#     tp1 pp2:  2 ms +  1 x 5 us + 0.6 ms = 2.605 ms, two engines an instance
#     tp2 pp2:  1 ms + 81 x 5 us + 0.6 ms = 2.005 ms, two engines an instance
#
# At a constant 1,200 requests/s, round robin over n engines hands each one a request every
# n / 1200 s, so nobody waits exactly when n >= 1200 x step: 3 engines (3 tp2 instances, 6 GPUs),
# 4 engines (2 tp1 pp2 instances, 4 GPUs) or 3 engines (2 tp2 pp2 instances, 8 GPUs).
DUO = {"name": "duo", "num_parameters": 10**8, "num_layers": 40, "hidden_size": 8,
       "num_attention_heads": 2, "num_kv_heads": 2, "head_dim": 4, "dtype_bytes": 1.0,
       "max_model_len": 1000}  # fmt: skip
CHEAP = gpu("cheap", 6.25e10, 1.0, 0.8e8)


def test_the_search_picks_pipeline_stages_when_they_are_cheaper() -> None:
    scenario = {**hand_scenario(600), "model": DUO, "hardware": {**CHEAP, "tensor_parallel": 2}}
    scenario["workload"]["arrival"]["rate"] = 1200.0
    space = {"gpus": [CHEAP], "tensor_parallel": [1, 2], "pipeline_parallel": [1, 2],
             "router": "round_robin", "max_instances": 16}  # fmt: skip
    full = search(scenario, space, [HAND_SLO], workers=1, repeats=1, exhaustive=True)
    result = search(scenario, space, [HAND_SLO], workers=1, repeats=1)
    batch = "colocated | static batch=1"
    for found in (full, result):
        rows = found.table.set_index("configuration")
        assert rows.loc[f"cheap tp1 | {batch}", "status"] == "does not fit"
        table = found.ranked.set_index("configuration")
        sized = table[["instances", "num_gpus", "fleet_usd_per_hour", "pipeline_parallel"]]
        assert sized.to_dict("index") == {
            f"cheap tp1 pp2 | {batch}": {"instances": 2, "num_gpus": 4.0,
                                         "fleet_usd_per_hour": 4.0, "pipeline_parallel": 2},
            f"cheap tp2 | {batch}": {"instances": 3, "num_gpus": 6.0,
                                     "fleet_usd_per_hour": 6.0, "pipeline_parallel": 1},
            f"cheap tp2 pp2 | {batch}": {"instances": 2, "num_gpus": 8.0,
                                         "fleet_usd_per_hour": 8.0, "pipeline_parallel": 2},
        }  # fmt: skip
        best = found.best
        assert best is not None and best["configuration"] == f"cheap tp1 pp2 | {batch}"
        assert (best["instances"], best["num_gpus"], best["rank"]) == (2, 4, 1)
        assert found.ranked["confirmed"].all()
    # one overloaded unit of two stages completes what its two engines do: 2 / 2.605 ms, so
    # the bound on its fleet is the fleet itself
    row = result.table.set_index("configuration").loc[f"cheap tp1 pp2 | {batch}"]
    assert row["unit_completed_rps"] == pytest.approx(2 / 2.605e-3, rel=0.01)
    assert row["units_at_least"] == 2
    assert result.counts["pruned"] == 0  # every bound is at most the cheapest fleet ($4/h)


def test_pruning_never_removes_the_optimum_with_pipeline_stages() -> None:
    """A dense model under load on two GPUs, at one or two stages (a P/D layout's decode pool at
    two of its own too): the pruned search finds what the exhaustive one finds, and the bound of
    a unit of stages counts what all its engines completed."""
    scenario = llama_poisson(max_num_seqs=32) | {"name": "dense"}
    staged = {"prefill": 1, "decode": 1, "decode_hardware": {"pipeline_parallel": 2}}
    space = {"gpus": ["l40s", "a100-80g"], "tensor_parallel": [1, 2], "pipeline_parallel": [1, 2],
             "layouts": ["colocated", "1p1d", staged], "max_instances": 16}  # fmt: skip
    slos = ["ttft_p99=1", "tpot_p99=0.05"]
    full = search(scenario, space, slos, repeats=1, exhaustive=True, workers=1)
    pruned = search(scenario, space, slos, repeats=1, workers=1)
    # tp1 pp2 with a decode pool of its own at tp1 pp2 deploys plain tp1 pp2 1p1d
    assert full.counts["set_aside_by_reason"] == {"duplicate": 2}
    assert pruned.counts["pruned"] >= 8  # the rules did prune
    _agree(full, pruned)
    found = full.ranked.set_index("configuration")
    assert set(found["pipeline_parallel"]) == {1, 2}
    # GPUs of every found fleet: tensor x pipeline parallel per instance, each pool at its own
    for name, row in found.iterrows():
        per_instance = row["tensor_parallel"] * row["pipeline_parallel"]
        if row["layout"] == "1p1d[D tp1 pp2]":
            assert row["num_gpus"] == row["prefill"] * per_instance + row["decode"] * 2, name
        else:
            assert row["num_gpus"] == row["instances"] * per_instance, name
    # one a100 instance of two stages of two GPUs serves the rate; its unit completed what its
    # two engines did, so its bound is that one instance (half the engines' count would say two)
    one = "a100-80g tp2 pp2 | colocated | continuous seqs=32"
    assert found.loc[one, "instances"] == 1
    assert pruned.table.set_index("configuration").loc[one, "units_at_least"] == 1
