"""What a bad request gets from `batchsim serve`, at every layer: OpenAI's error document with
the status that names the fault, and nothing on standard error.

aiohttp refuses a request its HTTP parser cannot read (its framing: Content-Length,
Transfer-Encoding and chunk sizes; its request line and headers) before any route runs, with a
plain-text 400 and the parser's traceback logged. `Handler` (aiohttp's `RequestHandler`, which
each connection gets) answers those as the routes answer theirs: 431 for a header line over
`FIELD_BYTES` or more than `MAX_HEADERS` headers, 414 for a request line over `LINE_BYTES`, 415
for a content encoding it cannot decode, 400 for the rest, one line saying why. A body that
cannot be read (a content encoding that does not decode, a chunk that does not frame) is refused
the same way by `read_body`, which also refuses a body over the limit (413) before reading it.
A fault of the server's own is answered 500, and reported on standard error in one line.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import (
    BadHttpMessage,
    ContentEncodingError,
    HttpProcessingError,
    LineTooLong,
)
from aiohttp.web_protocol import RequestHandler, RequestPayloadError

from sim.serve.protocol import BadRequest, error_body

MAX_BODY_BYTES = 8 << 20
# aiohttp's limits, one apart so that a line too long tells which it was
LINE_BYTES = 8190  # the request line
FIELD_BYTES = 8191  # a header's name and value
MAX_HEADERS = 128
ENCODINGS = ("identity", "gzip", "x-gzip", "deflate")  # what aiohttp decodes with no extra
# what a client's bytes make aiohttp raise
CLIENT_FAULTS = (HttpProcessingError, RequestPayloadError, ConnectionError)


def error_response(exc: BadRequest) -> web.Response:
    response = web.json_response(error_body(exc.message, exc.kind, exc.status, exc.param),
                                 status=exc.status)  # fmt: skip
    return response


def _first_line(text: str) -> str:
    """The first line that says something of aiohttp's messages ("400, message:" does not)."""
    lines = [part.strip() for part in text.splitlines() if part.strip()]
    said = [line for line in lines if not re.fullmatch(r"\d{3}, message:", line)]
    return (said or [""])[0][:200]


def parse_error(exc: BaseException | None) -> BadRequest:
    """What a request aiohttp's parser refused is answered."""
    if isinstance(exc, LineTooLong):
        if exc.args[1:2] == (LINE_BYTES,):
            return BadRequest(f"the request line is over {LINE_BYTES} bytes", status=414)
        return BadRequest(f"a header is over {FIELD_BYTES} bytes", status=431)
    message = exc.message if isinstance(exc, HttpProcessingError) else str(exc or "")
    if isinstance(exc, BadHttpMessage) and "Too many headers" in message:
        return BadRequest(f"the request has over {MAX_HEADERS} headers", status=431)
    if isinstance(exc, ContentEncodingError):
        return BadRequest(f"{_first_line(message)}; the server decodes {', '.join(ENCODINGS)}",
                          status=415)  # fmt: skip
    reason = _first_line(message) or "the request is not valid HTTP/1.1"
    return BadRequest(f"malformed HTTP request: {reason}")


class Handler(RequestHandler):
    """aiohttp's connection handler, answering what its parser refuses as the routes answer
    (see the module docstring), and logging nothing for a client's fault."""

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:  # fmt: skip
        if request.writer.output_size > 0:  # the answer has begun: only closing is left
            raise ConnectionError("the response is under way")
        if status == 500:
            report(exc, "an unexpected fault answering a request")
            refused = BadRequest("internal server error", status=500, kind="InternalServerError")
        elif status == 504:
            refused = BadRequest("the request timed out", status=504, kind="Timeout")
        else:
            refused = parse_error(exc)
        response = error_response(refused)
        response.force_close()
        return response

    async def finish_response(
        self, request: Any, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        # aiohttp's own refusals that no middleware sees (an `Expect` other than 100-continue)
        if isinstance(resp, web.HTTPException) and resp.status >= 400:
            text = resp.text if isinstance(resp.text, str) else resp.reason
            resp = error_response(BadRequest(_first_line(text) or resp.reason,
                                             status=resp.status))  # fmt: skip
        return await super().finish_response(request, resp, start_time)

    def log_exception(self, *args: Any, **kw: Any) -> None:
        exc = kw.get("exc_info")
        if isinstance(exc, CLIENT_FAULTS):  # a client's fault: its answer said it
            return
        report(exc, str(args[0]) if args else "an unexpected fault")


def report(exc: Any, what: str) -> None:
    """One line on standard error for a fault of the server's own (no traceback)."""
    detail = ""
    if isinstance(exc, BaseException):
        detail = f": {type(exc).__name__}: {_first_line(str(exc))}"
    print(f"batchsim serve: {what}{detail}", file=sys.stderr, flush=True)


async def read_body(request: web.Request) -> bytes:
    """The body, decoded, or `BadRequest`: over `MAX_BODY_BYTES` (said, or once decoded) 413,
    an encoding the server does not decode 415, one that does not decode or a chunk that does
    not frame 400."""
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ENCODINGS:
        raise BadRequest(f"Content-Encoding {encoding!r:.40} is not served; it decodes "
                         f"{', '.join(ENCODINGS)}", status=415)  # fmt: skip
    length = request.content_length
    if length is not None and length > MAX_BODY_BYTES:
        raise _too_large()
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise _too_large() from None
    except (HttpProcessingError, RequestPayloadError, ValueError) as exc:
        raise BadRequest(f"the body cannot be read: {_first_line(str(exc))}") from None


def _too_large() -> BadRequest:
    return BadRequest(f"the body is over {MAX_BODY_BYTES} bytes", status=413)


Route = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def json_errors(request: web.Request, handler: Route) -> web.StreamResponse:
    """Every refusal as OpenAI's error document, whatever raised it; a fault of the server's
    own as a 500 (reported in one line)."""
    try:
        return await handler(request)
    except BadRequest as exc:
        return error_response(exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        reason = {404: f"no route {request.path!r:.80}",
                  405: f"{request.method:.20} is not allowed on {request.path!r:.80}"}  # fmt: skip
        return error_response(BadRequest(reason.get(exc.status, exc.reason), status=exc.status))
    except (asyncio.CancelledError, ConnectionError):
        raise
    except Exception as exc:
        report(exc, f"an unexpected fault answering {request.method} {request.path}")
        return error_response(BadRequest("internal server error", status=500,
                                         kind="InternalServerError"))  # fmt: skip


async def listen(runner: web.AppRunner, host: str, port: int) -> tuple[asyncio.Server, int]:
    """Serve `runner`'s application on host:port (0: any free port) through `Handler`; the
    listening server and its port."""
    loop = asyncio.get_running_loop()
    manager = runner.server
    assert manager is not None, "the runner is set up first"

    options: dict[str, Any] = {"access_log": None, "max_line_size": LINE_BYTES,
                               "max_field_size": FIELD_BYTES, "max_headers": MAX_HEADERS}

    def connection() -> Handler:
        return Handler(manager, loop=loop, **options)

    server = await loop.create_server(connection, host, port, reuse_address=True)
    return server, int(server.sockets[0].getsockname()[1])
