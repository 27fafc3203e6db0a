"""The prefill/decode-disaggregated and MTP rows of the training file as scenarios
(calibration/published_pd.py): pools laid out as the row says, the KV over each prefill GPU's
link, MTP with the stated acceptance, and a small point simulated end to end."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from calibration.published_events import (
    MTP_FIRST_RATE,
    MTP_LATER_RATE,
    STATED_MEMORY,
    mtp_tokens,
)
from calibration.published_pd import expressible_pd, gpus_of, pd_errors, pd_scenario
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
        ttft_mean_s=0.1, ttft_median_s=0.1, ttft_p99_s=0.3,
    )  # fmt: skip
    return SimpleNamespace(**(base | fields))


def test_rows_the_mapping_takes_and_refuses() -> None:
    assert expressible_pd(_row()) is None
    assert "one instance without speculation" in str(expressible_pd(_row(disagg=False)))
    assert "engine" in str(expressible_pd(_row(framework="vllm-disagg")))
    # one instance's MTP row: judged here, since the fit leaves speculation out
    single = _row(disagg=False, spec_decoding="mtp", framework="trt", tp=8, ep=8,
                  dp_attention=False, model_key="dsr1")  # fmt: skip
    assert expressible_pd(single) is None
    assert "engine" in str(expressible_pd(_row(disagg=False, spec_decoding="mtp")))


def test_pools_links_and_loop_as_the_row_says() -> None:
    raw = pd_scenario(_row(prefill_workers=3, num_prefill_gpu=12, prefill_tp=4))
    pools = raw["disaggregation"]
    assert pools["prefill"]["count"] == 3
    # the memory share the deployment set, stated (the rows do not carry it)
    assert pools["prefill"]["hardware"] == {"name": "gb200", "tensor_parallel": 4, **STATED_MEMORY}
    assert pools["decode"]["hardware"] == {"name": "gb200", "tensor_parallel": 4, **STATED_MEMORY}
    assert pools["link"]["num_links"] == 12  # one per prefill GPU
    assert raw["engine"] == {"name": "trt-llm", "async_scheduling": True}
    assert raw["workload"]["clients"]["num_clients"] == 4
    # wide EP: data-parallel attention with the experts over every rank of the worker
    wide = pd_scenario(_row(model_key="dsr1", decode_dp_attention=True, num_decode_gpu=16,
                            prefill_tp=4, num_prefill_gpu=4))  # fmt: skip
    hw = wide["disaggregation"]["decode"]["hardware"]
    assert hw == {"name": "gb200", "tensor_parallel": 1, "data_parallel": 16,
                  "expert_parallel": 16, **STATED_MEMORY}  # fmt: skip
    (variant,) = load_scenario_dict(wide).variants
    assert variant.spec.disaggregation is not None
    # Dynamo's SGLang pools place 32 replicas beside DeepSeek-R1's 256 experts: EP 48 holds them
    sglang = pd_scenario(_row(model_key="dsr1", precision="fp8", framework="dynamo-sglang",
                              decode_dp_attention=True, num_decode_gpu=48,
                              prefill_dp_attention=True, prefill_workers=3, num_prefill_gpu=24,
                              framework_version="lmsysorg/sglang:v0.5.5.post2"))  # fmt: skip
    decode = sglang["disaggregation"]["decode"]["hardware"]
    assert (decode["expert_parallel"], decode["redundant_experts"]) == (48, 32)
    assert sglang["disaggregation"]["prefill"]["hardware"]["redundant_experts"] == 32
    (variant,) = load_scenario_dict(sglang).variants
    assert variant.spec.disaggregation is not None
    # each data-parallel rank chunks its own prompts: SGLang's 16,384 tokens over 8 ranks
    prefill = sglang["disaggregation"]["prefill"]["policy"]
    assert (prefill["name"], prefill["long_prefill_token_threshold"]) == ("chunked", 2048)
    # a sweep's first point that ran cold (p99 TTFT 10x the median) waits the cold start
    assert "cold_start_s" not in sglang["engine"]
    cold = pd_scenario(_row(ttft_median_s=2.0, ttft_p99_s=80.0))
    assert cold["engine"]["cold_start_s"] > 0


def test_mtp_rows_speculate_as_their_deployments_ran_it() -> None:
    raw = pd_scenario(_row(model_key="dsr1", spec_decoding="mtp", num_decode_gpu=8))
    speculative = raw["disaggregation"]["decode"]["policy"]["speculative"]
    # Dynamo-TRT: three drafts, the first accepted at TensorRT-LLM's rate, the later at 0.5
    first = MTP_FIRST_RATE["trt-llm"]
    assert speculative == {"method": "mtp", "num_speculative_tokens": 3,
                           "acceptance": {"rate": [first, MTP_LATER_RATE, MTP_LATER_RATE]}}
    assert 2.2 < 1 + first + first * MTP_LATER_RATE + first * MTP_LATER_RATE**2 < 2.45
    assert "speculative" not in raw["disaggregation"]["prefill"]["policy"]
    # SGLang turns its overlap scheduler off with speculation
    sglang = pd_scenario(_row(model_key="dsr1", spec_decoding="mtp", framework="dynamo-sglang",
                              num_decode_gpu=8))  # fmt: skip
    assert sglang["engine"]["async_scheduling"] is False
    # SGLang's MI355X pools draft one token (`--speculative-num-steps 1`)
    amd = pd_scenario(_row(model_key="dsr1", spec_decoding="mtp", framework="sglang-disagg",
                           gpu="mi355x", precision="fp8", num_decode_gpu=8))  # fmt: skip
    assert amd["disaggregation"]["decode"]["policy"]["speculative"]["acceptance"] == {
        "rate": [MTP_FIRST_RATE["sglang"]]}
    # TensorRT-LLM alone drafts one token with data-parallel attention, three without
    assert (mtp_tokens("trt", "b200", True), mtp_tokens("trt", "b200", False)) == (1, 3)
    assert mtp_tokens("sglang", "b200", False) == 2


def test_one_instances_mtp_row_is_the_fits_scenario_with_speculation() -> None:
    row = _row(disagg=False, spec_decoding="mtp", framework="trt", tp=4, ep=4,
               dp_attention=False, model_key="dsr1", isl=128, osl=16, conc=2,
               framework_version="nvcr.io#nvidia/tensorrt-llm/release:1.2.0rc2")  # fmt: skip
    raw = pd_scenario(row)
    assert "profile" not in raw and "disaggregation" not in raw  # as a user writes it
    assert raw["hardware"] == {"name": "gb200", "tensor_parallel": 4, "expert_parallel": 4,
                               **STATED_MEMORY}  # fmt: skip
    assert raw["policy"]["speculative"]["num_speculative_tokens"] == 3
    assert gpus_of(row) == 4 and gpus_of(_row()) == 5
    errors = pd_errors(row)
    assert set(errors) == {"tput_err", "tpot_err", "ttft_err"}


def test_a_small_point_simulates_and_reports_its_errors() -> None:
    errors = pd_errors(_row())
    assert set(errors) == {"tput_err", "tpot_err", "ttft_err"}
    for value in errors.values():
        assert value == pytest.approx(value) and -100 < value < 10_000
