"""The fuzz corpus: KV tiers below the GPU (`kv_tiers`) and P/D through the shared store
(`disaggregation.link.via`).

- every key of `kv_tiers` and of each tier (`dram`, `nvme`, `remote`) given each value of the
  wrong type or out of range, and keys that do not exist;
- capacities, bandwidths, latencies and prices past their bounds (negative, NaN, infinite,
  huge), on every tier kind;
- combinations that cannot run: tiers where some policy does not cache prefixes, a shared store
  under groups of different block sizes, `via: store` without `kv_tiers.remote`;
- the same through a variant and through `--set`.
"""

from __future__ import annotations

import copy
from typing import Any

from fuzz_corpus import BAD, BASE, Case, dump, edited, scenario_case

KINDS = ("dram", "nvme", "remote")
TIERS: dict[str, Any] = {
    "write": "through",
    "load": "sync",
    "dram": {"capacity_gb": 64},
    "nvme": {"capacity_gb": 500, "read_gb_per_s": 10.0},
    "remote": {"capacity_gb": "unbounded", "latency_s": 0.002, "price_per_gb_hour": 0.01},
}
# the base: a caching policy, tiers of every kind, variants that keep both
TIER_BASE = {k: v for k, v in BASE.items() if k != "variants"}
TIER_BASE = edited("policy.prefix_caching", True, TIER_BASE)
TIER_BASE["kv_tiers"] = copy.deepcopy(TIERS)
TIER_BASE["variants"] = {"a": {}, "b": {"kv_tiers": {"load": "overlap"}}}
# P/D through the store
PD_BASE = copy.deepcopy(TIER_BASE)
PD_BASE["disaggregation"] = {"prefill": {"count": 1}, "decode": {"count": 1},
                             "link": {"via": "store"}}  # fmt: skip

EXTRA = {"zero": 0, "huge": 1e30, "tiny-neg": -1e-9}
ANY = tuple(BAD)
# key under kv_tiers -> the BAD and EXTRA values it refuses
TOP_KEYS: dict[str, tuple[str, ...]] = {
    "write": ANY,
    "load": ANY,
    **{kind: ("neg", "str", "bool", "list", "inf", "nan") for kind in KINDS},
}
TIER_KEYS: dict[str, tuple[str, ...]] = {
    "capacity_gb": (*ANY, "huge", "tiny-neg"),
    "read_gb_per_s": (*ANY, "zero", "huge"),
    "write_gb_per_s": (*ANY, "zero", "huge"),
    "latency_s": (*ANY, "huge", "tiny-neg"),
    "price_per_gb_hour": (*ANY, "huge", "tiny-neg"),
}
# values in range but past the documented bounds: (key, value, gist)
PAST_BOUNDS = (
    ("capacity_gb", 1.0001e7, "out of range"),
    ("read_gb_per_s", 10_001, "<= 10000"),
    ("write_gb_per_s", 10_001, "<= 10000"),
    ("latency_s", 10.5, "<= 10"),
    ("price_per_gb_hour", 100.5, "<= 100"),
)


def _value(label: str) -> Any:
    return BAD[label] if label in BAD else EXTRA[label]


def _value_cases() -> list[Case]:
    cases = [
        scenario_case(f"tiers-{key}-{label}", dump(edited(f"kv_tiers.{key}", _value(label),
                                                          TIER_BASE)), f"kv_tiers.{key}")
        for key, labels in TOP_KEYS.items()
        for label in labels
    ]  # fmt: skip
    for kind in KINDS:
        cases += [
            scenario_case(f"tiers-{kind}-{key}-{label}",
                          dump(edited(f"kv_tiers.{kind}.{key}", _value(label), TIER_BASE)),
                          f"kv_tiers.{kind}.{key}")
            for key, labels in TIER_KEYS.items()
            for label in labels
        ]  # fmt: skip
        cases += [
            scenario_case(f"tiers-{kind}-{key}-past-bound",
                          dump(edited(f"kv_tiers.{kind}.{key}", value, TIER_BASE)),
                          f"kv_tiers.{kind}.{key}", gist)
            for key, value, gist in PAST_BOUNDS
        ]  # fmt: skip
        no_capacity = copy.deepcopy(TIER_BASE)
        del no_capacity["kv_tiers"][kind]["capacity_gb"]
        cases.append(scenario_case(f"tiers-{kind}-no-capacity", dump(no_capacity),
                                   f"kv_tiers.{kind}.capacity_gb", "required"))  # fmt: skip
    return cases


