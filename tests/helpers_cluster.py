"""Cluster runs for the topology tests: a workload, a run on a routed cluster, the
invariants every cluster run keeps, the time columns two runs compare, and a prefill/decode
scenario."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any
from unittest import mock

import numpy as np
import pandas as pd
from scenario_factory import scenario

from sim.metrics.results import VariantResult
from sim.scenario.load import load_scenario_dict
from sim.simulate import run_variant
from sim.topology.cluster import Cluster
from sim.topology.router import pool_of, rank_of
from sim.workload import RequestArrays, generate_requests

WORKLOAD = {
    "num_requests": 300,
    "arrival": {"process": "poisson", "rate": 40.0},
    "prompt_tokens": {"dist": "lognormal", "median": 300, "sigma": 0.8, "max": 2000},
    "output_tokens": {"dist": "lognormal", "median": 40, "sigma": 0.8, "max": 400},
}


def run_with_cluster(
    raw: dict[str, Any], arrays: RequestArrays | None = None
) -> tuple[VariantResult, Cluster]:
    """Run the scenario's single variant; also return the cluster it ran on (its end state)."""
    module = importlib.import_module("sim.simulate.run")
    build = module.build_cluster
    made: list[Cluster] = []

    def capture(*args: Any, **kwargs: Any) -> Cluster:
        made.append(build(*args, **kwargs))
        return made[-1]

    resolved = load_scenario_dict(raw).variants[0]
    if arrays is None:
        arrays = generate_requests(
            resolved.spec.workload, np.random.default_rng(resolved.spec.seed), resolved.base_dir
        )
    with mock.patch.object(module, "build_cluster", capture):
        res = run_variant(resolved, arrays)
    return res, made[0]


def arrays_of(arrival_s: list[float], prompt: list[int], output: list[int]) -> RequestArrays:
    n = len(arrival_s)
    return RequestArrays(
        arrival_s=np.asarray(arrival_s, dtype=float),
        prompt_tokens=np.asarray(prompt, dtype=np.int64),
        output_tokens=np.asarray(output, dtype=np.int64),
        class_index=np.zeros(n, dtype=np.int64),
        class_names=("default",),
    )


def check_invariants(res: VariantResult, cluster: Cluster) -> None:
    req = res.requests
    steps = res.steps
    rejected = req["rejected"].to_numpy(dtype=bool)
    served = req[~rejected]
    # every request exactly once, finished with all its tokens, or rejected
    assert req["id"].is_unique and len(req) == res.summary()["num_requests"]
    assert served["finish_s"].notna().all()
    assert (served["num_output_tokens"] == served["max_output_tokens"]).all()
    assert req.loc[rejected, "finish_s"].isna().all()
    # tokens: each step's decode tokens, plus one first token per served request, plus one
    # token per recompute (a preempted decode prefills prompt and outputs again, then emits)
    preemptions = int(served["num_preemptions"].sum())
    decoded = int((steps["num_decode_tokens"] * steps["num_steps"]).sum())
    assert decoded + len(served) + preemptions == int(served["num_output_tokens"].sum())
    prefilled = int(steps["num_prefill_tokens"].sum())
    recomputed = int(served["num_recomputed_tokens"].sum())
    # a recompute also prefills the last emitted token, whose KV its preemption never had
    assert prefilled == int(served["num_prompt_tokens"].sum()) + recomputed + preemptions
    # every preemption shows in the steps table, even one in a step that then ran nothing
    assert int(steps["num_preempted"].sum()) == preemptions
    # an instance runs one step group at a time and never holds more blocks than its pool
    info = res.instances.set_index("index")
    for index, own in steps.groupby("instance"):
        own = own.sort_values("start_s")
        starts = own["start_s"].to_numpy()
        ends = own["end_s"].to_numpy()
        assert (ends >= starts).all()
        assert (starts[1:] >= ends[:-1]).all(), f"instance {index}: overlapping steps"
        assert own["kv_blocks_used"].max() <= info.loc[index, "kv_blocks_total"]
    # all KV handed back at the end, on every instance
    for inst in cluster.instances:
        assert inst.pool.num_free == inst.pool.num_total
        assert inst.num_waiting == 0 and inst.num_running == 0
    # the instance table: one row per instance, ids in order
    table = res.instance_summary()
    assert table["instance"].tolist() == list(range(len(cluster.instances)))
    assert sorted(steps["instance"].unique()) == sorted(
        i.index for i in cluster.instances if len(i.engine.steps)
    )


