"""The fuzz corpus, part 3: bad command lines (flags, overrides, output folders, what-if runs,
results folders given to `report`).

The "file" an error must name is the flag or the path at fault here, so each case expects the
flag (`--workers`, `--slo`) or the path in its line.
"""

from __future__ import annotations

import importlib.util
import json
import socket

from fuzz_corpus import BASE, Case, dump, edited

GOOD = {"s.yaml": dump(BASE)}


def _free_port() -> int:
    """A local port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run(case_id: str, *args: str, expect: tuple[str, ...], files: dict | None = None) -> Case:
    return Case(
        case_id, ("run", "s.yaml", "-q", "--no-plots", *args), expect, {**GOOD, **(files or {})}
    )


def set_cases() -> list[Case]:
    sets = {
        "no-equals": ("nonsense", ("--set", "KEY.PATH=VALUE")),
        "empty-key": ("=5", ("--set", "empty key")),
        "empty-part": ("a..b=1", ("--set", "empty key")),
        "bad-yaml-value": ("policy.max_num_seqs=[1,", ("--set", "policy.max_num_seqs")),
        "typo-variant": ("variants.c.policy.max_num_seqs=4", ("--set", "no variant 'c'")),
        "not-a-mapping": ("seed.x=1", ("seed", "not a mapping")),
        "name-dot": ("name=.", ("name", "'.'")),
        "name-dotdot": ("name=..", ("name", "'..'")),
        "name-slash": ("name=a/b", ("name", "separator")),
        "name-absolute": ("name=/etc", ("name", "separator")),
        "name-empty": ("name=", ("name",)),
        "name-long": ("name=" + "x" * 300, ("name", "at most")),
        "bool-count": ("workload.num_requests=true", ("workload.num_requests", "true")),
        "list-index": ("variants.b.policy.max_batch_size.0=1", ("max_batch_size",)),
        "value-bomb": ("description=" + "&a [" + ",".join(["*a"] * 3) + "]", ("--set",)),
    }
    return [
        _run(f"set-{label}", "--set", assignment, expect=expect)
        for label, (assignment, expect) in sets.items()
    ]


def out_cases() -> list[Case]:
    return [
        _run(
            "out-file",
            "--out",
            "f.txt",
            expect=("--out", "f.txt", "is a file"),
            files={"f.txt": b"x"},
        ),
        _run(
            "out-under-file",
            "--out",
            "f.txt/sub",
            expect=("--out", "is a file"),
            files={"f.txt": b"x"},
        ),
        _run("out-dev-null", "--out", "/dev/null", expect=("--out", "/dev/null", "device")),
        _run("out-proc", "--out", "/proc/self/x", expect=("--out", "/proc", "proc")),
        _run("out-sys", "--out", "/sys/fuzz", expect=("--out", "/sys")),
        _run(
            "out-foreign-folder",
            "--out",
            "mine",
            expect=("mine/fuzz", "not written by"),
            files={"mine": None, "mine/fuzz": None, "mine/fuzz/notes.txt": b"mine"},
        ),
        _run(
            "out-name-is-file",
            "--out",
            "mine",
            expect=("mine/fuzz", "not a folder"),
            files={"mine": None, "mine/fuzz": b"a file"},
        ),
        _run("flag-trace-requests", "--trace-requests", "-1", expect=("--trace-requests",)),
        _run("flag-trace-requests-text", "--trace-requests", "x", expect=("--trace-requests",)),
        _run("flag-tables", "--tables", "some", expect=("--tables", "invalid choice")),
        _run("flag-format", "--format", "xml", expect=("--format", "invalid choice")),
        _run("flag-unknown", "--bogus", expect=("unrecognized arguments", "--bogus")),
        Case("cli-no-command", (), ("batchsim", "command"), {}),
        Case("cli-unknown-command", ("simulate",), ("batchsim", "simulate"), {}),
        Case("cli-run-no-file", ("run",), ("batchsim run", "scenario"), {}),
    ]


def sweep_cases() -> list[Case]:
    def sweep(case_id: str, *args: str, expect: tuple[str, ...], files: dict | None = None) -> Case:
        return Case(case_id, ("sweep", "s.yaml", "-q", *args), expect, {**GOOD, **(files or {})})

    grid = ("--grid", "policy.max_num_seqs=4,8")
    port = _free_port()
    return [
        sweep("sweep-workers-0", *grid, "--workers", "0", expect=("--workers", "at least 1")),
        sweep("sweep-workers-neg", *grid, "--workers", "-3", expect=("--workers", "at least 1")),
        sweep("sweep-workers-text", *grid, "--workers", "two", expect=("--workers",)),
        sweep("sweep-grid-no-equals", "--grid", "policy", expect=("--grid", "KEY.PATH=")),
        sweep("sweep-grid-empty", "--grid", "policy.max_num_seqs=", expect=("--grid", "empty")),
        sweep(
            "sweep-grid-dup",
            "--grid",
            "policy.max_num_seqs=4,8,4",
            expect=("--grid policy.max_num_seqs", "listed twice"),
        ),
        sweep(
            "sweep-grid-dup-float",
            "--grid",
            "workload.arrival.rate=2,2.0",
            expect=("--grid workload.arrival.rate", "listed twice"),
        ),
        sweep("sweep-grid-twice", *grid, *grid, expect=("--grid policy.max_num_seqs", "twice")),
        sweep("sweep-grid-reserved", "--grid", "variant=1,2", expect=("--grid variant",)),
        sweep(
            "sweep-grid-bad-value",
            "--grid",
            "policy.max_num_seqs=4,-1",
            expect=("--grid policy.max_num_seqs=-1", "s.yaml", "must be > 0"),
        ),
        sweep(
            "sweep-grid-huge",
            "--grid",
            "seed=" + ",".join(map(str, range(400))),
            "--grid",
            "policy.max_num_seqs=" + ",".join(map(str, range(1, 400))),
            expect=("--grid", "points", "at most"),
        ),
        sweep(
            "sweep-out-file",
            *grid,
            "--out",
            "f.txt",
            expect=("--out", "f.txt", "is a file"),
            files={"f.txt": b"x"},
        ),
        sweep(
            "sweep-out-foreign",
            *grid,
            "--out",
            "mine",
            expect=("--out", "mine", "sweep"),
            files={"mine": None, "mine/notes.txt": b"mine"},
        ),
        sweep(
            "sweep-ray-unreachable",
            *grid,
            "--backend",
            "ray",
            "--address",
            f"127.0.0.1:{port}",
            expect=("--address", f"127.0.0.1:{port}", "reachable"),
        ),
        sweep(
            "sweep-ray-client",
            *grid,
            "--backend",
            "ray",
            "--address",
            f"ray://127.0.0.1:{port}",
            expect=("--address", f"ray://127.0.0.1:{port}"),
        ),
        sweep(
            "sweep-ray-bad-address",
            *grid,
            "--backend",
            "ray",
            "--address",
            "nowhere",
            expect=("--address", "HOST:PORT"),
        ),
        sweep("sweep-backend", *grid, "--backend", "slurm", expect=("--backend",)),
        sweep("sweep-bad-scenario", *grid, "--set", "seed=-1", expect=("s.yaml", "seed")),
    ]


def capacity_cases() -> list[Case]:
    def cap(case_id: str, *args: str, expect: tuple[str, ...]) -> Case:
        return Case(case_id, ("capacity", "s.yaml", *args), expect, GOOD)

    return [
        Case("capacity-rate-profile", ("capacity", "s.yaml", "--slo", "ttft_p90=1"),
             ("s.yaml", "rate profile", "workload.arrival.scale"),
             {"s.yaml": dump(edited("workload.arrival", {
                 "process": "profile",
                 "rate": {"shape": "ramp", "from_rate": 1.0, "to_rate": 5.0, "over_s": 10.0}}))}),
        cap("capacity-slo-neg", "--slo", "ttft_p90=-1", expect=("--slo", "ttft_p90=-1")),
        cap("capacity-slo-zero", "--slo", "ttft_p90=0", expect=("--slo", "> 0")),
        cap("capacity-slo-nan", "--slo", "ttft_p90=nan", expect=("--slo", "finite")),
        cap("capacity-slo-inf", "--slo", "ttft_p90=inf", expect=("--slo", "finite")),
        cap("capacity-slo-text", "--slo", "ttft_p90=fast", expect=("--slo", "not a number")),
        cap("capacity-slo-metric", "--slo", "speed=1", expect=("--slo", "no summary metric")),
        cap("capacity-slo-form", "--slo", "ttft_p90", expect=("--slo", "METRIC=VALUE")),
        cap("capacity-slo-fraction", "--slo", "slo_attainment>=1.5", expect=("--slo", "fraction")),
        cap(
            "capacity-tolerance-0",
            "--slo",
            "ttft_p90=1",
            "--tolerance",
            "0",
            expect=("--tolerance",),
        ),
        cap(
            "capacity-tolerance-nan",
            "--slo",
            "ttft_p90=1",
            "--tolerance",
            "nan",
            expect=("--tolerance",),
        ),
        cap(
            "capacity-repeats-neg",
            "--slo",
            "ttft_p90=1",
            "--repeats",
            "-1",
            expect=("--repeats", "at least 0"),
        ),
        cap("capacity-no-slo", expect=("--slo", "required")),
    ]


def _results_folder(summary: bytes | None, scenario: bytes | None) -> dict[str, bytes | None]:
    files: dict[str, bytes | None] = {"r": None}
    if summary is not None:
        files["r/summary.json"] = summary
    if scenario is not None:
        files["r/scenario.yaml"] = scenario
    return files


def report_cases() -> list[Case]:
    good_summary = json.dumps({"scenario": "x", "variants": {"a": {"num_requests": 1}}}).encode()
    scenario = b"scenario: x\nvariants: {}\n"

    def report(case_id: str, files: dict[str, bytes | None], *expect: str) -> Case:
        return Case(case_id, ("report", "r"), ("r", *expect), files)

    return [
        report("report-missing", {}, "no such folder"),
        report("report-file", {"r": b"x"}, "is a file"),
        report("report-empty", _results_folder(None, None), "no summary.json"),
        report(
            "report-corrupt",
            _results_folder(b'{"variants": {', scenario),
            "summary.json",
            "not valid JSON",
        ),
        report(
            "report-deep",
            _results_folder(b"[" * 100_000 + b"]" * 100_000, scenario),
            "summary.json",
        ),
        report("report-shape", _results_folder(b"[1, 2]", scenario), "summary.json", "variants"),
        report(
            "report-variants-list", _results_folder(b'{"variants": [1]}', scenario), "summary.json"
        ),
        report("report-no-scenario", _results_folder(good_summary, None), "scenario.yaml"),
        report("report-bad-scenario", _results_folder(good_summary, b"a: [\n"), "scenario.yaml"),
        report(
            "report-foreign",
            {**_results_folder(good_summary, scenario), "r/notes.txt": b"mine"},
            "not written by batchsim",
        ),
        report("report-latin1", _results_folder(b'{"s": "caf\xe9"}', scenario), "not UTF-8"),
    ]


def calibration_cases() -> list[Case]:
    """The calibration plug-in's commands (`calibrate` only where torch is installed)."""
    timings = b"num_seqs,num_tokens,sum_context_tokens,step_s\n1,1,10,0.01\n"
    cases = [
        Case("fit-missing", ("fit", "t.csv", "--out", "o"), ("t.csv", "not found"), {}),
        Case(
            "fit-latin1",
            ("fit", "t.csv", "--out", "o"),
            ("t.csv", "line 3", "not UTF-8"),
            {"t.csv": timings + b"2,2,\xe9,0.02\n"},
        ),
        Case(
            "fit-header",
            ("fit", "t.csv", "--out", "o"),
            ("t.csv", "header", "step_s"),
            {"t.csv": b"a,b\n1,2\n"},
        ),
        Case(
            "fit-step",
            ("fit", "t.csv", "--out", "o"),
            ("t.csv", "line 3", "step_s"),
            {"t.csv": timings + b"2,2,20,-1\n"},
        ),
    ]
    if importlib.util.find_spec("torch") is not None:
        cases.append(
            Case(
                "calibrate-device",
                ("calibrate", "--model", "llama-56m-example", "--device", "nope", "--out", "o"),
                ("--device", "'nope'"),
                {},
            )
        )
    return cases


