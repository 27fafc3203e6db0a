"""The op-level timings the unit costs are fitted on beside the published deployments
(calibration/op_level.py), and the default step model's agreement with them per part of a step
(calibration/check_events.py)."""

from __future__ import annotations

import statistics

from calibration.check_events import TABLES, compare
from calibration.op_level import attention_rows, op_rows
from calibration.published_events import seconds
from sim.costs.step_events import catalog_unit_costs


def test_rows_leave_host_time_out_and_price_the_gpu_terms() -> None:
    rows = op_rows()
    assert len(rows) > len(attention_rows()) >= 6
    for row in rows:
        assert row.measured_s > 0
        assert not any(k.startswith("host_s@") for k in row.row)
    linear = [r for r in rows if "attention" not in r.table]
    assert {k.split("@")[1].split("/")[0] for r in linear for k in r.row if "@" in k} >= {
        "hopper",
        "ampere",
    }


def test_the_shipped_unit_costs_agree_with_the_op_level_rows() -> None:
    costs = catalog_unit_costs()
    errors = [abs(seconds(r.row, costs) / r.measured_s - 1) for r in op_rows()]
    assert statistics.median(errors) < 0.10
    assert max(errors) < 0.35


def test_check_events_compares_every_table_it_can_place() -> None:
    compared = [compare(path) for path in TABLES]
    points = [p for _, rows in compared for p in rows]
    assert len(points) >= 40
    ratios = [events / measured for _, measured, events in points]
    assert statistics.median(abs(r - 1) for r in ratios) < 0.15
