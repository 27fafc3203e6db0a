"""Generated bad HTTP requests for `batchsim serve` (tests/serve/test_http_fuzz.py): broken
framing, headers, content encodings, bodies, JSON depth, numbers and request ids. Each case is
the raw bytes a client sends and the statuses a sensible server may answer (always a 4xx, as
OpenAI's error document)."""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass

from raw_http import request

COMPLETIONS = "/v1/completions"
BODY = json.dumps({"prompt": "hello", "max_tokens": 2}).encode()
ANY = "*"
HEAD = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


@dataclass(frozen=True)
class HttpCase:
    id: str
    data: bytes
    statuses: frozenset[int]  # what the answer may be
    param: str | None = None  # the field the error names (None: none; `ANY`: not checked)
    chunks: int = 1  # writes the bytes are sent in


def _case(id: str, data: bytes, *statuses: int, param: str | None = None,
          chunks: int = 1) -> HttpCase:
    return HttpCase(id, data, frozenset(statuses), param, chunks)


def framing_cases() -> list[HttpCase]:
    """Content-Length and Transfer-Encoding that do not frame a body."""
    out = []
    lengths = ["-1", "-5", "abc", "5x", "+5", "0x10", "1e3", " ", "", "99999999999999999999999",
               str(1 << 64), "1 2", "5,5", "\t5"]
    for k, value in enumerate(lengths):
        out.append(_case(f"length-bad-{k}", HEAD + f"Content-Length: {value}\r\n\r\n".encode()
                         + BODY, 400))
    for k, value in enumerate([10**12, (8 << 20) + 1, 1 << 40]):
        out.append(_case(f"length-huge-{k}", HEAD + f"Content-Length: {value}\r\n\r\n".encode()
                         + BODY, 413))
    n = len(BODY)
    for k, (a, b) in enumerate([(n, n + 3), (n, n), (0, n)]):
        out.append(_case(f"length-twice-{k}", HEAD + f"Content-Length: {a}\r\nContent-Length: "
                         f"{b}\r\n\r\n".encode() + BODY, 400))
    both = [f"Transfer-Encoding: chunked\r\nContent-Length: {n}",
            f"Content-Length: {n}\r\nTransfer-Encoding: chunked"]
    for k, headers in enumerate(both):
        body = b"%x\r\n%b\r\n0\r\n\r\n" % (n, BODY)
        out.append(_case(f"te-and-length-{k}", HEAD + headers.encode() + b"\r\n\r\n" + body, 400))
    sizes = [b"zz", b"-1", b"ffffffffffffffffffffffff", b"1g", b"0x5", b" ", b"5;" + b"x" * 9000,
             b"%x" % (n - 3), b"%x;ext=1" % (n - 1)]
    for k, size in enumerate(sizes):
        data = (HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + size + b"\r\n" + BODY
                + b"\r\n0\r\n\r\n")
        out.append(_case(f"chunk-size-{k}", data, 400, 413))
    for k, te in enumerate(["gzip", "chunked, gzip", "identity", "foo", "chunked, chunked"]):
        out.append(_case(f"te-unknown-{k}", HEAD + f"Transfer-Encoding: {te}\r\n\r\n".encode()
                         + BODY, 400))
    out.append(_case("chunk-no-crlf", HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
                     + b"%x\r\n%bXX0\r\n\r\n" % (n, BODY), 400))
    out.append(_case("chunk-trailers-many", HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
                     + b"%x\r\n%b\r\n0\r\n" % (n, BODY)
                     + b"".join(b"T%d: v\r\n" % i for i in range(300)) + b"\r\n", 400, 431))
    out.append(_case("short-body-then-more", HEAD + b"Content-Length: 3\r\n\r\n" + BODY, 400))
    return out


