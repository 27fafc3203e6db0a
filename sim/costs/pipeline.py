"""Pipeline parallelism: stages of GPUs, each holding a share of the layers, batches in flight.

An instance with `pipeline_parallel` (pp) stages of `tensor_parallel x data_parallel` GPUs each
runs as pp *virtual engines*, the way vLLM schedules pipeline parallelism: each engine has its
own scheduler, its own running batch and 1/pp of the instance's KV blocks (all stages' memory,
each stage keeping its layers' share of every token's KV), and new requests go to the engine the
router picks. A batch goes through every stage in turn, so one engine's step takes the whole
model's time on one stage's GPUs plus the hand-over of activations between stages; while it is
in stage 2, another engine's batch can be in stage 1. With pp engines busy every stage is busy
(pp batches in flight); with fewer requests than that the other engines wait and their stages
idle: the pipeline's bubbles. A lone request decodes no faster than on one stage's GPUs.

The roofline of an engine's step (`sim.costs.profile.roofline_profile`) is that of the model on
one stage's GPUs, plus `pipeline_terms`: per step `(pp - 1)` hand-over latencies, per token
`(pp - 1) * hidden * 2` bytes (bf16 activations) over the link, NVLink inside a scale-up domain,
the scale-out NIC when the instance spans domains. Not modelled: two engines' batches of very
different sizes contending for a stage (each engine is priced as if its stages were free when
it reaches them).
"""

from __future__ import annotations

from sim.costs.catalog import HardwareSpec, ModelSpec

ACTIVATION_BYTES = 2  # bf16 activations cross between stages


def pipeline_terms(
    model: ModelSpec, hw: HardwareSpec, link_efficiency: float, latency_s: float
) -> tuple[float, float]:
    """(seconds per step, seconds per token) the hand-overs between stages add to a step."""
    pp = hw.pipeline_parallel
    if pp == 1:
        return 0.0, 0.0
    assert hw.interconnect_bandwidth_bytes_per_s is not None  # pipeline_problem
    bandwidth = hw.interconnect_bandwidth_bytes_per_s / 2 * link_efficiency
    latency = latency_s
    if hw.num_gpus > hw.scaleup_domain_gpus:  # stages on other nodes: the scale-out NIC
        assert hw.scaleout_bandwidth_bytes_per_s is not None  # pipeline_problem
        bandwidth = hw.scaleout_bandwidth_bytes_per_s * link_efficiency
        latency += hw.scaleout_latency_s
    # each of the stage's tensor-parallel GPUs hands over its data-parallel rank's tokens
    per_token = model.hidden_size * ACTIVATION_BYTES / bandwidth
    return (pp - 1) * latency, (pp - 1) * per_token
