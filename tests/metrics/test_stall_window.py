"""Stall percentiles (each request's longest inter-token gap) cover the measured window, like
the other latencies; the pooled ITL percentiles cover the whole run (they carry no request)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers_tables import make_context

from sim.metrics.instances import stall_summary


def requests(stalls: list[float]) -> pd.DataFrame:
    n = len(stalls)
    return pd.DataFrame(
        {
            "arrival_s": np.arange(n, dtype=float) * 10.0,  # 0, 10, ..., 10 (n - 1)
            "max_itl_s": stalls,
            "num_output_tokens": 5,
            "rejected": False,
        }
    )


def test_warmup_and_cooldown_leave_the_edges_out() -> None:
    # the first and last requests stall for long: they are the edges of the run
    table = requests([9.0, 0.1, 0.2, 0.3, 0.4, 8.0])
    whole = stall_summary(table, make_context())
    assert whole["stall_p99_s"] > 7.9 and whole["stall_mean_s"] == pytest.approx(18.0 / 6)
    windowed = stall_summary(table, make_context(warmup_s=5.0, cooldown_s=5.0))
    assert windowed["stall_mean_s"] == pytest.approx(0.25)  # the four middle requests
    assert windowed["stall_p99_s"] < 0.41
    only_warmup = stall_summary(table, make_context(warmup_s=15.0))
    assert only_warmup["stall_mean_s"] == pytest.approx((0.2 + 0.3 + 0.4 + 8.0) / 4)


def test_without_a_context_every_served_request_counts() -> None:
    table = requests([1.0, 2.0, 3.0])
    table.loc[1, "rejected"] = True
    assert stall_summary(table)["stall_mean_s"] == pytest.approx(2.0)
