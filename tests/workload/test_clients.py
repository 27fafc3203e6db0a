"""Closed-loop benchmark clients (`workload.clients`): N clients, each sending its next request
a delay after its previous response ended; schedules worked by hand, the concurrency bound,
Little's law, the caps, determinism and the refusals."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scenario_factory import UNIT, continuous, scenario

from sim import load_scenario_dict, simulate
from sim.errors import ScenarioError
from sim.workload.budget import expected_requests, memory_problem
from sim.workload.clients import client_schedule
from sim.workload.generate import generate_requests
from sim.workload.spec import WorkloadSpec

FIXED_10 = {"dist": "fixed", "value": 10}
FIXED_3 = {"dist": "fixed", "value": 3}


def clients(num_clients: int, **extra: Any) -> dict[str, Any]:
    return {
        "num_clients": num_clients,
        "prompt_tokens": FIXED_10,
        "output_tokens": FIXED_3,
        **extra,
    }


def clients_scenario(workload: dict[str, Any], **extra: Any) -> dict[str, Any]:
    extra.setdefault("profile", UNIT)
    policy = continuous(max_num_seqs=64, max_num_batched_tokens=4096)
    return scenario(workload=workload, policy=policy, **extra)


def requests(raw: dict[str, Any]) -> pd.DataFrame:
    results = simulate(load_scenario_dict(raw))
    (name,) = results.variants
    return results[name].requests.set_index("id").sort_index()


def previous_of(table: pd.DataFrame) -> dict[int, int]:
    """Each later request's predecessor from the same client: consecutive in id order within
    a client (ids follow a client's sending order)."""
    out = {}
    for _, group in table.groupby("session"):
        ids = group.index.to_list()
        out.update(zip(ids[1:], ids[:-1], strict=True))
    return out


# --- the schedule, by hand ------------------------------------------------------------------


def test_two_clients_by_hand() -> None:
    # every step costs 1 s. Prefill first: both prompts in one step (0..1, first tokens at 1),
    # then two decode steps (finish at 3); the next requests arrive 0.5 s later, at 3.5.
    # Five requests dealt to two clients: client 0 sends ids 0, 2, 3 and client 1 ids 1, 4.
    delay = {"dist": "fixed", "value_s": 0.5}
    raw = clients_scenario({"num_requests": 5, "clients": clients(2, delay=delay)})
    table = requests(raw)
    assert table["session"].to_list() == [0, 1, 0, 0, 1]
    assert table["arrival_s"].to_list() == [0.0, 0.0, 3.5, 7.0, 3.5]
    assert table["first_token_s"].to_list() == [1.0, 1.0, 4.5, 8.0, 4.5]
    assert table["finish_s"].to_list() == [3.0, 3.0, 6.5, 10.0, 6.5]
    for later, previous in previous_of(table).items():
        assert table.at[later, "arrival_s"] == table.at[previous, "finish_s"] + 0.5


def test_ramp_up_spreads_the_first_requests_evenly() -> None:
    raw = clients_scenario({"num_requests": 12, "clients": clients(4, ramp_up_s=2.0)})
    table = requests(raw)
    assert table["arrival_s"].iloc[:4].to_list() == [0.0, 0.5, 1.0, 1.5]
    for later, previous in previous_of(table).items():  # delay 0 by default
        assert table.at[later, "arrival_s"] == table.at[previous, "finish_s"]


def test_one_client_without_delay_is_strictly_sequential() -> None:
    workload = {
        "num_requests": 40,
        "clients": {
            "num_clients": 1,
            "prompt_tokens": {"dist": "uniform", "low": 5, "high": 300},
            "output_tokens": {"dist": "uniform", "low": 1, "high": 40},
        },
    }
    table = requests(clients_scenario(workload))
    assert len(table) == 40 and (table["session"] == 0).all()
    arrival = table["arrival_s"].to_numpy()
    finish = table["finish_s"].to_numpy()
    assert arrival[0] == 0.0
    np.testing.assert_array_equal(arrival[1:], finish[:-1])
    assert (finish > arrival).all()


def test_client_schedule_deals_requests_in_turn() -> None:
    client, nxt, first = client_schedule(3, 8)
    # counts 3, 3, 2: first requests 0, 1, 2; then client 0's later 3, 4; client 1's 5, 6;
    # client 2's 7
    assert client.tolist() == [0, 1, 2, 0, 0, 1, 1, 2]
    assert nxt.tolist() == [3, 5, 7, 4, -1, 6, -1, -1]
    assert first.tolist() == [True, True, True, False, False, False, False, False]
    # fewer requests than clients: the clients left over send nothing
    client, nxt, first = client_schedule(5, 3)
    assert client.tolist() == [0, 1, 2] and nxt.tolist() == [-1, -1, -1] and first.all()


# --- invariants of a longer run ---------------------------------------------------------------

ROOFLINE_ISH = {"coefficients": {"t_mem_s": 0.01, "t_flop_s_per_token": 2.0e-5}}


def long_workload(num_clients: int, delay_s: float, **caps: Any) -> dict[str, Any]:
    return {
        **caps,
        "clients": {
            "num_clients": num_clients,
            "prompt_tokens": {"dist": "lognormal", "median": 200, "sigma": 0.6, "max": 1500},
            "output_tokens": {"dist": "lognormal", "median": 60, "sigma": 0.6, "max": 300},
            "delay": {"dist": "fixed", "value_s": delay_s},
        },
    }


def in_flight_at_arrivals(table: pd.DataFrame) -> np.ndarray:
    """Requests arrived and not yet finished at each arrival (a request whose successor
    arrives at its very finish is no longer in flight then)."""
    arrival = table["arrival_s"].to_numpy()
    finish = table["finish_s"].to_numpy()
    return np.array([int(((arrival <= t) & (finish > t)).sum()) for t in arrival])


@pytest.mark.parametrize("delay_s", [0.0, 0.05])
def test_concurrency_never_exceeds_the_clients(delay_s: float) -> None:
    raw = clients_scenario(long_workload(6, delay_s, num_requests=300), profile=ROOFLINE_ISH)
    table = requests(raw)
    assert len(table) == 300 and table["finish_s"].notna().all()
    counts = in_flight_at_arrivals(table)
    assert counts.max() == 6
    previous = previous_of(table)
    later = np.array(list(previous))
    before = np.array([previous[i] for i in later])
    np.testing.assert_allclose(
        table["arrival_s"].to_numpy()[later],
        table["finish_s"].to_numpy()[before] + delay_s,
        rtol=0,
        atol=1e-12,
    )


def test_more_clients_than_seats_wait_in_the_queue_not_beyond() -> None:
    raw = clients_scenario(long_workload(12, 0.0, num_requests=200), profile=ROOFLINE_ISH)
    raw["policy"]["max_num_seqs"] = 4
    table = requests(raw)
    assert in_flight_at_arrivals(table).max() == 12
    assert (table["queue_s"] > 0).any()


def test_littles_law_holds_on_a_long_run() -> None:
    # N = throughput x (mean E2E + delay) while every client is busy: each is always either
    # waiting for a response or in its delay. The window ends at the first client's last
    # finish (after it, clients dealt fewer or shorter requests idle: the tail).
    num_clients, delay_s = 16, 0.2
    raw = clients_scenario(
        long_workload(num_clients, delay_s, num_requests=3200), profile=ROOFLINE_ISH
    )
    table = requests(raw)
    end = table.groupby("session")["finish_s"].max().min()
    inside = table[table["finish_s"] <= end]
    throughput = len(inside) / end
    cycle = inside["e2e_s"].mean() + delay_s
    assert len(inside) > 2500
    assert throughput * cycle == pytest.approx(num_clients, rel=0.02)


# --- caps -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("caps", "per_client"),
    [
        ({"num_requests": 10}, [3, 3, 2, 2]),
        ({"requests_per_client": 3}, [3, 3, 3, 3]),
        ({"num_requests": 10, "requests_per_client": 2}, [2, 2, 2, 2]),
        ({"num_requests": 7, "requests_per_client": 3}, [2, 2, 2, 1]),
        ({"num_requests": 2}, [1, 1]),
    ],
)
def test_caps_are_exact(caps: dict[str, Any], per_client: list[int]) -> None:
    spec = clients(4)
    workload: dict[str, Any] = {"clients": spec}
    if "num_requests" in caps:
        workload["num_requests"] = caps["num_requests"]
    if "requests_per_client" in caps:
        spec["requests_per_client"] = caps["requests_per_client"]
    table = requests(clients_scenario(workload))
    assert table["session"].value_counts().sort_index().to_list() == per_client
    assert table["finish_s"].notna().all()
    size = expected_requests(WorkloadSpec.model_validate(workload))
    assert size is not None and size[0] == sum(per_client)


