"""The step log's row writer names every column of the schema, in its order."""

from __future__ import annotations

import inspect

from sim.core.recorder import STEP_SCHEMA, StepLog


def test_add_takes_one_keyword_per_column_in_schema_order() -> None:
    params = list(inspect.signature(StepLog.add).parameters)[1:]
    assert params == [name for name, _ in STEP_SCHEMA]


def test_add_writes_each_value_to_its_named_column() -> None:
    log = StepLog(3)
    values = {name: i + 1 for i, (name, _) in enumerate(STEP_SCHEMA)}
    log.add(**values)
    log.add(**{**values, "swap_s": 0.0, "num_spec_seqs": 0})
    cols = log.columns()
    assert cols["instance"].tolist() == [3, 3]
    for name, value in values.items():
        expected = [value, 0 if name in ("swap_s", "num_spec_seqs") else value]
        assert cols[name].tolist() == expected, name
