"""The compiled core: which modules an opt-in build compiles with mypyc, and whether this one did.

`BATCHSIM_COMPILE=1 pip install .` compiles the modules below to C extensions with mypyc (the
way black and mypy ship): the step loop, the decode batch, the KV pool, the recorder, the
policies, and the topologies with their gateway, routers, KV link and fleet: everything that runs
per step or per arrival. The source is the same Python, so the
answers are the same (CI runs the regression baselines and the coalesced-versus-stepwise tests on
both builds); the compiled one is about twice as fast. A plain or editable install runs them as
Python and needs no C compiler; an editable install is never compiled (`_build/backend.py`).

This module imports nothing outside the standard library: `setup.py` reads `MODULES` from it
before anything is installed.
"""

from __future__ import annotations

import importlib.util

# hot modules, as paths from the repository root. Left as Python: `sim.policies.queues` (its FCFS
# queue subclasses `collections.deque`), `sim.core.urgent` (a SimPy event) and `sim.core.clock`
# (a SimPy environment): mypyc compiles classes with bases from outside the build wrongly
MODULES = (
    "sim/core/acceptance.py",
    "sim/core/arrivals.py",
    "sim/core/block_hash.py",
    "sim/core/decode_batch.py",
    "sim/core/engine.py",
    "sim/core/engine_reads.py",
    "sim/core/handoff.py",
    "sim/core/instance.py",
    "sim/core/instance_reads.py",
    "sim/core/kv/host.py",
    "sim/core/kv/planning.py",
    "sim/core/kv/pool.py",
    "sim/core/kv/tiers.py",
    "sim/core/kv_usage.py",
    "sim/core/load.py",
    "sim/core/lookahead.py",
    "sim/core/plan.py",
    "sim/core/prefill_curve.py",
    "sim/core/pricing.py",
    "sim/core/recorder.py",
    "sim/core/request.py",
    "sim/core/request_parts.py",
    "sim/core/request_state.py",
    "sim/core/run.py",
    "sim/core/speculative_step.py",
    "sim/core/step_times.py",
    "sim/core/waiting.py",
    "sim/costs/cost_model.py",
    "sim/policies/chunked.py",
    "sim/policies/continuous.py",
    "sim/policies/iteration.py",
    "sim/policies/preemption.py",
    "sim/policies/reservation.py",
    "sim/policies/speculation.py",
    "sim/policies/static.py",
    "sim/topology/autoscaler.py",
    "sim/topology/cluster.py",
    "sim/topology/gateway.py",
    "sim/topology/groups.py",
    "sim/topology/kv_link.py",
    "sim/topology/load_index.py",
    "sim/topology/router.py",
    "sim/topology/scaling.py",
    "sim/topology/signals.py",
    "sim/topology/told_index.py",
    "sim/topology/topologies.py",
    "sim/topology/ttft_index.py",
)
ENV = "BATCHSIM_COMPILE"  # =1 at install time: build the compiled core


def build() -> str:
    """`compiled` when the step loop runs as a C extension, `python` otherwise."""
    spec = importlib.util.find_spec("sim.core.engine")
    origin = (spec.origin or "") if spec is not None else ""
    return "python" if origin.endswith(".py") else "compiled"
