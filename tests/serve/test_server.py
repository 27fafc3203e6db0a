"""`batchsim serve` over HTTP on localhost: OpenAI's stream format, usage, errors as OpenAI's
error document with the right 4xx, `/metrics` in Prometheus text with vLLM's names, bad
requests that leave the server serving, and a client that disconnects."""

from __future__ import annotations

import json
import socket
import time

import pytest
from helpers_serve import events, get, post, serving
from prometheus_client.parser import text_string_to_metric_families
from scenario_factory import scenario


@pytest.fixture(scope="module")
def server():  # type: ignore[no-untyped-def]
    with serving(scenario(profile=None), speed=20.0) as (ports, srv):
        yield ports[0], srv


def test_a_stream_has_one_chunk_per_token_usage_and_done(server) -> None:  # type: ignore[no-untyped-def]
    port, _ = server
    status, raw = post(port, "/v1/completions", {"model": "m", "prompt": "a" * 40,
                       "max_tokens": 5, "stream": True,
                       "stream_options": {"include_usage": True}})  # fmt: skip
    assert status == 200
    chunks = events(raw)
    assert chunks[-1] == "[DONE]"
    docs = [json.loads(c) for c in chunks[:-1]]
    texts = [d["choices"][0]["text"] for d in docs if d["choices"]]
    assert texts == [" tok"] * 5
    assert [d["choices"][0]["finish_reason"] for d in docs if d["choices"]][-1] == "length"
    assert docs[-1]["usage"] == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def test_chat_whole_answer(server) -> None:  # type: ignore[no-untyped-def]
    port, _ = server
    status, raw = post(port, "/v1/chat/completions", {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "hello there"}]}],
        "max_completion_tokens": 3})  # fmt: skip
    doc = json.loads(raw)
    assert status == 200 and doc["object"] == "chat.completion"
    assert doc["choices"][0]["message"]["content"] == " tok tok tok"
    assert doc["usage"]["completion_tokens"] == 3


BAD = [
    (b"{not json", 400, None),
    (b"[1, 2]", 400, None),
    ({"prompt": 5}, 400, "prompt"),
    ({"max_tokens": 3}, 400, "prompt"),
    ({"prompt": "x", "max_tokens": "3"}, 400, "max_tokens"),
    ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ({"prompt": "x", "max_tokens": 10**12}, 400, "max_tokens"),
    ({"prompt": "x", "max_tokens": 3, "n": 2}, 400, "n"),
    ({"prompt": "x", "stream": "yes"}, 400, "stream"),
    ({"prompt": "x", "stream_options": []}, 400, "stream_options"),
    ({"prompt": "x", "min_tokens": 9, "max_tokens": 3}, 400, "min_tokens"),
    ({"prompt": "x", "model": "other"}, 404, "model"),
    ({"prompt": ["a", "b"]}, 400, "prompt"),
    ({"prompt": "x" * 400_000}, 400, "prompt"),
    (b"x" * (9 << 20), 413, None),
]


@pytest.mark.parametrize(("body", "status", "param"), BAD, ids=range(len(BAD)))
def test_bad_requests_get_a_4xx_and_the_server_serves_on(server, body, status, param) -> None:  # type: ignore[no-untyped-def]
    port, _ = server
    got, raw = post(port, "/v1/completions", body)
    assert got == status
    error = json.loads(raw)["error"]
    assert error["code"] == status and "\n" not in error["message"]
    assert error["param"] == param
    assert get(port, "/health")[0] == 200


def test_a_slow_client_and_a_vanished_one_leave_it_serving(server) -> None:  # type: ignore[no-untyped-def]
    port, srv = server
    with socket.create_connection(("127.0.0.1", port)) as slow:  # headers, then nothing
        slow.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        assert post(port, "/v1/completions", {"prompt": "y", "max_tokens": 2})[0] == 200
    with socket.create_connection(("127.0.0.1", port)) as gone:  # a long stream, dropped
        body = json.dumps({"prompt": "z", "max_tokens": 4000, "stream": True}).encode()
        gone.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        gone.recv(100)  # streaming has begun
    # the abort takes milliseconds; 10 s is the margin a busy machine may need, and only a
    # handler that never ends uses it all
    deadline = time.monotonic() + 10
    while srv.inflight and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not srv.inflight  # its handler ended: the request was aborted in the engine
    assert post(port, "/v1/completions", {"prompt": "y", "max_tokens": 2})[0] == 200


