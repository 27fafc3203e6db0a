"""Watching and feeding whole runs: `observed_steps` sees every step an engine applies,
`run_arrays` runs a scenario (built with `scenario_factory`) on hand-made request arrays
(arbitrary arrival times, ties included), which the synthetic workload generator cannot produce,
and `service_time_batch1` is a lone request's exact service time on the `LINEAR` profile.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import numpy as np
import pytest
from scenario_factory import COEFFS

from sim.compiled import build
from sim.metrics.results import VariantResult
from sim.scenario.load import load_scenario_dict
from sim.simulate import run_variant
from sim.workload import RequestArrays

# Tests that wrap the engine's own methods to watch it work: a compiled class calls its methods
# directly, past any wrapper, so they run on the pure-Python build only (the same source).
instruments_engine = pytest.mark.skipif(
    build() == "compiled", reason="wraps engine methods; a compiled class bypasses wrappers"
)
# tests that hand a compiled class stand-ins for instances (a compiled class checks the types of
# what it is given): on the Python build only
uses_stand_ins = pytest.mark.skipif(
    build() == "compiled", reason="stand-in instances; a compiled class checks argument types"
)


class StepCalls:
    """How often an `observed_steps` hook was called: at runs' starts, and after applied pieces
    (one per row of the steps table, so a test can check that the hook saw every step)."""

    def __init__(self) -> None:
        self.started = 0
        self.ended = 0


@contextlib.contextmanager
def observed_steps(hook: Callable[[Any, Any, bool], Any]) -> Iterator[StepCalls]:
    """Runs inside see every step through the engine's own observer, `Instance.on_step`
    (`hook(instance, run, ended)`: once a run's start is applied, again after each applied piece
    of it), which both builds call: each instance `sim.topology.cluster.build_cluster` makes
    gets `hook`.
    Yields the call counts: a test compares `ended` with its steps table, so a check that
    silently stopped running (the hook not called) fails."""
    module = importlib.import_module("sim.simulate.run")
    build = module.build_cluster
    calls = StepCalls()

    def counted(instance: Any, run: Any, ended: bool) -> None:
        if ended:
            calls.ended += 1
        else:
            calls.started += 1
        hook(instance, run, ended)

    def attach(*args: Any, **kwargs: Any) -> Any:
        cluster = build(*args, **kwargs)
        for instance in cluster.instances:
            instance.on_step = counted
        return cluster

    with mock.patch.object(module, "build_cluster", attach):
        yield calls


def service_time_batch1(
    prompt: np.ndarray | float, output: np.ndarray | float, c: dict[str, float] = COEFFS
) -> np.ndarray:
    """Exact service time of one request served alone: prefill(P) + (O-1) decode steps.

    Prefill: t_mem + t_flop*P + t_kv*P + t_attn*P*P. Decode step j (1..O-1) computes one token
    over a context of P + j tokens: t_mem + t_flop + t_kv*(P + j).
    """
    p = np.asarray(prompt, dtype=float)
    o = np.asarray(output, dtype=float)
    prefill = c["t_mem_s"] + (c["t_flop_s_per_token"] + c["t_kv_s_per_token"]) * p
    prefill = prefill + c["t_attn_s_per_token2"] * p * p
    d = o - 1.0
    decode = d * (c["t_mem_s"] + c["t_flop_s_per_token"])
    decode = decode + c["t_kv_s_per_token"] * (d * p + d * o / 2.0)
    return prefill + decode


def run_arrays(
    raw: dict[str, Any], arrival_s: list[float], prompt: list[int], output: list[int]
) -> VariantResult:
    """Run the scenario's (single) variant on the given requests instead of its workload."""
    return run_arrays_with_instance(raw, arrival_s, prompt, output)[0]


def run_arrays_with_instance(
    raw: dict[str, Any],
    arrival_s: list[float],
    prompt: list[int],
    output: list[int],
    **columns: Any,
) -> tuple[VariantResult, Any]:
    """`run_arrays`, also returning the instance the run used (to inspect its end state);
    `columns` are further `RequestArrays` fields (content, sessions).

    The instance is taken from the cluster `run_variant` builds
    (`sim.topology.cluster.build_cluster`);
    the scenarios here have a single instance.
    """
    made: list[Any] = []
    # `sim.simulate` the attribute is the function (sim/__init__ re-exports it): fetch the module
    module = importlib.import_module("sim.simulate.run")
    build = module.build_cluster

    def capture(*args: Any, **kwargs: Any) -> Any:
        made.append(build(*args, **kwargs))
        return made[-1]

    resolved = load_scenario_dict(raw).variants[0]
    n = len(arrival_s)
    arrays = RequestArrays(
        arrival_s=np.asarray(arrival_s, dtype=float),
        prompt_tokens=np.asarray(prompt, dtype=np.int64),
        output_tokens=np.asarray(output, dtype=np.int64),
        class_index=np.zeros(n, dtype=np.int64),
        class_names=("default",),
        **columns,
    )
    with mock.patch.object(module, "build_cluster", capture):
        res = run_variant(resolved, arrays)
    assert len(made) == 1 and len(made[0].instances) == 1
    return res, made[0].instances[0]
