"""The catalog's GPUs: datasheet figures per GPU (source per row).

A data table (`sim.costs.catalog.HardwareSpec` reads it); the field meanings are HardwareSpec's.
"""

from __future__ import annotations

from typing import Any

MiB = 1024**2

# memory_bytes is the total the driver reports (nvidia-smi "MiB"), which is what an engine's
# gpu_memory_utilization multiplies; the datasheet "GB" label is a rounded figure. FLOP/s are
# dense (the datasheets' larger figures assume 2:4 sparsity). interconnect_bandwidth_bytes_per_s
# is the datasheet's per-GPU figure, both directions together (NVLink, or PCIe where the GPU has
# no NVLink switch); a ring all-reduce moves data one way at half of it.
HARDWARE_TABLE: dict[str, dict[str, Any]] = {
    # NVIDIA A100 datasheet (2021): 40GB SXM 1,555 GB/s, 80GB SXM 2,039 GB/s; BF16 dense 312 TFLOPS;
    # no FP8 tensor cores; NVLink 3 600 GB/s
    "a100-40g": dict(
        memory_bytes=40_960 * MiB,
        hbm_bandwidth_bytes_per_s=1.555e12,
        peak_flops=312e12,
        interconnect_bandwidth_bytes_per_s=600e9,
    ),
    "a100-80g": dict(
        memory_bytes=81_920 * MiB,
        hbm_bandwidth_bytes_per_s=2.039e12,
        peak_flops=312e12,
        interconnect_bandwidth_bytes_per_s=600e9,
    ),
    # NVIDIA A40 datasheet (2021): 48 GB GDDR6 with ECC (nvidia-smi 46,068 MiB, as the L40S), 696
    # GB/s, BF16 dense 149.7 TFLOPS (299.4 is sparse); no FP8 tensor cores; PCIe Gen4 x16 64 GB/s
    # (the 112.5 GB/s NVLink bridge joins pairs only, not modelled)
    "a40": dict(
        memory_bytes=46_068 * MiB,
        hbm_bandwidth_bytes_per_s=696e9,
        peak_flops=149.7e12,
        interconnect_bandwidth_bytes_per_s=64e9,
    ),
    # NVIDIA H100 datasheet, SXM5: 80 GB HBM3, 3.35 TB/s, BF16 dense 989 TFLOPS (1,979 is sparse),
    # FP8 dense 1,979 TFLOPS, NVLink 4 900 GB/s
    "h100-sxm": dict(
        memory_bytes=81_559 * MiB,
        hbm_bandwidth_bytes_per_s=3.35e12,
        peak_flops=989e12,
        fp8_peak_flops=1979e12,
        interconnect_bandwidth_bytes_per_s=900e9,
    ),
    # NVIDIA H100 datasheet, PCIe: 80 GB HBM2e, 2.0 TB/s, BF16 dense 756 TFLOPS, FP8 dense 1,513
    # TFLOPS; PCIe Gen5 x16 128 GB/s (the 600 GB/s NVLink bridge joins pairs only, not modelled)
    "h100-pcie": dict(
        memory_bytes=81_559 * MiB,
        hbm_bandwidth_bytes_per_s=2.0e12,
        peak_flops=756e12,
        fp8_peak_flops=1513e12,
        interconnect_bandwidth_bytes_per_s=128e9,
    ),
    # NVIDIA H200 datasheet, SXM: 141 GB HBM3e, 4.8 TB/s, BF16 dense 989 TFLOPS (same die as H100),
    # FP8 dense 1,979 TFLOPS, NVLink 4 900 GB/s
    "h200": dict(
        memory_bytes=143_771 * MiB,
        hbm_bandwidth_bytes_per_s=4.8e12,
        peak_flops=989e12,
        fp8_peak_flops=1979e12,
        interconnect_bandwidth_bytes_per_s=900e9,
    ),
    # NVIDIA L40S datasheet: 48 GB GDDR6 (nvidia-smi 46,068 MiB with ECC), 864 GB/s, BF16 dense
    # 362.05 TFLOPS, FP8 dense 733 TFLOPS; no NVLink: PCIe Gen4 x16 64 GB/s
    "l40s": dict(
        memory_bytes=46_068 * MiB,
        hbm_bandwidth_bytes_per_s=864e9,
        peak_flops=362.05e12,
        fp8_peak_flops=733e12,
        interconnect_bandwidth_bytes_per_s=64e9,
    ),
    # NVIDIA HGX B200 datasheet (per GPU = 1/8 of the 8-GPU board): HBM3e 8 TB/s, FP16/BF16 dense
    # 2.25 PFLOPS (4.5 sparse), FP8 dense 4.5 PFLOPS, NVLink 5 1.8 TB/s. Memory: the board's
    # 180 GB label; nvidia-smi reports 183,359 MiB, used here as for the other GPUs.
    "b200": dict(
        memory_bytes=183_359 * MiB,
        hbm_bandwidth_bytes_per_s=8.0e12,
        peak_flops=2.25e15,
        fp8_peak_flops=4.5e15,
        interconnect_bandwidth_bytes_per_s=1.8e12,
    ),
}