def test_metrics_parse_with_vllm_names(server) -> None:  # type: ignore[no-untyped-def]
    port, _ = server
    post(port, "/v1/completions", {"prompt": "abcd" * 8, "max_tokens": 4})
    status, raw = get(port, "/metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(raw.decode())}
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:time_to_first_token_seconds",
                 "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds",
                 "vllm:prompt_tokens", "vllm:generation_tokens",
                 "vllm:prefix_cache_queries", "vllm:prefix_cache_hits"):  # fmt: skip
        assert name in families, name
    running = families["vllm:num_requests_running"].samples[0]
    assert running.labels == {"model_name": "m", "engine": "0"}
    assert running.value == 0.0  # idle at the scrape: nothing in flight
    generated = families["vllm:generation_tokens"].samples[0].value
    assert generated >= 4


def test_the_stop_writes_every_request() -> None:
    with serving(scenario(profile=None), speed=20.0) as (ports, _):
        for k in range(3):
            assert post(ports[0], "/v1/completions", {"prompt": "q" * (k + 1),
                        "max_tokens": 3}, {"X-Request-Id": f"r{k}"})[0] == 200  # fmt: skip
    (result,) = serving.results.variants.values()  # type: ignore[attr-defined]
    table = result.requests
    assert table["source_id"].tolist() == ["r0", "r1", "r2"]
    assert (table["num_output_tokens"] == 3).all() and not table["rejected"].any()


