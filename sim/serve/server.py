"""The HTTP side of `batchsim serve`: aiohttp routes over one `LiveEngine`.

Routes: `POST /v1/completions` and `/v1/chat/completions` (server-sent events in OpenAI's chunk
format ending with `data: [DONE]`, or one JSON document), `GET /v1/models`, `/health` and
`/metrics` (`sim.serve.metrics`). With `per_instance`, each instance of a fixed fleet has a port
of its own (`port + i`), its own `/metrics`, and takes every request sent to it: an external
router decides.

The driver (`Driver`) runs the engine on the event loop: one timer, set for `LiveEngine.next_s`
on the wall clock, advances the simulation; an arrival advances it at once. A request's handler
waits on its own event, set when its tokens move; it writes them as they come. A handler whose
client went away is cancelled (aiohttp's handler cancellation), which aborts its request.

What each answer means: 400 a malformed or unserviceable request (one line naming the field);
404 an unknown model; 413 a body over `MAX_BODY_BYTES`; 429 a request the scenario's admission
control sheds (`cluster.admission`); 503 while stopping. On SIGINT or SIGTERM the server stops
taking requests, lets those in flight finish for up to `drain_s` wall seconds, aborts the rest,
and returns; the caller writes the results folder (`sim.cli.serve`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import HttpVersion11, web

from sim.core.request import ABORTED, FINISHED, REJECTED
from sim.serve.live import Live, LiveEngine
from sim.serve.metrics import ServeMetrics
from sim.serve.protocol import (
    COMPLETION_DEFAULT_TOKENS,
    Answer,
    BadRequest,
    Call,
    error_body,
    parse,
)
from sim.serve.tokens import Tokens
from sim.topology.gateway import SHED

MAX_BODY_BYTES = 8 << 20
# The event loop's timers fire up to a millisecond late (epoll waits in whole milliseconds), so
# the driver's timer is set this much early and the loop polls (serving I/O) up to the instant.
EARLY_S = 0.0015
MAX_LAGS = 1 << 20  # token send delays kept for the benchmark (the latest)
# a stream whose socket holds more unsent bytes than this is written through aiohttp, which
# waits for the client to read (`Push`)
PUSH_BUFFER_BYTES = 1 << 16
ENDED = (FINISHED, REJECTED)


@dataclass
class Lags:
    """How late each token left against its simulated time, in wall seconds."""

    values: list[float] = field(default_factory=list)

    def add(self, lag: float) -> None:
        if len(self.values) < MAX_LAGS:
            self.values.append(lag)


class Driver:
    """Runs the engine on the event loop (see the module docstring)."""

    def __init__(self, engine: LiveEngine) -> None:
        self.engine = engine
        self.loop = asyncio.get_running_loop()
        self._timer: asyncio.Handle | None = None
        self._due = math.inf
        self.lags = Lags()

    def tick(self) -> None:
        if self.loop.time() < self._due:  # woke early on purpose: poll up to the instant
            self._timer = self.loop.call_soon(self.tick)
            return
        self._timer = None
        self._due = math.inf
        self.engine.advance()
        self.schedule()

    def schedule(self) -> None:
        nxt = self.engine.next_s()
        if nxt == math.inf:
            return
        due = self.engine.wall_of(nxt)
        if due >= self._due:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._due = due
        self._timer = self.loop.call_at(due - EARLY_S, self.tick)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def refusal(reason: str) -> BadRequest:
    """What a request the engine refused is answered."""
    if reason == SHED:
        return BadRequest("the engine is overloaded: its queue is full", status=429,
                          kind="RateLimitError")  # fmt: skip
    if reason == ABORTED:
        return BadRequest("the request was aborted", status=503, kind="ServiceUnavailable")
    return BadRequest(f"the engine refused the request: {reason}", "prompt")


class Push:
    """Writes a stream's tokens from the driver, at the instant the simulation emits them.

    A step's end emits a token on every stream of its batch. Waking each stream's handler to
    write its own costs a task switch and aiohttp's write per stream (about 40 µs here), so the
    last of 256 streams left 10 ms late; the driver instead writes each stream's events straight
    to its socket (`transport.write`, with HTTP/1.1's chunked framing, as aiohttp frames them),
    a few µs each. The response's headers are out before the first token (the handler sends
    them when the request is placed), so the first token is written the same way. A client
    that reads slowly (more than `PUSH_BUFFER_BYTES` unsent) is handed back to its handler
    (`slow`), which writes through aiohttp and waits for it to drain; the handler also writes
    the end (usage, `[DONE]`).
    """

    __slots__ = ("answer", "chunked", "lags", "live", "piece", "req", "role", "slow", "start",
                 "steady", "transport", "wake", "wall_per_s")  # fmt: skip

    def __init__(self, live: Live, transport: asyncio.Transport, wake: asyncio.Event,
                 answer: Answer, piece: str, chunked: bool, lags: Lags,
                 engine: LiveEngine) -> None:  # fmt: skip
        self.live, self.req, self.transport, self.wake = live, live.req, transport, wake
        self.answer, self.piece, self.chunked, self.lags = answer, piece, chunked, lags
        self.start, self.wall_per_s = engine.wall_of(0.0), 1.0 / engine.speed
        self.role = answer.call.chat  # the first event of a chat stream names the role
        self.slow = False
        self.steady = self.frame(answer.chunk(piece))

    def frame(self, data: bytes) -> bytes:
        return b"%x\r\n%b\r\n" % (len(data), data) if self.chunked else data

    def take(self, new: int) -> bytes:
        """The events of the next `new` tokens (the last with its finish reason if the
        request has finished), counted as sent."""
        live, answer, piece = self.live, self.answer, self.piece
        live.sent += new
        last = live.ended and not live.rejected and live.sent == live.num_tokens
        out = []
        for k in range(new):
            finish = "length" if last and k == new - 1 else None
            out.append(answer.chunk(piece, finish, role=self.role))
            self.role = False
        return b"".join(out)

    def __call__(self) -> None:
        # read on the hot path (every stream at every step's end): the request's own fields
        live, req = self.live, self.req
        new = req.num_output_tokens - live.sent
        if new > 0 and not self.slow:
            transport = self.transport
            if transport.is_closing():
                pass  # gone: its handler is cancelled, which aborts the request
            elif transport.get_write_buffer_size() > PUSH_BUFFER_BYTES:
                self.slow = True
            else:
                ended = req.state in ENDED
                if new == 1 and not ended and not self.role:
                    live.sent += 1
                    transport.write(self.steady)
                else:
                    transport.write(self.frame(self.take(new)))
                self.lags.add(time.monotonic() - self.start - self.wall_per_s * (
                    req.first_token_s if req.num_output_tokens == 1 else req.last_token_s))
                if not ended:
                    return
        self.wake.set()  # its end, a slow client or a closed one: the handler takes over

class Endpoint:
    """The routes of one port: the whole engine, or one instance of it (`instance`)."""

    def __init__(self, server: Server, instance: int | None) -> None:
        self.server = server
        self.instance = instance
        engine = server.engine
        self.metrics = ServeMetrics(
            server.model, "0" if instance is None else str(instance),
            lambda: engine.state(instance),
        )  # fmt: skip

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[_json_errors])
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.scrape)
        return app

    async def models(self, request: web.Request) -> web.Response:
        doc = {"object": "list", "data": [{"id": self.server.model, "object": "model",
               "created": self.server.created, "owned_by": "batchsim",
               "max_model_len": self.server.max_model_len}]}  # fmt: skip
        return web.json_response(doc)

    async def health(self, request: web.Request) -> web.Response:
        if self.server.stopping:
            return web.Response(status=503)
        return web.Response(status=200)

    async def scrape(self, request: web.Request) -> web.Response:
        self.server.engine.advance()
        return web.Response(body=self.metrics.render(),
                            content_type="text/plain", charset="utf-8")  # fmt: skip

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    async def _serve(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        server = self.server
        arrived_s = server.engine.now_s()  # before the body is read, parsed and tokenized
        if server.stopping:
            raise BadRequest("the server is stopping", status=503, kind="ServiceUnavailable")
        call = parse(await request.read(), chat=chat, model=server.model)
        ids = server.tokens.encode(call.prompt) if call.prompt is not None else (
            server.tokens.ids(call.prompt_ids or []))  # fmt: skip
        num_prompt = max(1, len(ids))
        room = server.max_model_len - num_prompt
        if room < 1:
            raise BadRequest(f"this model's maximum context length is {server.max_model_len} "
                             f"tokens; the prompt has {num_prompt}", "prompt")  # fmt: skip
        max_tokens = call.max_tokens
        if max_tokens is None:
            max_tokens = room if chat else min(room, COMPLETION_DEFAULT_TOKENS)
        if max_tokens > room:
            raise BadRequest(f"max_tokens is {max_tokens}, but the prompt's {num_prompt} tokens "
                             f"leave {room} of the context of {server.max_model_len}",
                             "max_tokens")  # fmt: skip
        wake = asyncio.Event()
        source = request.headers.get("X-Request-Id", "")[:200]
        live = server.engine.submit(
            num_prompt, max_tokens, wake.set, content=ids if len(ids) else None,
            instance=self.instance, source_id=source, arrived_s=arrived_s,
        )  # fmt: skip
        server.driver.schedule()
        server.inflight.add(live)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        answer = Answer(call, rid, num_prompt)
        try:
            return await self._answer(request, call, live, answer, wake)
        except (asyncio.CancelledError, ConnectionResetError):
            server.engine.abort(live)
            server.driver.schedule()
            raise
        finally:
            server.inflight.discard(live)
            self._observe(live, num_prompt)

    async def _answer(self, request: web.Request, call: Call, live: Live, answer: Answer,
                      wake: asyncio.Event) -> web.StreamResponse:  # fmt: skip
        await wake.wait()  # placed on an instance, or refused
        refused = live.rejected
        if refused and live.num_tokens == 0:
            raise refusal(refused)
        if not call.stream:
            while not live.ended:
                wake.clear()
                await wake.wait()
            n = live.num_tokens
            finish = "abort" if live.rejected else "length"
            return web.json_response(answer.whole(self.server.tokens.filler(n), n, finish))
        # the headers go out now, as a real engine's do; every token after is the driver's
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})  # fmt: skip
        chunked = request.version >= HttpVersion11
        if chunked:
            response.enable_chunked_encoding()
        wake.clear()
        await response.prepare(request)
        transport = request.transport
        if transport is None:  # gone while the headers were written
            raise ConnectionResetError("the client closed the connection")
        push = Push(live, transport, wake, answer, self.server.tokens.piece, chunked,
                    self.server.driver.lags, self.server.engine)  # fmt: skip
        live.notify = push
        push()  # the tokens emitted while the headers were written, if any
        while True:
            new = live.num_tokens - live.sent
            if push.slow and new > 0:  # the client reads slowly: aiohttp's write waits for it
                await response.write(push.take(new))
                push.slow = transport.get_write_buffer_size() > PUSH_BUFFER_BYTES
                continue
            if live.ended and new == 0:
                break
            wake.clear()
            await wake.wait()
        if live.rejected and live.num_tokens == 0:  # refused after its headers went out
            exc = refusal(live.rejected)
            doc = error_body(exc.message, exc.kind, exc.status, exc.param)
            await response.write(b"data: " + json.dumps(doc).encode() + b"\n\n")
        elif live.rejected:  # aborted while streaming (the server is stopping)
            await response.write(answer.chunk("", "abort"))
        if call.include_usage:
            await response.write(answer.usage_chunk(live.num_tokens))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _observe(self, live: Live, num_prompt: int) -> None:
        """The request has left this endpoint: its counters and histograms."""
        req, m = live.req, self.metrics
        n = live.num_tokens
        m.prompt_tokens += num_prompt
        m.generation_tokens += n
        if live.rejected and n == 0 and live.rejected != ABORTED:
            return  # refused: never served
        m.finished["abort" if live.rejected else "length"] += 1
        m.prompt_hist.observe(num_prompt)
        m.generation_hist.observe(n)
        if n >= 1:
            m.ttft.observe(req.first_token_s - req.arrival_s)
        if n >= 2 and req.finish_s == req.finish_s:
            m.itl.observe((req.finish_s - req.first_token_s) / (n - 1), n - 1)
        if req.finish_s == req.finish_s:
            m.e2e.observe(req.finish_s - req.arrival_s)
        if req.first_scheduled_s == req.first_scheduled_s:
            m.queue.observe(req.first_scheduled_s - req.arrival_s)


@web.middleware
async def _json_errors(request: web.Request, handler: Callable[[web.Request], Any]) -> Any:
    """Every refusal as OpenAI's error document, whatever raised it."""
    try:
        return await handler(request)
    except BadRequest as exc:
        return web.json_response(error_body(exc.message, exc.kind, exc.status, exc.param),
                                 status=exc.status)  # fmt: skip
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        reason = exc.reason if exc.status != 413 else f"the body is over {MAX_BODY_BYTES} bytes"
        return web.json_response(error_body(reason, "invalid_request_error", exc.status),
                                 status=exc.status)  # fmt: skip