def other_cases() -> list[Case]:
    return [
        _run("stream-tables-all", "--stream", "--tables", "all", expect=("--stream",)),
        _run("stream-trace", "--stream", "--trace", expect=("--stream",)),
        _run(
            "caching-contiguous",
            "--set",
            "policy.prefix_caching=true",
            "--set",
            "policy.kv_reservation=exact",
            expect=("s.yaml", "prefix_caching"),
        ),
        Case("catalog-model", ("catalog", "--model", "nope"), ("--model", "nope"), {}),
        Case("catalog-tp-0", ("catalog", "--tensor-parallel", "0"), ("--tensor-parallel",), {}),
        Case("catalog-block-0", ("catalog", "--block-size", "0"), ("--block-size",), {}),
        Case("catalog-dp-0", ("catalog", "--data-parallel", "0"), ("--data-parallel",), {}),
        Case("catalog-pp-x", ("catalog", "--pipeline-parallel", "x"), ("--pipeline-parallel",),
             {}),
        Case("catalog-dense-ep", ("catalog", "--model", "qwen3-32b", "--hardware", "h200",
                                  "--data-parallel", "2", "--expert-parallel"),
             ("--data-parallel needs a mixture-of-experts model",), {}),
        Case("catalog-pp-layers", ("catalog", "--model", "llama-2-7b", "--hardware", "h100-sxm",
                                   "--pipeline-parallel", "64"),
             ("--pipeline-parallel (64) exceeds llama-2-7b's 32 layers",), {}),
        Case("catalog-fp2", ("catalog", "--weight-dtype", "fp2"), ("--weight-dtype",), {}),
        Case(
            "catalog-util",
            ("catalog", "--gpu-memory-utilization", "2"),
            ("--gpu-memory-utilization",),
            {},
        ),
        Case(
            "regress-empty",
            ("regress", "--scenarios", "d", "--baselines", "b"),
            ("d",),
            {"d": None},
        ),
        Case(
            "regress-no-baseline",
            ("regress", "--scenarios", "d", "--baselines", "b"),
            ("no baseline", "b/s.json"),
            {"d": None, "d/s.yaml": dump(BASE)},
        ),
        Case(
            "validate-set",
            ("validate", "s.yaml", "--set", "policy.mode=fast"),
            ("s.yaml", "policy.mode"),
            GOOD,
        ),
    ]


