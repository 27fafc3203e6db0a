"""A small time-varying workload and autoscaling space, shared by the autoscaling search's
tests: a busy spell of ten minutes (14 req/s) in a quiet forty (1 req/s) on H100s with 8 seats,
so the peak needs several instances and the rest one."""

from __future__ import annotations

from typing import Any

from scenario_factory import chunked, lognormal, scenario

DAY: dict[str, Any] = scenario(
    name="mini-day",
    seed=3,
    workload={
        "duration_s": 2400,
        "arrival": {  # a busy spell of ten minutes in a quiet forty
            "process": "profile",
            "rate": {
                "shape": "piecewise",
                "points": [[0, 1], [240, 1], [420, 14], [720, 14], [840, 1], [2400, 1]],
            },
        },
        "prompt_tokens": lognormal(400, 0.5, max=2048),
        "output_tokens": lognormal(120, 0.5, max=512),
    },
    model="llama-3-8b",
    hardware="h100-sxm",
    policy=chunked(max_num_seqs=8, max_num_batched_tokens=1024),
    profile=None,
    slo={"ttft_s": 1.0, "tpot_s": 0.05},
)
SPACE = {
    "signals": {"running": [4, 6]},
    "min": [1],
    "max": 6,
    "interval_s": 5,
    "scale_out_cooldown_s": 10,
    "scale_in_cooldown_s": [30],
    "provisioning": {"scheduling_s": 2, "load_bandwidth_gb_per_s": 8, "warmup_s": 3},
}
# the same shape in ten minutes (a busy spell of three): for comparing backends, where the
# search itself runs three times
SHORT_DAY: dict[str, Any] = {
    **DAY,
    "workload": {
        **DAY["workload"],
        "duration_s": 600,
        "arrival": {
            "process": "profile",
            "rate": {
                "shape": "piecewise",
                "points": [[0, 1], [60, 1], [120, 14], [300, 14], [360, 1], [600, 1]],
            },
        },
    },
}
