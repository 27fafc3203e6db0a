"""The policy table: one builder per spec class of the schema's `PolicySpec` union, and each
builds the policy its spec describes."""

from __future__ import annotations

from typing import Any, get_args

import pytest
from pydantic import TypeAdapter

from sim.policies import (
    BUILDERS,
    ChunkedPolicy,
    ContinuousPolicy,
    StaticPolicy,
    make_policy,
)
from sim.policies.iteration import IterationPolicy
from sim.policies.reservation import Exact, Paged
from sim.scenario.schema import PolicySpec

SPEC_CLASSES: tuple[type, ...] = get_args(get_args(PolicySpec)[0])  # Annotated[union, ...]


def spec(**fields: Any) -> Any:
    return TypeAdapter(PolicySpec).validate_python(fields)


def name_of(cls: type) -> str:
    (name,) = get_args(cls.model_fields["name"].annotation)  # type: ignore[attr-defined]
    return str(name)


def test_every_spec_class_in_the_union_has_exactly_one_builder() -> None:
    assert len(SPEC_CLASSES) == len(set(SPEC_CLASSES)) >= 3
    assert set(BUILDERS) == set(SPEC_CLASSES)
    assert len({name_of(cls) for cls in SPEC_CLASSES}) == len(SPEC_CLASSES)


@pytest.mark.parametrize("cls", SPEC_CLASSES, ids=name_of)
def test_each_spec_class_builds_a_policy_from_its_defaults(cls: type) -> None:
    s = spec(name=name_of(cls))
    policy = make_policy(s, max_model_len=4096, kv_blocks_total=1000)
    assert type(s) is cls
    for method in ("schedule", "rejection", "next_wakeup_s"):
        assert callable(getattr(policy, method))
    assert isinstance(policy.releases_kv_on_finish, bool)
    assert isinstance(policy.paged_kv, bool)


def test_each_spec_class_builds_its_own_policy_class() -> None:
    built = {
        type(make_policy(spec(name=name_of(cls)), max_model_len=4096, kv_blocks_total=1000))
        for cls in SPEC_CLASSES
    }
    assert len(built) == len(SPEC_CLASSES)


def test_static_spec_fields_reach_the_policy() -> None:
    s = spec(
        name="static",
        max_batch_size=4,
        max_wait_s=0.5,
        kv_reservation="max_model_len",
        pad_prompts=True,
    )
    p = make_policy(s, max_model_len=2048, kv_blocks_total=100)
    assert isinstance(p, StaticPolicy)
    assert (p.max_batch_size, p.max_wait_s, p.max_model_len) == (4, 0.5, 2048)
    assert (p.kv_reservation, p.pad_prompts, p.paged_kv) == ("max_model_len", True, False)


def test_continuous_limits_resolve_for_the_pool() -> None:
    s = spec(
        name="continuous",
        mode="mixed",
        max_num_seqs=8,
        max_num_batched_tokens=None,
        watermark=0.05,
        preemption={"mode": "swap", "victim": "most_kv"},
    )
    p = make_policy(s, max_model_len=4096, kv_blocks_total=1000)
    assert type(p) is ContinuousPolicy and p.mode == "mixed" and not p.chunked
    assert p.max_num_batched_tokens == 1 << 62  # no budget: more than any step holds
    assert (p.max_num_seqs, p.max_prefill_seqs, p.max_model_len) == (8, 8, 4096)
    assert p.watermark_blocks == 50  # 5% of the pool's 1000 blocks
    assert isinstance(p.reservation, Paged) and p.paged_kv
    assert (p.preemptor.swap, p.preemptor.victim) == (True, "most_kv")
    assert p.speculation is None


def test_chunked_limits_resolve_for_the_pool() -> None:
    s = spec(
        name="chunked",
        max_num_seqs=4,
        max_num_batched_tokens=64,
        max_prefill_seqs=2,
        kv_reservation="exact",
        watermark=0.0,
        queue={"order": "priority", "tiers": {"a": {"rank": 1}}},
        preemption={"victim": "lowest_priority"},
    )
    p = make_policy(s, max_model_len=512, kv_blocks_total=333)
    assert type(p) is ChunkedPolicy and isinstance(p, IterationPolicy) and p.chunked
    assert (p.max_num_seqs, p.max_num_batched_tokens, p.max_prefill_seqs) == (4, 64, 2)
    assert p.watermark_blocks == 0
    assert isinstance(p.reservation, Exact) and not p.paged_kv
    assert (p.preemptor.swap, p.preemptor.victim, p.preemptor.ranks) == (
        False,
        "lowest_priority",
        {"a": 1},
    )
