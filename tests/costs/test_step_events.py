"""The events profile (sim/costs/step_events.py): counted kernels and collectives, the layout's
collectives, unit costs priced into coefficients, and the shipped unit costs' file."""

from __future__ import annotations

import math

import pytest
import yaml
from scenario_factory import run, scenario

from sim.costs.catalog import HardwareSpec, ModelSpec
from sim.costs.step_events import (
    PRIORS,
    UNIT_COSTS_FILE,
    basis,
    catalog_unit_costs,
    evaluate,
    events_profile,
    kernels_per_step,
    prior,
    vendor_key,
)


def _model(name: str, **fields: object) -> ModelSpec:
    return ModelSpec.model_validate({"name": name, **fields})


def _hw(name: str, **fields: object) -> HardwareSpec:
    return HardwareSpec.model_validate({"name": name, **fields})


def test_kernels_are_counted_per_layer_type() -> None:
    # Llama: 80 layers of GQA attention (6 kernels) and a dense MLP (4), plus 6 per step
    assert kernels_per_step(_model("llama-3.3-70b")) == 80 * (6 + 4) + 6
    # DeepSeek-V3: 61 latent-attention layers (12), 3 dense MLPs (4), 58 MoE layers with a
    # shared expert (8 + 3), plus 6 per step
    assert kernels_per_step(_model("deepseek-v3")) == 61 * 12 + 3 * 4 + 58 * (8 + 3) + 6
    # gpt-oss: 36 GQA layers (sliding or full: the same kernels), every one MoE, no shared one
    assert kernels_per_step(_model("gpt-oss-120b")) == 36 * (6 + 8) + 6


def test_the_fixed_step_time_grows_with_tensor_parallelism() -> None:
    """The all-reduce latency per step is monotone in tp: none at 1, then 2 per layer at a
    latency that grows with the group; the kernel floor does not shrink with tp."""
    model = _model("llama-3.3-70b", weight_dtype="fp8")
    costs = {
        "allreduce_s@nvidia": 10e-6,
        "allreduce_peer_s@nvidia": 1e-6,
        "kernel_s@hopper": 3e-6,
        "host_s@vllm": 0.0,
        "workers_s@vllm": 0.0,  # its own test below
    }
    fixed = []
    for tp in (1, 2, 4, 8):
        terms = basis(model, _hw("h200", tensor_parallel=tp))["t_mem_s"]
        weights = {k: v for k, v in terms.items() if not k.startswith("inv:")}
        fixed.append(evaluate({"t_mem_s": weights}, costs)["t_mem_s"])
        assert terms["kernel_s@hopper"] == kernels_per_step(model)
    floor = kernels_per_step(model) * 3e-6
    assert fixed[0] == pytest.approx(floor)
    assert fixed[1] == pytest.approx(floor + 160 * 10e-6)
    assert fixed[3] == pytest.approx(floor + 160 * (10e-6 + 6 * 1e-6))
    assert fixed == sorted(fixed) and len(set(fixed)) == 4


def test_a_multi_gpu_instance_hands_each_step_to_its_workers_unless_overlapped() -> None:
    model = _model("llama-3.3-70b", weight_dtype="fp8")
    one = basis(model, _hw("h200", tensor_parallel=1))["t_mem_s"]
    four = basis(model, _hw("h200", tensor_parallel=4))["t_mem_s"]
    hidden = basis(model, _hw("h200", tensor_parallel=4), overlapped=True)["t_mem_s"]
    assert "workers_s@vllm" not in one and four["workers_s@vllm"] == 1.0
    # an overlapped loop hides the host's time, the hand-off with it, but for its GPU gap
    assert "workers_s@vllm" not in hidden and "host_s@vllm" not in hidden
    assert hidden["gap_s@vllm"] == 1.0


def test_expert_parallelism_under_tensor_parallel_attention_runs_no_all_to_all() -> None:
    model = _model("deepseek-v3")
    terms = basis(model, _hw("b200", tensor_parallel=8, expert_parallel=8))
    assert "t_exchange_s" not in terms and "t_exchange_s_per_token" not in terms
    # the rank's two all-reduces per layer are all it runs
    assert terms["t_mem_s"]["allreduce_s@nvidia"] == 2 * 61