def test_gauges_are_the_engine_state_at_the_scrape(server) -> None:  # type: ignore[no-untyped-def]
    """With requests running and queued, each scrape's gauges are what the requests themselves
    say at that instant: running and waiting counts, and the KV blocks they hold."""
    import asyncio
    import threading

    from sim.core.request import RUNNING, WAITING
    from sim.serve.metrics import ServeMetrics

    port, srv = server
    body = {"prompt": "w" * 400, "max_tokens": 1500, "stream": True}
    threads = [threading.Thread(target=post, args=(port, "/v1/completions", body))
               for _ in range(6)]  # fmt: skip
    for t in threads:
        t.start()
    loop = srv.driver.loop
    metrics = ServeMetrics("m", "0", lambda: srv.engine.state())

    async def scrape() -> tuple[dict[str, float], tuple[int, int, int, int]]:
        srv.engine.advance()
        families = text_string_to_metric_families(metrics.render().decode())
        gauges = {f.name: f.samples[0].value for f in families if f.type == "gauge"}
        reqs = [live.req for live in srv.inflight]
        run = [r for r in reqs if r.state == RUNNING]
        counted = (len(run), sum(r.state == WAITING for r in reqs),
                   sum(r.kv_blocks for r in run), len(run) * (100 // 16 + 2))  # fmt: skip
        return gauges, counted

    seen_running = 0
    # scrape until the clients finish (seconds of paced streaming); 20 s only bounds a hang
    deadline = time.monotonic() + 20
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        gauges, (running, waiting, blocks, ahead) = asyncio.run_coroutine_threadsafe(
            scrape(), loop).result(10)  # fmt: skip
        assert gauges["vllm:num_requests_running"] == running
        assert gauges["vllm:num_requests_waiting"] == waiting
        # the pool holds the blocks of the computed tokens, and those of a step under way
        # (at most a prompt of 100 tokens in 16-token blocks, and one more, per request)
        used = gauges["vllm:kv_cache_usage_perc"] * srv.engine.cluster.instances[0].pool.num_total
        assert blocks - 1e-6 <= used <= blocks + ahead + 1e-6
        seen_running = max(seen_running, running)
        time.sleep(0.05)
    for t in threads:
        t.join(30)
    assert seen_running >= 2  # the scrapes saw a batch under way


def test_per_instance_ports_each_serve_their_own_instance() -> None:
    """`--per-instance`: a fleet of 3 on 3 ports; what each port takes runs on its instance,
    and each port's `/metrics` counts only its own."""
    from helpers_serve import serving as serve_fleet

    fleet = {"router": "least_outstanding_requests", "instances": [{"count": 3}]}
    with serve_fleet(scenario(profile=None, cluster=fleet), speed=20.0,
                     per_instance=True) as (ports, _):  # fmt: skip
        assert len(ports) == 3 and len(set(ports)) == 3
        sent = {0: 1, 1: 0, 2: 3}  # port index: requests
        for k, n in sent.items():
            for i in range(n):
                status, _ = post(ports[k], "/v1/completions", {"prompt": "p" * 40,
                                 "max_tokens": 4}, {"X-Request-Id": f"to-{k}-{i}"})  # fmt: skip
                assert status == 200
        for k, n in sent.items():
            families = text_string_to_metric_families(get(ports[k], "/metrics")[1].decode())
            tokens = {s.name: s for f in families for s in f.samples}
            assert tokens["vllm:generation_tokens_total"].value == 4 * n
            assert tokens["vllm:generation_tokens_total"].labels["engine"] == str(k)
    requests = serving.results.variants[next(iter(serving.results.variants))].requests
    placed = {row.source_id: row.instance for row in requests.itertuples()}
    assert placed == {f"to-{k}-{i}": k for k, n in sent.items() for i in range(n)}


def test_a_disconnect_aborts_its_request_and_metrics_count_as_the_results_do() -> None:
    """Streams of a static batch (whose run no arrival cuts) dropped by their clients leave the
    engine at the next step boundary, aborted, long before their output is done; `/metrics`
    counts them and the finished ones exactly as the results' rows do."""
    from scenario_factory import static

    raw = scenario(profile=None, policy=static(max_batch_size=8))
    with serving(raw, speed=20.0) as (ports, srv):
        port = ports[0]
        body = json.dumps({"prompt": "z" * 40, "max_tokens": 3000, "stream": True}).encode()
        for k in range(4):
            with socket.create_connection(("127.0.0.1", port)) as gone:
                gone.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: cut%d"
                             b"\r\nContent-Length: %d\r\n\r\n%b" % (k, len(body), body))
                gone.recv(100)  # streaming has begun
        # the abort takes a step; 10 s is the margin a busy machine may need
        deadline = time.monotonic() + 10
        while (srv.inflight or srv.engine.live) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not srv.engine.live  # every cut request has left the engine
        for k in range(3):
            assert post(port, "/v1/completions", {"prompt": "y", "max_tokens": 3},
                        {"X-Request-Id": f"whole{k}"})[0] == 200  # fmt: skip
        families = text_string_to_metric_families(get(port, "/metrics")[1].decode())
        counted = {s.labels["finished_reason"]: s.value for f in families for s in f.samples
                   if s.name == "vllm:request_success_total"}  # fmt: skip
    (result,) = serving.results.variants.values()  # type: ignore[attr-defined]
    table = result.requests
    aborted = table[table["reject_reason"] == "aborted by its client"]
    assert sorted(aborted["source_id"]) == [f"cut{k}" for k in range(4)]
    assert (aborted["num_output_tokens"] < 3000).all()
    assert counted["abort"] == len(aborted) == 4
    assert counted["length"] == (~table["rejected"]).sum() == 3


def test_a_fleet_scaled_to_zero_stopped_with_no_request_writes_an_empty_run(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Scale from zero (autoscaling with min 0) and no request at all: no instance ever
    launched, and the stop still writes a valid results folder with no rows."""
    from sim.io.output import write_results

    fleet = {"router": "least_outstanding_requests", "instances": [{"count": 0, "autoscale": {
        "mode": "target", "signal": "running", "target": 4, "min": 0, "max": 2}}]}  # fmt: skip
    with serving(scenario(profile=None, cluster=fleet), speed=20.0) as (ports, _):
        assert get(ports[0], "/health")[0] == 200
    results = serving.results  # type: ignore[attr-defined]
    (result,) = results.variants.values()
    assert len(result.requests) == 0 and len(result.steps) == 0
    folder = write_results(results, tmp_path / "t--serve", "name: t\n", plots=False)
    assert (folder / "summary.json").is_file()


def test_a_fault_of_the_engine_stops_the_server_instead_of_wedging_it() -> None:
    """The simulation raising (here: the policy's planning) cannot leave a server that is
    alive but answers nothing: the request that met it gets a 500, the server stops at once
    (said in one line), and the close still gives every request its row."""
    import asyncio

    with serving(scenario(profile=None), speed=20.0) as (ports, srv):
        core = srv.engine.cluster.instances[0].engine

        def fails() -> None:
            raise RuntimeError("a fault")

        async def break_it() -> None:
            core.plan = fails

        asyncio.run_coroutine_threadsafe(break_it(), srv.driver.loop).result(10)
        status, raw = post(ports[0], "/v1/completions", {"prompt": "y", "max_tokens": 2,
                                                         "stream": True})  # fmt: skip
        assert status in (200, 500)
        assert status == 500 or b"error" in raw  # an error document, or its stream's event
        deadline = time.monotonic() + 10
        while not srv._stop.is_set() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert srv.failed is not None and srv.stopping
    (result,) = serving.results.variants.values()  # type: ignore[attr-defined]
    assert len(result.requests) == (0 if status == 500 else 1)  # a 500: the engine never took it
