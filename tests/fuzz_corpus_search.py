"""The fuzz corpus, part 4: `batchsim search`: bad space files (their KV tier options, data,
expert and pipeline parallelism and P/D layouts with pools of their own too), bad flags,
scenarios a search cannot take, and bad prices or board power in a scenario's hardware.

A space case names the space file and the key at fault; a flag case names the flag. Spaces too
large to expand are generated along every axis (each refused with its size before anything is
expanded). `record_mutations` generates damaged saved results (`configs/<task id>.json`) for
tests/whatif/test_search.py: a search recomputes those instead of failing, so they are no CLI cases.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from fuzz_corpus import BAD, BASE, Case, dump, edited, scenario_case
from fuzz_corpus_cli import _free_port

SCENARIO = {k: v for k, v in copy.deepcopy(BASE).items() if k != "variants"}
SPACE: dict[str, Any] = {"gpus": ["a100-80g"], "tensor_parallel": [1], "max_instances": 4}
SEARCH = ("search", "s.yaml", "--space", "space.yaml", "--slo", "ttft_p99=1", "-q")


def _search(
    case_id: str,
    *args: str,
    expect: tuple[str, ...],
    space: Any = None,
    scenario: Any = None,
    files: dict[str, bytes | None] | None = None,
) -> Case:
    content = {
        "s.yaml": dump(SCENARIO if scenario is None else scenario),
        "space.yaml": space
        if isinstance(space, bytes)
        else dump(SPACE if space is None else space),
        **(files or {}),
    }
    return Case(case_id, (*SEARCH, *args), expect, content)


def _space(path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(SPACE)
    node = out
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return out


# space key -> which BAD values it refuses (every value but the ones listed as valid there)
SPACE_KEYS: dict[str, tuple[str, ...]] = {
    "gpus": tuple(BAD),
    "tensor_parallel": ("neg", "str", "bool", "map", "inf", "nan"),
    "data_parallel": ("neg", "str", "bool", "map", "inf", "nan"),
    "expert_parallel": tuple(BAD),  # [1, 2]: numbers, not true or false
    "pipeline_parallel": ("neg", "str", "bool", "map", "inf", "nan"),
    "layouts": tuple(BAD),
    "policies": tuple(BAD),
    "kv_tiers": tuple(BAD),
    "router": tuple(BAD),
    "link": ("neg", "str", "bool", "list", "map", "inf", "nan"),
    "link.bandwidth_gb_per_s": tuple(BAD),
    "max_instances": tuple(BAD),
}


def space_cases() -> list[Case]:
    cases = [
        _search(f"search-space-{path}-{label}", space=_space(path, BAD[label]),
                expect=("space.yaml", path))
        for path, labels in SPACE_KEYS.items()
        for label in labels
    ]  # fmt: skip
    a100 = {"name": "a100-80g"}
    explicit = {
        "gpus-empty": (_space("gpus", []), ("space.yaml", "gpus")),
        "gpus-unknown": (_space("gpus", ["h100"]), ("space.yaml", "gpus.0", "unknown hardware")),
        "gpus-twice": (_space("gpus", ["a100-80g", "a100-80g"]), ("gpus.1", "listed twice")),
        "gpus-tp": (_space("gpus", [{**a100, "tensor_parallel": 2}]), ("gpus.0.tensor_parallel",)),
        "gpus-price": (_space("gpus", [{**a100, "usd_per_gpu_hour": -1}]),
                       ("gpus.0.usd_per_gpu_hour",)),
        "gpus-idle": (_space("gpus", [{**a100, "idle_w": 900}]), ("gpus.0", "idle_w")),
        "gpus-typo": (_space("gpus", [{**a100, "usd_per_hour": 1}]), ("gpus.0.usd_per_hour",)),
        "gpus-no-price": (
            _space("gpus", [{"name": "mine", "memory_bytes": 80 * 2**30,
                             "hbm_bandwidth_bytes_per_s": 2e12, "peak_flops": 3e14}]),
            ("space.yaml", "gpus", "usd_per_gpu_hour"),
        ),
        "tp-zero": (_space("tensor_parallel", [0]), ("tensor_parallel.0",)),
        "tp-huge": (_space("tensor_parallel", [128]), ("tensor_parallel.0",)),
        "tp-twice": (_space("tensor_parallel", [1, 1]), ("tensor_parallel", "twice")),
        "layout-base60": (_space("layouts", [62]), ("layouts.0", "base 60")),
        "layout-zero": (_space("layouts", ["1p0d"]), ("layouts.0", "'1p0d'")),
        "layout-word": (_space("layouts", ["disaggregated"]), ("layouts.0",)),
        "layout-twice": (_space("layouts", ["1p1d", "1p1d"]), ("layouts", "twice")),
        "dp-zero": (_space("data_parallel", [0]), ("data_parallel.0", ">= 1")),
        "dp-huge": (_space("data_parallel", [2048]), ("data_parallel.0", "<= 1024")),
        "dp-twice": (_space("data_parallel", [8, 8]), ("data_parallel", "twice")),
        "dp-empty": (_space("data_parallel", []), ("space.yaml", "data_parallel")),
        "ep-maybe": (_space("expert_parallel", ["maybe"]), ("expert_parallel.0", "true or false")),
        "ep-number": (_space("expert_parallel", [8]), ("expert_parallel.0", "true or false")),
        "ep-scalar": (_space("expert_parallel", True), ("expert_parallel", "list")),
        "ep-twice": (_space("expert_parallel", [True, True]), ("expert_parallel", "twice")),
        "pp-zero": (_space("pipeline_parallel", [0]), ("pipeline_parallel.0", ">= 1")),
        "pp-huge": (_space("pipeline_parallel", [65]), ("pipeline_parallel.0", "<= 64")),
        "pp-text": (_space("pipeline_parallel", ["two"]), ("space.yaml", "pipeline_parallel.0")),
        "pp-twice": (_space("pipeline_parallel", [2, 2]), ("pipeline_parallel", "twice")),
        "pp-empty": (_space("pipeline_parallel", []), ("space.yaml", "pipeline_parallel")),
        "pp-scalar": (_space("pipeline_parallel", 2), ("space.yaml", "pipeline_parallel")),
        "gpus-pp": (_space("gpus", [{**a100, "pipeline_parallel": 2}]),
                    ("gpus.0.pipeline_parallel", "pipeline_parallel list")),
        "gpus-dp": (_space("gpus", [{**a100, "data_parallel": 2}]), ("gpus.0.data_parallel",)),
        "gpus-ep": (_space("gpus", [{**a100, "expert_parallel": 8}]),
                    ("gpus.0.expert_parallel",)),
        "gpus-imbalance": (_space("gpus", [{**a100, "expert_imbalance": 0.5}]),
                           ("gpus.0.expert_imbalance",)),
        "layout-role-key": (
            _space("layouts", [{"prefill": 1, "decode": 1,
                                "decode_hardware": {"stages": 2}}]),
            ("layouts.0.decode_hardware.stages", "unknown key"),
        ),
        "layout-role-pp": (
            _space("layouts", [{"prefill": 1, "decode": 1,
                                "decode_hardware": {"pipeline_parallel": 0}}]),
            ("layouts.0.decode_hardware.pipeline_parallel", ">= 1"),
        ),
        "layout-role-pp-huge": (
            _space("layouts", [{"prefill": 1, "decode": 1,
                                "prefill_hardware": {"pipeline_parallel": 128}}]),
            ("layouts.0.prefill_hardware.pipeline_parallel", "<= 64"),
        ),
        "layout-role-pp-text": (
            _space("layouts", [{"prefill": 1, "decode": 1,
                                "decode_hardware": {"pipeline_parallel": "two"}}]),
            ("layouts.0.decode_hardware.pipeline_parallel",),
        ),
        "layout-role-gpu": (
            _space("layouts", [{"prefill": 1, "decode": 1, "prefill_hardware": {"name": "h200"}}]),
            ("layouts.0.prefill_hardware.name", "unknown key"),
        ),
        "layout-role-ep": (
            _space("layouts", [{"prefill": 1, "decode": 1,
                                "decode_hardware": {"data_parallel": 4, "expert_parallel": 3}}]),
            ("layouts.0.decode_hardware.expert_parallel", "every GPU of a stage of the pool"),
        ),
        "layout-role-ep-maybe": (
            _space("layouts", [{"prefill": 1, "decode": 1,
                                "decode_hardware": {"expert_parallel": "maybe"}}]),
            ("layouts.0.decode_hardware.expert_parallel", "true or false"),
        ),
        "layout-role-tp": (
            _space("layouts", [{"prefill": 1, "decode": 1,
                                "prefill_hardware": {"tensor_parallel": 0}}]),
            ("layouts.0.prefill_hardware.tensor_parallel", ">= 1"),
        ),
        "layout-role-text": (
            _space("layouts", [{"prefill": 1, "decode": 1, "prefill_hardware": "tp8"}]),
            ("layouts.0.prefill_hardware", "mapping"),
        ),
        "layout-role-no-decode": (_space("layouts", [{"prefill": 1}]), ("layouts.0.decode",)),
        "layout-role-count": (_space("layouts", [{"prefill": 1, "decode": 17}]),
                              ("layouts.0.decode", "<= 16")),
        "layout-role-key-top": (_space("layouts", [{"prefill": 1, "decode": 1, "ratio": 2}]),
                                ("layouts.0.ratio", "unknown key")),
        "layout-role-twice": (
            _space("layouts", ["1p1d", {"prefill": 1, "decode": 1}]), ("layouts.1", "twice")
        ),
        "policy-name": (_space("policies", [{"name": "dynamic"}]), ("policies.0", "dynamic")),
        "policy-no-name": (_space("policies", [{"max_num_seqs": 4}]), ("policies.0", "name")),
        "policy-value": (
            _space("policies", [{"name": "continuous", "max_num_seqs": [8, -1]}]),
            ("policies.0.max_num_seqs", "seqs=-1"),
        ),
        "policy-key": (
            _space("policies", [{"name": "continuous", "max_num_seq": 8}]),
            ("policies.0.max_num_seq", "unknown key"),
        ),
        "tiers-empty": (_space("kv_tiers", []), ("space.yaml", "kv_tiers")),
        "tiers-capacity": (_space("kv_tiers", [{"dram": {"capacity_gb": -1}}]),
                           ("kv_tiers.0.dram.capacity_gb", "out of range")),
        "tiers-no-capacity": (_space("kv_tiers", [None, {"dram": {}}]),
                              ("kv_tiers.1.dram.capacity_gb",)),
        "tiers-kind": (_space("kv_tiers", [{"hbm": {"capacity_gb": 64}}]),
                       ("kv_tiers.0.hbm", "unknown key")),
        "tiers-write": (_space("kv_tiers", [{"write": "later", "dram": {"capacity_gb": 64}}]),
                        ("kv_tiers.0.write",)),
        "tiers-price": (_space("kv_tiers", [{"remote": {"capacity_gb": 64,
                                                         "price_per_gb_hour": -1}}]),
                        ("kv_tiers.0.remote.price_per_gb_hour",)),
        "tiers-none-given": (_space("kv_tiers", [{"write": "eviction"}]),
                             ("kv_tiers.0", "names no tier")),
        "tiers-entry-text": (_space("kv_tiers", ["dram256"]), ("space.yaml", "kv_tiers.0")),
        "tiers-null-twice": (_space("kv_tiers", [None, None]), ("kv_tiers.1", "listed twice")),
        "tiers-name-twice": (
            _space("kv_tiers", [{"dram": {"capacity_gb": 64}},
                                {"dram": {"capacity_gb": 64, "read_gb_per_s": 10}}]),
            ("kv_tiers.1", "dram64 is listed twice", "label"),
        ),
        "tiers-same-twice": (
            _space("kv_tiers", [{"dram": {"capacity_gb": 64}},
                                {"dram": {"capacity_gb": 64.0}, "label": "again"}]),
            ("kv_tiers.1", "same tiers"),
        ),
        "tiers-label": (_space("kv_tiers", [{"dram": {"capacity_gb": 64}, "label": 5}]),
                        ("kv_tiers.0.label",)),
        "tiers-store-link": (
            {**SPACE, "layouts": ["1p1d"], "link": {"via": "store"},
             "policies": [{"name": "continuous", "prefix_caching": True}],
             "kv_tiers": [{"dram": {"capacity_gb": 64}}]},
            ("space.yaml", "1p1d", "dram64", "kv_tiers.remote"),
        ),
        "unknown-key": (_space("gpu", ["a100-80g"]), ("space.yaml", "gpu", "unknown key")),
        "too-big": (
            {**SPACE, "tensor_parallel": list(range(1, 65)),
             "layouts": ["colocated", *(f"1p{d}d" for d in range(1, 16))],
             "policies": [{"name": "continuous", "max_num_seqs": list(range(1, 10))}]},
            ("space.yaml", "configurations", "at most"),
        ),
    }  # fmt: skip
    cases += [
        _search(f"search-space-{label}", space=space, expect=expect)
        for label, (space, expect) in explicit.items()
    ]
    texts = {
        "latin1": (b"# caf\xe9\n" + dump(SPACE), ("space.yaml", "not UTF-8")),
        "dup": (dump(SPACE) + b"gpus: [h200]\n", ("space.yaml", "duplicate key 'gpus'")),
        "list": (b"- a100-80g\n", ("space.yaml", "mapping")),
        "empty": (b"", ("space.yaml", "mapping")),
        "unclosed": (b"gpus: [a100-80g\n", ("space.yaml:",)),
    }
    cases += [
        _search(f"search-space-yaml-{label}", space=text, expect=expect)
        for label, (text, expect) in texts.items()
    ]
    return cases


def flag_cases() -> list[Case]:
    port = _free_port()
    flags = {
        "rate-zero": (("--rate", "0"), ("--rate",)),
        "rate-neg": (("--rate", "-2"), ("--rate",)),
        "rate-nan": (("--rate", "nan"), ("--rate",)),
        "rate-inf": (("--rate", "inf"), ("--rate",)),
        "rate-text": (("--rate", "fast"), ("--rate",)),
        "objective": (("--objective", "speed"), ("--objective", "invalid choice")),
        "repeats": (("--repeats", "-1"), ("--repeats", "at least 0")),
        "workers": (("--workers", "0"), ("--workers", "at least 1")),
        "top": (("--top", "0"), ("--top", "at least 1")),
        "slo": (("--slo", "speed=1"), ("--slo", "no summary metric")),
        "slo-fraction": (("--slo", "slo_attainment>=2"), ("--slo", "fraction")),
        "backend": (("--backend", "slurm"), ("--backend",)),
        "set": (("--set", "policy.max_num_seqs=[1,"), ("--set",)),
        "ray-unreachable": (
            ("--backend", "ray", "--address", f"127.0.0.1:{port}"),
            ("--address", f"127.0.0.1:{port}", "reachable"),
        ),
    }
    cases = [
        _search(f"search-flag-{label}", *args, expect=expect)
        for label, (args, expect) in flags.items()
    ]
    cases += [
        Case("search-no-space", ("search", "s.yaml", "--slo", "ttft_p99=1"),
             ("--space", "--autoscale"), {"s.yaml": dump(SCENARIO)}),
        Case("search-no-slo", ("search", "s.yaml", "--space", "space.yaml"),
             ("--slo", "required"), {"s.yaml": dump(SCENARIO), "space.yaml": dump(SPACE)}),
        Case("search-space-missing", ("search", "s.yaml", "--space", "nope.yaml", "--slo",
             "ttft_p99=1"), ("nope.yaml", "not found"), {"s.yaml": dump(SCENARIO)}),
        Case("search-space-folder", ("search", "s.yaml", "--space", "d", "--slo", "ttft_p99=1"),
             ("d", "folder"), {"s.yaml": dump(SCENARIO), "d": None}),
        _search("search-out-file", "--out", "f.txt", expect=("--out", "f.txt", "is a file"),
                files={"f.txt": b"x"}),
        _search("search-out-foreign", "--out", "mine", expect=("--out", "mine", "search"),
                files={"mine": None, "mine/notes.txt": b"mine"}),
    ]  # fmt: skip
    return cases + robust_cases()


def robust_cases() -> list[Case]:
    """`search --robust X`: a percentage strictly between 0 and 100, as `run --band X`, and a
    band whose end would take a configuration's GPU-time scale out of its range."""
    values = {"0": "0", "100": "100", "neg": "-1", "nan": "nan", "inf": "inf", "text": "abc",
              "empty": ""}  # fmt: skip
    cases = [
        _search(f"search-flag-robust-{label}", "--robust", value, expect=("--robust", value))
        for label, value in values.items()
    ]
    for label, scale, band in (("ceiling", 9.0, "50"), ("floor", 0.15, "50")):
        scenario = {**SCENARIO, "engine": {"pricing": {"gpu_time_scale": scale}}}
        expect = (f"--robust {band}", "engine.pricing.gpu_time_scale")
        case_id = f"search-flag-robust-scale-{label}"
        cases.append(_search(case_id, "--robust", band, scenario=scenario, expect=expect))
    return cases


