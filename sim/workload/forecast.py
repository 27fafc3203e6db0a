"""The request rate a workload states, as a function of time: what a predictive autoscaler
forecasts from (`sim.topology.autoscaler`).

A synthetic workload's arrival process states it: a fixed `rate` (Poisson, gamma, constant), or
a rate profile's curve (`sim.workload.rate_profile`), scale included. A trace, closed-loop
sessions (whose `arrival` is of sessions, not requests) and benchmark clients state none.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from sim.workload.rate_profile import curve_of
from sim.workload.spec import ProfileArrival, WorkloadSpec


def forecast_of(
    workload: WorkloadSpec, base_dir: Path | None = None
) -> Callable[[float], float] | None:
    """rate(t) in requests per second, or None when the workload states no rate; a csv profile
    is read from `base_dir` (without one, a stand-in that says a forecast exists)."""
    arrival = workload.arrival
    if arrival is None or workload.trace is not None or workload.sessions is not None:
        return None
    if workload.clients is not None:
        return None
    if isinstance(arrival, ProfileArrival):
        if base_dir is None and getattr(arrival.rate, "csv", None) is not None:
            return lambda t: 0.0  # checked only for existence: the csv is read with the run
        curve = curve_of(arrival, base_dir)
        return lambda t: float(curve.rate(np.array([t]))[0])
    rate = float(arrival.rate)
    return lambda t: rate
