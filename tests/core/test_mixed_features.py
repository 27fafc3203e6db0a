"""Every feature at once: random combinations of policy, queue order, preemption mode, KV
reservation and topology must give the same schedule and the same metrics whether the engine
coalesces decode steps or not. (This caught a router reading stale state after a cut run, and
KV moved by transfers being integrated from the start of a step instead of when it moved.)"""

from __future__ import annotations

import copy
import math
import random
from typing import Any

import numpy as np
import pytest
from scenario_factory import lognormal, scenario

from sim import load_scenario_dict, simulate

COMPARED = ("kv_utilization_mean", "mean_queue_length", "num_preemptions", "num_swaps",
            "itl_p99_s", "ttft_p99_s", "link_utilization")  # fmt: skip


def random_scenario(rng: random.Random) -> dict[str, Any]:
    name = rng.choice(["static", "continuous", "chunked"])
    policy: dict[str, Any] = {"name": name}
    if name == "static":
        policy.update(max_batch_size=rng.choice([1, 4, 16]), max_wait_s=rng.choice([0, 0.5]))
    else:
        policy.update(
            max_num_seqs=rng.choice([4, 16, 64]),
            block_size=rng.choice([1, 4, 16]),
            max_num_batched_tokens=rng.choice([64, 256, 2048]),
            preemption={
                "mode": rng.choice(["recompute", "swap"]),
                "victim": rng.choice(["last_admitted", "most_kv", "lowest_priority"]),
                "swap_bandwidth_gb_per_s": 10,
                "host_memory_gb": rng.choice([0.05, 5]),
            },
            kv_reservation=rng.choice(["paged", "paged", "exact", "max_length"]),
            queue=rng.choice(
                [{"order": "fcfs"}, {"order": "sjf", "aging_per_s": 10}, {"order": "edf"}]
            ),
        )
        if name == "continuous":
            policy["mode"] = rng.choice(["prefill_first", "mixed"])
            policy["max_num_batched_tokens"] = 2048
    # the keyword arguments are evaluated in order: seed, arrival rate, then memory draw from rng
    raw = scenario(
        name="mixed",
        seed=rng.randint(0, 99),
        workload={
            "num_requests": 120,
            "arrival": {"process": "gamma", "rate": rng.choice([2, 10, 40]), "cv": 2},
            "prompt_tokens": lognormal(200, 1.0, max=1500),
            "output_tokens": lognormal(60, 1.0, max=400),
        },
        model={
            "name": "tiny",
            "num_parameters": 100_000_000,
            "num_layers": 4,
            "hidden_size": 512,
            "num_attention_heads": 8,
            "num_kv_heads": 8,
            "head_dim": 64,
            "max_model_len": 2048,
        },
        # weights take 200 MB: the rest (a few MB) is a KV pool small enough to preempt
        hardware={
            "name": "small",
            "memory_bytes": 10**9 + rng.choice([2, 8, 40]) * 10**6,
            "hbm_bandwidth_bytes_per_s": 1e11,
            "peak_flops": 1e13,
            "activation_reserve_bytes": 8 * 10**8,
            "gpu_memory_utilization": 1.0,
        },
        policy=policy,
        profile=None,
        slo={"ttft_s": 1.0, "tpot_s": 0.1},
    )
    topology = rng.choice(["single", "cluster"] + (["pd"] if name != "static" else []))
    if topology == "cluster":
        router = rng.choice(["round_robin", "least_kv", "least_outstanding_tokens", "random"])
        raw["cluster"] = {"router": router, "instances": [{"count": 2}]}
    elif topology == "pd":
        raw["disaggregation"] = {
            "prefill": {"count": 1},
            "decode": {"count": rng.choice([1, 2]), "router": "least_kv"},
            "link": {"bandwidth_gb_per_s": 1, "latency_s": 0.001},
        }
    return raw


@pytest.mark.parametrize("case", range(24))
def test_coalescing_never_changes_anything(case: int) -> None:
    raw = random_scenario(random.Random(1000 + case))
    fast = simulate(load_scenario_dict(raw))["default"]
    slow_raw = copy.deepcopy(raw)
    slow_raw["engine"] = {"coalesce_decode_steps": False}
    slow = simulate(load_scenario_dict(slow_raw))["default"]
    for column in ("first_token_s", "finish_s", "max_itl_s", "decode_instance", "instance"):
        np.testing.assert_allclose(
            fast.requests[column].to_numpy(float),
            slow.requests[column].to_numpy(float),
            rtol=1e-7, atol=1e-9, err_msg=f"{column} in {raw}",
        )  # fmt: skip
    a, b = fast.summary(), slow.summary()
    for key in COMPARED:
        if key in a:
            assert math.isclose(a[key], b[key], rel_tol=1e-6, abs_tol=1e-9) or (
                math.isnan(a[key]) and math.isnan(b[key])
            ), (key, a[key], b[key], raw)
    assert fast.steps["num_steps"].sum() == len(slow.steps)
