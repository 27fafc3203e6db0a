"""A deployment search whose answer is known by hand.

Requests of one prompt token and one output token arrive at a constant 42 per second; a static
batch of one serves each in one step whose roofline time is the weights' read, `1e9 bytes /
(bandwidth * 0.8)` (FLOPs, KV and attention are negligible on these GPUs), halved at tensor
parallelism 2 (plus 10 us of all-reduces). Round robin hands each of n instances one request
every n / 42 s, so nothing ever waits exactly when n / 42 >= the step time: the fewest instances
are `ceil(42 * step time)`.

    GPU    $/GPU-h  step (tp1 / tp2)   instances (tp1 / tp2)   fleet $/h (tp1 / tp2)
    slow   1.0      0.100 / 0.050      5 / 3                   5.0 / 6.0
    fast   1.4      0.050 / 0.025      3 / 2                   4.2 / 5.6
    bad    2.0      (does not fit) / 0.100   - / 5             - / 20.0

The cheapest is three fast GPUs at $4.20/h. One bad GPU holds less than the weights (set aside
before simulating), and its tp2 unit is dearer and slower than a fast one (dominated).
"""

from __future__ import annotations

import math
from typing import Any

from scenario_factory import continuous, fixed, lognormal, poisson, scenario, static

RATE = 42.0
STEP = {("slow", 1): 0.1, ("slow", 2): 0.05, ("fast", 1): 0.05, ("fast", 2): 0.025,
        ("bad", 2): 0.1}  # fmt: skip
PRICE = {"slow": 1.0, "fast": 1.4, "bad": 2.0}


def gpu(name: str, bandwidth: float, price: float, memory: float = 2e9) -> dict[str, Any]:
    return {
        "name": name,
        "memory_bytes": int(memory),
        "hbm_bandwidth_bytes_per_s": bandwidth,
        "peak_flops": 1e18,
        "interconnect_bandwidth_bytes_per_s": 1e15,
        "activation_reserve_bytes": 0,
        "gpu_memory_utilization": 1.0,
        "usd_per_gpu_hour": price,
        "tdp_w": 300.0,
    }


GPUS = [gpu("slow", 1.25e10, 1.0), gpu("fast", 2.5e10, 1.4), gpu("bad", 0.625e10, 2.0, 0.8e9)]


def hand_scenario(num_requests: int = 300) -> dict[str, Any]:
    return scenario(
        name="hand",
        seed=0,
        workload={
            "num_requests": num_requests,
            "arrival": {"process": "constant", "rate": RATE},
            "prompt_tokens": fixed(1),
            "output_tokens": fixed(1),
        },
        model={
            "name": "tiny",
            "num_parameters": 10**9,
            "num_layers": 1,
            "hidden_size": 8,
            "num_attention_heads": 2,
            "num_kv_heads": 2,
            "head_dim": 4,
            "dtype_bytes": 1.0,
            "max_model_len": 1000,
        },
        hardware=GPUS[0],
        policy=static(max_batch_size=1),
        profile="roofline",  # the hand figures above are the roofline's
    )


def hand_space() -> dict[str, Any]:
    return {"gpus": GPUS, "tensor_parallel": [1, 2], "router": "round_robin", "max_instances": 16}


def expected_instances(gpu_name: str, tp: int) -> int:
    return math.ceil(RATE * STEP[gpu_name, tp] * (1 - 1e-9))


HAND_SLO = "queue_p99=0.001"  # nobody waits


def llama_poisson(**policy: Any) -> dict[str, Any]:
    """Llama-3-8B on an A100 under Poisson arrivals at 40 req/s (600 requests): a scenario
    big enough that searches prune, small enough to run whole."""
    return scenario(
        name="small",
        seed=3,
        workload=poisson(600, 40.0, lognormal(400, 0.6, 2000), lognormal(60, 0.6, 400)),
        model="llama-3-8b",
        policy=continuous(**policy),
        profile=None,
        metrics={"warmup_s": 1, "cooldown_s": 1},
    )