def scenario_cases() -> list[Case]:
    one_row = edited("workload", {"trace": {"path": "t.csv", "format": "csv"}}, SCENARIO)
    return [
        _search("search-variants", scenario=BASE, expect=("s.yaml", "variants")),
        _search("search-scenario-key", scenario=edited("slo.ttft", 1, SCENARIO),
                expect=("s.yaml", "slo.ttft", "unknown key")),
        _search("search-scenario-model", scenario=edited("model", "llama-9", SCENARIO),
                expect=("s.yaml", "model", "llama-9")),
        _search("search-scenario-name", "--set", "name=a/b", expect=("s.yaml", "name")),
        _search("search-trace-one-row", scenario=one_row,
                files={"t.csv": b"arrival_s,prompt_tokens,output_tokens\n0,10,5\n"},
                expect=("s.yaml", "workload.trace", "no rate")),
        scenario_case("hardware-price-neg",
                      dump(edited("hardware", {"name": "a100-80g", "usd_per_gpu_hour": -1})),
                      "hardware.usd_per_gpu_hour"),
        scenario_case("hardware-tdp-zero", dump(edited("hardware", {"name": "h200", "tdp_w": 0})),
                      "hardware.tdp_w"),
        scenario_case("hardware-idle-over-tdp",
                      dump(edited("hardware", {"name": "h200", "idle_w": 800})),
                      "hardware", "idle_w (800) cannot exceed tdp_w"),
        scenario_case("hardware-price-text",
                      dump(edited("hardware", {"name": "h200", "usd_per_gpu_hour": "cheap"})),
                      "hardware.usd_per_gpu_hour"),
    ]  # fmt: skip


