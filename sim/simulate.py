"""`simulate(scenario) -> Results`: the one entry point. It writes nothing.

For each variant: generate (or reuse) the requests, size the KV pool from the model and GPU,
build the policy and the cost model, run one SimPy environment until every request has finished
or been rejected, and turn the flat records into pandas tables. Variants that share the workload
and seed get the very same requests.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import simpy

from sim.cluster import build_cluster
from sim.engine import Source
from sim.errors import ScenarioError
from sim.metrics import SummaryContext
from sim.recorder import STEP_COLUMNS
from sim.request import Request
from sim.results import Results, VariantResult
from sim.scenario import ResolvedScenario, ScenarioSet, load_scenario
from sim.workload import RequestArrays, generate_requests

ProgressFn = Callable[[str], None]


def simulate(
    scenario: ScenarioSet | str | Path,
    *,
    overrides: list[str] | tuple[str, ...] = (),
    progress: ProgressFn | None = None,
) -> Results:
    """Run every variant of a scenario (a loaded `ScenarioSet` or a YAML path)."""
    if not isinstance(scenario, ScenarioSet):
        scenario = load_scenario(scenario, overrides)
    elif overrides:
        raise ValueError("overrides apply when loading: pass a path, or load_scenario(path, ...)")
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
        if progress:
            progress(f"{resolved.variant}: {len(workloads[key])} requests")
        variants[resolved.variant] = run_variant(resolved, workloads[key])
    return Results(scenario_name=scenario.name, variants=variants)


def run_variant(resolved: ResolvedScenario, requests: RequestArrays) -> VariantResult:
    spec = resolved.spec
    model = spec.model
    env = simpy.Environment()
    routing_rng = np.random.default_rng([spec.seed, 1])  # its own stream: routers only
    cluster = build_cluster(env, resolved, routing_rng)
    prompt = requests.prompt_tokens.tolist()
    output = requests.output_tokens.tolist()
    arrival_list = requests.arrival_s.tolist()
    made: list[Request] = []

    def make_request(i: int) -> Request:
        req = Request(i, arrival_list[i], prompt[i], output[i])
        made.append(req)
        return req

    Source(env, requests.arrival_s, make_request, cluster.dispatch)
    env.run()
    unfinished = [r for r in made if not r.rejected and math.isnan(r.finish_s)]
    if unfinished or len(made) != len(requests):  # the loop only stops when the queues drain
        raise AssertionError(f"{len(unfinished)} requests never finished in {resolved.variant}")

    first = cluster.info[0]
    context = SummaryContext(
        slo_ttft_s=spec.slo.ttft_s,
        slo_tpot_s=spec.slo.tpot_s,
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
    gaps = [g for inst in cluster.instances for g in inst.recorder.itl_gap_s]
    counts = [c for inst in cluster.instances for c in inst.recorder.itl_count]
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