def test_data_parallel_attention_dispatches_and_combines_once_per_moe_layer() -> None:
    model = _model("deepseek-v3")
    terms = basis(model, _hw("b200", tensor_parallel=1, data_parallel=8, expert_parallel=8))
    assert terms["t_exchange_s"] == {"dispatch_s@nvidia": 2.0 * 58}
    assert "allreduce_s@nvidia" not in terms["t_mem_s"]  # one GPU per attention rank
    # bytes: k experts x hidden x (1 fp8 dispatch + 2 bf16 combine), 7/8 leaving, per GPU
    per_token = 58 * 8 * 7168 * 3 * (7 / 8) / 8
    one_way = 1.8e12 / 2 * 0.8
    assert terms["t_exchange_s_per_token"]["const"] == pytest.approx(per_token / one_way)


def test_the_profile_prices_the_basis_with_the_unit_costs() -> None:
    model, hw = _model("llama-3.3-70b", weight_dtype="fp8"), _hw("h100-sxm", tensor_parallel=4)
    costs = {"kernel_s@hopper": 2e-6, "stream_eff@hopper/plain": 0.5, "host_s@sglang": 1e-3}
    profile = events_profile(model, hw, "sglang", costs=costs)
    weights = model.weight_bytes / (4 * 3.35e12)
    fixed = (
        kernels_per_step(model) * 2e-6
        + 1e-3
        + prior("workers_s@sglang")  # four GPUs: worker processes
        + 160 * (prior("allreduce_s@nvidia") + 2 * prior("allreduce_peer_s@nvidia"))
    )
    assert profile.coefficients.t_mem_s == pytest.approx(fixed + weights / 0.5)
    # the provenance says which unit costs were fitted and which took their priors
    units = profile.provenance["unit_costs"]
    assert units["kernel_s@hopper"] == {"value": 2e-6, "source": "fitted"}
    assert units["allreduce_s@nvidia"]["source"] == "prior"
    assert profile.provenance["engine"] == "sglang"


def test_a_generation_without_a_fitted_value_takes_its_vendors() -> None:
    """MI325X (CDNA3) with only AMD's shared values fitted: it prices at AMD's, and says so."""
    model, hw = _model("llama-3.3-70b", weight_dtype="fp8"), _hw("mi325x", tensor_parallel=2)
    costs = {"kernel_s@amd": 9e-6, "kernel_s@cdna4": 5e-6, "stream_eff@amd/plain": 0.6}
    profile = events_profile(model, hw, "vllm", costs=costs)
    units = profile.provenance["unit_costs"]
    assert units["kernel_s@cdna3"] == {"value": 9e-6, "source": "fitted for kernel_s@amd"}
    assert units["stream_eff@cdna3/plain"]["value"] == 0.6
    assert units["gemm_eff@cdna3/fp8"]["source"] == "prior"  # neither fitted
    # the fallback is by vendor, never across vendors
    assert vendor_key("kernel_s@hopper") == "kernel_s@nvidia"
    assert vendor_key("gemm_eff@cdna3/fp8") == "gemm_eff@amd/fp8"
    assert vendor_key("host_s@vllm") is None and vendor_key("allreduce_s@amd") is None


def test_the_engine_name_selects_its_host_time() -> None:
    model, hw = _model("llama-3-8b"), _hw("h100-sxm")
    costs = {"host_s@vllm": 1e-3, "host_s@sglang": 3e-3}
    vllm = events_profile(model, hw, "vllm", costs=costs).coefficients.t_mem_s
    sglang = events_profile(model, hw, "sglang", costs=costs).coefficients.t_mem_s
    assert sglang - vllm == pytest.approx(2e-3)


def test_shipped_unit_costs_are_sourced_and_physical() -> None:
    doc = yaml.safe_load(UNIT_COSTS_FILE.read_text())
    assert doc["kind"] == "unit_costs"
    entries = doc["unit_costs"]
    assert entries, "the shipped file has fitted unit costs"
    for key, entry in entries.items():
        kind = key.split("@")[0]
        assert kind in PRIORS, key
        assert entry["source"].startswith("fit:") and "prior:" in entry["source"], key
        value = float(entry["value"])
        assert math.isfinite(value) and value > 0, key
        if kind.endswith("_eff"):
            assert value <= 1.0, key
    assert catalog_unit_costs() == {k: float(e["value"]) for k, e in entries.items()}


