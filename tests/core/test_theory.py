"""Queueing theory the simulator must reproduce (docs/testing.md: theory).

With batch size 1 a request's service time is deterministic given its lengths
(`helpers_sim.service_time_batch1`), so an instance is a single FIFO server: M/D/1 with fixed
lengths, M/G/1 with random output lengths. The per-request check against Lindley's recursion is
exact; the mean-waiting-time checks are statistical and average several seeds with the first 5 %
of the arrival span dropped as warm-up. Every seed list is fixed, so the tests are deterministic;
the tolerances are several standard errors wide (measured over 8 seeds while writing them).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers_sim import service_time_batch1
from scenario_factory import run, scenario

from sim.scenario.load import load_scenario_dict
from sim.simulate import simulate

STATIC_1 = {"name": "static", "max_batch_size": 1}
CONTINUOUS_1 = {"name": "continuous", "max_num_seqs": 1}
PROMPT = 100
WARMUP_FRACTION = 0.05


def _workload(n: int, rate: float, output: dict) -> dict:
    return {
        "num_requests": n,
        "arrival": {"process": "poisson", "rate": rate},
        "prompt_tokens": {"dist": "fixed", "value": PROMPT},
        "output_tokens": output,
    }


def _measured(req):
    """Requests past the warm-up (first 5 % of the arrival span); all finish at batch size 1."""
    arrival = req["arrival_s"].to_numpy()
    return req[arrival >= arrival.min() + WARMUP_FRACTION * (arrival.max() - arrival.min())]


def _lognormal_pmf(median: float, sigma: float, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact pmf of `clip(rint(exp(N(ln median, sigma))), 1, hi)` (sim.workload.lengths)."""
    k = np.arange(1, hi + 1, dtype=float)

    def cdf(x: float) -> float:  # P(X < x) for the lognormal X
        return 0.5 * (1.0 + math.erf((math.log(x) - math.log(median)) / (sigma * math.sqrt(2))))

    upper = np.array([cdf(v + 0.5) for v in k])
    upper[-1] = 1.0  # everything at or above hi - 0.5 is clipped to hi
    lower = np.concatenate([[0.0], upper[:-1]])  # everything below 1.5 rounds or clips to 1
    return k, upper - lower


# --- exact: Lindley's recursion ----------------------------------------------------------------


@pytest.mark.parametrize("policy", [STATIC_1, CONTINUOUS_1], ids=["static", "continuous"])
def test_batch1_waits_follow_lindley_recursion_exactly(policy):
    """W_{n+1} = max(0, W_n + S_n - (A_{n+1} - A_n)) for every request, not just on average."""
    out = {"dist": "uniform", "low": 1, "high": 40}
    res = run(scenario(policy=policy, workload=_workload(3000, 3.0, out), seed=3))
    req = res.requests
    arrival = req["arrival_s"].to_numpy()
    service = service_time_batch1(req["num_prompt_tokens"], req["max_output_tokens"])
    wait = np.zeros(len(req))
    for i in range(1, len(req)):
        wait[i] = max(0.0, wait[i - 1] + service[i - 1] - (arrival[i] - arrival[i - 1]))
    np.testing.assert_allclose(req["queue_s"], wait, rtol=0, atol=1e-9)
    np.testing.assert_allclose(req["e2e_s"], wait + service, rtol=1e-12, atol=1e-9)