def header_cases() -> list[HttpCase]:
    """Request lines and headers a parser must refuse."""
    out = [
        _case("header-20kb", request(COMPLETIONS, BODY, headers=[("X-Big", "a" * 20_000)]), 431),
        _case("header-name-20kb", request(COMPLETIONS, BODY, headers=[("X" * 20_000, "a")]), 431),
        _case("headers-too-many", request(COMPLETIONS, BODY, headers=[(f"X-H{i}", "v")
              for i in range(400)]), 431),
        _case("url-too-long", request("/v1/completions?" + "a" * 20_000, BODY), 414),
        _case("request-line-garbage", b"GARBAGE\r\n\r\n", 400),
        _case("request-line-tls", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\0" * 40,
              400),
        _case("http-version-9", b"POST /v1/completions HTTP/9.9\r\nHost: x\r\n\r\n", 400),
        _case("method-bad-bytes", b"PO\x01ST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        _case("no-colon", HEAD + b"NoColonHere\r\nContent-Length: 2\r\n\r\n{}", 400),
        _case("space-before-colon", HEAD + b"Content-Length : 2\r\n\r\n{}", 400),
        _case("obs-fold", HEAD + b"X-A: 1\r\n folded\r\nContent-Length: 2\r\n\r\n{}", 400),
        _case("expect-unknown", request(COMPLETIONS, BODY, headers=[("Expect", "teapot")]),
              400, 417),
        _case("get-completions", request(COMPLETIONS, method="GET"), 405),
        _case("unknown-path", request("/v1/nothing", BODY), 404),
        _case("post-health", request("/health", BODY), 405),
    ]
    for k, byte in enumerate([0, 1, 8, 11, 12, 14, 27, 127]):
        value = b"a%cb" % byte
        out.append(_case(f"control-byte-value-{k}", HEAD + b"X-Ctl: " + value
                         + b"\r\nContent-Length: %d\r\n\r\n%b" % (len(BODY), BODY), 400))
        out.append(_case(f"control-byte-name-{k}", HEAD + b"X-C%ctl: v" % byte
                         + b"\r\nContent-Length: %d\r\n\r\n%b" % (len(BODY), BODY), 400))
    out.append(_case("bare-cr", HEAD + b"X-A: a\rb\r\nContent-Length: 2\r\n\r\n{}", 400))
    return out


def encoding_cases(path: str = COMPLETIONS) -> list[HttpCase]:
    """Content encodings of a POST to `path`: one that lies, ones the server does not take,
    and bombs."""
    where = "" if path == COMPLETIONS else path.strip("/").replace("/", "-") + "-"
    bomb = gzip.compress(b" " * (9 << 20))  # 9 MiB of blanks in 9 KiB
    deflate_bomb = zlib.compress(b"[" + b" " * (9 << 20) + b"]")
    out = [
        _case(f"{where}gzip-not-gzip", request(path, BODY, headers=[("Content-Encoding", "gzip")]),
              400),
        _case(f"{where}gzip-truncated", request(path, gzip.compress(BODY)[:20],
              headers=[("Content-Encoding", "gzip")]), 400),
        _case(f"{where}deflate-not-deflate", request(path, BODY,
              headers=[("Content-Encoding", "deflate")]), 400),
        _case(f"{where}gzip-bomb", request(path, bomb, headers=[("Content-Encoding", "gzip")]),
              413),
        _case(f"{where}deflate-bomb", request(path, deflate_bomb,
              headers=[("Content-Encoding", "deflate")]), 413),
        _case(f"{where}gzip-of-garbage", request(path, gzip.compress(b"\xff\xfe{{"),
              headers=[("Content-Encoding", "gzip")]), 400),
    ]
    for k, name in enumerate(["br", "zstd", "compress", "x-foo", "gzip, br", "identity, br"]):
        out.append(_case(f"{where}encoding-unsupported-{k}", request(path, BODY,
                         headers=[("Content-Encoding", name)]), 400, 415))
    return out


def _nested(depth: int, open_: str, close: str, inner: str = "1") -> bytes:
    return (open_ * depth + inner + close * depth).encode()


def body_cases() -> list[HttpCase]:
    """Bodies: not JSON, not UTF-8, nested past any parser's stack, numbers out of range."""
    out = [
        _case("body-empty", request(COMPLETIONS, b""), 400),
        _case("body-not-utf8", request(COMPLETIONS, b'{"prompt": "\xff\xfe", "max_tokens": 2}'),
              400),
        _case("body-utf16", request(COMPLETIONS, BODY.decode().encode("utf-16")), 400),
        _case("body-nul", request(COMPLETIONS, b"\x00" * 64), 400),
        _case("body-lone-surrogate-prompt", request(COMPLETIONS,
              b'{"prompt": "a\\udcff", "max_tokens": 2}'), 200, 400),
    ]
    for depth in (1_000, 100_000, 1_000_000):
        out.append(_case(f"depth-list-{depth}", request(COMPLETIONS, _nested(depth, "[", "]")),
                         400))
        out.append(_case(f"depth-object-{depth}", request(COMPLETIONS,
                         _nested(depth, '{"a":', "}")), 400))
        inner = b'{"prompt": ' + _nested(depth, "[", "]") + b', "max_tokens": 2}'
        out.append(_case(f"depth-prompt-{depth}", request(COMPLETIONS, inner), 400,
                         param=ANY))  # a parser's limit (no field) or the prompt's shape
    numbers = {
        "max_tokens": ["1e400", "-1e400", "NaN", "Infinity", "1" * 5000, "2.5", "1e3",
                       str(1 << 64), str(-(1 << 63) - 1), "true", "null0"],
        "min_tokens": ["NaN", str(1 << 64), "-1", "1e400"],
        "n": [str(1 << 64), "0", "NaN"],
        "prompt": [f"[{1 << 63}]", f"[{1 << 64}]", f"[1, {10**30}]", "[-1]", "[1.5]", "[NaN]",
                   "[1e400]", "[true]", "[[1, 2], [3]]", "[]", "{}", "null"],
    }
    for name, values in numbers.items():
        for k, value in enumerate(values):
            fields = {"prompt": '"hello"', "max_tokens": "2", name: value}
            text = "{" + ", ".join(f'"{f}": {v}' for f, v in fields.items()) + "}"
            json_error = value == "null0" or len(value) > 4300  # Python's digit limit
            out.append(_case(f"number-{name}-{k}", request(COMPLETIONS, text.encode()), 400,
                             param=None if json_error else name))
    chat = [(b'{"messages": ' + _nested(200_000, "[", "]") + b"}", None),
            (b'{"messages": [{"role": "user", "content": ' + _nested(50_000, "[", "]") + b"}]}",
             None),
            (b'{"messages": [{"role": 5, "content": "x"}]}', "messages[0].role"),
            (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1e999}',
             "max_tokens")]
    for k, (body, param) in enumerate(chat):
        out.append(_case(f"chat-body-{k}", request("/v1/chat/completions", body), 400,
                         param=param))
    return out


