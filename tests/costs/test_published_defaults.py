"""The roofline's measured all-reduce latency and host step time, and the fit behind them."""

from __future__ import annotations

import pandas as pd
import pytest

from calibration.allreduce_fit import fit_allreduce
from sim.costs.catalog import HARDWARE, MODELS
from sim.costs.profile import (
    ALLREDUCE_LATENCY_MEASURED_S,
    HOST_STEP_S,
    allreduce_latency_for,
    roofline_profile,
)
from sim.errors import ScenarioError


def vidur_rows(workers: int, per_node: int, times_ms: dict[int, float]) -> list[dict]:
    """Rows in the columns of Vidur's network/<node>/all_reduce.csv.gz."""
    return [
        {"time_stats.all_reduce.median": t, "rank": 0, "num_workers": workers, "size": size,
         "collective": "all_reduce", "devices_per_node": per_node, "max_devices_per_node": 8}
        for size, t in times_ms.items()
    ]  # fmt: skip


def test_fit_takes_the_small_message_median_and_the_ring_bandwidth() -> None:
    mib = 1024 * 1024
    # tp 2 in one node: 20, 22, 30 us at small sizes (median 22 us); large messages at
    # 22 us + bytes / 100 GB/s (ring traffic 2 (2-1)/2 = 1 x bytes)
    big = {16 * mib: 0.022 + 16 * mib / 100e9 * 1e3, 64 * mib: 0.022 + 64 * mib / 100e9 * 1e3}
    rows = vidur_rows(2, 2, {2048: 0.020, 10240: 0.030, 65536: 0.022, 1 * mib: 0.5} | big)
    rows += vidur_rows(2, 1, {2048: 9.0, 10240: 9.0})  # across nodes: never tensor parallel
    fits = fit_allreduce(pd.DataFrame(rows))
    assert list(fits) == [2]
    assert fits[2].latency_s == pytest.approx(22e-6, rel=1e-12)
    assert fits[2].bus_bandwidth_bytes_per_s == pytest.approx(100e9, rel=1e-9)
    assert fits[2].num_sizes == 6


def test_fit_refuses_bad_rows_in_one_line() -> None:
    rows = vidur_rows(2, 2, {2048: 0.02, 4096: -1.0})
    with pytest.raises(ScenarioError) as info:
        fit_allreduce(pd.DataFrame(rows), file="ar.csv")
    assert (info.value.file, info.value.path) == ("ar.csv", "row 2")
    assert "is not a positive number" in info.value.reason
    with pytest.raises(ScenarioError, match="missing column"):
        fit_allreduce(pd.DataFrame([{"size": 1}]), file="ar.csv")


def test_the_roofline_carries_measured_latency_and_the_host_step() -> None:
    llama = MODELS["llama-3-70b"]
    for gpu, node in (("h100-sxm", "h100_dgx"), ("h200", "h100_dgx"), ("a100-80g", "a100_dgx")):
        for tp in (2, 4, 8):
            hw = HARDWARE[gpu].with_tensor_parallel(tp)
            latency, source = allreduce_latency_for(hw)
            assert latency == ALLREDUCE_LATENCY_MEASURED_S[node][tp]
            assert node in source and (("nearest" in source) == (gpu == "h200"))
            one = roofline_profile(llama, hw, allreduce_latency_s=0.0, host_step_s=0.0)
            c = roofline_profile(llama, hw).coefficients
            # 80 layers, 2 all-reduces each, plus the host step
            fixed = c.t_mem_s - one.coefficients.t_mem_s
            assert fixed == pytest.approx(160 * latency + HOST_STEP_S, rel=1e-12)
    # tp 16 was never measured in one node: the nearest measured degree (8)
    h100 = HARDWARE["h100-sxm"].with_tensor_parallel(16)
    assert allreduce_latency_for(h100)[0] == ALLREDUCE_LATENCY_MEASURED_S["h100_dgx"][8]
    # one GPU: no collectives, but the host step all the same
    single = roofline_profile(MODELS["llama-2-7b"], HARDWARE["h100-sxm"])
    bare = roofline_profile(MODELS["llama-2-7b"], HARDWARE["h100-sxm"], host_step_s=0.0)
    assert single.coefficients.t_mem_s - bare.coefficients.t_mem_s == pytest.approx(HOST_STEP_S)
    assert HOST_STEP_S == 0.6e-3
    assert single.provenance["efficiency"]["host_step_s"] == HOST_STEP_S