# a space of just over 10 million configurations along each axis (YAML lists of that length
# would be files of megabytes: the policy axis multiplies, the others are long flat lists)
HUGE_POLICY = {"name": "continuous", "max_num_seqs": list(range(1, 101)),
               "max_num_batched_tokens": list(range(512, 612)), "watermark": [0.01] * 100,
               "block_size": [16] * 10}  # fmt: skip


def size_cases() -> list[Case]:
    axes = {
        "policies": ({"policies": [HUGE_POLICY]}, "10000000 configurations"),
        "policies-summed": ({"policies": [HUGE_POLICY, {"name": "chunked"}]},
                            "10000001 configurations"),
        "gpus": ({"gpus": ["a100-80g"] * 5001}, "5001 configurations"),
        "kv-tiers": ({"kv_tiers": [None] * 5001}, "5001 configurations"),
        "tensor-parallel": ({"tensor_parallel": list(range(1, 65)),
                             "policies": [{"name": "continuous", "max_num_seqs": [8] * 100}]},
                            "6400 configurations"),
        "layouts": ({"layouts": ["colocated"] + [f"{x}p{y}d" for x in range(1, 17)
                                                  for y in range(1, 17)],
                     "policies": [{"name": "continuous", "max_num_seqs": [8] * 20}]},
                    "5140 configurations"),
        "data-parallel": ({"data_parallel": list(range(1, 101)), "expert_parallel": [False, True],
                           "policies": [{"name": "continuous", "max_num_seqs": [8] * 30}]},
                          "6000 configurations (1 GPUs x 1 degrees x 100 data-parallel degrees "
                          "x 2 expert-parallel options"),
        "pipeline-parallel": ({"tensor_parallel": [1, 2], "pipeline_parallel": list(range(1, 65)),
                               "policies": [{"name": "continuous", "max_num_seqs": [8] * 40}]},
                              "5120 configurations (1 GPUs x 2 degrees x 64 pipeline-parallel "
                              "degrees x 1 layouts x 40 policies)"),
    }  # fmt: skip
    cases = [
        _search(f"search-size-{axis}", space={**SPACE, **edit},
                expect=("space.yaml", size, "at most 5000"))
        for axis, (edit, size) in axes.items()
    ]  # fmt: skip
    empty = {"name": "continuous", "max_num_seqs": [], "max_num_batched_tokens": [512, 1024]}
    expect = ("space.yaml", "policies.0.max_num_seqs", "empty list")
    cases.append(_search("search-size-empty-list", space={**SPACE, "policies": [empty]},
                         expect=expect))  # fmt: skip
    return cases


