"""The driver writes each stream's tokens to its socket (`sim.serve.server.Push`): the events are
the same as through aiohttp's writer (a client that reads slowly is written that way), chunked
for HTTP/1.1 and plain for HTTP/1.0, with the role on a chat stream's first event only."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
from helpers_serve import events, post, serving
from scenario_factory import scenario

import sim.serve.server as server_module


@pytest.fixture(scope="module")
def server():  # type: ignore[no-untyped-def]
    with serving(scenario(profile=None), speed=20.0) as (ports, srv):
        yield ports[0], srv


CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 6, "stream": True,
        "stream_options": {"include_usage": True}}  # fmt: skip


def choices(raw: bytes) -> list[Any]:
    """What a stream says, less its ids and times: each event's choices and usage."""
    chunks = events(raw)
    assert chunks[-1] == "[DONE]"
    return [(d["choices"], d.get("usage")) for d in map(json.loads, chunks[:-1])]


def test_a_chat_stream_names_the_role_first_and_finishes_last(server) -> None:  # type: ignore[no-untyped-def]
    port, _ = server
    status, raw = post(port, "/v1/chat/completions", CHAT)
    assert status == 200
    said = choices(raw)
    deltas = [c[0]["delta"] for c, _ in said if c]
    assert deltas[0] == {"role": "assistant", "content": " tok"}
    assert deltas[1:] == [{"content": " tok"}] * 5
    assert [c[0]["finish_reason"] for c, _ in said if c] == [None] * 5 + ["length"]
    assert said[-1] == ([], {"prompt_tokens": 2, "completion_tokens": 6, "total_tokens": 8})


def test_a_slow_reader_gets_the_same_stream_through_aiohttp(server, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    port, _ = server
    fast = choices(post(port, "/v1/chat/completions", CHAT)[1])
    monkeypatch.setattr(server_module, "PUSH_BUFFER_BYTES", -1)  # every socket counts as full
    status, raw = post(port, "/v1/chat/completions", CHAT)
    assert status == 200
    assert choices(raw) == fast
    body = {"prompt": "abc", "max_tokens": 40, "stream": True}
    assert len([c for c, _ in choices(post(port, "/v1/completions", body)[1]) if c]) == 40


def test_an_http_1_0_stream_is_not_chunked(server) -> None:  # type: ignore[no-untyped-def]
    port, _ = server
    body = json.dumps({"prompt": "abc", "max_tokens": 7, "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(b"POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
        raw = b""
        while chunk := conn.recv(65536):  # the body ends where the server closes
            raw += chunk
    head, _, payload = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") and b"chunked" not in head.lower()
    texts = [c[0]["text"] for c, _ in choices(payload) if c]
    assert texts == [" tok"] * 7