def error_bar_cases() -> list[Case]:
    """`run --seeds N` (2 to 1000) and `run --band X` (a percentage strictly between 0 and 100),
    refused by the flag's own check, or by the GPU-time scale a band end would need."""
    seeds = {"0": "0", "1": "1", "neg": "-3", "text": "'x'", "huge": "100000"}
    band = {"0": "0", "100": "100", "neg": "-5", "nan": "nan", "text": "'x'"}
    return [
        *(_run(f"flag-seeds-{k}", "--seeds", v.strip("'"), expect=("--seeds", v))
          for k, v in seeds.items()),
        *(_run(f"flag-band-{k}", "--band", v.strip("'"), expect=("--band", v))
          for k, v in band.items()),
        _run("flag-band-scale-floor", "--band", "95",
             expect=("--band 95", "engine.pricing.gpu_time_scale")),
        _run("flag-band-workers-0", "--band", "5", "--workers", "0", expect=("--workers",)),
    ]  # fmt: skip


def serve_cases() -> list[Case]:
    """`batchsim serve`: each bad flag is refused before anything listens."""

    def serve(case_id: str, *args: str, expect: tuple[str, ...], files: dict | None = None) -> Case:
        return Case(case_id, ("serve", "s.yaml", "-q", *args), expect, {**GOOD, **(files or {})})

    return [
        serve("serve-speed-zero", "--speed", "0", expect=("--speed", "between")),
        serve("serve-speed-nan", "--speed", "nan", expect=("--speed", "between")),
        serve("serve-speed-word", "--speed", "fast", expect=("--speed", "not a number")),
        serve("serve-port-negative", "--port", "-1", expect=("--port",)),
        serve("serve-port-70000", "--port", "70000", expect=("--port", "not a port")),
        serve("serve-port-huge", "--port", str(1 << 70), expect=("--port", "not a port")),
        serve("serve-per-instance-past-65535", "--port", "65535", "--per-instance",
              "--set", "cluster.instances=[{count: 2}]", expect=("--port", "past 65535")),
        serve("serve-drain-huge", "--drain-s", "1e9", expect=("--drain-s", "between")),
        serve("serve-variant-missing", "--variant", "nope", expect=("--variant", "no variant")),
        serve("serve-tokenizer-missing", "--tokenizer", "nowhere",
              expect=("--tokenizer", "no tokenizer.json")),
        serve("serve-tokenizer-bad", "--tokenizer", "tok",
              expect=("--tokenizer", "not a tokenizer"),
              files={"tok": None, "tok/tokenizer.json": b"{not json"}),
        serve("serve-bad-set", "--set", "policy.max_num_seqs=-3", expect=("max_num_seqs",)),
    ]


def cli_cases() -> list[Case]:
    return [
        *error_bar_cases(),
        *set_cases(),
        *out_cases(),
        *sweep_cases(),
        *capacity_cases(),
        *report_cases(),
        *calibration_cases(),
        *other_cases(),
        *serve_cases(),
    ]
