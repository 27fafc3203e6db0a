"""Closed-loop benchmark clients: N clients, each sending its next request when the previous
response has ended (`vllm bench serve --max-concurrency N`, GuideLLM's concurrent mode, AIPerf).

A client is a closed-loop session whose turns are independent requests: it reuses `Sessions`
(`next_turn` links a client's requests in order, `think_s` holds the client's delay before
each later one), so the engine releases a client's next request `delay` after its previous one
finished, exactly as it does a session's next turn. Client i sends its first request at
`i * ramp_up_s / num_clients`.

The request count is known before the run: the workload's `num_requests` (or `num_clients x
requests_per_client`, whichever is smaller) is dealt to the clients in turn, so client i sends
`total // N` requests, one more for the first `total % N` clients, and never more than
`requests_per_client`. (A benchmark that hands a shared queue of requests to whichever client is
free differs only in the tail: here a client that drew short requests idles at the end.)

Request ids follow sessions: the clients' first requests (known arrivals, in client order),
then every later request, client by client and in sending order (arrival NaN until the run
knows it). Each column is drawn, in request id order, from its own child stream (prompt,
output, delay, predicted output, shared prefix), so changing one distribution leaves the
others' draws as they were. Prompts are unique tokens unless `shared_prefix` puts a system
prompt in front (each request draws its own, as synthetic requests do).
"""

from __future__ import annotations

import numpy as np

from sim.workload.arrays import RequestArrays, Sessions
from sim.workload.content import build_content, draw_prefixes
from sim.workload.lengths import TraceCache, sample_lengths
from sim.workload.sessions import sample_delays
from sim.workload.spec import WorkloadSpec


def client_schedule(num_clients: int, total: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(client, next request, is first) per request id for `total` requests dealt in turn to
    `num_clients` clients; next request is -1 after a client's last."""
    clients = min(num_clients, total)  # clients dealt nothing send nothing
    count = np.full(clients, total // clients, dtype=np.int64)
    count[: total % clients] += 1
    later = count - 1
    # client i's later requests are ids later_start[i] .. later_start[i] + later[i] - 1
    later_start = clients + np.cumsum(later) - later
    client = np.empty(total, dtype=np.int64)
    client[:clients] = np.arange(clients)
    client[clients:] = np.repeat(np.arange(clients), later)
    next_request = np.full(total, -1, dtype=np.int64)
    has_later = later > 0
    next_request[:clients][has_later] = later_start[has_later]
    # within a client's later requests, each is followed by the next id, except its last
    ids = np.arange(clients, total, dtype=np.int64)
    last = later_start + later - 1  # last later id per client (unused where later == 0)
    is_last = np.zeros(total, dtype=bool)
    is_last[last[has_later]] = True
    next_request[clients:] = np.where(is_last[clients:], -1, ids + 1)
    first = np.zeros(total, dtype=bool)
    first[:clients] = True
    return client, next_request, first


def generate_clients(
    spec: WorkloadSpec, rng: np.random.Generator, traces: TraceCache
) -> RequestArrays:
    assert spec.clients is not None
    c = spec.clients
    prompt_rng, output_rng, delay_rng, predict_rng, prefix_rng = rng.spawn(5)
    total = c.num_requests(spec.num_requests)
    client, next_request, first = client_schedule(c.num_clients, total)
    clients = int(first.sum())
    prompt = sample_lengths(c.prompt_tokens, total, prompt_rng, traces)
    output = sample_lengths(c.output_tokens, total, output_rng, traces)
    arrival = np.full(total, np.nan)
    arrival[:clients] = np.arange(clients) * (c.ramp_up_s / c.num_clients)
    think = np.full(total, np.nan)
    think[clients:] = sample_delays(c.delay, total - clients, delay_rng)
    content = None
    if spec.shared_prefix is not None:
        prefix, prefix_tokens = draw_prefixes(spec.shared_prefix, total, prefix_rng, traces)
        prompt = prompt + prefix_tokens
        content = build_content(prefix, prefix_tokens, prompt)
    return RequestArrays(
        arrival_s=arrival,
        prompt_tokens=prompt,
        output_tokens=output,
        class_index=np.zeros(total, dtype=np.int64),
        class_names=("client",),
        tier_names=(spec.tier,),
        predicted_output_tokens=_predict(output, spec.output_prediction_sigma, predict_rng),
        content=content,
        sessions=Sessions(session=client, next_turn=next_request, think_s=think),
    )


def _predict(output: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """True length times lognormal noise exp(N(0, sigma)), rounded, at least 1 (the rule of
    synthetic workloads, `generate._predict`, which imports this module)."""
    if sigma == 0.0:
        return output
    noisy = np.rint(output * np.exp(rng.normal(0.0, sigma, size=len(output))))
    return np.maximum(noisy, 1).astype(np.int64)