def test_memory_guard_counts_clients_times_requests() -> None:
    spec = WorkloadSpec.model_validate(
        {"clients": clients(100_000, requests_per_client=100_000_000)}
    )
    assert expected_requests(spec) == (1e13, "workload.clients.requests_per_client")
    problem = memory_problem([spec])
    assert problem is not None and problem[0] == "workload.clients.requests_per_client"
    assert "1e+13 requests" in problem[1] or "10000000000000 requests" in problem[1]
    capped = WorkloadSpec.model_validate({"num_requests": 50, "clients": clients(100_000)})
    assert expected_requests(capped) == (50.0, "workload.num_requests")
    assert memory_problem([capped]) is None


# --- determinism and content ------------------------------------------------------------------


def test_the_same_seed_gives_the_same_run_and_columns_are_independent() -> None:
    raw = clients_scenario(long_workload(5, 0.0, num_requests=60), profile=ROOFLINE_ISH)
    first = requests(raw)
    pd.testing.assert_frame_equal(first, requests(copy.deepcopy(raw)))
    other = copy.deepcopy(raw)
    other["seed"] = 2
    assert not first["num_prompt_tokens"].equals(requests(other)["num_prompt_tokens"])
    # another output distribution draws from its own stream: the prompts stay as they were
    changed = copy.deepcopy(raw)
    changed["workload"]["clients"]["output_tokens"] = {"dist": "uniform", "low": 1, "high": 9}
    again = requests(changed)
    assert again["num_prompt_tokens"].equals(first["num_prompt_tokens"])
    assert not again["max_output_tokens"].equals(first["max_output_tokens"])


