"""The fuzz corpus: what a colocated cluster's gateway sees and sheds.

- `cluster.router_options.refresh_s` and `kv_event_lag_s` given values of the wrong type,
  negative, non-finite or past their bound (3600 s);
- `cluster.admission.max_waiting` and a tier's limit under `admission.tiers` the same way, and
  limits past 10,000,000;
- keys that do not exist under `router_options` and `admission`, and a router name that does
  not exist;
- the same through a variant and through `--set`.
"""

from __future__ import annotations

import copy
from typing import Any

from fuzz_corpus import BAD, BASE, RUN, Case, dump, edited, scenario_case

CONTROL_BASE: dict[str, Any] = copy.deepcopy(BASE)
CONTROL_BASE["cluster"] = {
    "router": "slo_headroom",
    "router_options": {"refresh_s": 1.0, "kv_event_lag_s": 0.5},
    "admission": {"max_waiting": 8, "tiers": {"default": 4}},
    "instances": [{"count": 2}],
}
ANY = tuple(BAD)
# key path under cluster -> the values it refuses (labels of BAD, or extra ones here)
EXTRA: dict[str, Any] = {"past": 3600.5, "frac": 2.5, "big": 10**7 + 1}
KEYS: dict[str, tuple[str, ...]] = {
    "router_options.refresh_s": (*ANY, "past"),
    "router_options.kv_event_lag_s": (*ANY, "past"),
    "admission.max_waiting": (*ANY, "frac", "big"),
    "admission.tiers.default": (*ANY, "frac", "big"),
}
# where each key's error is reported (a tier's limit: by the admission's own check)
WHERE = {"admission.tiers.default": "tiers.default"}


def _value(label: str) -> Any:
    return BAD[label] if label in BAD else EXTRA[label]


def control_cases() -> list[Case]:
    cases = [
        scenario_case(f"control-{key}-{label}",
                      dump(edited(f"cluster.{key}", _value(label), CONTROL_BASE)),
                      WHERE.get(key, f"cluster.{key}"))
        for key, labels in KEYS.items()
        for label in labels
    ]  # fmt: skip
    cases += [
        scenario_case("control-unknown-option",
                      dump(edited("cluster.router_options.refresh", 1.0, CONTROL_BASE)),
                      "cluster.router_options.refresh", "unknown key"),
        scenario_case("control-unknown-admission-key",
                      dump(edited("cluster.admission.max_queue", 3, CONTROL_BASE)),
                      "cluster.admission.max_queue", "unknown key"),
        scenario_case("control-admission-not-a-map",
                      dump(edited("cluster.admission", 5, CONTROL_BASE)), "cluster.admission"),
        scenario_case("control-tiers-not-a-map",
                      dump(edited("cluster.admission.tiers", [1, 2], CONTROL_BASE)),
                      "cluster.admission.tiers"),
        scenario_case("control-unknown-router",
                      dump(edited("cluster.router", "slo_aware", CONTROL_BASE)),
                      "cluster.router", "slo_headroom"),
        scenario_case("control-variant-bad-refresh",
                      dump(edited("variants.b.cluster",
                                  {"router_options": {"refresh_s": -2}}, CONTROL_BASE)),
                      "variants.b.cluster"),
        scenario_case("control-admission-tier-not-in-workload",
                      dump(edited("cluster.admission.tiers", {"gold": 2}, CONTROL_BASE)),
                      "cluster.admission.tiers", "'gold' is not a tier of the workload"),
        Case("control-set-bad-lag", (*RUN, "--set",
                                     "cluster.router_options.kv_event_lag_s=-1"),
             ("cluster.router_options.kv_event_lag_s",), {"s.yaml": dump(CONTROL_BASE)}),
        Case("control-set-bad-max-waiting", (*RUN, "--set",
                                             "cluster.admission.max_waiting=-3"),
             ("cluster.admission.max_waiting",), {"s.yaml": dump(CONTROL_BASE)}),
    ]  # fmt: skip
    return cases
