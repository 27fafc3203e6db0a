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

from sim.catalog import kv_capacity_blocks, kv_capacity_tokens
from sim.cost_model import CostModel
from sim.engine import Instance, Source
from sim.errors import ScenarioError
from sim.kv_cache import BlockManager
from sim.metrics import SummaryContext
from sim.policies import make_policy
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
    model, hw, policy_spec = spec.model, spec.hardware, spec.policy
    block_size = 1 if policy_spec.name == "static" else policy_spec.block_size
    if policy_spec.name != "static":
        num_blocks = kv_capacity_blocks(model, hw, block_size)
    else:  # contiguous reservation: a pool of one-token blocks
        num_blocks = kv_capacity_tokens(model, hw)
    kv = BlockManager(num_blocks, block_size)
    policy = make_policy(policy_spec, kv, max_model_len=model.max_model_len)
    cost = CostModel(resolved.profile)

    env = simpy.Environment()
    arrival = requests.arrival_s
    prompt = requests.prompt_tokens.tolist()
    output = requests.output_tokens.tolist()
    arrival_list = arrival.tolist()
    made: list[Request] = []

    def make_request(i: int) -> Request:
        req = Request(i, arrival_list[i], prompt[i], output[i])
        made.append(req)
        return req

    instance: Instance | None = None

    def dispatch(req: Request) -> None:
        assert instance is not None
        instance.submit(req)

    source = Source(env, arrival, make_request, dispatch)
    instance = Instance(
        env, 0, policy, cost, source.next_arrival_s, coalesce=spec.engine.coalesce_decode_steps
    )
    env.run()
    unfinished = [r for r in made if not r.rejected and math.isnan(r.finish_s)]
    if unfinished or len(made) != len(requests):  # the loop only stops when the queue drains
        raise AssertionError(f"{len(unfinished)} requests never finished in {resolved.variant}")

    context = SummaryContext(
        slo_ttft_s=spec.slo.ttft_s,
        slo_tpot_s=spec.slo.tpot_s,
        warmup_s=spec.metrics.warmup_s,
        cooldown_s=spec.metrics.cooldown_s,
        flops_per_token=model.flops_per_token,
        weight_bytes=model.weight_bytes,
        kv_bytes_per_token=model.kv_bytes_per_token,
        peak_flops=hw.peak_flops,
        hbm_bandwidth_bytes_per_s=hw.hbm_bandwidth_bytes_per_s,
        kv_blocks_total=num_blocks,
        block_size=block_size,
        num_instances=1,
    )
    rec = instance.recorder
    return VariantResult(
        name=resolved.variant,
        requests=requests_table(made),
        steps=pd.DataFrame.from_records(rec.steps, columns=list(STEP_COLUMNS)),
        itl=pd.DataFrame(
            {
                "gap_s": np.asarray(rec.itl_gap_s, dtype=float),
                "count": np.asarray(rec.itl_count, dtype=np.int64),
            }
        ),
        context=context,
        scenario=resolved.spec.model_dump(mode="json"),
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
        }
    )
    df["queue_s"] = df["first_scheduled_s"] - df["arrival_s"]
    df["ttft_s"] = df["first_token_s"] - df["arrival_s"]
    df["e2e_s"] = df["finish_s"] - df["arrival_s"]
    decode_tokens = (df["num_output_tokens"] - 1).where(df["num_output_tokens"] >= 2)
    df["tpot_s"] = (df["finish_s"] - df["first_token_s"]) / decode_tokens
    return df.sort_values("id", ignore_index=True)
