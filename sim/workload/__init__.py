"""Workloads: what requests arrive, when, and how long their prompts and outputs are.

`WorkloadSpec` is the validated `workload:` section of a scenario; `generate_requests` turns it
and a seeded generator into `RequestArrays` (columns indexed by request id, in arrival order);
`read_trace` parses an Azure or batchsim CSV trace into `TraceData`. Synthetic workloads use an
arrival process and length distributions (optionally a weighted mix of request classes); trace
workloads replay a file, windowed and time-scaled.
"""

from __future__ import annotations

from sim.workload.generate import RequestArrays, generate_requests
from sim.workload.spec import (
    ArrivalSpec,
    ConstantArrival,
    EmpiricalLength,
    FixedLength,
    GammaArrival,
    LengthDist,
    LognormalLength,
    MixClass,
    PoissonArrival,
    TraceSpec,
    UniformLength,
    WorkloadSpec,
)
from sim.workload.traces import TraceData, read_trace, resolve_path

__all__ = [
    "ArrivalSpec",
    "ConstantArrival",
    "EmpiricalLength",
    "FixedLength",
    "GammaArrival",
    "LengthDist",
    "LognormalLength",
    "MixClass",
    "PoissonArrival",
    "RequestArrays",
    "TraceData",
    "TraceSpec",
    "UniformLength",
    "WorkloadSpec",
    "generate_requests",
    "read_trace",
    "resolve_path",
]
