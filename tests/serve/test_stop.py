"""The stop of `batchsim serve` as a real command: SIGTERM with streams in flight ends every
stream at once (an error event, then `data: [DONE]`), counts the cut requests as aborted, and
writes every request of its ledger into the results, whatever more signals do meanwhile."""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path

import pandas as pd
import yaml
from raw_http import Served, request, serve_command
from scenario_factory import scenario

STREAMS = 6
# a bound only a stop that never ends reaches (a stream here would run for minutes)
HANG_S = 30.0


def _open_streams(served: Served) -> list[socket.socket]:
    """`STREAMS` streams of 4,000 tokens, each once its first tokens have come."""
    socks = []
    for k in range(STREAMS):
        body = json.dumps({"prompt": "p" * 40, "max_tokens": 4000, "stream": True}).encode()
        sock = socket.create_connection(("127.0.0.1", served.port), timeout=HANG_S)
        sock.sendall(request("/v1/completions", body, headers=[("X-Request-Id", f"s{k}")]))
        seen = b""
        while seen.count(b"data: ") < 2:
            seen += sock.recv(65536)
        socks.append(sock)
    return socks


def _read_to_end(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _results(out: Path) -> pd.DataFrame:
    (folder,) = list(out.iterdir())
    return pd.read_parquet(folder / "requests.parquet")


def _serve(tmp_path: Path):  # type: ignore[no-untyped-def]
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(dict(scenario(profile=None))))
    return serve_command(path, tmp_path)


def test_sigterm_cuts_every_stream_and_writes_every_request(tmp_path: Path) -> None:
    with _serve(tmp_path) as served:
        socks = _open_streams(served)
        started = time.monotonic()
        served.proc.send_signal(signal.SIGTERM)
        for sock in socks:
            tail = _read_to_end(sock)
            sock.close()
            events = [e for e in tail.split(b"\n\n") if b"data: " in e]
            assert events[-1].endswith(b"data: [DONE]")
            error = json.loads(events[-2].split(b"data: ", 1)[1])["error"]
            assert error["code"] == 503
            finish = json.loads(events[-3].split(b"data: ", 1)[1])["choices"][0]
            assert finish["finish_reason"] == "abort"
        ended = time.monotonic() - started
        assert served.stop(timeout=HANG_S) == 0, served.errors()
        print(f"SIGTERM to the streams' ends: {ended:.2f} s, to exit: "
              f"{time.monotonic() - started:.2f} s")
    assert served.errors() == ""
    table = _results(served.out)
    assert sorted(table["source_id"]) == [f"s{k}" for k in range(STREAMS)]
    assert (table["reject_reason"] == "aborted by its client").all()
    assert (table["num_output_tokens"] < 4000).all()
    # a prompt exit: SIGTERM writes no plots (seconds of drawing), and the session says so
    (folder,) = list(served.out.iterdir())
    assert not list(folder.glob("*.png"))
    assert json.loads((folder / "session.json").read_text())["plots"] is False


def test_more_signals_while_stopping_still_write_the_results(tmp_path: Path) -> None:
    """SIGTERM and SIGINT again and again from the first on, while the server stops and
    writes its results: they are written whole."""
    with _serve(tmp_path) as served:
        socks = _open_streams(served)
        deadline = time.monotonic() + HANG_S
        written = served.out / "t--serve"
        while not written.exists() and time.monotonic() < deadline:
            served.proc.send_signal(signal.SIGTERM)
            time.sleep(0.002)
            if served.proc.poll() is None:
                served.proc.send_signal(signal.SIGINT)
            time.sleep(0.002)
        for sock in socks:
            sock.close()
        code = served.stop(timeout=HANG_S)
    # one that lands after the folder is committed, as the process exits, is ignored too
    assert code == 0, served.errors()
    assert served.errors() == ""
    assert sorted(_results(served.out)["source_id"]) == [f"s{k}" for k in range(STREAMS)]
