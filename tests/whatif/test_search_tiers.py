"""Deployment search over KV tiers below the GPU (the space's `kv_tiers` options): the product
they join, the names results show, the option reaching each probe's scenario and its rent the
fleet's dollars per hour, options set aside without prefix caching, bad options refused, and a
tier that lets fewer GPUs meet the SLOs."""

from __future__ import annotations

from typing import Any

import pytest
from helpers_search import GPUS, HAND_SLO, PRICE, hand_scenario, hand_space
from scenario_factory import chunked, fixed, poisson, scenario

from sim.costs.catalog import HardwareSpec
from sim.costs.memory_tiers import tier_cost_per_hour
from sim.errors import ScenarioError
from sim.scenario.kv_tiers import KVTiersSpec
from sim.whatif.search import search
from sim.whatif.search_probe import scenario_of, unit_counts
from sim.whatif.search_question import prepare
from sim.whatif.search_space import tiers_name

CACHING = {"name": "continuous", "max_num_seqs": 1, "prefix_caching": True}
STATIC = {"name": "static", "max_batch_size": 1}
STATIC_WHY = "which static batching does not have"
# $0.64/h per instance, and $0.20/h for the one store
DRAM = {"dram": {"capacity_gb": 64, "price_per_gb_hour": 0.01}}
STORE = {"remote": {"capacity_gb": 100, "price_per_gb_hour": 0.002}, "label": "store"}


def tiered_space(**edits: Any) -> dict[str, Any]:
    space = {**hand_space(), "gpus": GPUS[:2], "tensor_parallel": [1],
             "policies": [STATIC, CACHING], "kv_tiers": [None, DRAM, STORE]}  # fmt: skip
    return space | edits


def _prepare(scenario: dict[str, Any], space: dict[str, Any]) -> Any:
    return prepare(scenario, space, [HAND_SLO], rate=None, overrides=(), repeats=1,
                   objective="cost")  # fmt: skip


def test_tier_options_join_the_product_and_name_each_configuration() -> None:
    prepared = _prepare(hand_scenario(), tiered_space(tensor_parallel=[1, 2]))
    every = prepared.expanded.every
    assert len(every) == 2 * 2 * 1 * 2 * 3  # GPUs x degrees x layouts x policies x tiers
    assert len({c.id for c in every}) == len({c.label for c in every}) == len(every)
    assert [c.label for c in every[:6]] == [
        "slow tp1 | colocated | static batch=1 | no tiers",
        "slow tp1 | colocated | static batch=1 | dram64",
        "slow tp1 | colocated | static batch=1 | store",
        "slow tp1 | colocated | continuous seqs=1 prefix_caching=True | no tiers",
        "slow tp1 | colocated | continuous seqs=1 prefix_caching=True | dram64",
        "slow tp1 | colocated | continuous seqs=1 prefix_caching=True | store",
    ]
    # static batching has no prefix caching: its two tier options are set aside on each of the
    # 4 GPU x degree pairs; every other configuration runs
    aside = {c.label: why for c, why, _ in prepared.expanded.set_aside}
    assert set(aside.values()) == {"no prefix caching"} and len(aside) == 8
    assert len(prepared.runnable) == 16
    with pytest.raises(ScenarioError, match=r"6000 configurations \(2 GPUs x 2 degrees x 1 "
                       r"layouts x 3 policies x 500 tier options\)"):  # fmt: skip
        policies = [STATIC, {**CACHING, "max_num_seqs": [1, 2]}]
        tiers = [None, *({"dram": {"capacity_gb": k}} for k in range(1, 500))]
        _prepare(hand_scenario(), tiered_space(tensor_parallel=[1, 2], policies=policies,
                                               kv_tiers=tiers))  # fmt: skip


def test_a_tier_option_is_named_by_its_tiers_or_its_label() -> None:
    def name(raw: dict[str, Any]) -> str:
        return tiers_name(KVTiersSpec.model_validate(raw))

    assert name({"dram": {"capacity_gb": 256}}) == "dram256"
    assert name({"remote": {"capacity_gb": 2048, "read_gb_per_s": 5}}) == "remote2048"
    assert name({"remote": {"capacity_gb": "unbounded"}, "dram": {"capacity_gb": 256}}) == (
        "dram256+remote-unbounded"  # fastest first, as the tiers stack
    )
    assert name({"write": "eviction", "load": "overlap", "nvme": {"capacity_gb": 0.5}}) == (
        "nvme0.5 eviction overlap"
    )
    assert name({"write": "through", "load": "sync", "dram": {"capacity_gb": 1e7}}) == (
        "dram10000000"
    )
    every = _prepare(hand_scenario(), tiered_space()).expanded.every
    assert {c.tiers_label for c in every} == {"no tiers", "dram64", "store"}


