"""Table profiles: exact grid points, interpolation, counted extrapolation by the fitted form,
runs cut where a growing quantity crosses a grid point, and coalesced runs equal to stepping."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers_sim import run_arrays_with_instance
from scenario_factory import lognormal, poisson, scenario

from sim import ScenarioError, load_scenario_dict, simulate
from sim.core.plan import StepFeatures
from sim.costs.cost_model import CostModel
from sim.costs.profile import Profile, load_profile, save_profile
from sim.costs.table_model import TableCostModel
from sim.metrics.summary import expand_steps

COEFFS = {
    "t_mem_s": 0.01,
    "t_flop_s_per_token": 1e-5,
    "t_kv_s_per_token": 1e-7,
    "t_attn_s_per_token2": 1e-9,
}
LINEAR_TOKENS = [1, 8, 64, 512, 4096]
LINEAR_S = [0.0100, 0.0101, 0.0107, 0.0150, 0.0500]
BATCH = [1, 4, 16, 32]
CONTEXT = [0, 64, 256, 1024, 4096]
CHUNK = [16, 64, 256, 1024]
PREFIX = [0, 256, 1024, 4096]


def decode_s(b: int, ctx: int) -> float:
    return 2e-5 + 1e-6 * b + 1e-7 * b * ctx**0.9  # deliberately not linear


def prefill_s(c: int, p: int) -> float | None:
    if c + p > 4096:
        return None  # not measured: beyond the context limit
    return 3e-5 + 2e-9 * c * (p + c / 2) ** 1.05


def table_profile_dict(**table: Any) -> dict[str, Any]:
    block: dict[str, Any] = {
        "fallback_form": "extended",
        "linear": {"tokens": LINEAR_TOKENS, "seconds": LINEAR_S},
        "decode_attention": {
            "batch": BATCH,
            "context": CONTEXT,
            "seconds": [[decode_s(b, x) for x in CONTEXT] for b in BATCH],
        },
        "prefill_attention": {
            "chunk": CHUNK,
            "prefix": PREFIX,
            "seconds": [[prefill_s(c, p) for p in PREFIX] for c in CHUNK],
        },
    }
    block.update(table)
    return {
        "schema_version": 1,
        "name": "t",
        "source": "inline",
        "model_form": "table",
        "coefficients": dict(COEFFS),
        "table": block,
    }


def table_model(**table: Any) -> TableCostModel:
    return TableCostModel(Profile.model_validate(table_profile_dict(**table)))


def decode(b: int, ctx: int, repeated: bool = False) -> StepFeatures:
    """b decodes, each with ctx cached tokens before the step."""
    return StepFeatures(b, b, 0, b, b * (ctx + 1), 0, b if repeated else 0, b, 0, ())


def chunk(c: int, p: int, b: int = 0, ctx: int = 0, repeated: bool = False) -> StepFeatures:
    """A prompt chunk of c tokens after p cached ones, with b decodes over ctx tokens each."""
    growth = b + c if repeated else 0
    return StepFeatures(
        b + 1, c + b, c, b, p + c + b * (ctx + 1), c * (p + c), growth, b + 1,
        c * c if repeated else 0, ((c, p),),
    )  # fmt: skip


def fallback(features: StepFeatures) -> float:
    return CostModel(Profile.model_validate(table_profile_dict())).run_times(features)[0]


def test_grid_points_are_reproduced_exactly() -> None:
    cost = table_model()
    for b in BATCH:
        for ctx in CONTEXT:
            first, _ = cost.run_times(decode(b, ctx))
            linear = float(np.interp(b, LINEAR_TOKENS, LINEAR_S))
            assert first == pytest.approx(linear + decode_s(b, ctx), rel=1e-14), (b, ctx)
    # where the token count is a grid point too, bit for bit
    for ctx in CONTEXT:
        assert cost.run_times(decode(1, ctx))[0] == LINEAR_S[0] + decode_s(1, ctx)
    for c in CHUNK:
        for p in PREFIX:
            value = prefill_s(c, p)
            if value is None:
                continue
            first, _ = cost.run_times(chunk(c, p))
            linear = float(np.interp(c, LINEAR_TOKENS, LINEAR_S))
            assert first == pytest.approx(linear + value, rel=1e-14)
    assert cost.run_times(chunk(64, 256))[0] == LINEAR_S[2] + prefill_s(64, 256)  # type: ignore[operator]
    assert cost.num_extrapolated == 0


def test_interpolation_is_linear_along_each_axis() -> None:
    cost = table_model()
    # 10 decodes (batch halfway between 4 and 16) over 160 tokens (halfway between 64 and 256);
    # 10 tokens lie 2/56 of the way from 8 to 64
    linear = LINEAR_S[1] + (LINEAR_S[2] - LINEAR_S[1]) * 2 / 56
    row4 = (decode_s(4, 64) + decode_s(4, 256)) / 2
    row16 = (decode_s(16, 64) + decode_s(16, 256)) / 2
    first, _ = cost.run_times(decode(10, 160))
    assert first == pytest.approx(linear + (row4 + row16) / 2, rel=1e-12)
    # a prompt chunk of 40 tokens (between 16 and 64) after 128 cached ones (between 0 and 256)
    want = float(np.interp(40, LINEAR_TOKENS, LINEAR_S))
    p16 = (prefill_s(16, 0) + prefill_s(16, 256)) / 2  # type: ignore[operator]
    p64 = (prefill_s(64, 0) + prefill_s(64, 256)) / 2  # type: ignore[operator]
    assert cost.run_times(chunk(40, 128))[0] == pytest.approx(want + (p16 + p64) / 2, rel=1e-12)


@pytest.mark.parametrize(
    "features",
    [
        decode(33, 100),  # batch beyond the grid
        decode(4, 5000),  # context beyond the grid
        chunk(8, 0),  # chunk below the grid
        chunk(1024, 3500),  # a null cell (chunk + prefix beyond the measured region)
        StepFeatures(1, 5000, 5000, 0, 5000, 5000**2, 0, 1, 0, ((5000, 0),)),  # tokens beyond
    ],
    ids=["batch", "context", "chunk", "null", "tokens"],
)
def test_outside_the_grid_is_the_fitted_form_and_counted(features: StepFeatures) -> None:
    cost = table_model()
    first, _ = cost.run_times(features)
    assert first == fallback(features)
    assert cost.last_extrapolated and cost.num_extrapolated == 1
    cost.run_times(decode(4, 100))
    assert not cost.last_extrapolated and cost.num_extrapolated == 1


def test_attention_without_tables_uses_the_coefficients() -> None:
    cost = table_model(decode_attention=None, prefill_attention=None)
    c = COEFFS
    first, increment = cost.run_times(decode(4, 100, repeated=True))
    linear = float(np.interp(4, LINEAR_TOKENS, LINEAR_S))
    assert first == pytest.approx(linear + c["t_kv_s_per_token"] * 4 * 101, rel=1e-14)
    assert increment == pytest.approx(c["t_kv_s_per_token"] * 4, rel=1e-14)
    first, _ = cost.run_times(chunk(64, 100))
    attention = c["t_kv_s_per_token"] * 164 + c["t_attn_s_per_token2"] * 64 * 164
    assert first == pytest.approx(LINEAR_S[2] + attention, rel=1e-14)
    assert cost.linear_steps(decode(4, 100, repeated=True)) > 10**12  # linear in the context


def test_a_decode_run_is_cut_where_the_context_crosses_a_grid_point() -> None:
    cost = table_model()
    start = decode(4, 100, repeated=True)
    first, increment = cost.run_times(start)
    steps = cost.linear_steps(start)
    assert steps == 256 - 100 + 1  # contexts 100..256 lie on one linear piece
    for j in (1, 2, 50, steps):
        step_j = decode(4, 100 + j - 1)
        assert cost.run_times(step_j)[0] == pytest.approx(first + (j - 1) * increment, rel=1e-12)
    after = cost.run_times(decode(4, 100 + steps))[0]
    assert after != pytest.approx(first + steps * increment, rel=1e-6)  # a new piece


def test_a_chunk_run_is_cut_where_its_prefix_crosses_a_grid_point() -> None:
    cost = table_model()
    start = chunk(64, 100, b=3, ctx=200, repeated=True)
    first, increment = cost.run_times(start)
    assert cost.linear_steps(start) == 3  # prefixes 100, 164, 228; 292 is past 256
    for j in (1, 2, 3):
        step_j = chunk(64, 100 + 64 * (j - 1), b=3, ctx=200 + j - 1)
        assert cost.run_times(step_j)[0] == pytest.approx(first + (j - 1) * increment, rel=1e-12)


def test_a_run_below_the_grid_is_cut_where_it_comes_back_in() -> None:
    cost = table_model(
        decode_attention={
            "batch": [1, 4],
            "context": [32, 512],
            "seconds": [[1e-4, 2e-4], [3e-4, 5e-4]],
        }
    )
    start = decode(2, 10, repeated=True)
    first, increment = cost.run_times(start)
    assert cost.last_extrapolated and first == pytest.approx(fallback(start), rel=1e-14)
    assert cost.linear_steps(start) == 22  # contexts 10..31 outside; 32 is on the grid
    inside, _ = cost.run_times(decode(2, 32))
    assert not cost.last_extrapolated and inside != pytest.approx(first + 22 * increment)


def test_profile_file_round_trip_and_schema_errors(tmp_path: Path) -> None:
    profile = Profile.model_validate(table_profile_dict())
    path = tmp_path / "p.yaml"
    save_profile(profile, path)
    assert load_profile(path) == profile
    text = path.read_text()
    assert "tokens: [1, 8, 64, 512, 4096]" in text  # rows of numbers on one line each
    assert "null" in text  # the unmeasured cells

    def error(data: dict[str, Any]) -> ScenarioError:
        bad = tmp_path / "bad.yaml"
        save = copy.deepcopy(data)
        bad.write_text(__import__("yaml").safe_dump(save))
        with pytest.raises(ScenarioError) as info:
            load_profile(bad)
        return info.value

    data = table_profile_dict()
    data["model_form"] = "extended"
    assert error(data).path == "table"
    data = table_profile_dict()
    del data["table"]
    assert "required" in error(data).reason
    data = table_profile_dict(linear={"tokens": [1, 8, 8], "seconds": [0.1, 0.2, 0.3]})
    assert "strictly increasing" in error(data).reason
    data = table_profile_dict(
        decode_attention={"batch": [1, 2], "context": [0, 8], "seconds": [[1.0, 2.0]]}
    )
    assert "2 rows (batch) of 2 values" in error(data).reason


# -- whole runs: coalesced runs equal the steps run one by one ------------------------------


def table_scenario(policy: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """`policy` on the table profile, run coalesced and step by step."""
    raw = scenario(
        seed=3,
        workload=poisson(150, 12.0, lognormal(200, 0.8, 2000), lognormal(80, 0.8, 600)),
        profile=table_profile_dict(),
        policy=policy,
        variants={"coalesced": {}, "stepwise": {"engine": {"coalesce_decode_steps": False}}},
    )
    raw.update(extra)
    return raw


POLICIES = {
    "continuous": {"name": "continuous", "max_num_seqs": 48},
    "mixed": {"name": "continuous", "mode": "mixed", "max_num_seqs": 48},
    "chunked": {"name": "chunked", "max_num_batched_tokens": 256, "max_num_seqs": 48},
    "static": {"name": "static", "max_batch_size": 16, "pad_prompts": True},
}


@pytest.mark.parametrize("policy", list(POLICIES))
def test_coalesced_runs_with_a_table_profile_equal_stepping(policy: str) -> None:
    res = simulate(load_scenario_dict(table_scenario(POLICIES[policy])))
    fast, slow = res["coalesced"], res["stepwise"]
    assert (fast.steps["num_steps"] > 1).any()
    for col in ("first_token_s", "finish_s", "max_itl_s"):
        np.testing.assert_allclose(fast.requests[col], slow.requests[col], rtol=1e-9, err_msg=col)
    expanded = expand_steps(fast.steps)
    assert len(expanded) == len(slow.steps)
    np.testing.assert_allclose(expanded["duration_s"], slow.steps["duration_s"], rtol=1e-9)
    # steps priced off the tables are counted per step, however runs are coalesced
    off_tables = fast.summary()["profile_extrapolated_steps"]
    assert off_tables == slow.summary()["profile_extrapolated_steps"]


def test_extrapolated_runs_are_counted_by_the_instance_cost_model() -> None:
    raw = table_scenario(POLICIES["continuous"])
    del raw["variants"]
    # 40 requests at once: batches above the grid's 32 are priced by the fitted form
    res, instance = run_arrays_with_instance(raw, [0.0] * 40, [100] * 40, [50] * 40)
    assert res.steps["num_seqs"].max() == 40
    cost = instance.engine.pricing.cost
    assert isinstance(cost, TableCostModel)
    assert cost.num_extrapolated > 0
    # the summary counts steps: here exactly the decode steps whose batch is above the grid
    over = res.steps.loc[res.steps["num_decode_tokens"] > 32, "num_steps"].sum()
    assert res.summary()["profile_extrapolated_steps"] == over > 0
    inside = table_model()
    assert inside.run_times(decode(8, 120))[0] != fallback(decode(8, 120))
