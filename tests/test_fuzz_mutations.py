"""Randomly broken scenarios never crash batchsim: hypothesis mutates the valid base scenario of
the fuzz corpus (drops keys, duplicates lines, puts random values of any type at random keys)
and checks that `batchsim validate`, and `batchsim run` on whatever still validates, either
succeed or fail with one clear line and exit code 2, never with a traceback.
"""

from __future__ import annotations

import contextlib
import copy
import io
import tempfile
from pathlib import Path
from typing import Any

import yaml
from fuzz_corpus import BASE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.cli.main import main
from sim.scenario.load import load_scenario
from sim.workload.budget import expected_requests

MAX_RUN_REQUESTS = 400  # larger (valid) workloads are only validated: runs must stay short


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = []
    if isinstance(node, dict):
        for key, value in node.items():
            out.append((*prefix, key))
            out += _paths(value, (*prefix, key))
    return out


PATHS = _paths(BASE)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["static", "continuous", "chunked", "poisson", "fixed", ".", "..", "a/b"]),
)
values = st.one_of(
    scalars,
    st.lists(scalars, max_size=3),
    st.dictionaries(st.sampled_from(["name", "x", "rate", "value", "dist"]), scalars, max_size=2),
)
mutations = st.lists(
    st.tuples(st.sampled_from(["drop", "set", "duplicate"]), st.sampled_from(PATHS), values),
    min_size=1,
    max_size=3,
)


def _mutate(steps: list[tuple[str, tuple[Any, ...], Any]]) -> str:
    raw = copy.deepcopy(BASE)
    duplicates = []
    for action, path, value in steps:
        node: Any = raw
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue  # an earlier step replaced a parent
        if action == "drop":
            node.pop(path[-1], None)
        elif action == "set":
            node[path[-1]] = value
        else:
            duplicates.append(str(path[-1]))
    text = yaml.safe_dump(raw, sort_keys=False)
    for key in duplicates:  # repeat the first line that sets this key
        lines = text.splitlines()
        index = next((i for i, ln in enumerate(lines) if ln.strip().startswith(f"{key}:")), None)
        if index is not None:
            lines.insert(index + 1, lines[index])
            text = "\n".join(lines) + "\n"
    return text


def _cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


def _check(code: int, err: str) -> None:
    assert code in (0, 2), err
    assert "Traceback" not in err
    if code == 2:
        assert len(err.splitlines()) == 1 and err.startswith("batchsim: error: "), err


def _small(path: Path) -> bool:
    sizes = [expected_requests(v.spec.workload) for v in load_scenario(path).variants]
    return all(s is not None and s[0] <= MAX_RUN_REQUESTS for s in sizes)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations)
def test_mutated_scenarios_fail_cleanly_or_run(steps: list[tuple[str, Any, Any]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.yaml"
        path.write_text(_mutate(steps), encoding="utf-8")
        code, err = _cli(["validate", str(path)])
        _check(code, err)
        if code == 0 and _small(path):
            out = str(Path(folder) / "out")
            argv = ["run", str(path), "--out", out, "-q", "--no-plots", "--tables", "summary"]
            _check(*_cli(argv))
