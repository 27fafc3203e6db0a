"""The fuzz corpus: autoscaling, in a scenario and in `batchsim search --autoscale`.

- every field of a group's `autoscale` (and its `provisioning`) given values of the wrong type,
  out of range or non-finite; rules across fields (min above max, a count outside [min, max],
  a mode without what it needs, fields of another mode); unknown keys; pipeline parallelism;
  predictive scaling on a workload that states no rate (a trace);
- the autoscaling space file: every key with bad values, bad threshold bands (inverted, not a
  pair, out of range, non-finite), unknown keys, a space with nothing to try, a file that is not
  a mapping, is missing or is empty; flags that do not go with it.
"""

from __future__ import annotations

import copy
from typing import Any

from fuzz_corpus import BAD, BASE, RUN, Case, dump, scenario_case

AUTO: dict[str, Any] = {
    "signal": "running", "target": 8, "min": 1, "max": 4,
    "provisioning": {"scheduling_s": 1, "load_bandwidth_gb_per_s": 2, "warmup_s": 1},
}  # fmt: skip
AUTO_BASE: dict[str, Any] = {k: v for k, v in copy.deepcopy(BASE).items() if k != "variants"}
AUTO_BASE["cluster"] = {"instances": [{"count": 1, "autoscale": AUTO}]}
GROUP = "cluster.instances.0.autoscale"
ANY = tuple(BAD)
NUMBERS = ("neg", "str", "bool", "list", "map", "inf", "nan")
EXTRA: dict[str, Any] = {"zero": 0, "day": 86401, "huge": 10**9 + 1, "frac": 1.5, "big": 5000,
                         "nano": 1e-9}
# key under autoscale -> the values it refuses
KEYS: dict[str, tuple[str, ...]] = {
    "mode": ANY,
    "signal": ANY,
    "target": (*NUMBERS, "zero", "huge"),
    "tolerance": NUMBERS,
    "step": (*NUMBERS, "zero", "frac", "big"),
    "min": (*NUMBERS, "frac", "big"),
    "max": (*NUMBERS, "zero", "frac", "big"),
    "interval_s": (*NUMBERS, "zero", "day", "nano"),
    "window_s": (*NUMBERS, "zero", "day", "nano"),
    "scale_out_cooldown_s": (*NUMBERS, "day"),
    "scale_in_cooldown_s": (*NUMBERS, "day"),
    "headroom": (*NUMBERS, "zero"),
    "provisioning.scheduling_s": (*NUMBERS, "day"),
    "provisioning.load_bandwidth_gb_per_s": (*NUMBERS, "zero"),
    "provisioning.warmup_s": (*NUMBERS, "day"),
}
SPACE: dict[str, Any] = {"signals": {"running": [8]}, "max": 4}
SEARCH = ("search", "s.yaml", "--autoscale", "space.yaml", "--slo", "ttft_p99=1", "-q")
SPACE_KEYS: dict[str, tuple[str, ...]] = {
    "gpus": ("neg", "bool", "map", "inf", "nan"),
    "signals": ("neg", "str", "bool", "list", "inf", "nan"),
    "signals.running": ("neg", "str", "bool", "map", "inf", "nan"),
    "min": ("neg", "str", "bool", "map", "inf", "nan", "big"),
    "max": (*NUMBERS, "zero", "big"),
    "scale_in_cooldown_s": ("neg", "str", "bool", "map", "inf", "nan", "day"),
    "scale_out_cooldown_s": ("neg", "str", "bool", "map", "inf", "nan", "day"),
    "interval_s": (*NUMBERS, "zero", "day"),
    "router": ANY,
    "provisioning": ("neg", "str", "bool", "list", "inf", "nan"),
    "predictive": ("neg", "str", "bool", "list", "inf", "nan"),
    "thresholds": ("neg", "str", "bool", "list", "inf", "nan"),
    "step": ("neg", "str", "bool", "map", "inf", "nan", "zero", "big"),
}
BANDS = {  # a bad thresholds entry -> words of its error
    "inverted": ([[16, 8]], "scale_in_below < scale_out_above"),
    "equal": ([[8, 8]], "scale_in_below < scale_out_above"),
    "negative": ([[-1, 8]], "scale_in_below < scale_out_above"),
    "three": ([[1, 8, 16]], "pairs"),
    "flat": ([1, 8], "pairs"),
    "empty": ([], "at least one"),
    "bool": ([[True, 8]], "not true or false"),
    "nan": ([[float("nan"), 8]], "finite"),
    "inf": ([[1, float("inf")]], "finite"),
    "huge": ([[1, 10**9 + 1]], "scale_out_above"),
    "str": ([["a", 8]], "number"),
}


