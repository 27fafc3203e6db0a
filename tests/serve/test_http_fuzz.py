"""Raw-HTTP fuzz of `batchsim serve` (the cases: tests/serve/fuzz_http_cases.py): a real
`batchsim serve` process on loopback takes each bad request as raw bytes, and each must get
OpenAI's error document with a sensible 4xx, print nothing on the server's standard error (no
traceback, no log line), and leave the server answering a good request."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from fuzz_http_cases import ANY, HttpCase, http_cases
from raw_http import Served, exchange, good, serve_command
from scenario_factory import scenario

CASES = http_cases()


def test_the_cases_are_many_and_their_ids_unique() -> None:
    ids = Counter(case.id for case in CASES)
    assert len(CASES) >= 150
    assert [i for i, n in ids.items() if n > 1] == []
    assert all(400 <= s < 500 for case in CASES for s in case.statuses if s != 200)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    import yaml

    work = tmp_path_factory.mktemp("fuzz")
    path = work / "scenario.yaml"
    path.write_text(yaml.safe_dump(dict(scenario(profile=None))))
    with serve_command(path, work, "--speed", "50", "--drain-s", "0") as srv:
        yield srv
        # the stop after the whole corpus: results written, nothing on standard error
        assert srv.stop() == 0, srv.errors()
    assert srv.errors() == ""
    assert [p.name for p in srv.out.iterdir()] == ["t--serve"]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_a_bad_request_gets_a_4xx_error_document(served: Served, case: HttpCase) -> None:
    before = served.errors()
    reply = exchange(served.port, case.data, chunks=case.chunks)
    assert reply.status in case.statuses, (reply.status, reply.body[:300])
    if reply.status != 200:
        error = reply.error()
        if case.param != ANY:
            assert error["param"] == case.param, error
    assert served.errors() == before  # nothing on standard error: no traceback, no log line
    assert good(served.port).status == 200



def test_encoded_bodies_and_an_expected_continue_are_served(served: Served) -> None:
    """The encodings the server takes are decoded, and `Expect: 100-continue` is honoured."""
    import gzip
    import json
    import zlib

    from raw_http import request

    body = json.dumps({"prompt": "hello", "max_tokens": 2}).encode()
    for name, data in (("gzip", gzip.compress(body)), ("deflate", zlib.compress(body))):
        reply = exchange(served.port, request("/v1/completions", data,
                         headers=[("Content-Encoding", name), ("Connection", "close")]))
        assert reply.status == 200, reply
        assert json.loads(reply.body)["usage"]["completion_tokens"] == 2
    reply = exchange(served.port, request("/v1/completions", body,
                     headers=[("Expect", "100-continue"), ("Connection", "close")]))
    assert reply.status == 200