def pd_scenario(**extra: Any) -> dict[str, Any]:
    return scenario(
        policy={"name": "continuous", "max_num_seqs": 32, "max_num_batched_tokens": 4096},
        workload=WORKLOAD,
        disaggregation={
            "prefill": {
                "count": 2,
                "router": "round_robin",
                "policy": {"name": "chunked", "max_num_batched_tokens": 1024},
            },
            "decode": {"count": 2, "router": "least_kv"},
            "link": {"bandwidth_gb_per_s": 25.0, "latency_s": 0.002},
        },
        **extra,
    )


TIMES = ["first_scheduled_s", "first_token_s", "finish_s", "max_itl_s"]


def assert_same_times(a: pd.DataFrame, b: pd.DataFrame, columns: list[str]) -> None:
    for col in columns:
        x = a[col].to_numpy(dtype=float)
        y = b[col].to_numpy(dtype=float)
        np.testing.assert_allclose(x, y, rtol=1e-9, atol=0.0, equal_nan=True, err_msg=col)
    assert (a["instance"].to_numpy() == b["instance"].to_numpy()).all()


# every kind of step a least-load router can see in flight, for the tests of its reads
LOAD_POLICIES: dict[str, dict[str, Any]] = {
    "continuous": {"name": "continuous", "max_num_seqs": 16},
    "chunked": {"name": "chunked", "max_num_batched_tokens": 24, "max_num_seqs": 16},
    "static": {"name": "static", "max_batch_size": 8, "max_wait_s": 0.05},
    "preempting": {"name": "continuous", "preemption": {"mode": "swap"}},
    "speculative": {
        "name": "continuous",
        "speculative": {
            "method": "ngram",
            "num_speculative_tokens": 3,
            "acceptance": {"rate": 0.7},
        },
    },
}
LEAST_LOAD_ROUTERS = ("least_outstanding_tokens", "least_outstanding_requests", "session_sticky")


class StandIn:
    """Signals a test crafts for a router (`sim.topology.router.Signals`): whole loads
    (`loads[i]`), each instance's cached fraction (`hits`) and predicted TTFT (`ttfts`), no
    index. A plain class: a compiled router takes it, as it takes the gateway's."""

    def __init__(
        self,
        num_instances: int,
        candidates: Sequence[int] | None = None,
        loads: Callable[[int], Any] | None = None,
        *,
        session: int = -1,
        hits: Sequence[float] | None = None,
        ttfts: Callable[[int], float] | None = None,
    ) -> None:
        self.num_instances = num_instances
        self.candidates = candidates
        self.loads = loads
        self.session = session
        self.hits = hits
        self.ttfts = ttfts
        self.indexed = False

    def pool(self) -> Sequence[int]:
        return pool_of(self.num_instances, self.candidates)

    def load(self, i: int) -> Any:
        assert self.loads is not None, "read a whole load"
        return self.loads(i)

    def number(self, i: int, by: str) -> float:
        return rank_of(self.load(i), by)

    def hit(self, i: int) -> float:
        return self.hits[i] if self.hits is not None else 0.0

    def may_hit(self, i: int) -> bool:
        return self.hit(i) > 0

    def least(self, candidates: Sequence[int] | None) -> int:
        raise AssertionError("no index")

    def ttft(self, i: int) -> float:
        if self.ttfts is None:
            raise ValueError("no predicted TTFT")
        return self.ttfts(i)

    def fastest(self, candidates: Sequence[int] | None) -> int:
        raise AssertionError("no index")
