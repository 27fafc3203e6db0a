"""The HTTP side of `batchsim serve`: aiohttp routes over one `LiveEngine`.

Routes: `POST /v1/completions` and `/v1/chat/completions` (server-sent events in OpenAI's chunk
format ending with `data: [DONE]`, or one JSON document), `GET /v1/models`, `/health`,
`/version` and `/metrics` (`sim.serve.metrics`), `POST /tokenize` and `/detokenize`
(`sim.serve.tokenize`). With `per_instance`, each instance of a fixed fleet has a port
of its own (`port + i`), its own `/metrics`, and takes every request sent to it: an external
router decides.

The driver (`Driver`) runs the engine on the event loop: one timer, set for `LiveEngine.next_s`
on the wall clock, advances the simulation; an arrival advances it at once. A request's handler
waits on its own event, set when its tokens move; it writes them as they come. A handler whose
client went away is cancelled (aiohttp's handler cancellation), which aborts its request.

What each answer means: 400 a malformed or unserviceable request (one line naming the field);
404 an unknown model or route; 413 a body over `MAX_BODY_BYTES`; 429 a request the scenario's
admission control sheds (`cluster.admission`); 503 while stopping; what HTTP itself refuses
(framing, headers, encodings) as `sim.serve.http` says. Every answer is OpenAI's error document.

The stop (SIGINT or SIGTERM, `request_stop`): the server takes no more requests, lets those in
flight finish for up to `drain_s` wall seconds (a second signal ends the wait), then cuts the
rest: each is aborted in the engine and its stream ends at once with an error event and
`data: [DONE]` (a whole answer: what it had, `finish_reason` "abort"). Connections are closed
within `CLOSE_S` after, and `serve` returns; the caller closes the engine, which records the
cut requests as aborted, and writes the results (`sim.cli.serve`). A fault of the simulated
engine (`fail`) stops the server the same way, at once.
"""

from __future__ import annotations

import asyncio
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
from sim.serve.http import MAX_BODY_BYTES, json_errors, listen, read_body, report
from sim.serve.live import Live, LiveEngine
from sim.serve.metrics import ServeMetrics
from sim.serve.protocol import (
    COMPLETION_DEFAULT_TOKENS,
    Answer,
    BadRequest,
    Call,
    check_min_tokens,
    error_body,
    parse,
    request_id,
)
from sim.serve.tokenize import detokenize, prompt_of, tokenize, version
from sim.serve.tokens import Tokens
from sim.topology.gateway import SHED

# The event loop's timers fire up to a millisecond late (epoll waits in whole milliseconds), so
# the driver's timer is set this much early and the loop polls (serving I/O) up to the instant.
EARLY_S = 0.0015
MAX_LAGS = 1 << 20  # token send delays kept for the benchmark (the latest)
# a stream whose socket holds more unsent bytes than this is written through aiohttp, which
# waits for the client to read (`Push`)
PUSH_BUFFER_BYTES = 1 << 16
ENDED = (FINISHED, REJECTED)
CLOSE_S = 0.5  # wall seconds cut requests get to write their ends before connections close
STOPPING = "the server is stopping"


@dataclass
class Lags:
    """How late each token left against its simulated time, in wall seconds."""

    values: list[float] = field(default_factory=list)

    def add(self, lag: float) -> None:
        if len(self.values) < MAX_LAGS:
            self.values.append(lag)


