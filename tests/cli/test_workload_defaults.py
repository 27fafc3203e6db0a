"""`batchsim workload day-profile`'s defaults are the core's (the command line keeps its own copy
so that building it imports no tables)."""

from __future__ import annotations

from sim.cli import workload as cli
from sim.workload import day_profile as core


def test_the_command_line_defaults_are_the_cores() -> None:
    for name in ("PERIOD_S", "MEAN_RATE", "PEAK_TO_TROUGH", "PEAK_HOUR", "BIN_S"):
        assert getattr(cli, f"DEFAULT_{name}") == getattr(core, f"DEFAULT_{name}"), name
