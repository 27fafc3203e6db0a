"""Every plot draws a panel only when it carries something for the run: a fleet of one fixed
instance has no instances or rent panel over time, an autoscaled one has both; a queue that never
held a request, a latency no request has and an attainment a sweep did not judge have none."""

from __future__ import annotations

from typing import Any

import pandas as pd
from helpers_autoscale import SHORT_DAY
from scenario_factory import continuous, poisson, run, scenario

from sim.io.plots import latency_cdf_figure, timeline_figure
from sim.io.plots_sweep import goodput_figure
from sim.io.plots_timeline import over_time_figure, panels_of
from sim.metrics.results import VariantResult

SLO = {"ttft_s": 2.0, "tpot_s": 0.1}


def over_time_labels(result: VariantResult) -> list[str]:
    timeline = result.timeline()
    fig = over_time_figure({"v": timeline}, {"v": result.fleet_events}, {"v": SLO["ttft_s"]})
    return [ax.get_ylabel() for ax in fig.axes]


def test_one_fixed_instance_has_no_instances_or_rent_panel() -> None:
    # the quickstart's shape: one instance, continuous batching, SLO targets
    result = run(scenario(workload=poisson(300, 5.0), policy=continuous(max_num_seqs=64),
                          profile=None, slo=SLO))  # fmt: skip
    assert len(result.timeline()) > 2
    assert panels_of({"v": result.timeline()}, {"v": result.fleet_events}) == (
        "rate",
        "ttft",
        "slo",
    )
    assert over_time_labels(result) == ["requests/s", "TTFT p90 (s)", "SLO attainment"]


def test_an_autoscaled_fleet_has_its_instances_and_rent_panels() -> None:
    autoscale: dict[str, Any] = {
        "signal": "running", "target": 4, "min": 1, "max": 6, "interval_s": 5,
        "scale_out_cooldown_s": 10, "scale_in_cooldown_s": 30,
        "provisioning": {"scheduling_s": 2, "load_bandwidth_gb_per_s": 8, "warmup_s": 3},
    }  # fmt: skip
    doc = {
        **SHORT_DAY,
        "slo": SLO,
        "cluster": {
            "router": "least_outstanding_tokens",
            "instances": [{"count": 1, "autoscale": autoscale}],
        },
    }
    result = run(doc)
    assert len(result.fleet_events) > 0
    assert over_time_labels(result) == [
        "requests/s",
        "instances",
        "TTFT p90 (s)",
        "SLO attainment",
        "$/hour",
    ]


def test_no_slo_target_no_attainment_panel() -> None:
    result = run(scenario(workload=poisson(300, 5.0), profile=None))
    assert "SLO attainment" not in over_time_labels(result)


def test_a_queue_that_never_held_a_request_has_no_panel() -> None:
    # one request at a time, each arriving while nothing runs
    steps = pd.DataFrame(
        {"variant": "v", "instance": 0, "start_s": [0.0, 2.0, 4.0], "end_s": [1.0, 3.0, 5.0],
         "num_seqs": 1, "num_waiting": 0, "kv_blocks_used": [2, 1, 2]}
    )  # fmt: skip
    labels = [ax.get_ylabel() for ax in timeline_figure(steps).axes]
    assert labels == ["batch size (sequences)", "KV blocks used (blocks)"]
    busy = run(scenario(workload=poisson(200, 50.0), policy=continuous(max_num_seqs=4)))
    assert busy.steps["num_waiting"].any()
    labels = [ax.get_ylabel() for ax in timeline_figure(busy.steps.assign(variant="v")).axes]
    assert "queue length (requests)" in labels


def test_one_token_answers_have_no_tpot_panel() -> None:
    result = run(scenario(workload=poisson(50, 5.0, output=1)))
    fig = latency_cdf_figure(result.requests.assign(variant="v"))
    assert [ax.get_xlabel() for ax in fig.axes] == ["TTFT (ms)", "E2E latency (ms)"]  # sub-second


def test_a_sweep_without_attainment_has_only_goodput() -> None:
    sweep = pd.DataFrame(
        {"variant": "v", "workload.arrival.rate": [1.0, 2.0], "goodput_rps": [1.0, 1.9]}
    )
    assert len(goodput_figure(sweep).axes) == 1
    judged = sweep.assign(slo_attainment=[1.0, 0.95])
    assert len(goodput_figure(judged).axes) == 2
