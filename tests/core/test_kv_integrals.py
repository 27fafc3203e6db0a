"""KV integrals against a brute-force tally of the instances' state.

The engine keeps stored and fragment tallies incrementally and integrates them in closed form.
Here every change point (a step's start, a KV transfer reserving, landing or leaving mid-step)
is snapshotted from the instances' state directly: the blocks the pool has handed out, the
tokens every KV holder has computed (counting the step's own tokens), and what each holds beyond
its whole sequence. The piecewise-constant integral of those snapshots over busy time must equal
the per-instance sums of `kv_block_seconds`, `kv_stored_token_seconds` and
`kv_fragment_token_seconds`, in P/D clusters whose transfers land and leave mid-step, under
preemption, one step at a time.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from typing import Any

import pytest
from helpers_cluster import run_with_cluster
from helpers_sim import instruments_engine
from scenario_factory import scenario, tiny_hardware, tiny_model

from sim.core.instance import Instance

pytestmark = instruments_engine

Snapshot = tuple[float, float, float, float]  # time, blocks used, stored tokens, fragment


def _state(inst: Instance) -> tuple[float, float, float]:
    run = inst._run_in_step
    plan = run.plan
    bs = inst.pool.block_size
    stored = fragment = 0
    engine = inst.engine
    for req in [*engine.running, *engine.held, *engine.pd.handed_off(), *engine.arrived]:
        member = req._batch is engine.batch
        tokens = plan.prefill.get(req, 0) or (1 if member and plan.decode else 0)
        computed = req.num_computed_tokens + tokens
        stored += computed
        blocks = -(-computed // bs) if member and engine.batch.paged else req.kv_blocks
        fragment += max(0, blocks * bs - req.sequence_tokens)
    return float(inst.pool.num_used), float(stored), float(fragment)


@pytest.fixture
def tally(monkeypatch: pytest.MonkeyPatch) -> dict[int, list[Snapshot | None]]:
    """Per instance, snapshots at change points; None closes a busy period."""
    seen: dict[int, list[Snapshot | None]] = defaultdict(list)
    begin, apply_ = Instance._begin, Instance._apply

    def snap(inst: Instance, now: float) -> None:
        seen[inst.index].append((now, *_state(inst)))

    def wrapped_begin(self: Instance, plan: Any) -> Any:
        run = begin(self, plan)
        if plan.has_work:
            self._run_in_step = run
            snap(self, run.times.start_s)
        return run

    def wrapped_apply(self: Instance, run: Any, num_steps: int) -> float:
        assert num_steps == 1, "the brute force tallies single steps"
        end = run.times.end(1)
        seen[self.index].append((end, math.nan, math.nan, math.nan))
        seen[self.index].append(None)
        return apply_(self, run, num_steps)

    for name in ("reserve", "receive", "release"):
        original = getattr(Instance, name)

        def wrapped(self: Instance, *args: Any, _original: Any = original) -> None:
            _original(self, *args)
            if self.engine._busy:
                snap(self, self.env.now)

        monkeypatch.setattr(Instance, name, wrapped)
    monkeypatch.setattr(Instance, "_begin", wrapped_begin)
    monkeypatch.setattr(Instance, "_apply", wrapped_apply)
    return seen


def _integrals(points: list[Snapshot | None]) -> tuple[float, float, float]:
    totals = [0.0, 0.0, 0.0]
    for a, b in itertools.pairwise(points):
        if a is None or b is None:
            continue
        for i in range(3):
            totals[i] += a[i + 1] * (b[0] - a[0])
    return totals[0], totals[1], totals[2]


@pytest.mark.parametrize("policy", ["continuous", "chunked"])
@pytest.mark.parametrize("decode_kv", [48, 96, 400])
def test_kv_integrals_equal_the_state_tallied_at_every_change(tally, policy, decode_kv) -> None:
    raw = scenario(
        policy={"name": policy, "max_num_seqs": 6, "max_num_batched_tokens": 64, "block_size": 4},
        workload={
            "num_requests": 40,
            "arrival": {"process": "poisson", "rate": 40.0},
            "prompt_tokens": {"dist": "uniform", "low": 3, "high": 30},
            "output_tokens": {"dist": "uniform", "low": 1, "high": 20},
        },
        model=tiny_model(),
        hardware=tiny_hardware(2000),
        engine={"coalesce_decode_steps": False},
        disaggregation={
            "prefill": {"count": 1},
            "decode": {"count": 2, "hardware": tiny_hardware(decode_kv), "router": "least_kv"},
            # ~8 ms transfers against ~10 ms steps: most land and leave mid-step
            "link": {"bandwidth_gb_per_s": 5e-6, "latency_s": 0.002},
        },
    )
    res, _ = run_with_cluster(raw)
    steps = res.steps
    for index, own in steps.groupby("instance"):
        blocks, stored, fragment = _integrals(tally[int(index)])
        assert math.isclose(own["kv_block_seconds"].sum(), blocks, rel_tol=1e-9, abs_tol=1e-9)
        assert math.isclose(
            own["kv_stored_token_seconds"].sum(), stored, rel_tol=1e-9, abs_tol=1e-9
        )
        assert math.isclose(
            own["kv_fragment_token_seconds"].sum(), fragment, rel_tol=1e-9, abs_tol=1e-9
        )
    # the cases do exercise what they are for: transfers landing and leaving mid-step
    assert res.requests["transfer_s"].notna().sum() > 10
    points = sum(1 for seen in tally.values() for p in seen if p is not None)
    assert points - 2 * len(steps) > 20  # beyond each step's start and end: mid-step changes