def test_the_tier_option_reaches_the_probed_scenario() -> None:
    own = {"nvme": {"capacity_gb": 500}}
    scenario = {**hand_scenario(), "policy": CACHING, "kv_tiers": own}
    prepared = _prepare(scenario, tiered_space(gpus=GPUS[1:2], policies=[CACHING]))
    q = prepared.question
    by_label = {c.tiers_label: c for c in prepared.runnable}
    probed = {label: scenario_of(q, c, unit_counts(c), q.rate_rps, q.seeds[0])
              for label, c in by_label.items()}  # fmt: skip
    assert "kv_tiers" not in probed["no tiers"]  # null: the scenario's own tiers are gone
    assert probed["dram64"]["kv_tiers"] == {
        "write": "through", "load": "sync",
        "dram": {"capacity_gb": 64.0, "price_per_gb_hour": 0.01},
    }  # fmt: skip
    assert probed["store"]["kv_tiers"]["remote"] == {"capacity_gb": 100.0,
                                                     "price_per_gb_hour": 0.002}  # fmt: skip
    # without the key every configuration keeps the scenario's own tiers, and says nothing
    plain = _prepare(scenario, {**hand_space(), "gpus": GPUS[1:2], "policies": [CACHING]})
    config, q = plain.runnable[0], plain.question
    assert config.label == "fast tp1 | colocated | continuous seqs=1 prefix_caching=True"
    assert scenario_of(q, config, (1, 0), q.rate_rps, q.seeds[0])["kv_tiers"] == own


def test_the_tiers_rent_joins_the_fleet_cost_and_its_bound() -> None:
    result = search(hand_scenario(), tiered_space(), [HAND_SLO], workers=1)
    table = result.table.set_index("configuration")
    # a static batch of one and a continuous one of one serve alike: 3 fast or 5 slow instances
    for gpu, count in (("fast", 3), ("slow", 5)):
        gpus = count * PRICE[gpu]
        for policy in ("static batch=1", "continuous seqs=1 prefix_caching=True"):
            row = table.loc[f"{gpu} tp1 | colocated | {policy} | no tiers"]
            assert (row["status"], row["instances"]) == ("found", count)
            assert row["fleet_usd_per_hour"] == pytest.approx(gpus)
        row = table.loc[f"{gpu} tp1 | colocated | continuous seqs=1 prefix_caching=True | store"]
        assert row["instances"] == count and row["kv_tiers"] == "store"
        assert row["fleet_usd_per_hour"] == pytest.approx(gpus + 100 * 0.002)  # the store once
        for tiers in ("dram64", "store"):
            row = table.loc[f"{gpu} tp1 | colocated | static batch=1 | {tiers}"]
            assert row["status"] == "no prefix caching"
            assert row["note"] == f"kv_tiers needs prefix caching, {STATIC_WHY}"
    dram = table.loc["fast tp1 | colocated | continuous seqs=1 prefix_caching=True | dram64"]
    assert dram["fleet_usd_per_hour"] == pytest.approx(3 * 1.4 + 3 * 64 * 0.01)  # per instance
    # slow with DRAM: one unit bounds its fleet at 3 instances, $3 of GPUs and $1.92 of DRAM,
    # more than the $4.20 found: pruned, which the GPUs' price alone could not do
    slow = table.loc["slow tp1 | colocated | continuous seqs=1 prefix_caching=True | dram64"]
    assert slow["status"] == "dominated"
    assert "at least 3 units, $4.92/h, more than fast tp1 | colocated" in slow["note"]
    best = result.best
    assert best is not None and best["fleet_usd_per_hour"] == pytest.approx(4.2)
    c = result.counts
    assert (c["configurations"], c["set_aside"], c["pruned"], c["found"]) == (12, 4, 1, 7)
    assert c["set_aside_by_reason"] == {"no prefix caching": 4}
    columns = list(result.table.columns)
    at = columns.index("policy")
    assert columns[at : at + 3] == ["policy", "kv_tiers", "config_id"]
    plain = search(hand_scenario(), hand_space(), [HAND_SLO], workers=1)
    assert "kv_tiers" not in plain.table.columns


def test_a_pd_fleet_rents_dram_on_every_instance() -> None:
    space = tiered_space(gpus=GPUS[1:2], layouts=["colocated", "1p1d"], policies=[CACHING],
                         kv_tiers=[DRAM, STORE])  # fmt: skip
    result = search(hand_scenario(), space, [HAND_SLO], workers=1, exhaustive=True)
    table = result.table.set_index("configuration")
    label = "fast tp1 | 1p1d | continuous seqs=1 prefix_caching=True | "
    dram, store = table.loc[label + "dram64"], table.loc[label + "store"]
    assert (dram["prefill"], dram["decode"], store["prefill"], store["decode"]) == (3, 3, 3, 3)
    assert dram["fleet_usd_per_hour"] == pytest.approx(6 * 1.4 + 6 * 0.64)
    assert store["fleet_usd_per_hour"] == pytest.approx(6 * 1.4 + 0.2)
    pruned = search(hand_scenario(), space, [HAND_SLO], workers=1)
    assert pruned.best is not None and result.best is not None
    assert pruned.best["configuration"] == result.best["configuration"]
    # the bound of each P/D unit: 2 units of 2 GPUs, and DRAM on 4 instances or the store once
    notes = pruned.table.set_index("configuration")["note"]
    assert "at least 2 units, $8.16/h," in notes[label + "dram64"]
    assert "at least 2 units, $5.8/h," in notes[label + "store"]


