"""The question a deployment search asks every configuration, checked before anything runs.

From the scenario, the space and the flags: the base mapping (overrides applied), the rate to
serve (the flag, else the workload's arrival rate, else a trace's rate at its `rate_scale`, with
the trace's own rate measured over the requests it replays), the SLOs, the seeds (for a trace,
the windows of it that each seed replays), and the space expanded into configurations.
Everything is validated first, so that a bad key fails in one line naming its file before
minutes of simulation:

* the scenario: no variants (the search varies the deployment itself); its model alone, then the
  rest with the hardware of the first configuration that fits (the scenario's own hardware,
  policy, cluster and disaggregation, and its kv_tiers when the space lists tier options, are
  replaced by each configuration's, so they need not fit);
* the space (`sim.whatif.search_space`), each of its policies in the scenario, and every
  configuration's scenario at one unit; the objective's figures (price, or TDP) of every GPU;
* over a band (`--robust X`), every configuration's scenario at each end of it (a GPU-time scale
  out of its range is refused naming the flag).
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
from pydantic import ValidationError

from sim.costs.catalog import ModelSpec
from sim.errors import ScenarioError
from sim.measured import read_measured
from sim.scenario.kv_tiers import KVTiersSpec
from sim.scenario.load import ResolvedScenario, ScenarioSet, load_scenario_dict, source_of
from sim.whatif.capacity import SLO, parse_slos
from sim.whatif.search_probe import Question, at_scale, max_units, scenario_of, unit_counts
from sim.whatif.search_prune import unit_figures
from sim.whatif.search_space import Config, Expanded, expand, policies, read_space, validated
from sim.workload import generate_requests
from sim.workload.mooncake import read_mooncake
from sim.workload.spec import MEASURED_FORMATS
from sim.workload.traces import TraceFileFormat, read_trace, resolve_path

Source = ScenarioSet | Mapping[str, Any] | str | os.PathLike[str]
REPLACED = ("hardware", "cluster", "disaggregation")  # set by each configuration


@dataclass(frozen=True)
class Prepared:
    question: Question
    name: str  # the scenario's
    space_file: str
    expanded: Expanded
    runnable: list[Config]  # the configurations to simulate, in space order
    aside: dict[str, tuple[str, str]]  # config id -> (status, reason): cannot run


def _trace_windows(
    resolved: ResolvedScenario, count: int
) -> tuple[tuple[tuple[float, float], ...], int]:
    """(start_s, own rate at rate_scale 1) of `count` consecutive windows of a trace, each of as
    many requests as the scenario replays: the first is the scenario's own, the others are what
    further seeds replay (and the number of requests in each). Where the trace is too short for
    them all, the first is replayed."""
    spec = resolved.spec
    trace = spec.workload.trace
    assert trace is not None
    replay = generate_requests(spec.workload, np.random.default_rng(spec.seed), resolved.base_dir)
    size = len(replay)
    path = resolve_path(trace.path, resolved.base_dir)
    if trace.format == "mooncake":
        times = read_mooncake(path).arrival_s
    elif trace.format in MEASURED_FORMATS:
        fmt = None if trace.format == "measured" else trace.format
        times = read_measured(
            path, fmt, benchmark=trace.benchmark, drop_duplicates=trace.drop_duplicates
        ).arrival_s
    else:
        times = read_trace(path, cast(TraceFileFormat, trace.format)).arrival_s
    end = math.inf if trace.end_s is None else trace.end_s
    rows = times[(times >= trace.start_s) & (times < end)]
    windows = []
    for k in range(count):
        first = k * size if (k + 1) * size <= len(rows) else 0
        chunk = rows[first : first + size]
        span = float(chunk[-1] - chunk[0]) if size > 1 else 0.0
        if span <= 0:
            raise ScenarioError(
                "the trace replays fewer than two arrival times: it has no rate",
                path="workload.trace",
            )
        windows.append((float(chunk[0]), (size - 1) / span))
    return tuple(windows), size


def _closed_loop(workload: Any, rate: float | None) -> ScenarioError:
    """Why a workload without an arrival rate cannot be searched (and `--rate` cannot give it
    one): a closed loop sends its next request when an answer comes back, so the request rate is
    the fleet's, not the workload's."""
    flag = f"--rate {rate:g} does not apply" if rate is not None else "--rate cannot give it one"
    if workload.sessions is not None:
        return ScenarioError(
            "a search serves a rate of requests, and a sessions workload has none: each later "
            "turn arrives a think time after the previous answer (a closed loop), so the request "
            f"rate depends on the fleet; {flag}. Search an open-loop workload (arrival and "
            "lengths, or a trace)",
            path="workload.sessions",
        )
    if workload.clients is not None:
        return ScenarioError(
            "a search serves a rate of requests, and a clients workload has none: each client "
            "sends its next request when its previous answer arrives (a closed loop), so the "
            f"request rate depends on the fleet; {flag}. Search an open-loop workload (arrival "
            "and lengths, or a trace)",
            path="workload.clients",
        )
    kind = "an agents" if workload.agents is not None else "a rollouts"
    if workload.agents is not None or workload.rollouts is not None:
        return ScenarioError(
            f"a search serves a rate of requests, and {kind} workload has none: each later "
            "call of a task arrives after the calls it waits for (a closed loop), so the request "
            f"rate depends on the fleet; {flag}. Search an open-loop workload (arrival and "
            "lengths, or a trace)",
            path=f"workload.{kind.split()[1]}",
        )
    return ScenarioError("the workload has no arrival rate", path="workload.arrival")


def _rates(
    resolved: ResolvedScenario, rate: float | None, seeds: int
) -> tuple[float, tuple[tuple[float, float], ...]]:
    """(the rate to serve, a trace's windows (empty for synthetic arrivals)), after checking that
    at that rate the workload outlasts the metrics' warm-up and cool-down windows (else nothing
    would be measured)."""
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise ScenarioError(
            f"must be a finite number of requests/s above 0 (got {rate})", path="--rate"
        )
    workload = resolved.spec.workload
    windows: tuple[tuple[float, float], ...] = ()
    if workload.trace is not None and workload.trace.format in ("weka", "rollouts"):
        raise ScenarioError(
            f"a search serves a rate of requests, and a {workload.trace.format} trace has none: "
            "each later call of a task arrives after the calls it waits for (a closed loop), "
            "so the request rate depends on the fleet. Search an open-loop workload (arrival "
            "and lengths, or a trace of arrival times)",
            path="workload.trace.format",
        )
    if workload.trace is not None:
        windows, size = _trace_windows(resolved, seeds)
        own = windows[0][1] * workload.trace.rate_scale
        target = rate if rate is not None else own
        span = (size - 1) / target
    elif workload.arrival is None:
        raise _closed_loop(workload, rate)
    else:
        if not isinstance(workload.arrival.rate, (int, float)):
            raise ScenarioError(
                "the search sizes a fleet for one arrival rate, and this workload's rate is a "
                "profile (process profile); give a poisson, gamma or constant process",
                path="workload.arrival.rate",
            )
        target = rate if rate is not None else float(workload.arrival.rate)
        span = (workload.num_requests or math.inf) / target
    span = min(span, workload.duration_s or math.inf)
    window = resolved.spec.metrics
    edges = window.warmup_s + window.cooldown_s
    if span <= edges:
        raise ScenarioError(
            f"at {target:.4g} requests/s the workload spans about {span:.3g} s, no more than "
            f"warmup_s + cooldown_s ({edges:g} s): no request would be measured; give more "
            "requests or shorter windows",
            path="metrics",
        )
    return target, windows


def _policy_error(
    exc: ScenarioError, label: str, index: int, listed: bool, space_file: str
) -> ScenarioError:
    """The error of one policy a space entry expands to, named in the space (and, when the
    entry lists values, with the combination at fault)."""
    where = (exc.path or "policy").replace("policy", f"policies.{index}", 1)
    reason = f"{exc.reason} (in {label})" if listed else exc.reason
    return ScenarioError(reason, file=space_file, path=where)


def _names_tiers(kv_tiers: Any) -> bool:
    """Whether the scenario's own kv_tiers name a tier (one that does not validate is refused
    with its own reason when the scenario is loaded)."""
    try:
        return kv_tiers is not None and bool(KVTiersSpec.model_validate(kv_tiers).given())
    except ValidationError:
        return False


def _check_configs(prepared: Prepared, objective: str) -> None:
    question = prepared.question
    for config in prepared.runnable:
        figures = unit_figures(config)
        if math.isnan(figures[0] if objective == "cost" else figures[1]):
            field = "usd_per_gpu_hour" if objective == "cost" else "tdp_w"
            raise ScenarioError(
                f"{config.gpu} has no {field} (not in the price table): give one to rank by "
                f"{objective}",
                file=prepared.space_file,
                path="gpus",
            )
        counts = unit_counts(config)
        raw = scenario_of(question, config, counts, question.rate_rps, question.seeds[0])
        try:
            load_scenario_dict(raw, file=question.file, base_dir=Path(question.base_dir))
        except ScenarioError as exc:
            raise ScenarioError(
                f"configuration {config.label}: {exc.message()}", file=prepared.space_file
            ) from None
        for scale in question.scales[1:]:
            try:
                at_scale(raw, scale, question.file, Path(question.base_dir))
            except ScenarioError as exc:
                raise ScenarioError(
                    f"--robust {question.band:g}: configuration {config.label} at "
                    f"{scale:g} x its GPU time: {exc.reason if exc.path == '--band' else exc}"
                ) from None


def prepare(
    scenario: Source,
    space: str | os.PathLike[str] | Mapping[str, Any],
    slos: Sequence[str | SLO],
    *,
    rate: float | None,
    overrides: Sequence[str],
    repeats: int,
    objective: str,
    band: float | None = None,
) -> Prepared:
    """The checked question and configurations (see the module docstring)."""
    parsed = tuple(parse_slos(slos, repeats))
    raw, file, base_dir = source_of(scenario, tuple(overrides))
    if raw.get("variants"):
        raise ScenarioError(
            "the search varies the deployment itself: give a scenario without variants",
            file=file,
            path="variants",
        )
    model = validated(ModelSpec, raw.get("model"), file, "model")
    spec, space_file = read_space(space)
    policy = raw.get("policy")
    found = policies(spec, policy if isinstance(policy, dict) else {}, space_file)
    expanded = expand(spec, space_file, model, found, _names_tiers(raw.get("kv_tiers")))
    replaced = (*REPLACED, "kv_tiers") if spec.kv_tiers is not None else REPLACED
    base = {k: v for k, v in raw.items() if k not in replaced}
    if expanded.configs:
        base["hardware"] = expanded.configs[0].base_hardware
    elif "hardware" in raw:
        base["hardware"] = raw["hardware"]
    try:
        resolved = load_scenario_dict(base, file=file, base_dir=base_dir).variants[0]
    except ScenarioError as exc:
        if expanded.configs:
            raise
        # nothing in the space can run, and the scenario's own hardware cannot check the rest
        why = Counter(category for _, category, _ in expanded.set_aside)
        reasons = ", ".join(f"{n} {category}" for category, n in why.items())
        raise ScenarioError(
            f"every one of the {len(expanded.every)} configurations of the space is set aside "
            f"before simulating ({reasons}), and the scenario cannot be checked on its own "
            f"hardware either: {exc.message()}",
            file=space_file,
        ) from None
    if spec.policies is not None:
        for label, policy, index in found:
            try:
                load_scenario_dict({**base, "policy": policy}, file=file, base_dir=base_dir)
            except ScenarioError as exc:
                listed = any(isinstance(v, list) for v in spec.policies[index].values())
                raise _policy_error(exc, label, index, listed, space_file) from None
    try:
        target, windows = _rates(resolved, rate, repeats + 1)
    except ScenarioError as exc:
        raise (exc if exc.path == "--rate" else exc.with_file(file)) from None
    question = Question(
        raw=raw,
        file=file,
        base_dir=str(base_dir),
        rate_rps=target,
        windows=windows,
        slos=parsed,
        seeds=tuple(resolved.spec.seed + k for k in range(repeats + 1)),
        max_instances=spec.max_instances,
        router=spec.router,
        link=spec.link.model_dump() if spec.link is not None else None,
        band=band,
    )
    aside = {c.id: (why, note) for c, why, note in expanded.set_aside}
    runnable = []
    for config in expanded.configs:
        if max_units(question, config) < 1:
            note = f"{config.unit_size} instances per unit; max_instances is {spec.max_instances}"
            aside[config.id] = ("unit over max_instances", note)
        else:
            runnable.append(config)
    prepared = Prepared(question, resolved.spec.name, space_file, expanded, runnable, aside)
    _check_configs(prepared, objective)
    return prepared
