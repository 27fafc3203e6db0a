"""A client that speaks raw HTTP on loopback (bytes as given, no client library to tidy them),
and `batchsim serve` as a real command with its standard error kept for the test to read."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CASE_S = 10.0  # a bound on one exchange: only a server that never answers reaches it


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def error(self) -> dict[str, Any]:
        """OpenAI's error document of this reply (asserts that it is one)."""
        assert self.headers.get("content-type", "").startswith("application/json"), self
        doc = json.loads(self.body)
        assert set(doc) == {"error"}, doc
        error = doc["error"]
        assert set(error) == {"message", "type", "param", "code"}, error
        assert isinstance(error["message"], str) and "\n" not in error["message"], error
        assert error["code"] == self.status, error
        return dict(error)


def exchange(port: int, data: bytes, *, timeout: float = CASE_S, chunks: int = 1) -> Reply:
    """Send `data` (in `chunks` writes), read one response."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        step = -(-len(data) // chunks) if data else 1
        try:
            for at in range(0, len(data), step):
                sock.sendall(data[at : at + step])
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered and closed before the rest was sent: the answer is still there
        response = http.client.HTTPResponse(sock, method="POST")
        response.begin()
        body = response.read()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, body)


def request(
    path: str,
    body: bytes = b"",
    *,
    method: str = "POST",
    headers: list[tuple[str, str]] | None = None,
    length: bool = True,
) -> bytes:
    """An HTTP/1.1 request's bytes: a Host, a JSON Content-Type, and a Content-Length of the
    body unless `length` is False; `headers` are added as given."""
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    if length:
        lines.append(f"Content-Length: {len(body)}")
    raw = "".join(line + "\r\n" for line in lines).encode()
    for name, value in headers or []:
        raw += name.encode("latin-1") + b": " + value.encode("latin-1") + b"\r\n"
    return raw + b"\r\n" + body


def good(port: int) -> Reply:
    """A plain completion of 2 tokens."""
    body = json.dumps({"prompt": "hello", "max_tokens": 2}).encode()
    return exchange(port, request("/v1/completions", body, headers=[("Connection", "close")]))


@dataclass
class Served:
    """A `batchsim serve` process on `port`, its standard error in `stderr`."""

    proc: subprocess.Popen[bytes]
    port: int
    stderr: Path
    out: Path
    stdout: bytes = field(default=b"")

    def errors(self) -> str:
        return self.stderr.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.stdout = self.proc.communicate(timeout=timeout)[0]
        return int(self.proc.returncode)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve_command(scenario: Path, work: Path, *args: str) -> Iterator[Served]:
    """`batchsim serve SCENARIO --out work/out ARGS` on a free port, once `/health` answers;
    stopped (SIGTERM) afterwards unless the test stopped it."""
    port = free_port()
    stderr = work / "stderr.txt"
    cmd = [sys.executable, "-m", "sim", "serve", str(scenario), "--port", str(port),
           "--out", str(work / "out"), "-q", *args]  # fmt: skip
    with stderr.open("wb") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=err)
    served = Served(proc, port, stderr, work / "out")
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    if s.recv(12).startswith(b"HTTP/1.1 200"):
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"serve did not start: {served.errors()}")
            time.sleep(0.1)
        yield served
    finally:
        if proc.poll() is None:
            served.stop()
