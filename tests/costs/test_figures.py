"""A model's figures on an instance, worked out once (sim.costs.figures), and a KV tier's
geometry on an instance (sim.costs.memory_tiers.tier_geometry): the catalog's own numbers, and
a layout that cannot serve blamed on what to change."""

from __future__ import annotations

import pytest

from sim.costs.catalog import (
    HARDWARE,
    MODELS,
    kv_bytes_per_token_on,
    kv_capacity_blocks,
)
from sim.costs.figures import LayoutProblem, resolve_instance, resolve_model
from sim.costs.memory_tiers import GB_BYTES, TIER_DEFAULTS, UNBOUNDED_BLOCKS, tier_geometry


def test_figures_are_the_catalogs() -> None:
    model, hw = MODELS["llama-3-8b"], HARDWARE["h100-sxm"].with_tensor_parallel(2)
    draft = MODELS["llama-2-7b"]  # a draft model keeps its own KV of every token
    f = resolve_instance(model, hw, block_size=16, seats=256, draft=draft)
    own = kv_bytes_per_token_on(model, hw)
    assert f.kv_bytes_per_token == own
    assert f.moved_bytes_per_token == own + kv_bytes_per_token_on(draft, hw)
    assert f.kv_blocks == kv_capacity_blocks(model, hw, 16, draft, 256)
    assert (f.label, f.num_gpus, f.engines, f.engine_gpus) == ("h100-sxmx2", 2, 1, 2)
    assert f.peak_flops == hw.instance_peak_flops
    assert f.usd_per_gpu_hour == hw.economics.usd_per_gpu_hour
    stated = resolve_instance(model, hw, block_size=16, seats=256, stated_blocks=100)
    assert stated.kv_blocks == 100
    m = resolve_model(model, hw)
    assert (m.weight_bytes, m.flops_per_token) == (model.weight_bytes, model.flops_per_token)


def test_a_layout_that_cannot_serve_names_what_to_blame() -> None:
    big, small = MODELS["llama-2-70b"], HARDWARE["a100-80g"]
    with pytest.raises(LayoutProblem) as exc:
        resolve_model(big, small)
    assert exc.value.blame == "hardware"
    with pytest.raises(LayoutProblem) as exc:
        resolve_instance(big, small, block_size=16, seats=8)
    assert exc.value.blame == "hardware"
    # checked already: the hardware is not asked again, and a draft as large as the target
    # leaves no room next to it
    target = MODELS["llama-3-8b"]
    with pytest.raises(LayoutProblem) as exc:
        resolve_instance(target, HARDWARE["a100-40g"], block_size=16, seats=8, draft=big,
                         fits=True)  # fmt: skip
    assert exc.value.blame == "draft"


def test_tier_geometry() -> None:
    dram = TIER_DEFAULTS["dram"]
    g = tier_geometry("dram", 2.0, 4096.0, 4)
    assert g.capacity_blocks == int(2.0 * GB_BYTES // 4096.0)
    assert g.read_bytes_per_s == dram.read_bytes_per_s * 4  # one path per GPU
    assert g.latency_s == dram.latency_s
    nvme = tier_geometry("nvme", None, 4096.0, 4, read_gb_per_s=3.0, latency_s=0.5)
    assert nvme.capacity_blocks == UNBOUNDED_BLOCKS
    assert nvme.read_bytes_per_s == 3.0e9  # one drive per instance, whatever its GPUs
    assert nvme.latency_s == 0.5
