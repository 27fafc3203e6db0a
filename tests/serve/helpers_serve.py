"""Driving `LiveEngine` on a hand-set clock, `batchsim serve` on a free localhost port in a
thread of the test process, and plain HTTP calls to it."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from sim.scenario.load import load_scenario_dict
from sim.serve.live import LiveEngine
from sim.serve.server import Server
from sim.serve.tokens import Tokens


class Clock:
    """A wall clock the test sets."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def live_run(raw: dict[str, Any], arrivals: list[tuple[float, int, int]], speed: float = 1.0,
             aborts: dict[int, float] | None = None,
             sessions: list[str] | None = None) -> Any:  # fmt: skip
    """Serve `arrivals` (simulated time, prompt, output tokens) on a hand-set clock at
    `speed`, aborting request i at simulated time `aborts[i]`, stepping the clock to every
    instant the engine names; each request with its client's session label (`sessions[i]`,
    the body's `user`); the requests table."""
    clock = Clock()
    engine = LiveEngine(load_scenario_dict(raw).variants[0], speed=speed, clock=clock)
    aborts = dict(aborts or {})
    events = sorted([(t, 0, i) for i, (t, _, _) in enumerate(arrivals)]
                    + [(t, 1, i) for i, t in aborts.items()])  # fmt: skip
    lives: dict[int, Any] = {}
    for t, kind, i in events:
        while engine.next_s() < t:  # the clock moves to each instant the engine names
            clock.t = engine.wall_of(engine.next_s()) + 1e-9
            engine.advance()
        clock.t = engine.wall_of(t)
        if kind == 0:
            _, prompt, output = arrivals[i]
            label = sessions[i] if sessions is not None else ""
            lives[i] = engine.submit(prompt, output, lambda: None, session=label)
        else:
            engine.advance()
            engine.abort(lives[i])
    while engine.live:
        nxt = engine.next_s()
        assert nxt < np.inf
        clock.t = engine.wall_of(nxt) + 1e-9
        engine.advance()
    return engine.close("t").variants[engine.resolved.variant].requests


@contextmanager
def serving(raw: dict[str, Any], *, speed: float = 1.0, per_instance: bool = False,
            tokens: Tokens | None = None) -> Iterator[tuple[list[int], Server]]:  # fmt: skip
    """`batchsim serve` of `raw` on free ports in a thread: (ports, server); stopped after."""
    resolved = load_scenario_dict(raw).variants[0]
    ready: list[list[int]] = []
    started = threading.Event()
    box: dict[str, Any] = {}

    def main() -> None:
        async def go() -> None:
            engine = LiveEngine(resolved, speed=speed)
            server = Server(engine, tokens or Tokens(), "m", resolved.spec.model.max_model_len,
                            drain_s=5.0)  # fmt: skip
            box["server"], box["loop"] = server, asyncio.get_running_loop()

            def up(ports: list[int]) -> None:
                ready.append(ports)
                started.set()

            await server.serve("127.0.0.1", 0, per_instance, up)
            box["results"] = engine.close("t")

        asyncio.run(go())

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    assert started.wait(30)
    try:
        yield ready[0], box["server"]
    finally:
        # its loop may be closed already: the server stopped itself (a fault of the engine)
        with contextlib.suppress(RuntimeError):
            box["loop"].call_soon_threadsafe(box["server"].request_stop)
        thread.join(30)
        serving.results = box.get("results")  # type: ignore[attr-defined]


def post(
    port: int, path: str, body: bytes | dict, headers: dict | None = None
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request("POST", path, data, {"Content-Type": "application/json", **(headers or {})})
    response = conn.getresponse()
    out = response.status, response.read()
    conn.close()
    return out


def get(port: int, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path)
    response = conn.getresponse()
    out = response.status, response.read()
    conn.close()
    return out


def events(raw: bytes) -> list[str]:
    return [line[6:] for line in raw.decode().split("\n\n") if line.startswith("data: ")]
