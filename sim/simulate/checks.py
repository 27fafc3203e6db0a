"""The checks a variant passes after its workload is made and before it runs: what loading
could not know (a trace's tiers, the timeline's windows and the timers over the arrivals' span,
a streamed closed loop's cooldown), each a one-line `ScenarioError` naming the file and key."""

from __future__ import annotations

from typing import Any

from sim.errors import ScenarioError
from sim.metrics.timeline import check_windows
from sim.scenario.load import ResolvedScenario, check_tiers
from sim.workload.stream import Workload


def check_variant(resolved: ResolvedScenario, workload: Workload, tables: bool, file: str) -> None:
    """Refuse, before it runs, a variant its workload turned out not to fit (see the module
    docstring); `file` is the scenario's, for the message."""
    spec = resolved.spec
    if resolved.workload_plan.tier_names is None:  # a trace's tier column: known only now
        try:
            check_tiers(spec, list(workload.tier_names))
        except ValueError as exc:
            raise ScenarioError(str(exc), file=file, path="slo.tiers") from None
    shape = workload.shape
    if spec.metrics.window_s is not None and shape.first_s == shape.first_s:  # not NaN
        try:  # the timeline's windows, early
            check_windows(shape.first_s, shape.last_s, spec.metrics.window_s)
        except ScenarioError as exc:
            raise exc.with_file(file) from None
    if shape.first_s == shape.first_s:
        check_timers(spec, shape.last_s - shape.first_s, file)
    if not tables and workload.closed_loop and spec.metrics.cooldown_s:
        raise ScenarioError(
            "a streamed run of closed-loop sessions learns its last arrival only at the end, "
            "so it cannot leave out a cooldown; set it to 0 or keep the tables",
            file=file,
            path="metrics.cooldown_s",
        )


def check_timers(spec: Any, span_s: float, file: str) -> None:
    """A ScenarioError before the run when a periodic timer (an autoscaler's interval, a
    router's load scrape) would add more events than `MAX_TICKS` over the arrivals' span."""
    from sim.scenario.control_plane import timer_problem

    timers: list[tuple[str, float]] = []
    if spec.cluster is not None:
        refresh = spec.cluster.router_options.refresh_s
        if refresh > 0:
            timers.append(("cluster.router_options.refresh_s", refresh))
        for i, group in enumerate(spec.cluster.instances):
            if group.autoscale is not None:
                timers.append((f"cluster.instances[{i}].autoscale.interval_s",
                               group.autoscale.interval_s))
    if spec.disaggregation is not None:
        pools = (("prefill", spec.disaggregation.prefill), ("decode", spec.disaggregation.decode))
        for role, pool in pools:
            if pool.autoscale is not None:
                timers.append((f"disaggregation.{role}.autoscale.interval_s",
                               pool.autoscale.interval_s))
    for path, period in timers:
        problem = timer_problem(period, span_s)
        if problem is not None:
            raise ScenarioError(problem, file=file, path=path)
