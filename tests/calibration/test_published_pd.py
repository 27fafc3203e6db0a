"""The prefill/decode-disaggregated and MTP rows of the training file as scenarios
(calibration/published_pd.py): pools laid out as the row says, the KV over each prefill GPU's
link, MTP with the stated acceptance, and a small point simulated end to end."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from calibration.published_pd import (
    MTP_ACCEPTANCE,
    MTP_TOKENS,
    expressible_pd,
    pd_errors,
    pd_scenario,
)
from sim.scenario.load import load_scenario_dict


def _row(**fields: Any) -> SimpleNamespace:
    """A small disaggregated row: gpt-oss on GB200, one prefill GPU, one 4-GPU decode worker."""
    base = dict(
        model_key="gptoss", precision="fp4", gpu="gb200", framework="dynamo-trt",
        framework_version="nvcr.io#nvidia/ai-dynamo/tensorrtllm-runtime:0.7.0.post2",
        disagg=True, spec_decoding="none", isl=256, osl=16, conc=4, random_range_ratio=0.8,
        prefill_tp=1, prefill_ep=1, prefill_dp_attention=False, prefill_workers=1,
        num_prefill_gpu=1, decode_tp=4, decode_ep=1, decode_dp_attention=False,
        decode_workers=1, num_decode_gpu=4, tput_per_gpu=1000.0, tpot_mean_s=0.004,
        ttft_mean_s=0.1,
    )  # fmt: skip
    return SimpleNamespace(**(base | fields))


def test_rows_the_mapping_takes_and_refuses() -> None:
    assert expressible_pd(_row()) is None
    assert "not disaggregated" in str(expressible_pd(_row(disagg=False)))
    assert "engine" in str(expressible_pd(_row(framework="vllm-disagg")))


def test_pools_links_and_loop_as_the_row_says() -> None:
    raw = pd_scenario(_row(prefill_workers=3, num_prefill_gpu=12, prefill_tp=4))
    pools = raw["disaggregation"]
    assert pools["prefill"]["count"] == 3
    assert pools["prefill"]["hardware"] == {"name": "gb200", "tensor_parallel": 4}
    assert pools["decode"]["hardware"] == {"name": "gb200", "tensor_parallel": 4}
    assert pools["link"]["num_links"] == 12  # one per prefill GPU
    assert raw["engine"] == {"name": "trt-llm", "async_scheduling": True}
    assert raw["workload"]["clients"]["num_clients"] == 4
    # wide EP: data-parallel attention with the experts over every rank of the worker
    wide = pd_scenario(_row(model_key="dsr1", decode_dp_attention=True, num_decode_gpu=16,
                            prefill_tp=4, num_prefill_gpu=4))  # fmt: skip
    hw = wide["disaggregation"]["decode"]["hardware"]
    assert hw == {"name": "gb200", "tensor_parallel": 1, "data_parallel": 16,
                  "expert_parallel": 16}  # fmt: skip
    (variant,) = load_scenario_dict(wide).variants
    assert variant.spec.disaggregation is not None


def test_mtp_rows_speculate_with_the_stated_acceptance() -> None:
    raw = pd_scenario(_row(model_key="dsr1", spec_decoding="mtp", num_decode_gpu=8))
    speculative = raw["disaggregation"]["decode"]["policy"]["speculative"]
    assert speculative == {"method": "mtp", "num_speculative_tokens": MTP_TOKENS,
                           "acceptance": {"rate": MTP_ACCEPTANCE}}  # fmt: skip
    assert "speculative" not in raw["disaggregation"]["prefill"]["policy"]
    # SGLang turns its overlap scheduler off with speculation
    sglang = pd_scenario(_row(model_key="dsr1", spec_decoding="mtp", framework="dynamo-sglang",
                              num_decode_gpu=8))  # fmt: skip
    assert sglang["engine"]["async_scheduling"] is False


def test_a_small_point_simulates_and_reports_its_errors() -> None:
    errors = pd_errors(_row())
    assert set(errors) == {"tput_err", "tpot_err", "ttft_err"}
    for value in errors.values():
        assert value == pytest.approx(value) and -100 < value < 10_000
