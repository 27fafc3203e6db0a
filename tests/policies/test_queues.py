"""Queue orders (sim/policies/queues.py): the exact pick of each on a crafted queue, SJF vs FCFS."""

from __future__ import annotations

import numpy as np
import pytest
from helpers_sim import run_arrays
from scenario_factory import tiny_scenario

from sim.core.request import Request
from sim.policies.queues import make_queue


def _reqs() -> list[Request]:
    # (arrival, output, predicted, tier)
    specs = [
        (0.0, 50, 5, "free"),
        (1.0, 10, 40, "paid"),
        (2.0, 30, 30, "free"),
        (3.0, 20, 1, "paid"),
    ]
    out = []
    for i, (t, o, pred, tier) in enumerate(specs):
        r = Request(i, t, 10, o)
        r.predicted_output_tokens, r.tier = pred, tier
        out.append(r)
    return out


def _drain(queue, now: float = 10.0) -> list[int]:
    order = []
    while len(queue):
        assert queue.peek(now) is queue.peek(now)  # peeking never changes the queue
        head = queue.peek(now)
        assert queue.pop(now) is head
        order.append(head.id)
    return order


TIERS = {"ranks": {"paid": 0, "free": 1}, "weights": {"paid": 1.0, "free": 1.0}}


@pytest.mark.parametrize(
    ("order", "kwargs", "expected"),
    [
        ("fcfs", {}, [0, 1, 2, 3]),
        ("sjf", {}, [1, 3, 2, 0]),
        ("sjf", {"length": "predicted"}, [3, 0, 2, 1]),
        # key = output + 10/s * arrival: 50, 20, 50, 50 -> ties broken by arrival
        ("sjf", {"aging_per_s": 10.0}, [1, 0, 2, 3]),
        ("priority", TIERS, [1, 3, 0, 2]),
        # rank + 1/s * arrival: 1, 1, 3, 3 -> arrival breaks ties
        ("priority", {**TIERS, "aging_per_s": 1.0}, [0, 1, 2, 3]),
        ("edf", {"ttft_by_tier": {"paid": 0.5, "free": 5.0}}, [1, 3, 0, 2]),
        ("edf", {"default_ttft_s": 1.0}, [0, 1, 2, 3]),
    ],
)
def test_each_order_picks_exactly(order, kwargs, expected):
    queue = make_queue(order, **kwargs)
    for r in _reqs():
        queue.push(r)
    assert len(queue) == 4 and sorted(r.id for r in queue) == [0, 1, 2, 3]
    assert _drain(queue) == expected


@pytest.mark.parametrize("order", ["fcfs", "sjf", "priority", "edf"])
def test_push_front_goes_before_everything(order):
    queue = make_queue(order, ranks={"paid": 0, "free": 1}, default_ttft_s=1.0)
    reqs = _reqs()
    for r in reqs[:3]:
        queue.push(r)
    queue.push_front(reqs[3])
    assert queue.peek(0.0) is reqs[3]
    assert not queue.may_be_overtaken()
    queue.remove(reqs[1])
    assert 1 not in _drain(queue)


def test_weighted_shares_follow_the_weights():
    queue = make_queue(
        "priority",
        priority_mode="weighted",
        ranks={"paid": 0, "free": 1},
        weights={"paid": 3.0, "free": 1.0},
    )
    for i in range(8):
        r = Request(i, float(i), 1, 1)
        r.tier = "paid" if i < 4 else "free"
        queue.push(r)
        r2 = Request(100 + i, float(i), 1, 1)
        r2.tier = "free" if i < 4 else "paid"
        queue.push(r2)
    tiers = []
    for _ in range(8):
        tiers.append(queue.pop(0.0).tier)
    # stride 1/3 vs 1: paid, free tie at pass 0 -> rank decides; then 3 paid per free
    assert tiers == ["paid", "free", "paid", "paid", "paid", "free", "paid", "paid"]


def _mixed(n: int = 100):
    """Three long jobs early, then a stream of short ones arriving faster than they are served."""
    arrival = [0.001, 0.002, 0.003] + [0.004 + 0.02 * i for i in range(n)]
    output = [100, 100, 100] + [4] * n
    return arrival, [20] * len(arrival), output


def _run(queue: dict, coalesce: bool = True):
    policy = {
        "name": "continuous",
        "max_num_seqs": 1,
        "max_num_batched_tokens": 64,
        "block_size": 4,
        "queue": queue,
    }
    return run_arrays(tiny_scenario(policy, 100_000, coalesce=coalesce), *_mixed())


def test_sjf_beats_fcfs_on_mean_latency_and_starves_long_jobs_without_aging():
    fcfs = _run({"order": "fcfs"}).requests
    sjf = _run({"order": "sjf"}).requests
    aged = _run({"order": "sjf", "aging_per_s": 1000.0}).requests
    assert sjf["e2e_s"].mean() < 0.8 * fcfs["e2e_s"].mean()
    long = fcfs["max_output_tokens"] == 100
    # the long jobs wait longest under SJF: starvation, visible as the oldest wait
    assert sjf.loc[long, "queue_s"].max() > 1.5 * fcfs.loc[long, "queue_s"].max()
    assert aged.loc[long, "queue_s"].max() < sjf.loc[long, "queue_s"].max()


@pytest.mark.parametrize(
    "queue",
    [
        {"order": "sjf", "aging_per_s": 50.0},
        {"order": "sjf", "length": "predicted"},
        {"order": "edf"},
        {"order": "priority", "tiers": {"default": {"rank": 0}}},
    ],
)
def test_coalescing_is_exact_for_every_order(queue):
    raw = lambda c: tiny_scenario(  # noqa: E731
        {
            "name": "continuous",
            "max_num_seqs": 2,
            "max_num_batched_tokens": 64,
            "block_size": 4,
            "queue": queue,
        },
        120,
        coalesce=c,
        slo={"ttft_s": 1.0},
    )
    a = run_arrays(raw(True), *_mixed()).requests
    b = run_arrays(raw(False), *_mixed()).requests
    cols = ["first_scheduled_s", "first_token_s", "finish_s", "num_preemptions"]
    assert np.allclose(a[cols].to_numpy(float), b[cols].to_numpy(float), rtol=1e-9, atol=1e-12)