def test_a_scenario_with_tiers_can_search_a_policy_without_caching() -> None:
    """The scenario's own tiers give way to the space's options, so a policy without prefix
    caching is searched with none and set aside with the others."""
    scenario = {**hand_scenario(), "policy": CACHING, "kv_tiers": DRAM}
    space = tiered_space(gpus=GPUS[1:2], policies=[{"name": "continuous", "max_num_seqs": 1}],
                         kv_tiers=[None, DRAM])  # fmt: skip
    result = search(scenario, space, [HAND_SLO], workers=1)
    status = result.table.set_index("kv_tiers")[["status", "note"]]
    assert status.loc["no tiers", "status"] == "found"
    assert status.loc["dram64", "status"] == "no prefix caching"
    assert status.loc["dram64", "note"] == (
        "kv_tiers needs prefix caching: the policy does not set prefix_caching: true"
    )
    # without the key the scenario's own tiers stay, and the policy is refused with them
    with pytest.raises(ScenarioError, match=r"policies\.0.*kv_tiers needs prefix caching"):
        search(scenario, {k: v for k, v in space.items() if k != "kv_tiers"}, [HAND_SLO])


@pytest.mark.parametrize(
    ("tiers", "where", "why"),
    [
        ([], "kv_tiers", "at least 1"),
        ([{"dram": {"capacity_gb": -1}}], "kv_tiers.0.dram.capacity_gb", "out of range"),
        ([None, {"hbm": {"capacity_gb": 1}}], "kv_tiers.1.hbm", "unknown key"),
        ([{"load": "overlap"}], "kv_tiers.0", "names no tier"),
        ([None, None], "kv_tiers.1", r"null \(no tiers\) is listed twice"),
        ([DRAM, {**DRAM, "label": "again"}], "kv_tiers.1", "the same tiers are listed twice"),
        ([DRAM, {"dram": {"capacity_gb": 64}}], "kv_tiers.1", "dram64 is listed twice.*label"),
        ([{**DRAM, "label": ""}], "kv_tiers.0.label", "must be a name"),
        (["dram64"], "kv_tiers.0", "mapping"),
    ],
)
def test_bad_tier_options_are_refused_naming_the_option(
    tiers: list[Any], where: str, why: str
) -> None:
    space = tiered_space(kv_tiers=tiers)
    with pytest.raises(ScenarioError, match=why) as info:
        _prepare(hand_scenario(), space)
    assert info.value.path == where and info.value.file == "<space>"


def trade_scenario() -> dict[str, Any]:
    """400 requests at 20/s on Llama-3-8B, each a 64-token question behind one of 40 system
    prompts of 4,096 tokens drawn alike (164k prompt tokens between them), with room for 4,000
    blocks of 16 tokens (64k) on the GPU: what the GPU cannot keep is computed again."""
    return scenario(
        name="trade",
        seed=2,
        workload=poisson(
            400,
            20.0,
            64,
            16,
            shared_prefix={"num_prefixes": 40, "zipf": 0.0, "length": fixed(4096)},
        ),
        model="llama-3-8b",
        hardware="h100-sxm",
        policy=chunked(
            max_num_seqs=32, max_num_batched_tokens=2048, prefix_caching=True, num_gpu_blocks=4000
        ),
        profile="roofline",  # the trade below was worked out on the roofline
        metrics={"warmup_s": 1, "cooldown_s": 1},
    )


def test_host_memory_can_replace_a_gpu() -> None:
    """64 GiB of host DRAM per instance holds every system prompt: two H100s then meet TTFT
    p99 under 0.5 s, where without it three are needed, and $0.25/h of DRAM on each of two
    costs less than a third GPU."""
    space = {"gpus": ["h100-sxm"], "tensor_parallel": [1], "max_instances": 16,
             "kv_tiers": [None, {"dram": {"capacity_gb": 64}}]}  # fmt: skip
    result = search(trade_scenario(), space, ["ttft_p99=0.5"], repeats=1, workers=1)
    table = result.table.set_index("kv_tiers")
    assert list(result.ranked["kv_tiers"]) == ["dram64", "no tiers"]
    assert (table.loc["dram64", "instances"], table.loc["no tiers", "instances"]) == (2, 3)
    gpu = HardwareSpec.model_validate({"name": "h100-sxm"}).economics.usd_per_gpu_hour
    dram = tier_cost_per_hour("dram", 64, None)  # at the catalog's price per GiB-hour
    assert table.loc["dram64", "fleet_usd_per_hour"] == pytest.approx(2 * gpu + 2 * dram)
    assert table.loc["no tiers", "fleet_usd_per_hour"] == pytest.approx(3 * gpu)
    assert 2 * dram < gpu
    assert bool(table.loc["dram64", "confirmed"])
