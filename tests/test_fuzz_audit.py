"""The fuzz suite covers every command: each `batchsim` subcommand (and each `profile` action)
that `--help` lists has generated bad cases in tests/fuzz_corpus*.py, so a command added later
without any fails here. `python tests/test_fuzz_audit.py` prints the cases per command.

Also here, the option rules of `run` the audit checked: `--stream --tables summary` is what
`--stream` writes, so it is accepted; `--tables all` or `--trace` with `--stream` is not.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml
from fuzz_cases import CORPUS
from scenario_factory import continuous, poisson, scenario, uniform

from sim.cli.main import main


def listed_commands(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    """The subcommands `batchsim *argv --help` lists (its `{a,b,c}` choices)."""
    try:
        code = main([*argv, "--help"])
    except SystemExit as exc:  # argparse's own exit, if main lets it through
        code = exc.code
    assert code == 0
    out = capsys.readouterr().out
    found = re.search(r"\{([a-z0-9,-]+)\}", out)
    assert found, out
    return found.group(1).split(",")


def cases_per_command() -> Counter[str]:
    """Fuzz cases by the command they run (`profile import`, `profile table` by action)."""
    counts: Counter[str] = Counter()
    for case in CORPUS:
        argv = case.argv
        if argv and argv[0] == "profile" and len(argv) > 1 and not argv[1].startswith("-"):
            counts[f"profile {argv[1]}"] += 1
        elif argv:
            counts[argv[0]] += 1
    return counts


def test_every_subcommand_has_generated_bad_cases(capsys: pytest.CaptureFixture[str]) -> None:
    commands = listed_commands(capsys)
    assert {"run", "search", "profile"} <= set(commands)  # the parse found the real list
    profile_actions = listed_commands(capsys, "profile")
    assert "import" in profile_actions
    wanted = [c for c in commands if c != "profile"] + [f"profile {a}" for a in profile_actions]
    counts = cases_per_command()
    assert [c for c in wanted if counts[c] == 0] == []


def test_every_case_runs_a_listed_command(capsys: pytest.CaptureFixture[str]) -> None:
    # a case that names no real command would exit 2 on argparse's error and pass vacuously,
    # except the few cases that are about a bad command itself
    commands = set(listed_commands(capsys))
    unknown = sorted({case.argv[0] for case in CORPUS if case.argv} - commands)
    assert all(not c.startswith("-") for c in unknown)
    assert len(unknown) <= 1, unknown


SCENARIO = scenario(
    name="s",
    workload=poisson(30, 5.0, uniform(10, 100), uniform(1, 20)),
    policy=continuous(max_num_seqs=8),
    profile=None,
)


def test_stream_with_tables_summary_is_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "r"
    argv = ["run", str(scenario), "-q", "--stream", "--out", str(out)]
    assert main([*argv, "--tables", "summary"]) == 0, capsys.readouterr().err
    written = {p.name for p in (out / "s").iterdir()}
    assert "summary.json" in written
    assert not any(name.startswith(("requests", "steps", "itl")) for name in written)
    summary = json.loads((out / "s" / "summary.json").read_text())
    assert summary  # the run's summary, as `--stream` alone writes it


@pytest.mark.parametrize(("extra", "named"), [(("--tables", "all"), "--tables all"),
                                              (("--trace",), "--trace")])  # fmt: skip
def test_stream_refuses_what_it_cannot_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], named: str
) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    code = main(["run", str(scenario), "-q", "--stream", "--out", str(tmp_path / "r"), *extra])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("batchsim: error: --stream: ") and named in err, err
    assert not (tmp_path / "r" / "s").exists()


if __name__ == "__main__":
    for command, count in sorted(cases_per_command().items()):
        print(f"{command:20s} {count:5d}")
    print(f"{'total':20s} {len(CORPUS):5d}")