class Server:
    """The endpoints over one engine, their lifetime and the stop."""

    def __init__(self, engine: LiveEngine, tokens: Tokens, model: str, max_model_len: int,
                 *, drain_s: float = 30.0) -> None:  # fmt: skip
        self.engine = engine
        self.tokens = tokens
        self.model = model
        self.max_model_len = max_model_len
        self.drain_s = drain_s
        self.created = int(time.time())
        self.stopping = False
        self.inflight: set[Live] = set()
        self.driver: Driver
        self._stop = asyncio.Event()

    def request_stop(self) -> None:
        if self.stopping:  # a second signal: no more waiting
            self.drain_s = 0.0
        self.stopping = True
        self._stop.set()

    async def serve(self, host: str, port: int, per_instance: bool,
                    ready: Callable[[list[int]], None] | None = None) -> None:  # fmt: skip
        """Serve until `request_stop` (SIGINT, SIGTERM), then drain (see the module doc)."""
        self.driver = Driver(self.engine)
        targets: list[int | None] = (
            list(range(self.engine.num_instances())) if per_instance else [None]
        )
        runners, ports = [], []
        for k, instance in enumerate(targets):
            runner = web.AppRunner(Endpoint(self, instance).app(), handler_cancellation=True,
                                   access_log=None)  # fmt: skip
            await runner.setup()
            site = web.TCPSite(runner, host, port + k if port else 0)
            await site.start()
            runners.append(runner)
            server = getattr(site, "_server", None)
            sockets = getattr(server, "sockets", None) or []
            ports.append(sockets[0].getsockname()[1] if sockets else port + k)
        loop = asyncio.get_running_loop()
        before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        for sig in before:
            with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
                loop.add_signal_handler(sig, self.request_stop)
        if ready is not None:
            ready(ports)
        try:
            await self._stop.wait()
            deadline = time.monotonic() + self.drain_s
            while self.inflight and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
                if self.drain_s == 0.0:
                    break
        finally:
            self.driver.stop()
            for runner in runners:
                await runner.cleanup()
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    loop.remove_signal_handler(sig)
                    signal.signal(sig, before[sig])  # the command's own handlers again
                except (NotImplementedError, RuntimeError, ValueError):
                    pass


