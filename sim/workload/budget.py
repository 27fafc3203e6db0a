"""How big a workload is before it exists: the request count it implies and the memory a run
of it needs, checked before anything is generated.

A synthetic workload stops at `num_requests` arrivals or at `duration_s`, so its size is known
from the spec (for a duration, the expected count `rate x duration` plus a margin). A run keeps
its workload's columns (`STREAMED_BYTES_PER_REQUEST`, all a streamed run keeps) and, unless it
streams, its tables (`TABLE_BYTES_PER_REQUEST` in all, per request and variant: from
`benchmarks/bench_sim.py`, 0.9 GB peak for a million requests, 0.2 GB streamed), so a workload
that cannot fit in this machine's memory is refused up front with the estimate, instead of
trying to allocate terabytes or swapping for an hour: at load time what no run could hold, and
when a run with tables starts, what its tables could not. Traces are bounded by their file and
are not estimated here; closed-loop `clients` send `num_requests`, or `num_clients x
requests_per_client` if smaller, a count known from the spec.
"""

from __future__ import annotations

import math
import os

from sim.workload.spec import WorkloadSpec

STREAMED_BYTES_PER_REQUEST = 150  # the workload's columns and the run's per-request state
TABLE_BYTES_PER_REQUEST = 1_200  # with the request, step and gap tables


def expected_requests(spec: WorkloadSpec) -> tuple[float, str] | None:
    """(requests the workload will have, the key that bounds it); None for a trace."""
    if spec.clients is not None:  # closed-loop clients: a count known up front
        sent = float(spec.clients.num_requests(spec.num_requests))
        if spec.num_requests is not None and sent == spec.num_requests:
            return sent, "workload.num_requests"
        return sent, "workload.clients.requests_per_client"
    if spec.trace is not None or spec.arrival is None:
        return None
    count, key = math.inf, "workload.num_requests"
    if spec.num_requests is not None:
        count = float(spec.num_requests)
    if spec.duration_s is not None:
        by_time = spec.arrival.rate * spec.duration_s
        by_time += 6 * math.sqrt(by_time)  # the count is random: a few standard deviations more
        if by_time < count:
            count, key = by_time, "workload.duration_s"
    return count, key


def physical_memory_bytes() -> int | None:
    """This machine's physical memory, or None where the platform does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def _size(num_bytes: float) -> str:
    for unit, scale in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:.1f} {unit}"
    return f"{num_bytes / 2**10:.0f} KiB"


def memory_problem(
    workloads: list[WorkloadSpec], *, tables: bool = False
) -> tuple[str, str] | None:
    """(key, reason) when running these workloads (one per variant) cannot fit in memory,
    streamed (`tables=False`: what no run could hold) or keeping tables."""
    per_request = TABLE_BYTES_PER_REQUEST if tables else STREAMED_BYTES_PER_REQUEST
    sized = [expected_requests(w) for w in workloads]
    known = [s for s in sized if s is not None]
    if not known:
        return None
    total = sum(count for count, _ in known)
    needed = total * per_request
    memory = physical_memory_bytes()
    if memory is None or needed <= memory:
        return None
    count, key = max(known)
    variants = f" x {len(known)} variants" if len(known) > 1 else ""
    what = f"about {count:.3g} requests" if key.endswith("duration_s") else f"{count:.0f} requests"
    advice = "lower num_requests or duration_s"
    if tables:
        advice += ", or stream the summary (batchsim run --stream, simulate(tables=False))"
    return key, (
        f"{what}{variants} need an estimated {_size(needed)} of memory (about "
        f"{per_request / 1000:.2g} kB per request and variant"
        f"{' with tables' if tables else ', streamed'}); this machine has "
        f"{_size(memory)}: {advice}"
    )