def closed_loop_cases() -> list[Case]:
    """Workloads without a request rate of their own: `--rate` cannot apply, and the error
    says why."""
    sessions = {
        "sessions": {
            "arrival": {"process": "poisson", "rate": 0.5},
            "num_sessions": 10,
            "turns": {"dist": "fixed", "value": 3},
            "first_prompt": {"dist": "fixed", "value": 100},
            "user_tokens": {"dist": "fixed", "value": 10},
            "output_tokens": {"dist": "fixed", "value": 10},
            "think_time": {"dist": "exponential", "mean_s": 3},
        }
    }
    clients = {
        "num_requests": 20,
        "clients": {
            "num_clients": 4,
            "prompt_tokens": {"dist": "fixed", "value": 100},
            "output_tokens": {"dist": "fixed", "value": 10},
        },
    }
    fixed = {"dist": "fixed", "value": 10}
    agents = {"agents": {"arrival": {"process": "poisson", "rate": 0.5}, "num_tasks": 5,
                         "types": [{"name": "a", "system_tokens": 100, "task_tokens": fixed,
                                    "turns": fixed, "tool_result_tokens": fixed,
                                    "output_tokens": fixed,
                                    "tool_time": {"dist": "fixed", "value_s": 1.0}}]}}
    rollouts = {"rollouts": {"num_waves": 2, "groups_per_wave": 2, "group_size": 2,
                             "prompt_tokens": fixed, "turns": fixed, "output_tokens": fixed,
                             "observation_tokens": fixed}}  # fmt: skip
    cases = []
    for kind, workload in (("sessions", sessions), ("clients", clients), ("agents", agents),
                           ("rollouts", rollouts)):  # fmt: skip
        scenario = {**SCENARIO, "workload": workload}
        for label, args, flag in (("", (), "--rate cannot give it one"),
                                  ("-rate", ("--rate", "3"), "--rate 3 does not apply")):
            cases.append(_search(f"search-{kind}{label}", *args, scenario=scenario,
                                 expect=("s.yaml", f"workload.{kind}", "closed loop", flag)))
    # a trace of agents' tasks: its calls wait on each other, no rate of its own
    weka = {**SCENARIO, "workload": {"trace": {"path": "t.jsonl", "format": "weka"}}}
    cases.append(_search("search-weka-trace", scenario=weka,
                         expect=("s.yaml", "workload.trace.format", "closed loop")))
    # a rate profile: the search sizes a fleet for one rate
    profile = copy.deepcopy(SCENARIO)
    profile["workload"]["arrival"] = {"process": "profile", "rate": {
        "shape": "ramp", "from_rate": 1.0, "to_rate": 5.0, "over_s": 10.0}}
    cases.append(_search("search-rate-profile", scenario=profile,
                         expect=("s.yaml", "workload.arrival.rate", "is a profile")))
    # nothing in the space fits, nor does the scenario's own hardware: said, not a traceback
    big = {**SCENARIO, "model": "llama-3-70b"}
    cases.append(_search("search-all-set-aside", scenario=big,
                         expect=("space.yaml", "every one of the 1 configurations",
                                 "1 does not fit")))  # fmt: skip
    return cases


