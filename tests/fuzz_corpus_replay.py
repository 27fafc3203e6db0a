"""The fuzz corpus, part 8: bad `batchsim replay` and `batchsim calibrate-engine` command lines:
measured runs that are missing or of another tool, broken `--options` files, fit windows and
terms, preset files that must not be written or replaced, and scenarios whose engine preset or
engine terms are wrong.

Each case expects the file or flag at fault in its line; none may leave a file behind (a
replay's results folder or a preset included).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from fuzz_corpus import BASE, Case, dump
from fuzz_corpus_measured import _otlp, _span

RUN = "t.json"
GOOD: dict[str, bytes | None] = {"s.yaml": dump(BASE), RUN: _otlp(_span())}
REPLAY = ("replay", RUN, "--scenario", "s.yaml", "-q", "--no-plots")
CALIBRATE = ("calibrate-engine", RUN, "--scenario", "s.yaml", "-q")


def _replay(case_id: str, *args: str, expect: tuple[str, ...], files: dict | None = None) -> Case:
    return Case(f"replay-{case_id}", (*REPLAY, *args), expect, {**GOOD, **(files or {})})


def _fit(case_id: str, *args: str, expect: tuple[str, ...], files: dict | None = None) -> Case:
    argv = (*CALIBRATE, *args) if "--out" in args else (*CALIBRATE, *args, "--out", "p.yaml")
    return Case(f"calibrate-{case_id}", argv, expect, {**GOOD, **(files or {})})


def _engine(**engine: Any) -> bytes:
    raw = copy.deepcopy(BASE)
    raw["engine"] = engine
    return dump(raw)


def _preset(engine: Any, kind: str = "engine_preset") -> bytes:
    return dump({"schema_version": 1, "kind": kind, "name": "p", "engine": engine})


OPTIONS = {
    "unknown-key": (b"colour: red\n", "colour"),
    "prefix-negative": (b"prefix_tokens: -5\n", "prefix_tokens"),
    "groups-zero": (b"prefix_groups: 0\n", "prefix_groups"),
    "format-unknown": (b"format: parquet\n", "parquet"),
    "not-mapping": (b"- a\n- b\n", "mapping"),
    "broken-yaml": (b"prefix_tokens: [1\n", "o.yaml"),
}
WINDOWS = {"reversed": "5:1", "text": "x", "negative": "-1:3", "empty": "2:2", "inf": "0:inf",
           "three": "1:2:3"}  # fmt: skip
# scenario files whose engine section is wrong: (content, what the line must say)
SCENARIOS = {
    "preset-missing": (_engine(preset="missing.yaml"), ("missing.yaml",)),
    "preset-unknown-name": (_engine(preset="no-such"), ("engine.preset", "no-such")),
    "preset-empty": (_engine(preset=""), ("s.yaml", "engine.preset")),
    "frontend-negative": (_engine(frontend_s=-0.001), ("s.yaml", "engine.frontend_s")),
    "frontend-huge": (_engine(frontend_s=1e9), ("s.yaml", "engine.frontend_s")),
    "frontend-text": (_engine(frontend_s="fast"), ("s.yaml", "engine.frontend_s")),
    "cold-start-negative": (_engine(cold_start_s=-1), ("s.yaml", "engine.cold_start_s")),
    "async-text": (_engine(async_scheduling="sometimes"), ("s.yaml", "engine.async_scheduling")),
    "async-number": (_engine(async_scheduling=2), ("s.yaml", "engine.async_scheduling")),
    "version-empty": (_engine(version=""), ("s.yaml", "engine.version")),
    "cold-start-huge": (_engine(cold_start_s=1e7), ("s.yaml", "engine.cold_start_s")),
    "scale-zero": (_engine(pricing={"gpu_time_scale": 0}), ("s.yaml", "gpu_time_scale")),
    "scale-huge": (_engine(pricing={"gpu_time_scale": 100}), ("s.yaml", "gpu_time_scale")),
    "per-step-negative": (
        _engine(pricing={"cpu_overhead": {"per_step_s": -1}}), ("s.yaml", "per_step_s")
    ),
}
# preset files a scenario names (engine: {preset: p.yaml}) that are wrong
PRESETS = {
    "preset-wrong-kind": (_preset({"frontend_s": 0.001}, kind="profile"), ("p.yaml", "kind")),
    "preset-chained": (_preset({"preset": "q.yaml"}), ("p.yaml", "engine.preset")),
    "preset-not-mapping": (_preset([1, 2]), ("p.yaml", "engine")),
    "preset-bad-value": (_preset({"frontend_s": -2}), ("p.yaml", "engine.frontend_s", "-2")),
    "preset-unknown-key": (_preset({"warp": 1}), ("p.yaml", "engine.warp")),
    "preset-is-folder": (None, ("p.yaml",)),
    "preset-not-yaml": (b"kind: engine_preset\nengine: {frontend_s: [\n", ("p.yaml",)),
}


def _both(case_id: str, expect: tuple[str, ...], files: dict[str, bytes | None]) -> list[Case]:
    return [
        _replay(case_id, expect=expect, files=files),
        _fit(case_id, "--out", "fit.yaml", expect=expect, files=files),
    ]


ONE = {k: v for k, v in BASE.items() if k != "variants"}
POINTS_HEAD = b"conc,isl,osl,total_tput_tok_s,tpot_mean_s\n"
POINTS_GOOD = POINTS_HEAD + b"1,100,10,500,0.01\n4,100,10,1500,0.012\n"
# closed-loop points files (calibrate-engine --points pts.csv) that are wrong
POINTS = {
    "no-tpot": (b"conc,isl,osl,total_tput_tok_s\n1,10,10,5\n", ("pts.csv", "tpot_mean_s")),
    "no-throughput": (b"conc,isl,osl,tpot_mean_s\n1,10,10,0.01\n", ("pts.csv", "throughput")),
    "conc-text": (POINTS_GOOD + b"many,100,10,500,0.01\n", ("pts.csv", "line 4", "conc")),
    "conc-zero": (POINTS_HEAD + b"0,100,10,500,0.01\n", ("pts.csv", "line 2", "conc")),
    "conc-fraction": (POINTS_HEAD + b"1.5,100,10,500,0.01\n", ("line 2", "whole number")),
    "conc-huge": (POINTS_HEAD + b"1e9,100,10,500,0.01\n", ("line 2", "conc")),
    "tput-negative": (POINTS_HEAD + b"1,100,10,-5,0.01\n", ("line 2", "total_tput_tok_s")),
    "tpot-nan": (POINTS_HEAD + b"1,100,10,500,nan\n", ("line 2", "tpot_mean_s")),
    "tpot-empty": (POINTS_HEAD + b"1,100,10,500,\n", ("line 2", "tpot_mean_s", "empty")),
    "isl-huge": (POINTS_HEAD + b"1,1e12,10,500,0.01\n", ("line 2", "isl")),
    "ratio-above-one": (
        b"conc,isl,osl,random_range_ratio,total_tput_tok_s,tpot_mean_s\n1,9,9,2,5,0.01\n",
        ("line 2", "random_range_ratio"),
    ),
    "per-gpu-without-gpus": (
        b"conc,isl,osl,tput_per_gpu,tpot_mean_s\n1,9,9,5,0.01\n", ("pts.csv", "num_gpus")
    ),
    "header-only": (POINTS_HEAD, ("pts.csv", "no points")),
    "empty": (b"", ("pts.csv",)),
    "folder": (None, ("pts.csv",)),
}


def _points(case_id: str, *args: str, expect: tuple[str, ...], files: dict | None = None,
            name: str = "pts.csv") -> Case:
    argv = ("calibrate-engine", "--points", name, "--scenario", "one.yaml", "-q", *args)
    if "--out" not in args:
        argv = (*argv, "--out", "p.yaml")
    base = {"one.yaml": dump(ONE), "s.yaml": dump(BASE), "pts.csv": POINTS_GOOD}
    return Case(f"calibrate-points-{case_id}", argv, expect, {**base, **(files or {})})


def points_cases() -> list[Case]:
    bench = json.dumps({"backend": "vllm", "max_concurrency": None, "duration": 2.0,
                        "input_lens": [10, 20], "output_lens": [3, 4], "ttfts": [0.1, 0.2],
                        "itls": [[0.05, 0.05], [0.05, 0.05, 0.05]], "errors": ["", ""]})
    overlap = {**ONE, "engine": {"pricing": {"cpu_overhead": {"per_step_s": 0.001,
                                                              "overlap": True}}}}
    cases = [
        _points(name, expect=expect, files={"pts.csv": content})
        for name, (content, expect) in POINTS.items()
    ]
    cases += [
        _points("missing", expect=("nope.csv",), name="nope.csv"),
        _points("open-loop-bench", expect=("b.json", "not a closed-loop point"), name="b.json",
                files={"b.json": bench.encode()}),
        _points("otlp-run", expect=(RUN, "closed-loop points"), name=RUN, files={RUN: GOOD[RUN]}),
        _points("with-runs", RUN, expect=("runs", "--points"), files={RUN: GOOD[RUN]}),
        _points("with-holdout", "--holdout", RUN, expect=("--holdout",), files={RUN: GOOD[RUN]}),
        _points("with-prefix", "--prefix-tokens", "8", expect=("--prefix-tokens",)),
        _points("variants", "--scenario", "s.yaml", expect=("s.yaml", "variants")),
        _points("fit-unknown", "--fit", "gpu_time_scale,warp_s", expect=("--fit", "warp_s")),
        _points("fit-overlap", "--scenario", "ov.yaml", expect=("--fit", "overlap"),
                files={"ov.yaml": dump(overlap)}),
        _points("out-foreign", "--out", "one.yaml", expect=("one.yaml", "not replaced")),
    ]  # fmt: skip
    return cases


def replay_cases() -> list[Case]:
    missing = ("nope.json", "--scenario", "s.yaml", "-q")
    wrong_tool = {RUN: b'{"benchmarks": []}'}
    cases = [
        Case("replay-run-missing", ("replay", *missing), ("nope.json",), dict(GOOD)),
        Case("calibrate-run-missing", ("calibrate-engine", *missing, "--out", "p.yaml"),
             ("nope.json",), dict(GOOD)),
        _replay("run-wrong-tool", "--format", "vllm_otlp", expect=(RUN, "GuideLLM"),
                files=wrong_tool),
        _fit("run-wrong-tool", "--format", "vllm_otlp", expect=(RUN, "GuideLLM"),
             files=wrong_tool),
        _replay("run-empty", expect=(RUN,), files={RUN: b""}),
        _replay("options-missing", "--options", "o.yaml", expect=("o.yaml", "not found")),
        _fit("benchmark-one-only", "--benchmark", "3", expect=(RUN, "--benchmark does not apply")),
        _replay("scenario-missing", "--scenario", "none.yaml", expect=("none.yaml",)),
    ]  # fmt: skip
    for name, (content, why) in OPTIONS.items():
        files = {"o.yaml": content}
        cases += [
            _replay(f"options-{name}", "--options", "o.yaml", expect=(why,), files=files),
            _fit(f"options-{name}", "--options", "o.yaml", expect=(why,), files=files),
        ]
    for name, text in WINDOWS.items():
        cases.append(_fit(f"window-{name}", f"--fit-window={text}", expect=("--fit-window",)))
    cases += [
        _fit("fit-unknown", "--fit", "per_step_s,warp_s", expect=("--fit", "warp_s")),
        _fit("holdout-is-fitted", "--holdout", RUN, expect=(RUN, "--holdout", "same run")),
        _fit("holdout-same-bytes", "--holdout", "copy.json", expect=("copy.json", "same run"),
             files={"copy.json": GOOD[RUN]}),
        _replay("prefix-longer-than-prompt", "--prefix-tokens", "10000000",
                expect=("prefix_tokens", "10000000", "1527")),
        _replay("exported-twice", expect=(RUN, "cmpl-1", "more than once"),
                files={RUN: GOOD[RUN] + b"\n" + GOOD[RUN]}),
        _fit("fit-empty", "--fit", ",", expect=("--fit",)),
        _replay("clients-zero", "--set", "workload.trace.num_clients=0",
                expect=("workload.trace.num_clients", "must be >= 1")),
        _replay("clients-too-many", "--set", "workload.trace.num_clients=1000000",
                expect=("workload.trace.num_clients", "100000")),
        _fit("out-folder", "--out", "p.yaml", expect=("p.yaml", "not a file"),
             files={"p.yaml": None}),
        _fit("out-foreign", "--out", "x.yaml", expect=("x.yaml", "not replaced"),
             files={"x.yaml": b"a: 1\n"}),
        _fit("out-scenario", "--out", "s.yaml", expect=("s.yaml", "not replaced")),
        _fit("out-no-parent", "--out", "nowhere/p.yaml",
             expect=("nowhere/p.yaml", "does not exist")),
        _fit("out-not-yaml", "--out", "p.txt", expect=("--out", ".yaml")),
        _fit("out-device", "--out", "/dev/null", expect=("--out", ".yaml")),
    ]  # fmt: skip
    for name, (content, expect) in SCENARIOS.items():
        cases += _both(name, expect, {"s.yaml": content})
    for name, (content, expect) in PRESETS.items():
        cases += _both(name, expect, {"s.yaml": _engine(preset="p.yaml"), "p.yaml": content})
    return cases + points_cases()
