"""The fuzz corpus, part 5: closed-loop benchmark clients (`workload.clients`): bad values of
each key, combinations a closed loop cannot take, and a workload too big for any machine.

Each case names the scenario file and the key at fault (the `workload` section for a
combination), with the gist of the reason.
"""

from __future__ import annotations

import copy
from typing import Any

from fuzz_corpus import ALL, BAD, BASE, Case, dump, edited, scenario_case

CLIENTS: dict[str, Any] = {
    "num_clients": 4,
    "prompt_tokens": {"dist": "uniform", "low": 10, "high": 100},
    "output_tokens": {"dist": "uniform", "low": 1, "high": 20},
}
CLIENTS_BASE = copy.deepcopy(BASE)
CLIENTS_BASE["workload"] = {"num_requests": 20, "clients": CLIENTS}

# key path -> (where the error is reported, which BAD values to try)
CLIENT_KEYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "workload.clients": ("workload.clients", ALL),
    "workload.clients.num_clients": ("workload.clients.num_clients", ALL),
    "workload.clients.requests_per_client": ("workload.clients.requests_per_client", ALL),
    "workload.clients.ramp_up_s": ("workload.clients.ramp_up_s", ALL),
    "workload.clients.delay": ("workload.clients.delay", ALL),
    "workload.clients.prompt_tokens": ("workload.clients.prompt_tokens", ALL),
    "workload.clients.output_tokens.high": ("workload.clients.output_tokens.high", ALL),
}


def _with(path: str, value: Any) -> bytes:
    return dump(edited(path, value, CLIENTS_BASE))


def client_cases() -> list[Case]:
    cases = [
        scenario_case(f"clients-{path}-{label}", _with(path, BAD[label]), where)
        for path, (where, labels) in CLIENT_KEYS.items()
        for label in labels
    ]
    lengths = {key: CLIENTS[key] for key in ("prompt_tokens", "output_tokens")}
    fixed_delay = {"dist": "fixed", "value_s": -0.5}
    no_cap = copy.deepcopy(CLIENTS_BASE)
    del no_cap["workload"]["num_requests"]
    huge = copy.deepcopy(no_cap)  # 10^13 requests
    huge["workload"]["clients"].update(num_clients=100_000, requests_per_client=100_000_000)
    explicit = {
        "zero": (_with("workload.clients.num_clients", 0), ("workload.clients.num_clients",)),
        "too-many": (
            _with("workload.clients.num_clients", 100_001),
            ("workload.clients.num_clients", "100000"),
        ),
        "negative-delay": (
            _with("workload.clients.delay", fixed_delay),
            ("workload.clients.delay.value_s",),
        ),
        "delay-typo": (
            _with("workload.clients.delay", {"dist": "fixed", "value": 0.0}),
            ("workload.clients.delay.value", "unknown key"),
        ),
        "unknown-key": (
            _with("workload.clients.concurrency", 4),
            ("workload.clients.concurrency", "unknown key"),
        ),
        "with-trace": (
            _with("workload.trace", {"path": "t.csv"}),
            ("workload", "'trace' cannot be combined with clients"),
        ),
        "with-arrival": (
            _with("workload.arrival", {"process": "poisson", "rate": 1.0}),
            ("workload", "'clients' cannot be combined with arrival"),
        ),
        "with-mix": (
            _with("workload.mix", [{"name": "a", "weight": 1, **lengths}]),
            ("workload", "'clients' cannot be combined with mix"),
        ),
        "with-duration": (_with("workload.duration_s", 60), ("workload", "not a duration")),
        "no-cap": (dump(no_cap), ("workload", "clients need 'num_requests'")),
        "too-big": (
            dump(huge),
            ("workload.clients.requests_per_client", "memory"),
        ),
    }
    cases += [
        scenario_case(f"clients-{name}", content, *expect)
        for name, (content, expect) in explicit.items()
    ]
    return cases
