"""`batchsim export`: the exact text of each format on a hand workload, the round trip through
batchsim's own trace readers, and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scenario_factory import continuous, scenario, uniform

import sim
from sim.cli import export as export_cli
from sim.cli.main import main
from sim.io import workload_export as wx
from sim.workload.arrays import Content, RequestArrays, Sessions
from sim.workload.content import build_content


def hand_workload(content: bool = True) -> RequestArrays:
    """Three requests; the first two start with the same 1024-token system prompt."""
    prompts = np.array([1100, 1030, 20], dtype=np.int64)
    arrays = RequestArrays(
        arrival_s=np.array([0.5, 1.0, 2.25]),
        prompt_tokens=prompts,
        output_tokens=np.array([3, 1, 7], dtype=np.int64),
        class_index=np.zeros(3, dtype=np.int64),
        class_names=("default",),
        content=build_content(
            np.array([0, 0, -1], dtype=np.int64), np.array([1024, 1024, 0], dtype=np.int64), prompts
        )
        if content
        else None,
    )
    return arrays


def test_csv_is_exact_and_starts_at_zero() -> None:
    text = wx.to_csv(hand_workload()).text
    assert text == "arrival_s,prompt_tokens,output_tokens\n0.0,1100,3\n0.5,1030,1\n1.75,20,7\n"


def test_mooncake_lines_and_hash_ids_of_512_token_blocks() -> None:
    lines = wx.to_mooncake(hand_workload()).text.splitlines()
    # blocks 0 and 1 are the shared prompt's 1024 tokens; every later block is a request's own
    assert lines == [
        '{"timestamp": 0.0, "input_length": 1100, "output_length": 3, "hash_ids": [0, 1, 2]}',
        '{"timestamp": 500.0, "input_length": 1030, "output_length": 1, "hash_ids": [0, 1, 3]}',
        '{"timestamp": 1750.0, "input_length": 20, "output_length": 7, "hash_ids": [4]}',
    ]


def test_without_content_every_block_is_its_requests_own() -> None:
    assert wx.block_hash_ids(hand_workload(content=False)) == [[0, 1, 2], [3, 4, 5], [6]]


def test_a_unit_that_does_not_divide_512_leaves_the_ids_out() -> None:
    base = hand_workload(content=False)
    counts = -(-base.prompt_tokens // 24)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    content = Content(np.arange(offsets[-1]), offsets, 24, base.prompt_tokens.copy())
    out = wx.to_mooncake(RequestArrays(**{**base.__dict__, "content": content}))
    assert all("hash_ids" not in json.loads(line) for line in out.text.splitlines())
    assert out.notes and "24-token units" in out.notes[0]


def test_vllm_custom_prompts_have_one_word_per_token_and_share_the_prefix() -> None:
    out = wx.to_vllm_custom(hand_workload())
    rows = [json.loads(line) for line in out.text.splitlines()]
    assert [set(r) for r in rows] == [{"prompt", "output_tokens"}] * 3
    assert [r["output_tokens"] for r in rows] == [3, 1, 7]
    words = [r["prompt"].split(" ") for r in rows]
    assert [len(w) for w in words] == [1100, 1030, 20]
    # 64 shared units + 5 + 1 + 2 own ones: 72 ids, two hex digits each; sorted, the prefix's
    # come first (ids 0..63), the third request's own units are 70 and 71
    assert words[2] == ["four", "six"] + ["the"] * 14 + ["four", "seven", "the", "the"]
    assert words[0][:1024] == words[1][:1024]
    assert words[0][1024:1026] == ["four", "zero"] and words[1][1024:1026] == ["four", "five"]
    assert "1.14286 req/s" in out.notes[0]  # 2 gaps in 1.75 s


def test_vllm_custom_without_content_differs_from_the_first_word() -> None:
    rows = wx.to_vllm_custom(hand_workload(content=False)).text.splitlines()
    firsts = [json.loads(r)["prompt"].split(" ")[:2] for r in rows]
    assert len({tuple(f) for f in firsts}) == 3


def test_closed_loop_sessions_are_refused() -> None:
    base = hand_workload()
    session = Sessions(session=np.zeros(3, dtype=np.int64), next_turn=np.array([1, 2, -1]),
                       think_s=np.ones(3))  # fmt: skip
    closed = RequestArrays(**{**base.__dict__, "sessions": session})
    assert "closed-loop" in (wx.open_loop_problem(closed) or "")
    assert wx.open_loop_problem(base) is None


def test_the_cli_knows_every_format() -> None:
    assert export_cli.FORMAT_CHOICES == wx.FORMATS == tuple(wx.WRITERS)


SCENARIO = scenario(
    name="rt",
    seed=5,
    workload={
        "num_requests": 40,
        "arrival": {"process": "constant", "rate": 4.0},
        "prompt_tokens": uniform(10, 900),
        "output_tokens": uniform(1, 40),
        "output_prediction_sigma": 0.0,
    },
    policy=continuous(max_num_seqs=8, max_num_batched_tokens=1024),
    profile=None,
)


@pytest.mark.parametrize(("fmt", "trace_format"), [("csv", "csv"), ("mooncake", "mooncake")])
def test_export_then_run_on_it_gives_the_same_requests_table(
    tmp_path: Path, fmt: str, trace_format: str
) -> None:
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / f"w.{fmt}"
    assert main(["export", str(tmp_path / "s.yaml"), "--format", fmt, "--out", str(out), "-q"]) == 0
    replay = {**SCENARIO, "workload": {"trace": {"path": str(out), "format": trace_format}}}
    original = sim.simulate(SCENARIO).requests
    replayed = sim.simulate(replay).requests
    replayed = replayed.drop(columns=[c for c in ("session",) if c in replayed])
    pd.testing.assert_frame_equal(original, replayed)


def test_a_poisson_workload_reads_back_as_the_numbers_written(tmp_path: Path) -> None:
    raw = {**SCENARIO, "workload": {**SCENARIO["workload"], "arrival": {"process": "poisson",
                                                                         "rate": 3.0}}}  # fmt: skip
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    out = tmp_path / "w.csv"
    assert main(["export", str(tmp_path / "s.yaml"), "--format", "csv", "--out", str(out)]) == 0
    written = pd.read_csv(out)
    requests = sim.simulate({**raw, "workload": {"trace": {"path": str(out), "format": "csv"}}})
    table = requests.requests
    assert table["arrival_s"].tolist() == written["arrival_s"].tolist()
    assert table["num_prompt_tokens"].tolist() == written["prompt_tokens"].tolist()
    original = sim.simulate(raw).requests
    assert original["num_prompt_tokens"].tolist() == written["prompt_tokens"].tolist()
    shifted = original["arrival_s"] - original["arrival_s"].iloc[0]
    np.testing.assert_allclose(written["arrival_s"], shifted, rtol=0, atol=1e-12)


def _export(tmp_path: Path, *args: str) -> int:
    return main(["export", str(tmp_path / "s.yaml"), "-q", *args])


def test_output_refusals_and_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SCENARIO))
    mine = tmp_path / "notes.txt"
    mine.write_text("keep me\n")
    assert _export(tmp_path, "--format", "csv", "--out", str(tmp_path)) == 2
    assert _export(tmp_path, "--format", "csv", "--out", str(tmp_path / "no" / "w.csv")) == 2
    assert _export(tmp_path, "--format", "csv", "--out", str(mine)) == 2
    assert mine.read_text() == "keep me\n"
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and "is a folder" in err[0] and "does not exist" in err[1]
    assert "not a csv export (use --force" in err[2]
    assert _export(tmp_path, "--format", "csv", "--out", str(mine), "--force") == 0
    assert mine.read_text().startswith("arrival_s,prompt_tokens,output_tokens\n")
    # an earlier export is replaced without --force, and no temporary file stays behind
    out = tmp_path / "w.jsonl"
    assert _export(tmp_path, "--format", "mooncake", "--out", str(out)) == 0
    assert _export(tmp_path, "--format", "mooncake", "--out", str(out), "--set",
                   "workload.num_requests=3") == 0  # fmt: skip
    assert len(out.read_text().splitlines()) == 3
    assert _export(tmp_path, "--format", "vllm-custom", "--out", str(out)) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "s.yaml", "w.jsonl"]


def test_variants_that_differ_need_a_choice(tmp_path: Path) -> None:
    raw = {**SCENARIO, "variants": {"a": {}, "b": {"seed": 9}}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    out = tmp_path / "w.csv"
    assert _export(tmp_path, "--format", "csv", "--out", str(out)) == 2
    assert _export(tmp_path, "--format", "csv", "--out", str(out), "--variant", "c") == 2
    assert not out.exists()
    assert _export(tmp_path, "--format", "csv", "--out", str(out), "--variant", "b") == 0
    same = {**SCENARIO, "seed": 9}
    assert out.read_text() == wx.to_csv(_requests(same)).text


def _requests(raw: dict) -> RequestArrays:
    from sim.scenario.load import load_any
    from sim.workload import generate_requests

    scenario = load_any(raw)
    spec = scenario.variants[0].spec
    return generate_requests(spec.workload, np.random.default_rng(spec.seed), Path.cwd(), None)
