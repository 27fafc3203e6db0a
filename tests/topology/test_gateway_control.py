"""The gateway's control plane: stale load signals, load shedding, lagged KV events and the
`slo_headroom` router (sim/topology/gateway.py, sim/topology/signals.py).

Hand-made schedules on two instances show where each request lands: with loads scraped every
10 s, `least_outstanding_requests` sends a whole burst to one instance (it never sees its own
decisions); shedding rejects exactly the requests that find their tier's queue limit reached;
`slo_headroom` goes where the predicted TTFT is least (behind the least prefill, or onto a
cached prefix) and, with KV events late, stops seeing a prefix stored too recently.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers_cluster import WORKLOAD, StandIn, arrays_of, check_invariants, run_with_cluster
from scenario_factory import COEFFS, scenario, tiny_hardware, tiny_model

from sim import load_scenario
from sim.core.instance import Load
from sim.core.prefill_curve import PREFILL_CHUNK_TOKENS
from sim.topology.router import Loads, make_router
from sim.topology.signals import Backlog, predicted_ttft
from sim.workload import RequestArrays
from sim.workload.arrays import Content

POLICY = {"name": "continuous", "max_num_seqs": 32, "max_num_batched_tokens": 4096}
SLO = {"ttft_s": 1.0, "tiers": {"gold": {"ttft_s": 0.5}, "bronze": {}, "default": {}}}


def cluster_raw(
    router: str, count: int = 2, policy: dict[str, Any] = POLICY, admission: Any = None,
    **options: float,
) -> dict[str, Any]:  # fmt: skip
    cluster: dict[str, Any] = {
        "router": router, "router_options": options, "instances": [{"count": count}],
    }  # fmt: skip
    if admission is not None:
        cluster["admission"] = admission
    return scenario(policy=policy, cluster=cluster, slo=SLO)


def placed(raw: dict[str, Any], arrays: RequestArrays) -> list[int]:
    res, cluster = run_with_cluster(raw, arrays)
    check_invariants(res, cluster)
    return res.requests.sort_values("id")["instance"].tolist()


# -- stale load signals ------------------------------------------------------------------------

# a burst of six 2-second requests at 0-0.05 s, two more at 1.1 and 1.2 s, one at 12 s
BURST = arrays_of([0.0, 0.01, 0.02, 0.03, 0.04, 0.05, 1.1, 1.2, 12.0], [100] * 9, [200] * 9)


def test_exact_loads_alternate_a_burst() -> None:
    assert placed(cluster_raw("least_outstanding_requests"), BURST) == [0, 1] * 4 + [0]


def test_loads_scraped_every_10_s_send_the_whole_burst_to_one_instance() -> None:
    # the scrape at 0 s saw both idle; nothing is re-read before 10 s, so every request herds
    # onto instance 0; at 12 s the scrape of 10 s saw both idle again
    raw = cluster_raw("least_outstanding_requests", refresh_s=10.0)
    assert placed(raw, BURST) == [0] * 9


def test_the_scrape_at_1_s_sees_the_burst_but_not_the_decisions_after_it() -> None:
    # at 1 s instance 0 runs all six: 1.1 and 1.2 both go to instance 1, which looks idle
    raw = cluster_raw("least_outstanding_requests", refresh_s=1.0)
    assert placed(raw, BURST) == [0] * 6 + [1, 1, 0]


def test_scrapes_happen_at_multiples_of_refresh_s_and_stop_when_idle() -> None:
    res, cluster = run_with_cluster(cluster_raw("least_outstanding_requests", refresh_s=1.0), BURST)
    check_invariants(res, cluster)
    # the burst and the pair end between 3 and 4 s: scrapes at 0 (the first arrival), 1, 2, 3
    # and 4 (nothing in flight: the timer stops); the last request runs from 12 s to just past
    # 14 s: scrapes at 12 (its arrival), 13, 14 and 15 (the timer stops)
    req = res.requests.sort_values("id")
    assert 3.0 < req["finish_s"].iloc[:8].max() < 4.0
    assert 14.0 < req["finish_s"].iloc[8] < 15.0
    gateway = _gateway(cluster)
    assert gateway.scraper is not None
    assert gateway.scraper.num_scrapes == 9
    assert gateway.scraper.tick == 15


def _gateway(cluster: Any) -> Any:
    dispatch = cluster.dispatch
    return dispatch.__self__


def test_a_router_that_reads_no_load_ignores_refresh() -> None:
    raw = cluster_raw("round_robin", refresh_s=10.0)
    assert placed(raw, BURST) == [0, 1] * 4 + [0]


@pytest.mark.parametrize("router", ["least_outstanding_requests", "prefix_affinity"])
def test_defaults_and_an_empty_admission_change_nothing(router: str) -> None:
    base = scenario(
        policy=POLICY, workload=WORKLOAD,
        cluster={"router": router, "instances": [{"count": 3}]},
    )  # fmt: skip
    knobs = scenario(
        policy=POLICY, workload=WORKLOAD,
        cluster={
            "router": router, "instances": [{"count": 3}], "admission": {},
            "router_options": {"refresh_s": 0.0, "kv_event_lag_s": 0.0},
        },
    )  # fmt: skip
    a, _ = run_with_cluster(base)
    b, cluster = run_with_cluster(knobs)
    check_invariants(b, cluster)
    assert a.summary() == b.summary()
    assert a.requests.equals(b.requests)


# -- admission control -------------------------------------------------------------------------

ONE_SEAT = {"name": "continuous", "max_num_seqs": 1, "max_num_batched_tokens": 4096}


def test_a_full_queue_sheds_exactly_the_requests_past_its_limit() -> None:
    # one seat: request 0 runs, 1 and 2 wait, 3, 4 and 5 find two waiting and are shed
    raw = cluster_raw(
        "least_outstanding_requests", count=1, policy=ONE_SEAT, admission={"max_waiting": 2}
    )
    arrays = arrays_of([0.0, 0.001, 0.002, 0.003, 0.004, 0.005], [100] * 6, [10] * 6)
    res, cluster = run_with_cluster(raw, arrays)
    check_invariants(res, cluster)
    req = res.requests.sort_values("id")
    assert req["rejected"].tolist() == [False] * 3 + [True] * 3
    assert req.loc[req["rejected"], "reject_reason"].tolist() == ["shed: queue full"] * 3
    assert req.loc[req["rejected"], "instance"].tolist() == [-1] * 3
    assert res.summary()["num_rejected"] == 3


def test_each_tier_has_its_own_limit() -> None:
    # gold may queue behind 3, bronze behind 1: bronze 3 and 5 and gold 6 find their limits
    n = 8
    arrays = RequestArrays(
        arrival_s=np.arange(n) * 0.001,
        prompt_tokens=np.full(n, 100),
        output_tokens=np.full(n, 10),
        class_index=np.zeros(n, dtype=np.int64),
        class_names=("default",),
        tier_index=np.array([0, 1] * 4),
        tier_names=("gold", "bronze"),
    )
    admission = {"max_waiting": 3, "tiers": {"bronze": 1}}
    raw = cluster_raw("least_outstanding_requests", count=1, policy=ONE_SEAT, admission=admission)
    # the workload declares both tiers (the hand-made arrays carry them)
    lengths = {k: raw["workload"].pop(k) for k in ("prompt_tokens", "output_tokens")}
    raw["workload"]["mix"] = [
        {"name": t, "weight": 1, "tier": t, **lengths} for t in ("gold", "bronze")
    ]
    res, cluster = run_with_cluster(raw, arrays)
    check_invariants(res, cluster)
    req = res.requests.sort_values("id")
    assert req["tier"].tolist() == ["gold", "bronze"] * 4
    assert req.index[req["rejected"]].tolist() == [3, 5, 6, 7]


def test_shedding_reads_the_scraped_queue() -> None:
    # scraped at 0 s, the queue looks empty until 10 s: nothing is shed, all six queue
    raw = cluster_raw(
        "least_outstanding_requests", count=1, policy=ONE_SEAT, admission={"max_waiting": 2},
        refresh_s=10.0,
    )  # fmt: skip
    arrays = arrays_of([0.0, 0.001, 0.002, 0.003, 0.004, 0.005], [100] * 6, [10] * 6)
    res, cluster = run_with_cluster(raw, arrays)
    check_invariants(res, cluster)
    assert not res.requests["rejected"].any()


# -- the slo_headroom router -------------------------------------------------------------------


def test_headroom_picks_the_least_predicted_ttft_ties_lowest() -> None:
    r = make_router("slo_headroom", np.random.default_rng(0))
    predicted = [0.4, 0.2, 0.2, 0.9]
    assert r.pick(StandIn(4, ttfts=predicted.__getitem__)) == 1
    assert r.pick(StandIn(4, [0, 3], ttfts=predicted.__getitem__)) == 0
    with pytest.raises(ValueError, match="predicted TTFT"):  # the KV link predicts none
        r.pick(Loads(2, None, [Load(0, 0, 0, 0, 1)] * 2))


def test_prefill_seconds_prices_one_step_then_chunks() -> None:
    _, cluster = run_with_cluster(cluster_raw("slo_headroom"), arrays_of([0.0], [10], [2]))
    inst = cluster.instances[0]
    c = COEFFS

    def step(n: int) -> float:
        return (
            c["t_mem_s"]
            + (c["t_flop_s_per_token"] + c["t_kv_s_per_token"]) * n
            + (c["t_attn_s_per_token2"] * n * n)
        )

    assert inst.prefill_seconds(0) == 0.0
    assert inst.prefill_seconds(100) == pytest.approx(step(100))
    chunk = PREFILL_CHUNK_TOKENS
    assert inst.prefill_seconds(3 * chunk) == pytest.approx(3 * step(chunk))
    # the rest of the step under way, then the backlog and its own tokens
    seen = Backlog(prefill_tokens=300, step_end_s=5.25)
    assert predicted_ttft(seen, 5.0, 100, inst.prefill_seconds) == pytest.approx(0.25 + step(400))
    assert predicted_ttft(seen, 6.0, 100, inst.prefill_seconds) == pytest.approx(step(400))


def test_slo_headroom_avoids_the_instance_behind_a_long_prefill() -> None:
    # 0: a 4000-token prompt takes instance 0 for ~0.066 s; 1: a short one goes to idle
    # instance 1; 2: both run one request (least_outstanding_requests: the lowest, 0), but
    # instance 1's step ends first, so slo_headroom predicts a shorter TTFT there
    arrays = arrays_of([0.0, 0.001, 0.002], [4000, 16, 16], [1, 200, 200])
    assert placed(cluster_raw("least_outstanding_requests"), arrays) == [0, 1, 0]
    assert placed(cluster_raw("slo_headroom"), arrays) == [0, 1, 1]


# -- cached prefixes and KV-event lag ----------------------------------------------------------

BS = 4
CACHING = {
    "name": "continuous", "max_num_seqs": 4, "max_num_batched_tokens": 256, "block_size": BS,
    "watermark": 0.0, "prefix_caching": True,
}  # fmt: skip


def prefix_arrays(rows: list[tuple[float, list[int], int]]) -> RequestArrays:
    """Requests from (arrival, content ids of BS tokens each, output tokens) rows."""
    n = len(rows)
    tokens = np.asarray([len(r[1]) * BS for r in rows], dtype=np.int64)
    content = Content(
        ids=np.asarray([i for r in rows for i in r[1]], dtype=np.int64),
        offsets=np.cumsum([0, *(len(r[1]) for r in rows)]).astype(np.int64),
        unit=BS,
        tokens=tokens,
    )
    return RequestArrays(
        arrival_s=np.asarray([r[0] for r in rows], dtype=float),
        prompt_tokens=tokens,
        output_tokens=np.asarray([r[2] for r in rows], dtype=np.int64),
        class_index=np.zeros(n, dtype=np.int64),
        class_names=("default",),
        content=content,
    )


# D keeps instance 0 busy, so A computes prefix 1-2-3-4 on instance 1; C asks for that prefix
# at 10 s, when both are idle: only instance 1's cache tells them apart
PREFIX_ROWS = [(0.0, [30, 31], 40), (0.001, [1, 2, 3, 4], 1), (10.0, [1, 2, 3, 4], 2)]


def prefix_raw(router: str, **options: float) -> dict[str, Any]:
    return scenario(
        policy=CACHING, model=tiny_model(), hardware=tiny_hardware(400),
        cluster={"router": router, "router_options": options, "instances": [{"count": 2}]},
    )  # fmt: skip


@pytest.mark.parametrize("router", ["slo_headroom", "prefix_affinity"])
@pytest.mark.parametrize(
    ("lag_s", "last"),
    [(0.0, 1), (5.0, 1), (100.0, 0)],  # A's prompt stored at ~0.01 s: seen from lag + 0.01 s
)
def test_a_cached_prefix_draws_c_unless_its_kv_events_are_late(
    router: str, lag_s: float, last: int
) -> None:
    raw = prefix_raw(router, kv_event_lag_s=lag_s)
    res, _ = run_with_cluster(raw, prefix_arrays(PREFIX_ROWS))
    req = res.requests.sort_values("id")
    assert req["finish_s"].notna().all()
    assert req["instance"].tolist() == [0, 1, last]
    assert req["num_cached_tokens"].tolist() == [0, 0, 12 if last == 1 else 0]


# -- no request lost ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("router", "options", "admission"),
    [
        ("least_outstanding_requests", {}, {"max_waiting": 4}),
        ("least_outstanding_requests", {"refresh_s": 0.5}, {"max_waiting": 4}),
        ("slo_headroom", {"refresh_s": 0.25}, None),
        ("slo_headroom", {}, {"max_waiting": 2}),
        ("prefix_affinity", {"refresh_s": 1.0, "kv_event_lag_s": 0.5}, {"max_waiting": 3}),
    ],
)
def test_every_request_finishes_or_is_shed(
    router: str, options: dict[str, float], admission: Any
) -> None:
    cluster: dict[str, Any] = {
        "router": router, "router_options": options, "instances": [{"count": 3}],
    }  # fmt: skip
    if admission is not None:
        cluster["admission"] = admission
    burst = {**WORKLOAD, "arrival": {"process": "poisson", "rate": 200.0}}
    policy = {**POLICY, "max_num_seqs": 4}
    res, made = run_with_cluster(scenario(policy=policy, workload=burst, cluster=cluster))
    check_invariants(res, made)
    req = res.requests
    assert len(req) == WORKLOAD["num_requests"]
    shed = req["reject_reason"] == "shed: queue full"
    assert (req["rejected"] == shed).all()  # no other cause here
    if admission is not None and router == "least_outstanding_requests":
        # 200 requests per second overload 3 x 4 seats: exact loads shed most of them; loads
        # scraped every 0.5 s herd each half second's arrivals onto the instance that looked
        # idle at the scrape, whose scraped queue is empty: none is shed
        assert shed.sum() == (249 if not options else 0)


def test_the_shipped_scenario_compares_routers_under_staleness() -> None:
    path = Path(__file__).resolve().parents[2] / "scenarios" / "stale_routers.yaml"
    seen = {
        v.variant: (
            v.spec.cluster.router,
            v.spec.cluster.router_options.refresh_s,
            v.spec.cluster.router_options.kv_event_lag_s,
            len(v.groups) and v.groups[0].count,
        )
        for v in load_scenario(path).variants
        if v.spec.cluster is not None
    }
    assert seen == {
        "lor-exact": ("least_outstanding_requests", 0.0, 0.0, 4),
        "lor-refresh-1s": ("least_outstanding_requests", 1.0, 0.0, 4),
        "lor-refresh-5s": ("least_outstanding_requests", 5.0, 0.0, 4),
        "prefix-affinity": ("prefix_affinity", 0.0, 0.0, 4),
        "prefix-affinity-stale": ("prefix_affinity", 1.0, 1.0, 4),
        "slo-headroom": ("slo_headroom", 0.0, 0.0, 4),
        "slo-headroom-stale": ("slo_headroom", 1.0, 1.0, 4),
    }