def test_a_scenario_runs_on_the_events_profile_of_its_engine() -> None:
    workload = {
        "num_requests": 5,
        "arrival": {"process": "poisson", "rate": 0.01},
        "prompt_tokens": {"dist": "fixed", "value": 256},
        "output_tokens": {"dist": "fixed", "value": 16},
    }
    policy = {"name": "chunked", "max_num_seqs": 8, "max_num_batched_tokens": 512}
    base = scenario(policy=policy, workload=workload, model="llama-3-8b", hardware="h100-sxm",
                    profile="events")
    costs = catalog_unit_costs()

    def unit(key: str) -> float:
        return costs.get(key, prior(key))

    for overlapped, kind in ((False, "host_s"), (True, "gap_s")):
        tpot = {}
        for engine in ("vllm", "sglang"):
            loop = {"name": engine, "version": "x", "async_scheduling": overlapped}
            tpot[engine] = run(base | {"engine": loop}).summary()["tpot_mean_s"]
        # requests one at a time (100 s apart): every decode step pays the engine's host time
        # (a synchronous loop) or only its GPU gap (an overlapped one hides the host's time)
        gap = unit(f"{kind}@sglang") - unit(f"{kind}@vllm")
        assert tpot["sglang"] - tpot["vllm"] == pytest.approx(gap, rel=1e-6, abs=1e-9), kind


def test_the_exchange_grows_past_one_node_as_deeps_latencies_do() -> None:
    from sim.costs.step_events import EXCHANGE_US, exchange_growth

    assert exchange_growth(2) == exchange_growth(8) == 1.0
    assert exchange_growth(32) == pytest.approx(EXCHANGE_US[2] / EXCHANGE_US[0])
    grown = [exchange_growth(ep) for ep in (8, 12, 16, 24, 32, 64, 128)]
    assert grown == sorted(grown) and len(set(grown)) == len(grown)
    wide = basis(_model("deepseek-v3"), _hw("gb200", data_parallel=32, expert_parallel=32))
    narrow = basis(_model("deepseek-v3"), _hw("gb200", data_parallel=8, expert_parallel=8))
    ratio = wide["t_exchange_s"]["dispatch_s@nvidia"] / narrow["t_exchange_s"]["dispatch_s@nvidia"]
    assert ratio == pytest.approx(exchange_growth(32))


def test_the_gemms_ridge_is_the_datasheets() -> None:
    from sim.costs.step_events import ridge_tokens

    # H100 bf16: 989 TFLOP/s x 2 bytes per parameter / (2 x 3.35 TB/s) = 295 tokens per rank
    assert ridge_tokens(_model("llama-3-8b"), _hw("h100-sxm")) == pytest.approx(295.2, abs=0.1)
    fp8 = ridge_tokens(_model("llama-3.3-70b", weight_dtype="fp8"), _hw("h100-sxm"))
    assert fp8 == pytest.approx(295.4, abs=1.0)  # twice the FLOP/s, half the bytes
    ranks = ridge_tokens(_model("deepseek-v3"), _hw("b200", data_parallel=8, expert_parallel=8))
    one = ridge_tokens(_model("deepseek-v3"), _hw("b200", tensor_parallel=8, expert_parallel=8))
    assert ranks == pytest.approx(8 * one)  # every data-parallel rank's tokens


def test_an_exchange_beyond_the_nodes_link_domain_crosses_the_nic() -> None:
    """16 MI355X GPUs (two 8-GPU nodes) exchange 8/15 of their bytes over the 50 GB/s NICs:
    the slower link sets the time, and each exchange pays the NIC's latency."""
    model = _model("deepseek-v3")
    inside = basis(model, _hw("mi355x", tensor_parallel=1, data_parallel=8, expert_parallel=8))
    across = basis(model, _hw("mi355x", tensor_parallel=1, data_parallel=16, expert_parallel=16))
    assert "const" not in inside["t_exchange_s"]
    hw = _hw("mi355x", tensor_parallel=1, data_parallel=16, expert_parallel=16)
    assert across["t_exchange_s"]["const"] == pytest.approx(2 * 58 * hw.scaleout_latency_s)
    per_token = 58 * 8 * 7168 * 3 * (15 / 16) / 16
    nic = hw.scaleout_bandwidth_bytes_per_s * 0.8
    expected = per_token * (8 / 15) / nic
    assert across["t_exchange_s_per_token"]["const"] == pytest.approx(expected)
    # a GB200 NVL72 rack keeps 32 GPUs inside one NVLink domain: no NIC
    rack = basis(model, _hw("gb200", tensor_parallel=1, data_parallel=32, expert_parallel=32))
    assert "const" not in rack["t_exchange_s"]