def id_cases() -> list[HttpCase]:
    """Request ids the results must hold: not UTF-8, not text."""
    out = []
    raw_ids = [b"\xff\xfe", b"\xed\xa0\x80", b"abc\xc3", b"\xc0\xaf", b"ok-\x80-id"]
    for k, raw in enumerate(raw_ids):
        out.append(_case(f"id-header-bytes-{k}", HEAD + b"X-Request-Id: " + raw
                         + b"\r\nContent-Length: %d\r\n\r\n%b" % (len(BODY), BODY), 400,
                         param="X-Request-Id"))
    out.append(_case("id-header-100kb", request(COMPLETIONS, BODY, headers=[("X-Request-Id",
                     "i" * 100_000)]), 431))
    for k, value in enumerate(['"\\udcff"', '"a\\ud800b"', "5", "[1]", "{}", "true"]):
        body = b'{"prompt": "x", "max_tokens": 2, "request_id": %b}' % value.encode()
        out.append(_case(f"id-body-{k}", request(COMPLETIONS, body), 400, param="request_id"))
        body = b'{"prompt": "x", "max_tokens": 2, "user": %b}' % value.encode()  # a session
        out.append(_case(f"user-body-{k}", request(COMPLETIONS, body), 400, param="user"))
    return out


def http_cases() -> list[HttpCase]:
    return [*framing_cases(), *header_cases(), *encoding_cases(),
            *encoding_cases("/v1/chat/completions"), *encoding_cases("/tokenize"),
            *body_cases(), *id_cases()]
