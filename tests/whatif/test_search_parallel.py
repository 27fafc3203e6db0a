"""Deployment search over the parallelism of mixture-of-experts deployments: the space's
data_parallel and expert_parallel axes (the product they join, the names and columns they give,
what is set aside and why), P/D layouts whose pools have parallelism of their own (wide expert
parallelism on decode), GPU counts and prices of tensor x data parallel instances, a search
whose cheapest answer is a data- and expert-parallel instance by construction, and pruning
against the exhaustive search on a space with the new axes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers_search import GPUS, HAND_SLO, expected_instances, gpu, hand_scenario, hand_space

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
    return {
        "name": "moe",
        "seed": 0,
        "workload": {
            "num_requests": num_requests,
            "arrival": {"process": "poisson", "rate": rate},
            "prompt_tokens": {"dist": "fixed", "value": 200},
            "output_tokens": {"dist": "fixed", "value": 20},
        },
        "model": SMALL_MOE,
        "hardware": "h200",
        "policy": POLICY,
    }


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
    listed = {**hand_space(), "data_parallel": [1], "expert_parallel": [False]}
    same = _prepare(hand_scenario(), listed).expanded.every
    assert [(c.id, c.label, c.hardware) for c in same] == [
        (c.id, c.label, c.hardware) for c in plain
    ]
    assert all("data_parallel" not in c.hardware and "expert_parallel" not in c.hardware
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
    return {
        "name": "toy",
        "seed": 0,
        "workload": {
            "num_requests": 100,
            "arrival": {"process": "poisson", "rate": 5.0},
            "prompt_tokens": {"dist": "fixed", "value": 20},
            "output_tokens": {"dist": "fixed", "value": 5},
        },
        "model": TOY_MOE,
        "hardware": BIG,
        "policy": {"name": "continuous", "max_num_seqs": 8},
    }


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
    assert columns[at : at + 4] == ["tensor_parallel", "data_parallel", "expert_parallel", "layout"]
    assert f"small tp1 dp2 ep2 | {seqs}" in (out / "report.html").read_text()
    # the exhaustive search sizes what was pruned: dearer, as its bound said
    full = search(toy_scenario(), space, slos, workers=1, repeats=1, exhaustive=True)
    assert full.best is not None and full.best["configuration"] == best["configuration"]
    found = full.ranked.set_index("configuration")
    assert found.loc[f"big tp1 | {seqs}", "fleet_usd_per_hour"] == pytest.approx(3.0)
    assert found.loc[f"big tp1 dp2 ep2 | {seqs}", "fleet_usd_per_hour"] == pytest.approx(6.0)


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
    # GPUs of every found fleet: tensor x data parallel per instance, each pool at its own
    for _, row in full.ranked.iterrows():
        if row["layout"].startswith("1p1d["):  # P tp2 / D dp2 ep2: 4 GPUs per unit
            assert row["num_gpus"] == 4 * row["instances"] // 2
        else:
            assert row["num_gpus"] == row["data_parallel"] * row["instances"]
