"""The step log's writers: one per column of the schema, each writing its column."""

from __future__ import annotations

from sim.core.recorder import SPARSE_COLUMNS, STEP_SCHEMA, StepLog
from sim.core.run import SKIPPED_WHEN_ZERO


def test_every_column_has_a_writer_of_its_name_in_schema_order() -> None:
    log = StepLog(3)
    names = [name for name, _ in STEP_SCHEMA]
    assert [log.writer(name) for name in names] == list(log.append)


def test_each_writer_writes_its_own_column() -> None:
    log = StepLog(3)
    values = {name: i + 1 for i, (name, _) in enumerate(STEP_SCHEMA)}
    for row in (values, {**values, "swap_s": 0.0, "num_spec_seqs": 0}):
        for name, _ in STEP_SCHEMA:  # a row is written column by column, in schema order
            log.writer(name)(row[name])
    cols = log.columns()
    assert cols["instance"].tolist() == [3, 3]
    for name, value in values.items():
        expected = [value, 0 if name in ("swap_s", "num_spec_seqs") else value]
        assert cols[name].tolist() == expected, name


def test_the_columns_a_run_skips_when_zero_are_sparse() -> None:
    # a sparse column keeps only its nonzero rows, so not writing a zero leaves it exact; a
    # dense column skipped would shift every later row
    assert set(SKIPPED_WHEN_ZERO) <= SPARSE_COLUMNS
