"""`sim.metrics.compare`: measured against simulated on a hand case of four requests, one of
which the simulator rejected (counted, named, left out of both sides)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from sim.measured.run import assemble
from sim.metrics.compare import compare, format_comparison

# measured: arrivals 0..3 s; outputs 11, 6, 21, 11 tokens; TPOT = (E2E - TTFT) / (output - 1)
MEAS_TTFT = [0.1, 0.2, 0.3, 0.4]
MEAS_E2E = [1.1, 1.2, 1.3, 1.4]
OUTPUT = [11, 6, 21, 11]
PROMPT = [10, 10, 10, 10]
# simulated: request 3 rejected; its measured values (the largest) must count on neither side
SIM_TTFT = [0.2, 0.2, 0.6, math.nan]
SIM_E2E = [1.2, 1.0, 1.5, math.nan]
SIM_TPOT = [0.1, 0.16, 0.045, math.nan]


def measured_run() -> object:
    return assemble(
        source="m.json",
        fmt="vllm_otlp",
        arrival=[0.0, 1.0, 2.0, 3.0],
        prompt_tokens=PROMPT,
        output_tokens=OUTPUT,
        ttft_s=MEAS_TTFT,
        e2e_s=MEAS_E2E,
        request_id=["a", "b", "c", "d"],
        records=["line 1", "line 2", "line 3", "line 4"],
        unix_clock=False,
        meta={},
    )


def simulated() -> pd.DataFrame:
    # rows out of order: compare must match them by id
    return pd.DataFrame(
        {
            "id": [3, 0, 1, 2],
            "ttft_s": [SIM_TTFT[3], *SIM_TTFT[:3]],
            "tpot_s": [SIM_TPOT[3], *SIM_TPOT[:3]],
            "e2e_s": [SIM_E2E[3], *SIM_E2E[:3]],
            "rejected": [True, False, False, False],
            "reject_reason": ["kv_capacity", "", "", ""],
        }
    )


def cell(comparison: object, metric: str, stat: str) -> tuple[float, float, float]:
    table = comparison.table  # type: ignore[attr-defined]
    row = table[(table["metric"] == metric) & (table["stat"] == stat)].iloc[0]
    return float(row["measured"]), float(row["simulated"]), float(row["error_pct"])


def test_percentiles_and_signed_errors_by_hand() -> None:
    c = compare(measured_run(), simulated())
    # TTFT over the 3 compared requests: measured 0.1, 0.2, 0.3; simulated 0.2, 0.2, 0.6
    # p90 (linear): position 0.9 * 2 = 1.8, so 0.2 + 0.8 * 0.1 and 0.2 + 0.8 * 0.4
    assert cell(c, "ttft", "mean") == pytest.approx((0.2, 1 / 3, 100 * (1 / 3 / 0.2 - 1)))
    assert cell(c, "ttft", "p50") == pytest.approx((0.2, 0.2, 0.0), abs=1e-12)
    assert cell(c, "ttft", "p90") == pytest.approx((0.28, 0.52, 100 * (0.52 / 0.28 - 1)))
    # TPOT measured: 1.0 / 10, 1.0 / 5, 1.0 / 20
    assert cell(c, "tpot", "mean") == pytest.approx(
        (0.35 / 3, 0.305 / 3, 100 * (0.305 / 0.35 - 1))
    )
    assert cell(c, "tpot", "p50") == pytest.approx((0.1, 0.1, 0.0), abs=1e-12)
    assert cell(c, "e2e", "p50") == pytest.approx((1.2, 1.2, 0.0), abs=1e-12)
    assert cell(c, "e2e", "p90") == pytest.approx((1.28, 1.2 + 0.8 * 0.3, 100 * (1.44 / 1.28 - 1)))
    assert c.error("ttft", "p90") == pytest.approx(100 * (0.52 / 0.28 - 1))
    # no per-token gaps measured: no ITL rows
    assert "itl" not in set(c.table["metric"])


def test_a_rejected_request_is_counted_named_and_left_out() -> None:
    c = compare(measured_run(), simulated())
    assert c.counts == {
        "measured_requests": 4,
        "compared_requests": 3,
        "rejected_by_simulator": 1,
        "rejected_reasons": {"kv_capacity": 1},
        "unfinished_in_simulation": 0,
        "failed_in_measurement": 0,
    }
    # the measured side left request 3 (TTFT 0.4) out: its max is 0.3's p99
    assert cell(c, "ttft", "p99")[0] == pytest.approx(0.2 + 0.98 * 0.1)


def test_an_unfinished_request_is_counted_apart_from_rejections() -> None:
    sim = simulated()
    sim.loc[sim["id"] == 2, ["ttft_s", "tpot_s", "e2e_s"]] = math.nan
    c = compare(measured_run(), sim)
    assert c.counts["compared_requests"] == 2
    assert c.counts["unfinished_in_simulation"] == 1
    assert c.counts["rejected_by_simulator"] == 1
    assert cell(c, "ttft", "mean")[0] == pytest.approx(0.15)


def test_per_request_agreement_by_hand() -> None:
    c = compare(measured_run(), simulated())
    pr = c.per_request.set_index("metric")
    # TTFT relative errors: +100 %, 0 %, +100 %
    assert pr.loc["ttft", "n"] == 3
    assert pr.loc["ttft", "median_ape_pct"] == pytest.approx(100.0)
    assert pr.loc["ttft", "bias_pct"] == pytest.approx(100.0)
    # centred: (-0.1, 0, 0.1) and (-2/15, -2/15, 4/15): r = 0.04 / sqrt(0.02 * 24/225)
    assert pr.loc["ttft", "pearson_r"] == pytest.approx(math.sqrt(3) / 2)
    # E2E relative errors: 1.2/1.1 - 1, 1.0/1.2 - 1, 1.5/1.3 - 1
    rel = [1.2 / 1.1 - 1, 1.0 / 1.2 - 1, 1.5 / 1.3 - 1]
    assert pr.loc["e2e", "median_ape_pct"] == pytest.approx(100 * (1.5 / 1.3 - 1))
    assert pr.loc["e2e", "bias_pct"] == pytest.approx(100 * rel[0])
    # centred: (-0.1, 0, 0.1) and (-0.1/3, -0.7/3, 0.8/3): r = 0.03 / sqrt(0.02 * 0.38/3)
    assert pr.loc["e2e", "pearson_r"] == pytest.approx(0.03 / math.sqrt(0.02 * 0.38 / 3))
    assert c.agreement("e2e", "bias_pct") == pytest.approx(100 * rel[0])
    # TPOT: 0 %, -20 %, -10 %
    assert pr.loc["tpot", "median_ape_pct"] == pytest.approx(10.0)
    assert pr.loc["tpot", "bias_pct"] == pytest.approx(-10.0)


def test_throughput_is_over_each_sides_own_window() -> None:
    c = compare(measured_run(), simulated())
    # compared requests arrive at 0, 1, 2 s; measured finishes 1.1, 2.2, 3.3; simulated 1.2,
    # 2.0, 3.5; 11 + 6 + 21 = 38 output tokens, 68 with the prompts
    assert cell(c, "output_tokens_per_s", "mean") == pytest.approx(
        (38 / 3.3, 38 / 3.5, 100 * (3.3 / 3.5 - 1))
    )
    assert cell(c, "total_tokens_per_s", "mean")[:2] == pytest.approx((68 / 3.3, 68 / 3.5))


def test_to_dict_is_json_ready_with_none_for_missing() -> None:
    sim = simulated()
    sim["ttft_s"] = np.where(sim["id"] == 3, math.nan, 0.0)  # a zero-second TTFT everywhere
    doc = compare(measured_run(), sim).to_dict()
    assert doc["distributions"]["ttft"]["p50"] == {
        "measured": pytest.approx(0.2),
        "simulated": 0.0,
        "error_pct": -100.0,
    }
    assert doc["per_request"]["ttft"]["n"] == 3
    assert doc["counts"]["rejected_reasons"] == {"kv_capacity": 1}


def test_format_comparison_names_what_was_left_out() -> None:
    text = format_comparison(compare(measured_run(), simulated()), "title")
    lines = text.splitlines()
    assert lines[0] == "title"
    assert lines[-1] == (
        "left out: 1 of 4 requests (1 rejected by the simulator: kv_capacity: 1; 0 unfinished)"
    )
    ttft_p90 = next(line for line in lines if line.startswith("ttft p90 (ms)"))
    assert ttft_p90.split()[-3:] == ["280.0", "520.0", "+85.7%"]


def test_format_comparison_is_silent_when_nothing_was_left_out() -> None:
    sim = simulated()
    sim.loc[sim["id"] == 3, ["ttft_s", "tpot_s", "e2e_s", "rejected"]] = [0.4, 0.1, 1.4, False]
    c = compare(measured_run(), sim)
    assert c.counts["compared_requests"] == 4
    assert "left out" not in format_comparison(c)
