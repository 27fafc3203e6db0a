"""The fuzz corpus, part 5: bad `batchsim export` command lines: formats, output files that must
not be written or replaced, variants, workloads that have no trace to give, broken scenarios.

Each case expects the flag or file at fault in its line; none may leave a file behind.
"""

from __future__ import annotations

from fuzz_corpus import BASE, Case, dump

GOOD = {"s.yaml": dump(BASE)}
SESSIONS = {
    **{k: v for k, v in BASE.items() if k != "workload"},
    "workload": {
        "sessions": {
            "arrival": {"process": "poisson", "rate": 0.5},
            "num_sessions": 3,
            "turns": {"dist": "fixed", "value": 2},
            "first_prompt": {"dist": "fixed", "value": 100},
            "user_tokens": {"dist": "fixed", "value": 10},
            "output_tokens": {"dist": "fixed", "value": 5},
            "think_time": {"dist": "exponential", "mean_s": 3},
        }
    },
}
NO_TRACE = {**BASE, "workload": {"trace": {"path": "none.csv", "format": "csv"}}}


def _export(case_id: str, *args: str, expect: tuple[str, ...], files: dict | None = None) -> Case:
    return Case(f"export-{case_id}", ("export", *args), expect, {**GOOD, **(files or {})})


def export_cases() -> list[Case]:
    csv = ("--format", "csv")
    return [
        _export("no-format", "s.yaml", "--out", "w.csv", expect=("--format",)),
        _export("bad-format", "s.yaml", "--format", "parquet", "--out", "w", expect=("--format",)),
        _export("no-out", "s.yaml", *csv, expect=("--out",)),
        _export("out-folder", "s.yaml", *csv, "--out", "results", expect=("--out", "folder")),
        _export("out-dot", "s.yaml", *csv, "--out", ".", expect=("--out", "folder")),
        _export("out-no-parent", "s.yaml", *csv, "--out", "nowhere/w.csv",
                expect=("--out", "does not exist")),
        _export("out-foreign", "s.yaml", *csv, "--out", "results/notes.txt",
                expect=("--out", "not a csv export", "--force")),
        _export("out-other-format", "s.yaml", "--format", "mooncake", "--out", "w.csv",
                expect=("--out", "not a mooncake export"),
                files={"w.csv": b"arrival_s,prompt_tokens,output_tokens\n0.0,1,1\n"}),
        _export("out-device", "s.yaml", *csv, "--out", "/dev/null",
                expect=("--out", "not a regular file")),
        _export("out-binary", "s.yaml", *csv, "--out", "w.csv", expect=("not a csv export",),
                files={"w.csv": b"\xff\xfe\x00garbage"}),
        _export("variant-unknown", "s.yaml", *csv, "--out", "w.csv", "--variant", "zz",
                expect=("--variant", "no variant 'zz'")),
        _export("variants-differ", "s.yaml", *csv, "--out", "w.csv", "--set",
                "variants.b.seed=7", expect=("s.yaml", "variants", "--variant")),
        _export("closed-loop", "c.yaml", *csv, "--out", "w.csv",
                expect=("c.yaml", "workload", "closed-loop"),
                files={"c.yaml": dump(SESSIONS)}),
        _export("missing-scenario", "nope.yaml", *csv, "--out", "w.csv", expect=("nope.yaml",)),
        _export("bad-set", "s.yaml", *csv, "--out", "w.csv", "--set", "workload.num_requests=-3",
                expect=("workload.num_requests",)),
        _export("bad-scenario", "b.yaml", *csv, "--out", "w.csv", expect=("b.yaml", "policy"),
                files={"b.yaml": dump({**BASE, "policy": {"name": "nope"}})}),
        _export("missing-trace", "t.yaml", *csv, "--out", "w.csv",
                expect=("none.csv", "not found"), files={"t.yaml": dump(NO_TRACE)}),
    ]