class Driver:
    """Runs the engine on the event loop (see the module docstring)."""

    def __init__(self, engine: LiveEngine, fail: Callable[[BaseException], object]) -> None:
        self.engine = engine
        self.fail = fail  # the engine raised: the server stops
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
        try:
            self.engine.advance()
        except Exception as exc:  # a fault of the simulation: no timer again, the server stops
            self.fail(exc)
            return
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
        self.role = answer.opens  # the first event names a chat's role, or echoes the prompt
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
            lambda: engine.state(instance), max_model_len=server.max_model_len,
            frontend_s=engine.frontend_s, cache_config=engine.cache_config(instance),
        )  # fmt: skip
        engine.watch(self.metrics, instance)  # the steps and gaps of what it serves

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES,
                              middlewares=[self.metrics.http.middleware, json_errors])
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.scrape)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/detokenize", self.detokenize)
        app.router.add_get("/version", self.version)
        return app

    async def tokenize(self, request: web.Request) -> web.Response:
        s = self.server
        return web.json_response(tokenize(await read_body(request), s.model, s.tokens,
                                          s.max_model_len))  # fmt: skip

    async def detokenize(self, request: web.Request) -> web.Response:
        s = self.server
        return web.json_response(detokenize(await read_body(request), s.model, s.tokens))

    async def version(self, request: web.Request) -> web.Response:
        return version()

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
        self.server.advance()
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
            raise BadRequest(STOPPING, status=503, kind="ServiceUnavailable")
        call = parse(await read_body(request), chat=chat, model=server.model)
        source = call.request_id or request_id(request.headers.get("X-Request-Id"),
                                               "X-Request-Id")  # fmt: skip
        if server.stopping:  # while its body was read
            raise BadRequest(STOPPING, status=503, kind="ServiceUnavailable")
        ids, echo = prompt_of(call, server.tokens)
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
        check_min_tokens(call.min_tokens, max_tokens)  # the default in force, if none given
        wake = asyncio.Event()
        try:
            live = server.engine.submit(
                num_prompt, max_tokens, wake.set, content=ids if len(ids) else None,
                instance=self.instance, source_id=source, arrived_s=arrived_s,
                meter=self.metrics, session=call.session,
            )  # fmt: skip
        except Exception as exc:
            raise server.fail(exc) from None
        server.driver.schedule()
        server.inflight[live] = wake
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        answer = Answer(call, rid, num_prompt, echo)
        try:
            return await self._answer(request, call, live, answer, wake)
        except BaseException:  # its client went away, or it failed: it leaves the engine
            live.notify = _nothing  # nothing more on its socket
            if not server.failed:
                server.engine.abort(live)
                server.driver.schedule()
            raise
        finally:
            server.inflight.pop(live, None)

    async def _answer(self, request: web.Request, call: Call, live: Live, answer: Answer,
                      wake: asyncio.Event) -> web.StreamResponse:  # fmt: skip
        server = self.server
        await wake.wait()  # placed on an instance, refused, or cut by the stop
        refused = live.rejected
        if refused and live.num_tokens == 0:
            raise refusal(refused)
        if server.cutting and live.num_tokens == 0:
            raise BadRequest(STOPPING, status=503, kind="ServiceUnavailable")
        if not call.stream:
            while not live.ended and not server.cutting:
                wake.clear()
                await wake.wait()
            n = live.num_tokens
            finish = "abort" if live.rejected or not live.ended else "length"
            answer.cached_tokens = live.num_cached_tokens
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
            if (live.ended and new == 0) or server.cutting:
                break
            wake.clear()
            await wake.wait()
        live.notify = _nothing  # the driver writes no more: the handler writes the end
        if live.rejected and live.num_tokens == 0:  # refused after its headers went out
            exc = refusal(live.rejected)
            doc = error_body(exc.message, exc.kind, exc.status, exc.param)
            await response.write(b"data: " + json.dumps(doc).encode() + b"\n\n")
        elif live.rejected or not live.ended:  # aborted while streaming, or cut by the stop
            await response.write(answer.chunk("", "abort"))
            doc = error_body(f"{STOPPING}: the request was aborted", "ServiceUnavailable", 503)
            await response.write(b"data: " + json.dumps(doc).encode() + b"\n\n")
        if call.include_usage:
            answer.cached_tokens = live.num_cached_tokens
            await response.write(answer.usage_chunk(live.num_tokens))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _nothing() -> None:
    pass


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
        self.cutting = False  # the requests still in flight are being cut (the stop)
        self.failed: BaseException | None = None  # the engine's fault, if it raised
        self.on_stop: Callable[[], None] | None = None  # called at the first stop
        self.stop_signal: int | None = None  # the signal that began the stop, if one did
        self.inflight: dict[Live, asyncio.Event] = {}  # each request's handler's wake-up
        self.driver: Driver
        self._stop = asyncio.Event()

    def request_stop(self, sig: int | None = None) -> None:
        if self.stopping:  # a second signal: no more waiting
            self.drain_s = 0.0
        else:
            self.stop_signal = sig
            if self.on_stop is not None:
                self.on_stop()
        self.stopping = True
        self._stop.set()

    def fail(self, exc: BaseException) -> BadRequest:
        """The simulated engine raised `exc`: it cannot go on, so the server stops at once
        (said in one line); what the request that met it is answered."""
        if self.failed is None:
            self.failed = exc
            report(exc, "the simulated engine failed; stopping")
        self.drain_s = 0.0
        self.request_stop()
        return BadRequest("the simulated engine failed", status=500, kind="InternalServerError")

    def advance(self) -> None:
        """The engine to now (a scrape): a fault stops the server."""
        if self.failed is None:
            try:
                self.engine.advance()
            except Exception as exc:
                raise self.fail(exc) from None

    def _cut(self) -> None:
        """Abort every request still in flight and wake its handler, which ends its answer."""
        self.cutting = True
        for live, wake in list(self.inflight.items()):
            if self.failed is None:
                self.engine.abort(live)
            wake.set()

    async def serve(self, host: str, port: int, per_instance: bool,
                    ready: Callable[[list[int]], None] | None = None) -> None:  # fmt: skip
        """Serve until `request_stop` (SIGINT, SIGTERM), then drain and cut what is left
        (see the module doc)."""
        self.driver = Driver(self.engine, self.fail)
        targets: list[int | None] = (
            list(range(self.engine.num_instances())) if per_instance else [None]
        )
        loop = asyncio.get_running_loop()
        signals = (signal.SIGINT, signal.SIGTERM)
        before = {sig: signal.getsignal(sig) for sig in signals}
        installed: list[signal.Signals] = []
        for sig in signals:  # before listening: a stop always finds them
            try:
                loop.add_signal_handler(sig, self.request_stop, int(sig))
                installed.append(sig)
            except (NotImplementedError, RuntimeError):  # not the main thread
                pass
        runners: list[web.AppRunner] = []
        listeners: list[asyncio.Server] = []
        try:
            ports = []
            for k, instance in enumerate(targets):
                runner = web.AppRunner(Endpoint(self, instance).app(), handler_cancellation=True,
                                       access_log=None, shutdown_timeout=CLOSE_S)  # fmt: skip
                await runner.setup()
                runners.append(runner)
                listener, bound = await listen(runner, host, port + k if port else 0)
                listeners.append(listener)
                ports.append(bound)
            if ready is not None:
                ready(ports)
            await self._stop.wait()
            deadline = time.monotonic() + self.drain_s
            while self.inflight and time.monotonic() < deadline and self.drain_s > 0:
                await asyncio.sleep(0.01)
        finally:
            self.stopping = True
            self._cut()
            deadline = time.monotonic() + CLOSE_S
            while self.inflight and time.monotonic() < deadline:
                await asyncio.sleep(0.005)  # the cut handlers write their ends
            self.driver.stop()
            for listener in listeners:
                listener.close()
            for runner in runners:
                await runner.cleanup()  # closes every connection (`CLOSE_S` at most)
            _restore(loop, installed, before)


def _restore(loop: asyncio.AbstractEventLoop, installed: list[signal.Signals],
             before: dict[signal.Signals, Any]) -> None:  # fmt: skip
    """The command's own signal handlers again, with the signals held meanwhile: removing the
    loop's handler alone would leave the default one (killing the process) for an instant."""
    if not installed:
        return
    held = set(installed)
    signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        for sig in installed:
            loop.remove_signal_handler(sig)
            signal.signal(sig, before[sig])
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)