def _key_cases() -> list[Case]:
    return [
        scenario_case("tiers-unknown-key", dump(edited("kv_tiers.writes", "through", TIER_BASE)),
                      "kv_tiers.writes", "unknown key", "write"),
        scenario_case("tiers-unknown-kind", dump(edited("kv_tiers.hbm", {"capacity_gb": 1},
                                                        TIER_BASE)),
                      "kv_tiers.hbm", "unknown key"),
        scenario_case("tiers-unknown-tier-key",
                      dump(edited("kv_tiers.dram.bandwidth_gb_per_s", 10, TIER_BASE)),
                      "kv_tiers.dram.bandwidth_gb_per_s", "unknown key"),
        scenario_case("tiers-write-back", dump(edited("kv_tiers.write", "back", TIER_BASE)),
                      "kv_tiers.write", "through, eviction", "'back'"),
        scenario_case("tiers-load-async", dump(edited("kv_tiers.load", "async", TIER_BASE)),
                      "kv_tiers.load", "sync, overlap", "'async'"),
        scenario_case("tiers-capacity-word", dump(edited("kv_tiers.nvme.capacity_gb",
                                                         "infinite", TIER_BASE)),
                      "kv_tiers.nvme.capacity_gb", "unbounded"),
        scenario_case("tiers-variant-bad-load",
                      dump(edited("variants.b.kv_tiers.load", "later", TIER_BASE)),
                      "variants.b.kv_tiers.load"),
        scenario_case("tiers-variant-bad-capacity",
                      dump(edited("variants.b.kv_tiers", {"dram": {"capacity_gb": -5}},
                                  TIER_BASE)),
                      "variants.b.kv_tiers.dram.capacity_gb"),
        Case("tiers-set-bad-latency", ("run", "s.yaml", "-q", "--no-plots", "--set",
                                       "kv_tiers.remote.latency_s=-1"),
             ("kv_tiers.remote.latency_s",), {"s.yaml": dump(TIER_BASE)}),
    ]  # fmt: skip


def _combination_cases() -> list[Case]:
    no_caching = edited("policy.prefix_caching", False, TIER_BASE)
    static_variant = edited("variants.b", {"policy": {"name": "static", "max_batch_size": 4}},
                            TIER_BASE)  # fmt: skip
    group = {"count": 1, "policy": {"name": "continuous", "block_size": 32}}
    uncached_group = edited("cluster", {"instances": [{"count": 1}, group]}, TIER_BASE)
    group_sizes = copy.deepcopy(uncached_group)
    group_sizes["cluster"]["instances"][1]["policy"]["prefix_caching"] = True
    uncached_decode = edited("disaggregation.decode.policy",
                             {"name": "continuous", "prefix_caching": False}, PD_BASE)
    return [
        scenario_case("tiers-without-prefix-caching", dump(no_caching),
                      "kv_tiers needs prefix caching", "policy.prefix_caching"),
        scenario_case("tiers-static-variant", dump(static_variant),
                      "kv_tiers needs prefix caching"),
        scenario_case("tiers-group-without-prefix-caching", dump(uncached_group),
                      "cluster.instances.policy.prefix_caching"),
        scenario_case("tiers-decode-pool-without-prefix-caching", dump(uncached_decode),
                      "disaggregation.decode.policy.prefix_caching"),
        scenario_case("tiers-remote-block-sizes", dump(group_sizes),
                      "kv_tiers.remote", "block_size", "16, 32"),
        # DRAM and NVMe are per instance, so groups of two block sizes may have them; a variant
        # that adds the shared store may not
        scenario_case("tiers-remote-block-sizes-variant",
                      dump(edited("variants.b.kv_tiers", {"remote": {"capacity_gb": 1}},
                                  edited("kv_tiers", {"dram": {"capacity_gb": 1}},
                                         group_sizes))),
                      "kv_tiers.remote", "block_size"),
    ]  # fmt: skip


def _via_cases() -> list[Case]:
    no_remote = copy.deepcopy(PD_BASE)
    del no_remote["kv_tiers"]["remote"]
    no_tiers = copy.deepcopy(PD_BASE)
    del no_tiers["kv_tiers"], no_tiers["variants"]
    cases = [
        scenario_case(f"tiers-via-{label}",
                      dump(edited("disaggregation.link.via", BAD[label], PD_BASE)),
                      "disaggregation.link.via")
        for label in ANY
    ]  # fmt: skip
    return [
        *cases,
        scenario_case("tiers-via-unknown", dump(edited("disaggregation.link.via", "rdma",
                                                       PD_BASE)),
                      "disaggregation.link.via", "direct, store", "'rdma'"),
        scenario_case("tiers-via-store-without-remote", dump(no_remote),
                      "disaggregation.link.via: store needs kv_tiers.remote"),
        scenario_case("tiers-via-store-without-tiers", dump(no_tiers),
                      "disaggregation.link.via: store needs kv_tiers.remote"),
        scenario_case("tiers-via-store-in-variant",
                      dump(edited("variants.b", {"disaggregation": {"link": {"via": "store"}}},
                                  edited("disaggregation.link.via", "direct", no_remote))),
                      "disaggregation.link.via: store needs kv_tiers.remote"),
        Case("tiers-via-set-store",
             ("run", "s.yaml", "-q", "--no-plots", "--set", "disaggregation.link.via=store"),
             ("disaggregation.link.via: store needs kv_tiers.remote",),
             {"s.yaml": dump(edited("disaggregation.link.via", "direct", no_remote))}),
        Case("tiers-via-set-bad",
             ("run", "s.yaml", "-q", "--no-plots", "--set", "disaggregation.link.via=both"),
             ("disaggregation.link.via", "'both'"), {"s.yaml": dump(PD_BASE)}),
    ]  # fmt: skip


def tier_cases() -> list[Case]:
    return [*_value_cases(), *_key_cases(), *_combination_cases(), *_via_cases()]

