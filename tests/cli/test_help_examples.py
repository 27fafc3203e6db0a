"""Every command's `--help` ends with examples: each names its command (`batchsim <command>`),
parses as that command's arguments, and every repository file it reads exists."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from sim.cli.main import _parser

ROOT = Path(__file__).resolve().parents[2]


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """(the words that name a command, its parser), every command and sub-command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(_parser()))


def _examples(help_text: str) -> list[str]:
    lines = help_text.split("\nexamples:\n", 1)[1].splitlines()
    return [line.strip() for line in lines if line.startswith("  batchsim ")]


def test_the_commands_are_found() -> None:
    names = {" ".join(words) for words, _ in COMMANDS}
    assert {"run", "sweep", "search", "replay", "serve", "workload day-profile"} <= names
    assert {"calibrate", "fit", "profile", "profile import", "profile table"} <= names


@pytest.mark.parametrize(("words", "parser"), COMMANDS, ids=[" ".join(w) for w, _ in COMMANDS])
def test_every_help_ends_with_examples_of_its_command(
    words: tuple[str, ...], parser: argparse.ArgumentParser
) -> None:
    help_text = parser.format_help()
    assert "\nexamples:\n" in help_text, f"batchsim {' '.join(words)} --help has no examples"
    examples = _examples(help_text)
    command = "batchsim " + " ".join(words)
    assert any(line == command or line.startswith(command + " ") for line in examples), examples
    for line in examples:
        argv = shlex.split(line, comments=True)[1:]
        _parser().parse_args(argv)  # a usage error raises
        for before, arg in zip(["", *argv[:-1]], argv, strict=True):
            if before != "--out" and arg.startswith(("scenarios/", "calibration/")):
                assert (ROOT / arg).exists(), f"{line}: {arg}"