def test_continuous_with_one_seat_is_static_batch1():
    workload = _workload(3000, 8.0, {"dist": "uniform", "low": 1, "high": 30})
    a = run(scenario(policy=STATIC_1, workload=workload)).requests
    b = run(scenario(policy=CONTINUOUS_1, workload=workload)).requests
    for col in ("queue_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(a[col], b[col], rtol=1e-12, atol=1e-12)


# --- statistical: M/D/1 and M/G/1 mean waiting time ----------------------------------------------


def test_md1_mean_queueing_delay():
    """M/D/1: W_q = rho * S / (2 (1 - rho)).

    Per seed (20k requests, rho 0.6) the relative error of the mean wait has a standard deviation
    of about 2 %; the mean over 5 seeds about 0.9 %, so 3 % is well over three standard errors.
    """
    output = 20
    rho = 0.6
    s = float(service_time_batch1(PROMPT, output))
    rate = rho / s
    expected = rho * s / (2 * (1 - rho))
    means = []
    for seed in range(5):
        workload = _workload(20_000, rate, {"dist": "fixed", "value": output})
        req = run(scenario(policy=STATIC_1, workload=workload, seed=seed)).requests
        np.testing.assert_allclose(req["e2e_s"] - req["queue_s"], s, rtol=1e-9)
        means.append(_measured(req)["queue_s"].mean())
    assert np.mean(means) == pytest.approx(expected, rel=0.03)


def test_mg1_pollaczek_khinchine():
    """M/G/1: W_q = lambda E[S^2] / (2 (1 - rho)) with lognormal output lengths.

    The workload has no exponential or geometric length distribution, so the service time is
    made variable with a lognormal output length (median 20, sigma 0.8, clipped to 1..300:
    coefficient of variation of S about 0.93, between M/D/1's 0 and M/M/1's 1). E[S] and E[S^2]
    are exact: the service-time formula applied to the exact pmf of the rounded, clipped
    lognormal. Per seed (20k requests, rho 0.5) the relative error has a standard deviation of
    about 2.5 % (heavier-tailed service than M/D/1); over 6 seeds about 1 %, so the tolerance is
    4 %, over four standard errors.
    """
    median, sigma, hi = 20.0, 0.8, 300
    k, pmf = _lognormal_pmf(median, sigma, hi)
    s = service_time_batch1(PROMPT, k)
    mean_s, mean_s2 = float(pmf @ s), float(pmf @ (s * s))
    rho = 0.5
    rate = rho / mean_s
    expected = rate * mean_s2 / (2 * (1 - rho))
    out = {"dist": "lognormal", "median": median, "sigma": sigma, "max": hi}
    means = []
    for seed in range(6):
        req = run(scenario(policy=STATIC_1, workload=_workload(20_000, rate, out), seed=seed))
        means.append(_measured(req.requests)["queue_s"].mean())
    assert np.mean(means) == pytest.approx(expected, rel=0.04)


# --- Little's law, saturation, and continuous vs static ------------------------------------------


def test_littles_law_on_continuous_batching():
    """Time-average number in system = throughput * mean E2E over a measured window.

    L is the integral of N(t) over [t0, t1] (each request's [arrival, finish] clipped to the
    window) divided by its length; throughput counts finishes inside the window; W is the mean
    E2E of those requests. Only edge effects (requests straddling t0 or t1, about one E2E out of
    a window of hundreds of seconds) separate the two sides, hence 2 %.
    """
    workload = {
        "num_requests": 6000,
        "arrival": {"process": "poisson", "rate": 20.0},
        "prompt_tokens": {"dist": "uniform", "low": 20, "high": 400},
        "output_tokens": {"dist": "uniform", "low": 1, "high": 120},
    }
    res = run(scenario(policy={"name": "continuous", "max_num_seqs": 16}, workload=workload))
    req = res.requests
    assert not req["rejected"].any()
    arrival, finish = req["arrival_s"].to_numpy(), req["finish_s"].to_numpy()
    t0 = arrival.min() + 0.1 * (arrival.max() - arrival.min())
    t1 = arrival.max()
    span = t1 - t0
    time_in_window = np.clip(np.minimum(finish, t1) - np.maximum(arrival, t0), 0.0, None)
    mean_in_system = time_in_window.sum() / span
    done = (finish >= t0) & (finish <= t1)
    throughput = done.sum() / span
    mean_e2e = (finish - arrival)[done].mean()
    assert mean_in_system > 2.0  # a real queue, not an idle server
    assert mean_in_system == pytest.approx(throughput * mean_e2e, rel=0.02)


def test_saturated_static_batch1_throughput_is_one_over_service_time():
    output = 30
    s = float(service_time_batch1(PROMPT, output))
    workload = _workload(2000, 1000.0 / s, {"dist": "fixed", "value": output})
    res = run(scenario(policy=STATIC_1, workload=workload))
    assert res.summary()["requests_per_s"] == pytest.approx(1.0 / s, rel=0.01)
    # and the server never idles once the backlog has built up
    steps = res.steps
    gaps = steps["start_s"].to_numpy()[1:] - steps["end_s"].to_numpy()[:-1]
    assert gaps[steps["start_s"].to_numpy()[1:] > 1.0].max() < 1e-9


def test_continuous_beats_static_on_median_e2e_for_mixed_lengths():
    """Short requests stuck behind long ones in a static batch wait for the longest member."""
    raw = scenario(
        policy={"name": "static", "max_batch_size": 8},
        workload={
            "num_requests": 1500,
            "arrival": {"process": "poisson", "rate": 2.0},
            "mix": [
                {
                    "name": "short",
                    "weight": 3.0,
                    "prompt_tokens": {"dist": "fixed", "value": 100},
                    "output_tokens": {"dist": "fixed", "value": 8},
                },
                {
                    "name": "long",
                    "weight": 1.0,
                    "prompt_tokens": {"dist": "fixed", "value": 100},
                    "output_tokens": {"dist": "fixed", "value": 256},
                },
            ],
        },
        variants={
            "static": None,
            "continuous": {"policy": {"name": "continuous", "max_num_seqs": 8}},
        },
        metrics={"warmup_s": 60.0},
    )
    summary = simulate(load_scenario_dict(raw)).summary()
    static, continuous = summary.loc["static"], summary.loc["continuous"]
    # moderate load: both keep up (no runaway backlog) ...
    assert static["num_finished"] == continuous["num_finished"] == 1500
    # ... yet continuous batching more than halves the median latency
    assert continuous["e2e_p50_s"] < 0.5 * static["e2e_p50_s"]
    assert continuous["e2e_mean_s"] < static["e2e_mean_s"]
