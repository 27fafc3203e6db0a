"""`simulate(scenario) -> Results`: the one entry point. It writes nothing.

For each variant: generate (or reuse) the requests, size the KV pool from the model and GPU,
build the policy and the cost model, run one SimPy environment until every request has finished
or been rejected, and turn the flat records into pandas tables. Variants that share the workload
and seed get the very same requests.

The scenario may be a file path, a mapping (as in a notebook) or a loaded `ScenarioSet`.

Progress: with a `progress` callback, a watcher thread wakes every `PROGRESS_WALL_S` seconds of
wall-clock time and reports the simulated time and the requests done. It lives outside the SimPy
environment and only reads state, so it changes neither the schedule nor the results, and its
cost is bounded by wall time, whatever the simulated time spans (a run over 10^9 simulated
seconds costs it nothing more). Without a callback there is no watcher at all.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd
import simpy

from sim.core.engine import Source
from sim.core.recorder import STEP_COLUMNS
from sim.core.request import Request
from sim.errors import ScenarioError
from sim.metrics.results import Results, VariantResult
from sim.metrics.summary import SummaryContext
from sim.scenario.load import ResolvedScenario, ScenarioSet, check_tiers, load_any
from sim.topology.cluster import build_cluster
from sim.workload import RequestArrays, generate_requests

ProgressFn = Callable[[str], None]
PROGRESS_WALL_S = 1.0


def simulate(
    scenario: ScenarioSet | Mapping[str, Any] | str | os.PathLike[str],
    *,
    overrides: list[str] | tuple[str, ...] = (),
    progress: ProgressFn | None = None,
) -> Results:
    """Run every variant of a scenario: a YAML path, a mapping or a loaded `ScenarioSet`."""
    scenario = load_any(scenario, overrides)
    workloads: dict[str, RequestArrays] = {}
    variants: dict[str, VariantResult] = {}
    for resolved in scenario.variants:
        spec = resolved.spec
        key = json.dumps(
            [spec.seed, spec.workload.model_dump(mode="json"), str(resolved.base_dir)],
            sort_keys=True,
        )
        if key not in workloads:
            rng = np.random.default_rng(spec.seed)
            try:
                workloads[key] = generate_requests(spec.workload, rng, resolved.base_dir)
            except ScenarioError as exc:
                raise exc.with_file(scenario.file) from None
        if spec.workload.tier_names() is None:  # a trace's tier column: known only now
            try:
                check_tiers(spec, list(workloads[key].tier_names))
            except ValueError as exc:
                raise ScenarioError(str(exc), file=scenario.file, path="slo.tiers") from None
        if progress:
            progress(f"{resolved.variant}: {len(workloads[key])} requests")
        variants[resolved.variant] = run_variant(resolved, workloads[key], progress)
    return Results(scenario_name=scenario.name, variants=variants)


class _Watcher:
    """Reports progress from a thread every `PROGRESS_WALL_S` wall-clock seconds (see above)."""

    def __init__(
        self, env: simpy.Environment, made: list[Request], total: int, name: str,
        progress: ProgressFn,
    ) -> None:  # fmt: skip
        self.env, self.made, self.total, self.name, self.progress = env, made, total, name, progress
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="batchsim-progress", daemon=True)

    def _run(self) -> None:
        settled = 0  # every request below this index is done: counted once, not every time
        while not self.stop.wait(PROGRESS_WALL_S):
            tail = self.made[settled:]  # a snapshot: the simulation appends meanwhile
            first_open = next((k for k, r in enumerate(tail) if not _done(r)), len(tail))
            settled += first_open
            done = settled + sum(1 for r in tail[first_open:] if _done(r))
            self.progress(
                f"{self.name}: {self.env.now:.1f} s simulated, {done}/{self.total} requests done"
            )

    def __enter__(self) -> _Watcher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def _done(req: Request) -> bool:
    return req.rejected or not math.isnan(req.finish_s)


def run_variant(
    resolved: ResolvedScenario, requests: RequestArrays, progress: ProgressFn | None = None
) -> VariantResult:
    spec = resolved.spec
    model = spec.model
    env = simpy.Environment()
    routing_rng = np.random.default_rng([spec.seed, 1])  # its own stream: routers only
    cluster = build_cluster(env, resolved, routing_rng)
    prompt = requests.prompt_tokens.tolist()
    output = requests.output_tokens.tolist()
    arrival_list = requests.arrival_s.tolist()
    assert requests.tier_index is not None and requests.predicted_output_tokens is not None
    tier_of = [requests.tier_names[t] for t in requests.tier_index.tolist()]
    predicted = requests.predicted_output_tokens.tolist()
    made: list[Request] = []

    def make_request(i: int) -> Request:
        req = Request(i, arrival_list[i], prompt[i], output[i])
        req.tier = tier_of[i]
        req.predicted_output_tokens = predicted[i]
        made.append(req)
        return req

    Source(env, requests.arrival_s, make_request, cluster.dispatch)
    if progress is not None:
        with _Watcher(env, made, len(requests), resolved.variant, progress):
            env.run()
    else:
        env.run()
    unfinished = [r for r in made if not r.rejected and math.isnan(r.finish_s)]
    if unfinished or len(made) != len(requests):  # the loop only stops when the queues drain
        raise AssertionError(f"{len(unfinished)} requests never finished in {resolved.variant}")

    first = cluster.info[0]
    context = SummaryContext(
        slo_ttft_s=spec.slo.ttft_s,
        slo_tpot_s=spec.slo.tpot_s,
        slo_tiers=tuple((t, *spec.slo.targets(t)) for t in spec.slo.tiers),
        warmup_s=spec.metrics.warmup_s,
        cooldown_s=spec.metrics.cooldown_s,
        flops_per_token=model.flops_per_token,
        weight_bytes=model.weight_bytes,
        kv_bytes_per_token=model.kv_bytes_per_token,
        peak_flops=first.peak_flops,
        hbm_bandwidth_bytes_per_s=first.hbm_bandwidth_bytes_per_s,
        kv_blocks_total=first.kv_blocks_total,
        block_size=first.block_size,
        num_instances=len(cluster.instances),
        instances=tuple(
            (i.kv_blocks_total, i.peak_flops, i.hbm_bandwidth_bytes_per_s) for i in cluster.info
        ),
        num_links=cluster.link.num_links if cluster.link is not None else 0,
    )
    step_rows = [row for inst in cluster.instances for row in inst.recorder.steps]
    itl_parts = [inst.recorder.itl_arrays() for inst in cluster.instances]
    gaps = np.concatenate([g for g, _ in itl_parts])
    counts = np.concatenate([c for _, c in itl_parts])
    steps = pd.DataFrame.from_records(step_rows, columns=list(STEP_COLUMNS))
    if len(cluster.instances) > 1:
        steps = steps.sort_values(["start_s", "instance"], kind="stable", ignore_index=True)
    return VariantResult(
        name=resolved.variant,
        requests=requests_table(made),
        steps=steps,
        itl=pd.DataFrame(
            {"gap_s": np.asarray(gaps, dtype=float), "count": np.asarray(counts, dtype=np.int64)}
        ),
        context=context,
        scenario=resolved.spec.model_dump(mode="json"),
        instances=pd.DataFrame([vars(i) for i in cluster.info]),
    )


def requests_table(made: list[Request]) -> pd.DataFrame:
    df = pd.DataFrame(
        {
            "id": [r.id for r in made],
            "instance": [r.instance for r in made],
            "arrival_s": [r.arrival_s for r in made],
            "num_prompt_tokens": [r.num_prompt_tokens for r in made],
            "max_output_tokens": [r.max_output_tokens for r in made],
            "num_output_tokens": [r.num_output_tokens for r in made],
            "first_scheduled_s": [r.first_scheduled_s for r in made],
            "first_token_s": [r.first_token_s for r in made],
            "finish_s": [r.finish_s for r in made],
            "max_itl_s": [r.max_itl_s for r in made],
            "num_preemptions": [r.num_preemptions for r in made],
            "num_recomputed_tokens": [r.num_recomputed_tokens for r in made],
            "num_swaps": [r.num_swaps for r in made],
            "swapped_bytes": [r.swapped_bytes for r in made],
            "tier": [r.tier for r in made],
            "predicted_output_tokens": [r.predicted_output_tokens for r in made],
            "rejected": [r.rejected for r in made],
            "decode_instance": [r.decode_instance for r in made],
            "handoff_s": [r.handoff_s for r in made],
            "transfer_start_s": [r.transfer_start_s for r in made],
            "transfer_end_s": [r.transfer_end_s for r in made],
        }
    )
    df["queue_s"] = df["first_scheduled_s"] - df["arrival_s"]
    df["ttft_s"] = df["first_token_s"] - df["arrival_s"]
    df["e2e_s"] = df["finish_s"] - df["arrival_s"]
    decode_tokens = (df["num_output_tokens"] - 1).where(df["num_output_tokens"] >= 2)
    df["tpot_s"] = (df["finish_s"] - df["first_token_s"]) / decode_tokens
    df["transfer_queue_s"] = df["transfer_start_s"] - df["handoff_s"]
    df["transfer_s"] = df["transfer_end_s"] - df["transfer_start_s"]
    return df.sort_values("id", ignore_index=True)
