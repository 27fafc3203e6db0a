"""Where `profile import`, `profile table`, `fit`, `search` and `sweep` may write, what they may
replace, and how they read corrupt profile inputs (Vidur's gzip CSVs, a raw CSV's sidecar) and
integer flags: no data loss, one-line errors. The inputs are the fuzz corpus's generated ones
(tests/fuzz_corpus_profile_cmds.py), checked here to be valid before one thing is broken."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from fuzz_corpus_profile_cmds import TARGET, gz, raw_files, vidur_files

from calibration.raw import read_meta
from calibration.vidur import import_tree
from sim.cli import args as cli_args
from sim.cli.main import _parser, main
from sim.errors import ScenarioError
from sim.io.destination import (
    MARKER,
    check_file_destination,
    check_out_folder,
    check_sweep_folder,
    written_by_batchsim,
)
from sim.whatif.search_output import write_search

REPO = Path(__file__).resolve().parents[2]


def put(folder: Path, files: dict[str, bytes | None]) -> None:
    for name, content in files.items():
        path = folder / name
        if content is None:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)


def one_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("batchsim: error: "), err
    return err[0]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


# -- the corpus's inputs are valid: each fuzz case breaks one thing ---------------------------


def test_the_generated_vidur_tree_and_raw_csv_are_valid(workdir: Path) -> None:
    put(workdir, {**vidur_files(), **raw_files()})
    import_args = ["profile", "import", "vidur", "--out", "out", "--hardware", "a100-80g"]
    assert main(import_args) == 0
    assert written_by_batchsim(workdir / "out" / TARGET)
    assert main([*import_args[:4], "out2", "--hardware", "a100-80g", "--tensor-parallel", "2"]) == 0
    assert (workdir / "out2" / "llama-2-7b_a100-80g_tp2.yaml").is_file()
    assert main(["profile", "table", "raw.csv", "--out", "p"]) == 0
    assert main(["fit", "raw.csv", "--out", "f", "--no-plot"]) == 0
    # a rerun replaces the profiles batchsim wrote (the documented regeneration workflow)
    before = (workdir / "p" / "profile.yaml").stat().st_mtime_ns
    assert main(["profile", "table", "raw.csv", "--out", "p"]) == 0
    assert main(import_args) == 0
    assert (workdir / "p" / "profile.yaml").stat().st_mtime_ns >= before


# -- search and sweep folders: only the marker (or a sweep's exact files) ----------------------


def test_search_never_adopts_a_folder_with_a_points_subfolder(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    put(mine, {"points": None, "report.html": b"<p>my report</p>"})
    with pytest.raises(ScenarioError, match="not a batchsim search folder"):
        check_sweep_folder(mine, "search")
    with pytest.raises(ScenarioError, match="not a batchsim search folder"):
        write_search(None, mine)  # type: ignore[arg-type]  # refused before the result is read
    assert (mine / "report.html").read_bytes() == b"<p>my report</p>"
    assert not (mine / MARKER).exists()


@pytest.mark.parametrize(
    ("files", "kind", "adopted"),
    [
        ({}, "search", True),  # empty
        ({MARKER: b'{"batchsim": "search"}\n', "report.html": b"x"}, "search", True),
        ({MARKER: b'{"batchsim": "sweep"}\n'}, "search", False),
        ({MARKER: b'{"batchsim": "results"}\n', "summary.json": b"{}"}, "search", False),
        ({MARKER: b'{"batchsim": "results"}\n', "summary.json": b"{}"}, "sweep", False),
        ({MARKER: b"not json"}, "sweep", True),  # a marker is batchsim's, whatever it says
        # a sweep from before markers: exactly what a sweep writes
        ({"points/0123456789ab.json": b"{}", "sweep.csv": b"a\n", "sweep.parquet": b""}, "sweep",
         True),
        ({"points/0123456789ab.json": b"{}"}, "sweep", True),
        ({"points/0123456789ab.json": b"{}"}, "search", False),
        ({"points/0123456789ab.json": b"{}", "report.html": b"x"}, "sweep", False),
        ({"points/notes.txt": b"x", "sweep.csv": b"a\n"}, "sweep", False),
        ({"points/0123456789ab.json": None}, "sweep", False),  # a folder, not a point file
        ({"sweep.csv": b"a\n"}, "sweep", False),  # no points: not enough to be a sweep
        ({"points": None}, "sweep", True),  # a sweep killed before its first point
    ],
)
def test_which_folders_a_sweep_or_search_adopts(
    tmp_path: Path, files: dict[str, bytes | None], kind: str, adopted: bool
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    put(out, files)
    if adopted:
        check_sweep_folder(out, kind)
    else:
        with pytest.raises(ScenarioError, match=f"--out {out}"):
            check_sweep_folder(out, kind)


def test_the_filesystem_root_is_never_an_output_folder(tmp_path: Path) -> None:
    for root in (Path("/"), Path("/tmp/..")):
        with pytest.raises(ScenarioError, match="filesystem root"):
            check_out_folder(root)
    check_out_folder(tmp_path / "new" / "folder")  # creatable: fine


# -- single files: replaced only when batchsim wrote them ---------------------------------------


def test_a_file_is_replaced_only_when_batchsim_wrote_it(tmp_path: Path) -> None:
    committed = REPO / "calibration" / "profiles" / "imported" / "vidur"
    assert all(written_by_batchsim(p) for p in sorted(committed.glob("*.yaml"))[:3])
    check_file_destination(tmp_path / "absent.yaml")
    (tmp_path / "mine.yaml").write_text("provenance: {generator: my script}\n")
    (tmp_path / "list.yaml").write_text("- provenance\n")
    (tmp_path / "bad.yaml").write_bytes(b"\xff\xfe: [")
    (tmp_path / "dir.yaml").mkdir()
    (tmp_path / "link.yaml").symlink_to(committed / TARGET)
    for name, reason in [
        ("mine.yaml", "not written by batchsim"),
        ("list.yaml", "not written by batchsim"),
        ("bad.yaml", "not written by batchsim"),
        ("dir.yaml", "not a file"),
        ("link.yaml", "a link"),
    ]:
        with pytest.raises(ScenarioError, match=reason):
            check_file_destination(tmp_path / name)


def test_profile_commands_check_out_before_any_work(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    put(workdir, {**vidur_files(), **raw_files(), "f.txt": b"x"})
    put(workdir, {f"out/{TARGET}": b"mine: 1\n", "p/profile.yaml": b"mine: 2\n"})
    cases = [
        (["profile", "import", "vidur", "--out", "f.txt"], "is a file"),
        (["profile", "table", "raw.csv", "--out", "f.txt"], "is a file"),
        (["profile", "import", "vidur", "--out", "/"], "filesystem root"),
        (["profile", "table", "raw.csv", "--out", "/"], "filesystem root"),
        (["profile", "import", "vidur", "--out", "out", "--hardware", "a100-80g"], TARGET),
        (["profile", "table", "raw.csv", "--out", "p"], "p/profile.yaml"),
        (["fit", "raw.csv", "--out", "p", "--no-plot"], "p/profile.yaml"),
    ]
    for argv, expect in cases:
        assert main(argv) == 2, argv
        assert expect in one_error(capsys)
    assert (workdir / "out" / TARGET).read_bytes() == b"mine: 1\n"
    assert (workdir / "p" / "profile.yaml").read_bytes() == b"mine: 2\n"
    assert (workdir / "f.txt").read_bytes() == b"x"


def test_an_import_writes_nothing_when_any_source_is_bad(tmp_path: Path) -> None:
    good = vidur_files()
    bad = {k.replace("/a100/", "/h100/"): v for k, v in good.items() if "/compute/" in k}
    bad[next(iter(bad))] = b"not gzip"  # the h100 mlp.csv.gz, read after the a100 one
    put(tmp_path, {**good, **bad})
    with pytest.raises(ScenarioError, match="not a gzip"):
        import_tree(tmp_path / "vidur", tmp_path / "out")
    assert not (tmp_path / "out").exists()


# -- tensor-parallel degree ---------------------------------------------------------------------


def test_a_tensor_parallel_degree_that_cannot_be_used_is_refused(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    put(workdir, vidur_files())
    root = workdir / "vidur"
    for tp, reason in [(3, "cannot shard llama-2-7b"), (0, "from 1 to 1024"),
                       (-2, "from 1 to 1024"), (10**30, "from 1 to 1024")]:  # fmt: skip
        with pytest.raises(ScenarioError, match=reason) as caught:
            import_tree(root, workdir / "out", tensor_parallel=tp)
        assert caught.value.path == "--tensor-parallel"
    for flag in ("3", "0", "-2", "1.5"):
        assert main(["profile", "import", "vidur", "--out", "o", "--tensor-parallel", flag]) == 2
        assert "--tensor-parallel" in one_error(capsys)
    assert not (workdir / "out").exists() and not (workdir / "o").exists()


def test_every_integer_flag_of_every_command_uses_the_shared_rule() -> None:
    """No flag is a bare `int` (which takes 0 and negatives): each is positive or non-negative,
    whatever command adds it later."""
    checked, bare = [], []

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{prefix} {name}")
            elif action.type is int:
                bare.append(f"{prefix} {action.option_strings}")
            elif action.type in (cli_args.positive_int, cli_args.nonnegative_int):
                checked.append(f"{prefix} {action.option_strings}")

    walk(_parser(), "batchsim")
    assert bare == []
    assert len(checked) >= 12  # workers, repeats, top, benchmark, tensor-parallel, ...


# -- Vidur files and raw-CSV sidecars -----------------------------------------------------------


def test_a_corrupt_vidur_file_names_its_line_and_column(tmp_path: Path) -> None:
    files = vidur_files()
    mlp = next(k for k in files if k.endswith("mlp.csv.gz"))
    text = __import__("gzip").decompress(files[mlp]).decode()
    lines = text.splitlines()
    lines[3] = lines[3].rsplit(",", 2)[0] + ",abc,1"  # num_tokens of line 4
    put(tmp_path, {**files, mlp: gz("\n".join(lines) + "\n")})
    with pytest.raises(ScenarioError) as caught:
        import_tree(tmp_path / "vidur", tmp_path / "out")
    assert caught.value.file == str(tmp_path / mlp) and caught.value.path == "line 4"
    assert "num_tokens must be an integer, got 'abc'" in caught.value.reason


def test_a_raw_csv_sidecar_is_read_or_refused_never_half_trusted(tmp_path: Path) -> None:
    csv_path = tmp_path / "raw.csv"
    assert read_meta(csv_path) == {}  # no sidecar: timings measured elsewhere
    sidecar = tmp_path / "raw.meta.json"
    sidecar.write_text(json.dumps({"device": {"name": "x"}, "layers": [1, 2]}))
    assert read_meta(csv_path) == {"device": {"name": "x"}, "layers": [1, 2]}
    for content, where, reason in [
        (b'{\n "a": 1,\n "b": }', "line 3", "not JSON"),
        (b"[1]", None, "expected a JSON object, got list"),
        (b'{"a": Infinity}', None, "Infinity is not a JSON number"),
        (b'{"a": "\xe9"}', "line 1", "not UTF-8"),
    ]:
        sidecar.write_bytes(content)
        with pytest.raises(ScenarioError, match=reason) as caught:
            read_meta(csv_path)
        assert caught.value.file == str(sidecar) and caught.value.path == where
