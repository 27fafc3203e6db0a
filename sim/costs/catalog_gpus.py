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
# scaleout_bandwidth_bytes_per_s is the GPU's own scale-out NIC, one direction (a 400 Gb/s
# InfiniBand or RoCE port is 50e9 bytes/s), given for the GPUs sold in multi-node platforms;
# scaleup_domain_gpus is the default 8 (one HGX / OAM board) except where stated.
HARDWARE_TABLE: dict[str, dict[str, Any]] = {
    # NVIDIA A100 datasheet (2021): 40GB SXM 1,555 GB/s, 80GB SXM 2,039 GB/s; BF16 dense 312 TFLOPS;
    # no FP8 tensor cores; NVLink 3 600 GB/s
    # Scale-out: NVIDIA DGX A100 datasheet, 8 single-port ConnectX-6 200 Gb/s HDR InfiniBand,
    # one per GPU (25e9 bytes/s)
    "a100-40g": dict(
        memory_bytes=40_960 * MiB,
        hbm_bandwidth_bytes_per_s=1.555e12,
        peak_flops=312e12,
        interconnect_bandwidth_bytes_per_s=600e9,
        scaleout_bandwidth_bytes_per_s=25e9,
    ),
    "a100-80g": dict(
        memory_bytes=81_920 * MiB,
        hbm_bandwidth_bytes_per_s=2.039e12,
        peak_flops=312e12,
        interconnect_bandwidth_bytes_per_s=600e9,
        scaleout_bandwidth_bytes_per_s=25e9,
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
    # FP8 dense 1,979 TFLOPS, NVLink 4 900 GB/s. Scale-out: NVIDIA DGX H100 datasheet, 8
    # ConnectX-7 400 Gb/s InfiniBand/Ethernet ports for the compute fabric, one per GPU.
    "h100-sxm": dict(
        memory_bytes=81_559 * MiB,
        hbm_bandwidth_bytes_per_s=3.35e12,
        peak_flops=989e12,
        fp8_peak_flops=1979e12,
        interconnect_bandwidth_bytes_per_s=900e9,
        scaleout_bandwidth_bytes_per_s=50e9,
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
    # FP8 dense 1,979 TFLOPS, NVLink 4 900 GB/s. Scale-out: HGX H200 platforms (DGX H200
    # datasheet) carry one ConnectX-7 400 Gb/s port per GPU.
    "h200": dict(
        memory_bytes=143_771 * MiB,
        hbm_bandwidth_bytes_per_s=4.8e12,
        peak_flops=989e12,
        fp8_peak_flops=1979e12,
        interconnect_bandwidth_bytes_per_s=900e9,
        scaleout_bandwidth_bytes_per_s=50e9,
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
    # 2.25 PFLOPS (4.5 sparse), FP8 dense 4.5 PFLOPS, FP4 dense 9 PFLOPS (the board's 144 PFLOPS
    # is sparse: 18 per GPU), NVLink 5 1.8 TB/s. Memory: the board's 180 GB label; nvidia-smi
    # reports 183,359 MiB, used here as for the other GPUs. (NVIDIA's later spec table prints
    # 7.7 TB/s for HGX B200; the 2024 datasheet's 8 TB/s is kept.) Scale-out: NVIDIA DGX B200
    # datasheet, 8 single-port ConnectX-7 400 Gb/s, one per GPU.
    "b200": dict(
        memory_bytes=183_359 * MiB,
        hbm_bandwidth_bytes_per_s=8.0e12,
        peak_flops=2.25e15,
        fp8_peak_flops=4.5e15,
        fp4_peak_flops=9.0e15,
        interconnect_bandwidth_bytes_per_s=1.8e12,
        scaleout_bandwidth_bytes_per_s=50e9,
    ),
    # One GPU of an NVIDIA GB200 NVL72 (NVIDIA GB200 NVL72 specifications, per Blackwell GPU):
    # 186 GB HBM3e (nvidia-smi: 189,471 MiB), 8 TB/s; FP16/BF16 5, FP8/FP6 10, FP4 20 PFLOPS
    # are sparse, so dense 2.5, 5 and 10 PFLOPS; NVLink 5 1.8 TB/s to every one of the rack's 72
    # GPUs through the NVLink switches (scaleup_domain_gpus 72). Scale-out: DGX GB200 compute
    # trays carry one ConnectX-7 400 Gb/s port per GPU (ConnectX-8 at 800 Gb/s arrives with
    # GB300).
    "gb200": dict(
        memory_bytes=189_471 * MiB,
        hbm_bandwidth_bytes_per_s=8.0e12,
        peak_flops=2.5e15,
        fp8_peak_flops=5.0e15,
        fp4_peak_flops=10.0e15,
        interconnect_bandwidth_bytes_per_s=1.8e12,
        scaleup_domain_gpus=72,
        scaleout_bandwidth_bytes_per_s=50e9,
    ),
    # One GPU of an NVIDIA HGX B300 (Blackwell Ultra; NVIDIA Blackwell Ultra datasheet, HGX B300
    # per GPU, and "Inside NVIDIA Blackwell Ultra", NVIDIA Technical Blog, 2025): HBM3e, the
    # board's 62 TB/s over 8 GPUs is 7.75 TB/s; FP16/BF16 4.5 and FP8 9 PFLOPS are stated
    # sparse ("dense is half"), so dense 2.25 and 4.5; NVFP4 14 PFLOPS dense (18 sparse; the
    # board's 108 over 8 is 13.5); NVLink 5 1.8 TB/s through the board's switch. Memory:
    # nvidia-smi reports 275,040 MiB ("NVIDIA B300 SXM6 AC"; the SKU labelled 270 GB; the
    # reference design's 288 GB is the HBM stacks' raw size). Scale-out: one ConnectX-8
    # SuperNIC of 800 Gb/s per GPU (100e9 bytes/s). Blackwell Ultra cut INT8 and FP64, which
    # batchsim does not price.
    "b300": dict(
        memory_bytes=275_040 * MiB,
        hbm_bandwidth_bytes_per_s=7.75e12,
        peak_flops=2.25e15,
        fp8_peak_flops=4.5e15,
        fp4_peak_flops=14.0e15,
        interconnect_bandwidth_bytes_per_s=1.8e12,
        scaleout_bandwidth_bytes_per_s=100e9,
    ),
    # One GPU of an NVIDIA GB300 NVL72 (NVIDIA GB300 NVL72 specifications and the Blackwell Ultra
    # datasheet, per GPU: the rack's figures over 72): HBM3e 8 TB/s; FP16/BF16 360 and FP8 720
    # PFLOPS a rack are sparse, so dense 2.5 and 5 per GPU; NVFP4 1,080 dense a rack, 15 per
    # GPU ("15 petaflops dense NVFP4", the blog); NVLink 5 1.8 TB/s to each of the rack's 72
    # GPUs (scaleup_domain_gpus 72). Memory: nvidia-smi reports 284,208 MiB ("NVIDIA GB300";
    # 279 GB in the datasheet, 288 GB raw). Scale-out: one ConnectX-8 800 Gb/s per GPU.
    "gb300": dict(
        memory_bytes=284_208 * MiB,
        hbm_bandwidth_bytes_per_s=8.0e12,
        peak_flops=2.5e15,
        fp8_peak_flops=5.0e15,
        fp4_peak_flops=15.0e15,
        interconnect_bandwidth_bytes_per_s=1.8e12,
        scaleup_domain_gpus=72,
        scaleout_bandwidth_bytes_per_s=100e9,
    ),
    # AMD Instinct MI300X datasheet (OAM): 192 GB HBM3 (rocm-smi VRAM total 205,822,885,888
    # bytes = 196,288 MiB), 5.3 TB/s; FP16/BF16 dense 1,307.4 TFLOPS (2,614.9 with sparsity),
    # FP8 dense 2,614.9 TFLOPS (5,229.8 sparse); no fp4; 7 Infinity Fabric links of 128 GB/s
    # (both directions) to the other 7 GPUs of the 8-GPU platform: 896 GB/s per GPU. Scale-out:
    # one 400 Gb/s NIC per GPU in the MI300X platforms (ConnectX-7 or Broadcom Thor2 400G).
    "mi300x": dict(
        memory_bytes=196_288 * MiB,
        hbm_bandwidth_bytes_per_s=5.3e12,
        peak_flops=1307.4e12,
        fp8_peak_flops=2614.9e12,
        interconnect_bandwidth_bytes_per_s=896e9,
        scaleout_bandwidth_bytes_per_s=50e9,
    ),
    # AMD Instinct MI325X datasheet: 256 GB HBM3E (ROCm's GPU specifications table: 256 GiB,
    # used here; no driver readout found, the MI300X's is 320 MiB under its 192 GiB), 6 TB/s;
    # compute as the MI300X (same CDNA 3 die and clocks): FP16/BF16 dense 1,307.4 TFLOPS, FP8
    # dense 2,614.9 TFLOPS; Infinity Fabric 7 x 128 GB/s = 896 GB/s. Scale-out: 400 Gb/s per
    # GPU (AMD Pensando Pollara 400 or ConnectX-7 in the MI325X platforms).
    "mi325x": dict(
        memory_bytes=256 * 1024 * MiB,
        hbm_bandwidth_bytes_per_s=6.0e12,
        peak_flops=1307.4e12,
        fp8_peak_flops=2614.9e12,
        interconnect_bandwidth_bytes_per_s=896e9,
        scaleout_bandwidth_bytes_per_s=50e9,
    ),
    # AMD Instinct MI355X datasheet (CDNA 4, 256 CUs at 2.4 GHz): 288 GB HBM3E (ROCm table:
    # 288 GiB, used here as for the MI325X), 8 TB/s; FP16/BF16 dense 2,516.6 TFLOPS, FP8 dense
    # 5,033.2 TFLOPS, MXFP4 dense 10,066.4 TFLOPS (twice each with structured sparsity: the
    # "20 PFLOPS" FP4 figure); 7 Infinity Fabric links of 153.6 GB/s = 1,075.2 GB/s per GPU.
    # Scale-out: 400 Gb/s per GPU (Pensando Pollara 400 in the MI355X platforms).
    "mi355x": dict(
        memory_bytes=288 * 1024 * MiB,
        hbm_bandwidth_bytes_per_s=8.0e12,
        peak_flops=2516.6e12,
        fp8_peak_flops=5033.2e12,
        fp4_peak_flops=10066.4e12,
        interconnect_bandwidth_bytes_per_s=1075.2e9,
        scaleout_bandwidth_bytes_per_s=50e9,
    ),
    # NVIDIA GeForce RTX 4090 (Ada Lovelace architecture whitepaper, appendix): 24 GB GDDR6X
    # (nvidia-smi 24,564 MiB), 1,008 GB/s; BF16 tensor with FP32 accumulate dense 165.2 TFLOPS
    # (330.4 sparse), FP8 with FP32 accumulate dense 330.3 TFLOPS (the GeForce part runs FP32
    # accumulation at half the FP16-accumulate rate; inference GEMMs accumulate in FP32); no
    # fp4 tensor cores; no NVLink: PCIe Gen4 x16 64 GB/s. A consumer card: no scale-out NIC.
    "rtx-4090": dict(
        memory_bytes=24_564 * MiB,
        hbm_bandwidth_bytes_per_s=1.008e12,
        peak_flops=165.2e12,
        fp8_peak_flops=330.3e12,
        interconnect_bandwidth_bytes_per_s=64e9,
    ),
}
