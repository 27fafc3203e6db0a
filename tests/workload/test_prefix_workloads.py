"""Workloads with content and what prefix caching does with them: the Mooncake trace format,
shared system prompts, closed-loop sessions, cache-aware routers, and whole runs (caching off
gives the old numbers; coalesced and step-by-step runs agree; an unbounded cache hits exactly
the trace's reuse)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers_cluster import StandIn
from scenario_factory import scenario, tiny_hardware, tiny_model

from sim import load_scenario_dict, simulate
from sim.errors import ScenarioError
from sim.topology.router import make_router
from sim.workload import generate_requests
from sim.workload.mooncake import read_mooncake
from sim.workload.spec import WorkloadSpec

ROWS = [  # timestamp ms, input, output, hash ids (512-token blocks)
    (0, 600, 10, [1, 2]),
    (1000, 1100, 20, [1, 2, 3]),
    (2000, 700, 5, [7, 8]),
    (3000, 1600, 10, [1, 2, 3, 4]),
    (4000, 300, 8, [7]),
]


def write_mooncake(path: Path, rows: list[tuple[int, int, int, list[int]]] = ROWS) -> Path:
    lines = [
        json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": h})
        for t, i, o, h in rows
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_mooncake_reader(tmp_path: Path) -> None:
    data = read_mooncake(write_mooncake(tmp_path / "t.jsonl"))
    assert data.arrival_s.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert data.prompt_tokens.tolist() == [600, 1100, 700, 1600, 300]
    assert data.offsets.tolist() == [0, 2, 5, 7, 11, 12]
    assert data.session.tolist() == [1, 1, 7, 1, 7]  # first blocks label conversations
    shared = read_mooncake(
        write_mooncake(
            tmp_path / "s.jsonl",
            [(0, 900, 1, [0, 1]), (1, 1500, 1, [0, 1, 2]), (2, 600, 1, [0, 5]), (3, 10, 1, [0])],
        )
    )
    # every line opens with block 0 (a system prompt): the next block labels the conversation
    assert shared.session.tolist() == [1, 1, 5, 0]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1]}\n')
    with pytest.raises(ScenarioError, match="line 1") as info:
        read_mooncake(bad)
    assert "1 hash_ids for 600 prompt tokens" in str(info.value)


def _trace_workload(tmp_path: Path, **trace: Any) -> WorkloadSpec:
    path = write_mooncake(tmp_path / "t.jsonl")
    return WorkloadSpec.model_validate(
        {"trace": {"path": str(path), "format": "mooncake", **trace}}
    )


def test_long_prompts_are_kept_dropped_or_clipped_and_counted(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    keep = generate_requests(_trace_workload(tmp_path), rng, tmp_path, max_model_len=1000)
    assert len(keep) == 5 and keep.notes == {}
    drop = generate_requests(
        _trace_workload(tmp_path, long_prompts="drop"), rng, tmp_path, max_model_len=1000
    )
    assert drop.prompt_tokens.tolist() == [600, 700, 300]
    assert drop.notes == {"workload_dropped_requests": 2}
    clip = generate_requests(
        _trace_workload(tmp_path, long_prompts="clip"), rng, tmp_path, max_model_len=1000
    )
    assert clip.prompt_tokens.tolist() == [600, 980, 700, 990, 300]
    assert clip.notes == {"workload_clipped_prompts": 2, "workload_dropped_requests": 0}
    assert clip.content is not None and clip.content.tokens.tolist()[1] == 980
    assert clip.sessions is not None
    assert clip.sessions.session.tolist() == [1, 1, 7, 1, 7]  # first block labels a conversation


def expected_hits(rows: list[tuple[int, int, int, list[int]]], block: int) -> list[int]:
    """Independent of the simulator: per request, the tokens an unbounded cache gives it when
    each earlier prompt's full blocks were cached once computed. A block is identified by its
    whole prefix (each token's 512-token content id and its place in it); a request takes its
    leading cached blocks, but never its last token's block."""
    seen: set[tuple[tuple[int, int], ...]] = set()
    hits = []
    for _, tokens, _, ids in rows:
        full = tokens // block
        prefix = [
            tuple((ids[(i * block) // 512], (i * block) % 512) for i in range(b + 1))
            for b in range(full)
        ]
        run = 0
        for b in range((tokens - 1) // block):
            if prefix[b] not in seen:
                break
            run += 1
        hits.append(run * block)
        seen.update(prefix)
    return hits


def _run_trace(tmp_path: Path, caching: bool, coalesce: bool = True, **policy: Any) -> Any:
    path = write_mooncake(tmp_path / "t.jsonl")
    raw = scenario(
        policy={
            "name": "chunked",
            "max_num_seqs": 8,
            "max_num_batched_tokens": 256,
            "block_size": 16,
            "prefix_caching": caching,
            **policy,
        },
        workload={"trace": {"path": str(path), "format": "mooncake"}},
        model=tiny_model(),
        hardware=tiny_hardware(100_000),
        engine={"coalesce_decode_steps": coalesce},
    )
    return simulate(load_scenario_dict(raw))["default"]


def test_an_unbounded_cache_hits_exactly_the_traces_reuse(tmp_path: Path) -> None:
    res = _run_trace(tmp_path, caching=True)
    expected = expected_hits(ROWS, 16)
    assert res.requests["num_cached_tokens"].tolist() == expected
    assert expected == [0, 592, 0, 1088, 288]  # by hand: 37, 68 and 18 blocks of 16
    summary = res.summary()
    assert summary["prefill_tokens_saved"] == sum(expected)
    assert summary["prefix_cache_evictions"] == 0
    known = sum(i + 0 for _, i, _, _ in ROWS)  # lookups: the prompts (nothing emitted yet)
    assert summary["prefix_cache_hit_rate"] == pytest.approx(sum(expected) / known)


def test_caching_off_changes_nothing_and_coalescing_changes_nothing(tmp_path: Path) -> None:
    off = _run_trace(tmp_path, caching=False)
    assert "prefix_cache_hit_rate" not in off.summary()
    assert (off.requests["num_cached_tokens"] == 0).all()
    fast = _run_trace(tmp_path, caching=True)
    slow = _run_trace(tmp_path, caching=True, coalesce=False)
    for column in ("first_token_s", "finish_s", "num_cached_tokens"):
        np.testing.assert_allclose(
            fast.requests[column].to_numpy(float), slow.requests[column].to_numpy(float), rtol=1e-9
        )
    assert fast.requests["ttft_s"].iloc[3] < off.requests["ttft_s"].iloc[3]


def _session_workload(**extra: Any) -> dict[str, Any]:
    return {
        "sessions": {
            "arrival": {"process": "constant", "rate": 0.5},
            "num_sessions": 3,
            "turns": {"dist": "fixed", "value": 3},
            "first_prompt": {"dist": "fixed", "value": 40},
            "user_tokens": {"dist": "fixed", "value": 8},
            "output_tokens": {"dist": "fixed", "value": 5},
            "think_time": {"dist": "fixed", "value_s": 2.0},
        },
        **extra,
    }


def test_session_turns_extend_the_history_and_follow_the_previous_finish() -> None:
    raw = scenario(
        policy={"name": "continuous", "max_num_seqs": 8, "block_size": 4, "prefix_caching": True},
        workload=_session_workload(),
        model=tiny_model(),
        hardware=tiny_hardware(10_000),
    )
    res = simulate(load_scenario_dict(raw))["default"]
    req = res.requests.set_index("id")
    assert len(req) == 9
    # ids 0..2: first turns; their later turns follow
    assert req.loc[[0, 1, 2], "num_prompt_tokens"].tolist() == [40, 40, 40]
    later = req.loc[3:]
    assert sorted(later["num_prompt_tokens"].tolist()) == [53, 53, 53, 66, 66, 66]
    spec = load_scenario_dict(raw).variants[0].spec
    arrays = generate_requests(spec.workload, np.random.default_rng(1), Path("."))
    assert arrays.sessions is not None and arrays.sessions.next_turn is not None
    for rid in range(9):
        nxt = int(arrays.sessions.next_turn[rid])
        if nxt >= 0:  # a closed loop: the next turn arrives 2 s after this one finished
            assert req.loc[nxt, "arrival_s"] == pytest.approx(req.loc[rid, "finish_s"] + 2.0)
            # and finds this turn's prompt and answer cached (whole 4-token blocks of them)
            assert (
                req.loc[nxt, "num_cached_tokens"]
                == (req.loc[rid, "num_prompt_tokens"] + 5) // 4 * 4
            )


def test_streamed_sessions_measure_every_turn_and_refuse_a_cooldown() -> None:
    raw = scenario(
        policy={"name": "continuous", "max_num_seqs": 8, "block_size": 4, "prefix_caching": True},
        workload=_session_workload(),
        model=tiny_model(),
        hardware=tiny_hardware(10_000),
    )
    table = simulate(load_scenario_dict(raw))["default"].summary()
    streamed = simulate(load_scenario_dict(raw), tables=False)["default"].summary()
    # later turns have no arrival before the run: they are measured all the same
    assert streamed["duration_s"] == pytest.approx(table["duration_s"], rel=1e-9)
    assert streamed["output_tokens_per_s"] == pytest.approx(table["output_tokens_per_s"], rel=1e-9)
    raw["metrics"] = {"cooldown_s": 1.0}
    with pytest.raises(ScenarioError, match=r"metrics\.cooldown_s: a streamed run of closed-loop"):
        simulate(load_scenario_dict(raw), tables=False)
    cooled = simulate(load_scenario_dict(raw))["default"].summary()
    assert cooled["duration_s"] < table["duration_s"]  # the last turns are left out


def test_shared_prefixes_add_content_and_leave_the_other_columns_alone() -> None:
    base = {
        "num_requests": 200,
        "arrival": {"process": "poisson", "rate": 5.0},
        "prompt_tokens": {"dist": "uniform", "low": 10, "high": 100},
        "output_tokens": {"dist": "uniform", "low": 1, "high": 50},
    }
    plain = generate_requests(
        WorkloadSpec.model_validate(base), np.random.default_rng(4), Path(".")
    )
    shared = generate_requests(
        WorkloadSpec.model_validate(
            {
                **base,
                "shared_prefix": {
                    "num_prefixes": 3,
                    "zipf": 1.0,
                    "length": {"dist": "fixed", "value": 64},
                },
            }
        ),
        np.random.default_rng(4),
        Path("."),
    )
    np.testing.assert_array_equal(plain.arrival_s, shared.arrival_s)
    np.testing.assert_array_equal(plain.output_tokens, shared.output_tokens)
    np.testing.assert_array_equal(plain.prompt_tokens + 64, shared.prompt_tokens)
    assert shared.content is not None
    first_units = {shared.content.of(i)[0] for i in range(200)}
    assert len(first_units) == 3  # three system prompts, shared


class _Load:
    def __init__(self, tokens: int) -> None:
        self.num_waiting = self.num_running = self.kv_blocks_used = 0
        self.kv_blocks_total = 1
        self.outstanding_tokens = tokens


def test_prefix_affinity_weighs_cache_hits_against_load() -> None:
    loads = [_Load(100), _Load(300), _Load(0)]
    hits = [0.0, 0.9, 0.0]
    router = make_router("prefix_affinity", np.random.default_rng(0))
    # instance 1: 0.9 - 1.0 = -0.1; instance 2: 0 - 0 = 0; instance 0: -1/3
    assert router.pick(StandIn(3, None, loads.__getitem__, hits=hits)) == 2
    keen = make_router("prefix_affinity", np.random.default_rng(0), hit_weight=3.0)
    assert keen.pick(StandIn(3, None, loads.__getitem__, hits=hits)) == 1


def test_session_sticky_keeps_a_session_where_it_started() -> None:
    router = make_router("session_sticky", np.random.default_rng(0))
    loads = [_Load(50), _Load(10)]
    seen = loads.__getitem__
    assert router.pick(StandIn(2, None, seen, session=7)) == 1  # least outstanding tokens
    loads[1].outstanding_tokens = 10_000
    assert router.pick(StandIn(2, None, seen, session=7)) == 1  # sticky
    assert router.pick(StandIn(2, None, seen, session=8)) == 0
    assert router.pick(StandIn(2, None, seen)) == 0  # no session: by load


def test_cache_aware_routers_run_a_cluster(tmp_path: Path) -> None:
    path = write_mooncake(tmp_path / "t.jsonl")
    out = {}
    for router in ("least_outstanding_tokens", "session_sticky", "prefix_affinity"):
        raw = scenario(
            policy={"name": "chunked", "max_num_batched_tokens": 256, "prefix_caching": True},
            workload={"trace": {"path": str(path), "format": "mooncake"}},
            model=tiny_model(),
            hardware=tiny_hardware(100_000),
            cluster={"router": router, "instances": [{"count": 2}]},
        )
        out[router] = simulate(load_scenario_dict(raw))["default"]
    sticky = out["session_sticky"].requests
    # requests 0, 1 and 3 share a conversation label: one instance serves them all
    assert sticky.loc[sticky["id"].isin([0, 1, 3]), "instance"].nunique() == 1
    # affinity sends each request where its prefix is: every hit one instance would have
    assert out["prefix_affinity"].summary()["prefill_tokens_saved"] == sum(expected_hits(ROWS, 16))
    assert math.isfinite(out["least_outstanding_tokens"].summary()["ttft_p99_s"])


def test_the_prefill_pool_of_a_disaggregated_cluster_caches() -> None:
    raw = scenario(
        policy={"name": "chunked", "max_num_seqs": 8, "block_size": 4, "prefix_caching": True},
        workload=_session_workload(),
        model=tiny_model(),
        hardware=tiny_hardware(10_000),
        disaggregation={
            "prefill": {"count": 1},
            "decode": {"count": 1},
            "link": {"bandwidth_gb_per_s": 1.0},
        },
    )
    res = simulate(load_scenario_dict(raw))["default"]
    req = res.requests.set_index("id")
    assert not req["rejected"].any() and req["finish_s"].notna().all()
    # later turns find their history cached on the prefill instance, as on a colocated one
    assert (req.loc[3:, "num_cached_tokens"] > 0).all()
    assert (req.loc[[0, 1, 2], "num_cached_tokens"] == 0).all()
