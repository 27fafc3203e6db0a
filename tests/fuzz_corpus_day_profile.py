"""The fuzz corpus: bad `batchsim workload day-profile` command lines.

Every numeric flag with a value that is not a number, not finite, negative or out of range; a
peak hour past the period; bins too wide for the trace or too narrow for a profile's points;
output files that must not be written or replaced; traces that are missing, empty, of an
unknown format or broken on a line. Each case names the flag or the file (and line) at fault;
none may leave a file behind.
"""

from __future__ import annotations

from fuzz_corpus import Case, Sparse

# a batchsim trace csv of 300 requests over 598 s: ten 60-s bins
GOOD_TRACE = b"arrival_s,prompt_tokens,output_tokens\n" + b"".join(
    f"{2 * i},100,10\n".encode() for i in range(300)
)
FILES: dict[str, bytes | None] = {"t.csv": GOOD_TRACE}


def _case(case_id: str, *args: str, expect: tuple[str, ...], files: dict | None = None) -> Case:
    argv = ("workload", "day-profile", *args)
    return Case(f"dayprofile-{case_id}", argv, expect, {**FILES, **(files or {})})


def _flag_cases() -> list[Case]:
    bad = {
        "--mean-rate": ("abc", "nan", "inf", "-3", "0", "2e9"),
        "--period-s": ("abc", "nan", "-1", "0", "2e9"),
        "--peak-to-trough": ("abc", "nan", "0.5", "-2", "1e7"),
        "--peak-hour": ("abc", "nan", "-1", "24", "1e300"),
        "--bin-s": ("abc", "inf", "-60", "0"),
        "--seed": ("abc", "-1", "1.5", "1e30"),
    }
    cases = []
    for flag, values in bad.items():
        for i, value in enumerate(values):
            cases.append(
                _case(f"{flag[2:]}-{i}", "t.csv", "--out", "p.csv", flag, value, expect=(flag,))
            )
    return cases


def day_profile_cases() -> list[Case]:
    out = ("--out", "p.csv")
    jsonl_bad = (
        b'{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\nnot json\n'
    )
    return [
        *_flag_cases(),
        _case("no-out", "t.csv", expect=("--out",)),
        # a sparse 20 GB trace: refused by its size, not read into memory
        _case(
            "sparse-20gb",
            "big.csv",
            *out,
            expect=("big.csv", "at most 2048 MiB"),
            files={"big.csv": Sparse(20 * 10**9, GOOD_TRACE)},
        ),
        _case("no-trace", *out, expect=("trace",)),
        _case("bad-format", "t.csv", *out, "--format", "parquet", expect=("--format",)),
        _case(
            "peak-hour-past-period",
            "t.csv",
            *out,
            "--period-s",
            "3600",
            "--peak-hour",
            "1",
            expect=("--peak-hour", "below the period's 1 h"),
        ),
        _case(
            "bin-wider-than-period",
            "t.csv",
            *out,
            "--period-s",
            "100",
            "--peak-hour",
            "0",
            "--bin-s",
            "200",
            expect=("--bin-s", "at most the period"),
        ),
        _case(
            "too-many-steps", "t.csv", *out, "--bin-s", "0.2", expect=("--bin-s", "at most 200000")
        ),
        _case(
            "trace-too-short",
            "t.csv",
            *out,
            "--bin-s",
            "300",
            expect=("t.csv", "--bin-s", "fewer than 2 bins"),
        ),
        _case(
            "peak-too-high",
            "t.csv",
            *out,
            "--mean-rate",
            "9e8",
            "--peak-to-trough",
            "1e6",
            expect=("--mean-rate", "peak"),
        ),
        _case("missing-trace", "none.csv", *out, expect=("none.csv", "not found")),
        _case("trace-folder", "results", *out, expect=("results", "folder")),
        _case("empty-trace", "e.csv", *out, expect=("e.csv",), files={"e.csv": b""}),
        _case(
            "unknown-header",
            "u.csv",
            *out,
            expect=("u.csv", "line 1", "--format"),
            files={"u.csv": b"when,what\n1,2\n"},
        ),
        _case(
            "header-only",
            "h.csv",
            *out,
            expect=("h.csv", "no rows"),
            files={"h.csv": b"arrival_s,prompt_tokens,output_tokens\n"},
        ),
        _case(
            "one-request",
            "o.csv",
            *out,
            expect=("o.csv", "--bin-s", "spans 0 s"),
            files={"o.csv": b"arrival_s,prompt_tokens,output_tokens\n5,1,1\n"},
        ),
        _case(
            "bad-row",
            "b.csv",
            *out,
            expect=("b.csv", "line 4"),
            files={"b.csv": GOOD_TRACE.replace(b"\n4,100", b"\nx,100")},
        ),
        _case(
            "out-of-order",
            "r.csv",
            *out,
            expect=("r.csv", "line 5", "out of order"),
            files={"r.csv": GOOD_TRACE.replace(b"\n6,100", b"\n1,100")},
        ),
        _case(
            "azure-bad-stamp",
            "a.csv",
            *out,
            expect=("a.csv", "line 3", "TIMESTAMP"),
            files={
                "a.csv": b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
                b"2023-11-16 18:15:46.6805900,374,44\nyesterday,1,1\n"
            },
        ),
        _case(
            "mooncake-bad-line",
            "m.jsonl",
            *out,
            expect=("m.jsonl", "line 2", "not JSON"),
            files={"m.jsonl": jsonl_bad},
        ),
        _case(
            "wrong-format-flag",
            "t.csv",
            *out,
            "--format",
            "azure",
            expect=("t.csv", "line 1", "missing column(s) TIMESTAMP"),
        ),
        _case("out-folder", "t.csv", "--out", "results", expect=("--out", "folder")),
        _case(
            "out-no-parent", "t.csv", "--out", "nowhere/p.csv", expect=("--out", "does not exist")
        ),
        _case(
            "out-foreign",
            "t.csv",
            "--out",
            "results/notes.txt",
            expect=("--out", "not a rate profile", "--force"),
        ),
        _case("out-is-trace", "t.csv", "--out", "t.csv", expect=("--out", "not a rate profile")),
        _case("out-device", "t.csv", "--out", "/dev/null", expect=("--out", "not a regular file")),
    ]