def _value(label: str) -> Any:
    return BAD[label] if label in BAD else EXTRA[label]


def edited(path: str, value: Any, raw: dict[str, Any]) -> dict[str, Any]:
    """A copy of `raw` with the dotted `path` (list items by number) set to `value`."""
    out = copy.deepcopy(raw)
    node: Any = out
    *parents, last = path.split(".")
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[last] = value
    return out


def _auto(fields: dict[str, Any]) -> bytes:
    doc = copy.deepcopy(AUTO_BASE)
    doc["cluster"]["instances"][0]["autoscale"] = {**AUTO, **fields}
    return dump(doc)


def _search(case_id: str, space: Any, *expect: str, args: tuple[str, ...] = ()) -> Case:
    files: dict[str, bytes | None] = {"s.yaml": dump(AUTO_BASE)}
    if space is not None:  # None: no space file at all
        files["space.yaml"] = space if isinstance(space, bytes) else dump(space)
    return Case(case_id, (*SEARCH, *args), expect, files)


def autoscale_cases() -> list[Case]:
    cases = [
        scenario_case(f"autoscale-{key}-{label}",
                      dump(edited(f"{GROUP}.{key}", _value(label), AUTO_BASE)), f"{GROUP}")
        for key, labels in KEYS.items()
        for label in labels
    ]  # fmt: skip
    cases += [
        scenario_case("autoscale-min-above-max", _auto({"min": 5, "max": 2}), GROUP,
                      "min (5) is above max (2)"),
        scenario_case("autoscale-count-outside", dump(edited("cluster.instances.0.count", 9,
                                                              AUTO_BASE)),
                      "cluster.instances.0", "outside autoscale's [min, max]"),
        scenario_case("autoscale-target-missing", _auto({"target": None}), GROUP,
                      "needs target"),
        scenario_case("autoscale-threshold-missing", _auto({"mode": "threshold"}), GROUP,
                      "scale_out_above"),
        scenario_case("autoscale-threshold-inverted",
                      _auto({"mode": "threshold", "scale_out_above": 2, "scale_in_below": 5}),
                      GROUP, "must be below"),
        scenario_case("autoscale-threshold-in-target", _auto({"scale_in_below": 1}), GROUP,
                      "belong to mode threshold"),
        scenario_case("autoscale-predictive-no-capacity", _auto({"mode": "predictive"}), GROUP,
                      "capacity_rps"),
        scenario_case("autoscale-capacity-in-target", _auto({"capacity_rps": 4}), GROUP,
                      "belong to mode predictive"),
        scenario_case("autoscale-unknown-key", _auto({"cooldown_s": 4}), GROUP, "unknown key"),
        scenario_case("autoscale-unknown-provisioning-key",
                      _auto({"provisioning": {"boot_s": 3}}), GROUP, "unknown key"),
        scenario_case("autoscale-not-a-map", dump(edited(GROUP, 3, AUTO_BASE)), GROUP),
        Case("autoscale-set-bad-max", (*RUN, "--set", f"{GROUP}.max=0"), (f"{GROUP}.max",),
             {"s.yaml": dump(AUTO_BASE)}),
        # above the floor, yet millions of ticks over a long run (20 requests over about two days)
        scenario_case("autoscale-interval-ticks", dump(edited(
            "workload.arrival.rate", 0.0001, edited(f"{GROUP}.interval_s", 0.01, AUTO_BASE))),
            "cluster.instances[0].autoscale.interval_s", "ticks more than"),
        # count 0 starts an autoscaled group with min 0 empty (tests/topology/test_scale_from_zero);
        # a fixed group, a group whose min is above 0 and a P/D pool refuse it
        scenario_case("count-zero-fixed", dump(edited("cluster.instances", [{"count": 0}],
                      AUTO_BASE)), "cluster.instances.0", "only an autoscaled group"),
        scenario_case("autoscale-count-zero-min-one", dump(edited("cluster.instances.0.count",
                      0, AUTO_BASE)), "cluster.instances.0", "count (0) is outside"),
        scenario_case("pd-pool-count-zero", dump({
            **{k: v for k, v in AUTO_BASE.items() if k != "cluster"},
            "disaggregation": {"prefill": {"count": 0, "autoscale": {**AUTO, "min": 0}}}}),
            "disaggregation", "prefill.count", "at least one instance"),
        scenario_case("router-refresh-pico", dump(edited(
            "cluster.router_options", {"refresh_s": 1e-12}, AUTO_BASE)),
            "cluster.router_options.refresh_s", "at least"),
        scenario_case("router-refresh-ticks", dump(edited("workload.arrival.rate", 0.0001, edited(
            "cluster.router_options", {"refresh_s": 0.005}, AUTO_BASE))),
            "cluster.router_options.refresh_s", "ticks more than"),
    ]  # fmt: skip
    for key, labels in SPACE_KEYS.items():
        for label in labels:
            cases.append(
                _search(f"autoscale-space-{key}-{label}",
                        edited(key, _value(label), SPACE) if key in SPACE or "." in key
                        else {**SPACE, key: _value(label)}, "space.yaml", key.split(".")[0])
            )  # fmt: skip
    # 1000 targets x 300 x 300 cooldowns: 9e7 candidates, counted, never built
    huge = {"signals": {"running": list(range(1, 1001))}, "max": 4,
            "scale_in_cooldown_s": list(range(300)), "scale_out_cooldown_s": list(range(300))}
    cases.append(_search("autoscale-space-huge", huge, "space.yaml", "90,000,000 candidates"))
    for label, (band, words) in BANDS.items():
        cases.append(_search(f"autoscale-space-thresholds-running-{label}",
                             {"thresholds": {"running": band}, "max": 4}, "space.yaml",
                             "thresholds", words))  # fmt: skip
    cases += [
        _search("autoscale-space-thresholds-kv-over-one",
                {"thresholds": {"kv_use": [[0.2, 1.5]]}, "max": 4}, "space.yaml", "fraction"),
        _search("autoscale-space-thresholds-unknown-signal",
                {"thresholds": {"speed": [[1, 4]]}, "max": 4}, "space.yaml", "thresholds"),
        _search("autoscale-space-unknown-key", {**SPACE, "signal": "running"}, "space.yaml",
                "signal", "unknown key"),
        _search("autoscale-space-nothing", {"max": 4}, "space.yaml", "give signals"),
        _search("autoscale-space-min-above-max", {**SPACE, "min": [6]}, "space.yaml",
                "above max"),
        _search("autoscale-space-kv-over-one", {**SPACE, "signals": {"kv_use": [1.5]}},
                "space.yaml", "fraction"),
        _search("autoscale-space-not-a-map", b"- 1\n- 2\n", "space.yaml", "mapping"),
        _search("autoscale-space-empty", b"", "space.yaml"),
        _search("autoscale-space-missing", None, "space.yaml"),
        _search("autoscale-with-space-too", SPACE, "--space", "not both",
                args=("--space", "space.yaml")),
        _search("autoscale-with-robust", SPACE, "--autoscale", "--robust",
                args=("--robust", "10")),
        _search("autoscale-with-rate", SPACE, "--autoscale", "--rate", args=("--rate", "5")),
        _search("autoscale-bad-verify", SPACE, "--verify", args=("--verify", "-1")),
        _search("autoscale-ray-bad-address", SPACE, "--address", "HOST:PORT",
                args=("--backend", "ray", "--address", "nowhere")),
        _search("autoscale-backend", SPACE, "--backend", args=("--backend", "slurm")),
    ]  # fmt: skip
    return cases
