"""Every bad input is refused cleanly: a generated corpus of broken scenarios, profiles, traces
and command lines (tests/fuzz_corpus*.py), each run through the CLI in-process.

Each case must: exit with code 2; print exactly one line on stderr, `batchsim: error: ...`,
naming the file (or flag) and the key (or line) at fault; print no traceback; and leave the
working folder exactly as it was: the committed-looking `results/` (baselines, another
scenario's results) and every other file, byte for byte, with nothing added.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from fuzz_cases import CORPUS, snapshot
from fuzz_corpus import Case, Sparse

from sim.cli.main import main

# the validation library's words, which mean nothing to a user
JARGON = ("Input should", "Unable to extract tag", "discriminator", "validation error", "pydantic")


def test_the_corpus_is_large_and_its_ids_are_unique() -> None:
    ids = Counter(case.id for case in CORPUS)
    assert len(CORPUS) >= 150
    assert [i for i, n in ids.items() if n > 1] == []
    kinds = Counter(case.id.split("-")[0] for case in CORPUS)
    assert {"yaml", "schema", "profile", "trace", "azure", "set", "out", "sweep", "search"} <= set(
        kinds
    )


def _populate(folder: Path, case: Case) -> None:
    """The case's files, and results a careless run could destroy."""
    results = folder / "results"
    (results / "baselines").mkdir(parents=True)
    (results / "baselines" / "ci.json").write_text('{"variants": {}}\n')
    (results / "other").mkdir()
    (results / "other" / ".batchsim").write_text('{"batchsim": "results"}\n')
    (results / "other" / "summary.json").write_text('{"variants": {}}\n')
    (results / "notes.txt").write_text("keep me\n")
    for name, content in case.files.items():
        path = folder / name
        if content is None:
            path.mkdir(parents=True, exist_ok=True)
        elif isinstance(content, Sparse):  # gigabytes that take no disk
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("wb") as handle:
                handle.write(content.head)
                handle.truncate(content.size)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.id)
def test_bad_input_is_one_clear_line_and_exit_2(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _populate(tmp_path, case)
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    code = main(list(case.argv))
    _, err = capsys.readouterr()
    assert code == 2, f"exit {code}; stderr: {err!r}"
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("batchsim: error: "), err
    assert "Traceback" not in err and "Error:" not in err.replace("error:", "")
    for jargon in JARGON:
        assert jargon not in lines[0], f"{jargon!r} in {lines[0]!r}"
    for expected in case.expect:
        assert expected in lines[0], f"{expected!r} not in {lines[0]!r}"
    assert snapshot(tmp_path) == before