def record_mutations(record: dict[str, Any]) -> dict[str, bytes | str | None]:
    """Damaged versions of a valid saved record (`{"id", "phase", "configuration", "result"}`),
    by name: file contents, None for a folder in the file's place, "fifo" for a named pipe.
    Every one is invalid."""
    out: dict[str, bytes | str | None] = {
        "folder": None,
        "fifo": "fifo",  # a named pipe: reading it would wait forever
        "empty": b"",
        "not-json": b"{\"id\": ",
        "latin1": b"\xe9\xe9",
        "deep": b"[" * 100_000 + b"]" * 100_000,
        "list": json.dumps([record]).encode(),
        "number": b"42",
    }

    def put(name: str, edit: dict[str, Any]) -> None:
        out[name] = json.dumps(edit).encode()

    for key in record:
        put(f"no-{key}", {k: v for k, v in record.items() if k != key})
    put("extra-key", {**record, "more": 1})
    put("other-id", {**record, "id": "0" * 16})
    put("other-phase", {**record, "phase": "fleet" if record["phase"] == "unit" else "unit"})
    put("result-list", {**record, "result": [record["result"]]})
    result = record["result"]
    for key, value in result.items():
        put(f"result-no-{key}", {**record, "result": {k: v for k, v in result.items() if k != key}})
        if isinstance(value, bool):
            wrong: list[Any] = [1, "true", None]
        elif isinstance(value, (int, float)):
            wrong = [str(value), True, -1, [value]]
        elif isinstance(value, dict):
            wrong = ["summary", [1], {**value, "ttft_p99_s": "fast"},
                    {k: v for k, v in value.items() if k != "fleet_usd_per_hour"}]
        else:
            wrong = [{"a": 1}]
        for i, bad in enumerate(wrong):
            put(f"result-{key}-{i}", {**record, "result": {**result, key: bad}})
    if "units" in result:
        for label, edit in {"units-zero": {"units": 0}, "units-huge": {"units": 10**6},
                            "instances-off": {"instances": result["instances"] + 1},
                            "not-found-summary": {"found": False}}.items():  # fmt: skip
            put(f"result-{label}", {**record, "result": {**result, **edit}})
    return out


def search_cases() -> list[Case]:
    return [*space_cases(), *flag_cases(), *scenario_cases(), *size_cases(), *closed_loop_cases()]
