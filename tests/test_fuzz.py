"""Every bad input is refused cleanly: a generated corpus of broken scenarios, profiles, traces
and command lines (tests/fuzz_corpus*.py), each run through the CLI in-process.

Each case must: exit with code 2; print exactly one line on stderr, `batchsim: error: ...`,
naming the file (or flag) and the key (or line) at fault; print no traceback; and leave the
working folder exactly as it was: the committed-looking `results/` (baselines, another
scenario's results) and every other file, byte for byte, with nothing added.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import pytest
from fuzz_corpus import Case, runtime_cases, schema_cases, speculative_cases, yaml_cases
from fuzz_corpus_audit import audit_cases
from fuzz_corpus_autoscale import autoscale_cases
from fuzz_corpus_bounds import bounds_cases
from fuzz_corpus_cli import cli_cases
from fuzz_corpus_clients import client_cases
from fuzz_corpus_day_profile import day_profile_cases
from fuzz_corpus_export import export_cases
from fuzz_corpus_files import profile_cases, trace_cases
from fuzz_corpus_measured import measured_cases
from fuzz_corpus_profile_cmds import profile_cmd_cases
from fuzz_corpus_replay import replay_cases
from fuzz_corpus_search import search_cases

from sim.cli.main import main

CORPUS: list[Case] = [
    *yaml_cases(),
    *schema_cases(),
    *speculative_cases(),
    *runtime_cases(),
    *profile_cases(),
    *trace_cases(),
    *cli_cases(),
    *search_cases(),
    *autoscale_cases(),
    *measured_cases(),
    *export_cases(),
    *client_cases(),
    *replay_cases(),
    *audit_cases(),
    *profile_cmd_cases(),
    *bounds_cases(),
    *day_profile_cases(),
]


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
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)


def snapshot(folder: Path) -> dict[str, str]:
    """Every path under `folder` with a digest of its content ("dir" for folders)."""
    out = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        out[key] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


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