def test_shared_prefix_gives_clients_system_prompts(tmp_path: Path) -> None:
    spec = WorkloadSpec.model_validate(
        {
            "num_requests": 30,
            "clients": clients(3),
            "shared_prefix": {"num_prefixes": 2, "length": {"dist": "fixed", "value": 64}},
        }
    )
    arrays = generate_requests(spec, np.random.default_rng(3), tmp_path)
    assert arrays.content is not None
    assert (arrays.prompt_tokens == 10 + 64).all()
    # two requests with the same system prompt share its 4 units, and nothing else
    head = arrays.content.of(0)[0]
    b = next(i for i in range(1, 30) if arrays.content.of(i)[0] == head)
    shared = set(arrays.content.of(0).tolist()) & set(arrays.content.of(b).tolist())
    assert len(shared) == 4
    raw = clients_scenario(spec.model_dump(mode="json", exclude_none=True))
    raw["policy"]["prefix_caching"] = True
    table = requests(raw)
    assert table["num_cached_tokens"].sum() > 0


# --- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("workload", "words"),
    [
        ({"num_requests": 5, "clients": clients(0)}, "workload.clients.num_clients"),
        ({"num_requests": 5, "clients": clients(100_001)}, "workload.clients.num_clients"),
        ({"num_requests": 5, "clients": clients(2, delay={"dist": "fixed", "value_s": -1})},
         "workload.clients.delay"),
        ({"num_requests": 5, "clients": clients(2, ramp_up_s=-1)}, "workload.clients.ramp_up_s"),
        ({"num_requests": 5, "clients": clients(2, requests_per_client=0)},
         "workload.clients.requests_per_client"),
        ({"clients": clients(2)}, "clients need 'num_requests'"),
        ({"duration_s": 10, "clients": clients(2)}, "not a duration"),
        ({"num_requests": 5, "clients": clients(2), "arrival": {"process": "poisson", "rate": 1}},
         "'clients' cannot be combined with arrival"),
        ({"num_requests": 5, "clients": clients(2), "prompt_tokens": FIXED_10},
         "'clients' cannot be combined with prompt_tokens"),
        ({"clients": clients(2), "trace": {"path": "t.csv"}},
         "'trace' cannot be combined with clients"),
    ],
)  # fmt: skip
def test_bad_clients_are_refused_in_one_line(workload: dict[str, Any], words: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        load_scenario_dict(clients_scenario(workload))
    message = str(caught.value)
    assert words in message and "\n" not in message


@pytest.mark.parametrize("kind", ["clients", "sessions"])
def test_a_request_over_the_context_is_rejected_and_its_client_goes_on(kind: str) -> None:
    """A closed-loop request longer than the model's context is rejected at arrival and counted,
    as an open-loop one is, and its client (or session) sends its next request a delay after
    the refusal; the run ends with every request finished or rejected."""
    delay = {"dist": "fixed", "value_s": 0.5}
    long_or_short = {"dist": "uniform", "low": 10, "high": 400}  # over 200 tokens: refused
    if kind == "clients":
        workload: dict[str, Any] = {
            "num_requests": 12,
            "clients": clients(2, delay=delay, prompt_tokens=long_or_short),
        }
    else:
        workload = {"sessions": {
            "arrival": {"process": "poisson", "rate": 1.0}, "num_sessions": 3,
            "turns": {"dist": "fixed", "value": 4}, "first_prompt": long_or_short,
            "user_tokens": FIXED_10, "output_tokens": FIXED_3, "think_time": delay,
        }}  # fmt: skip
    raw = clients_scenario(workload, model={"name": "llama-2-7b", "max_model_len": 200})
    results = simulate(load_scenario_dict(raw))
    (name,) = results.variants
    table = results[name].requests.set_index("id").sort_index()
    summary = results[name].summary()
    rejected = table["rejected"].to_numpy(bool)
    assert len(table) == summary["num_requests"] == 12
    assert 0 < summary["num_rejected"] == rejected.sum() < 12
    assert (table.loc[rejected, "reject_reason"] == "longer than max_model_len (200 tokens)").all()
    too_long = (table["num_prompt_tokens"] + table["num_output_tokens"] > 200).to_numpy()
    np.testing.assert_array_equal(rejected, too_long)
    for later, previous in previous_of(table).items():
        ended = table.at[previous, "arrival_s"] if rejected[table.index.get_loc(previous)] \
            else table.at[previous, "finish_s"]
        assert table.at[later, "arrival_s"] == pytest.approx(ended + 0.5)
