"""Time decode, prefill and mixed steps of a `DecoderStack` and return raw rows for the fit.

Only `layers_timed` layers are built. Each repeat times two regions separately, the layers and
the "outer" part (embedding lookup, final norm, LM head, greedy sampling), and the full-depth step
time is `layers_s * num_layers / layers_timed + outer_s`; provenance records this scaling. On CUDA
the regions are bracketed by CUDA events and decode (with `graphs_everywhere`, every step) may run
as captured CUDA graphs (one per region), as serving engines do, since launch overhead is part of
T_mem; on CPU perf_counter is used. Each point runs `warmup` untimed repeats, then `repeats`
timed ones; rows carry the median and the 10th/90th percentiles.

One KV cache of shape (B, kv_heads, L + 1, head_dim) is shared by the timed layers: every layer
still reads all of it (far larger than any cache level), so the traffic per layer is a real
layer's, while the memory needed stays that of one layer. A grid point is skipped, with a message,
when the full-depth model's weights and KV would not fit on the device (no engine could run that
step) or when the benchmark's own buffers would not fit in free memory.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from calibration.bench_model import (
    DecoderStack,
    ModelDims,
    chunk_attention,
    decode_attention,
    mixed_attention,
    no_attention,
    prefill_attention,
)
from calibration.grid import Grid, Point

Region = Callable[[], Any]


class Timer:
    """Times (layers, outer) region pairs with CUDA events, or perf_counter on CPU."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")

    def run(
        self, layers: Region, outer: Region, warmup: int, repeats: int
    ) -> list[tuple[float, float]]:
        for _ in range(warmup):
            layers()
            outer()
        if not self.cuda:
            out = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                layers()
                t1 = time.perf_counter()
                outer()
                out.append((t1 - t0, time.perf_counter() - t1))
            return out
        events = [[torch.cuda.Event(enable_timing=True) for _ in range(3)] for _ in range(repeats)]
        torch.cuda.synchronize()
        for start, middle, end in events:
            start.record()
            layers()
            middle.record()
            outer()
            end.record()
        torch.cuda.synchronize()
        return [(s.elapsed_time(m) / 1e3, m.elapsed_time(e) / 1e3) for s, m, e in events]


def as_graph(fn: Region) -> Region:
    """Capture `fn` in a CUDA graph (after a warm-up on a side stream) and return its replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def free_bytes(device: str) -> float:
    if device.startswith("cuda"):
        return float(torch.cuda.mem_get_info()[0])
    with open("/proc/meminfo") as f:
        info = {ln.split(":")[0]: ln.split()[1] for ln in f}
    return float(info["MemAvailable"]) * 1024


def total_bytes(device: str) -> float:
    if device.startswith("cuda"):
        return float(torch.cuda.mem_get_info()[1])
    with open("/proc/meminfo") as f:
        info = {ln.split(":")[0]: ln.split()[1] for ln in f}
    return float(info["MemTotal"]) * 1024


class Bench:
    """One model's stack on one device; `measure(point)` gives a raw row or a skip reason."""

    def __init__(self, dims: ModelDims, grid: Grid, device: str, dtype: torch.dtype) -> None:
        self.dims, self.grid, self.device, self.dtype = dims, grid, device, dtype
        self.layers_timed = min(grid.layers_timed, dims.num_layers)
        self.scale = dims.num_layers / self.layers_timed
        self.stack = DecoderStack(dims, self.layers_timed, device, dtype)
        self.timer = Timer(device)
        self.elem = torch.finfo(dtype).bits // 8
        self.device_bytes = total_bytes(device)

    def kv_bytes(self, tokens: int, layers: int) -> float:
        return 2.0 * tokens * layers * self.dims.num_kv_heads * self.dims.head_dim * self.elem

    def skip_reason(self, point: Point) -> str | None:
        d = self.dims
        full = d.num_parameters() * self.elem + self.kv_bytes(point.kv_tokens, d.num_layers)
        if full > 0.95 * self.device_bytes:
            return (
                f"full-depth weights + KV need {full / 2**30:.1f} GiB, the device has "
                f"{self.device_bytes / 2**30:.1f} GiB"
            )
        act = point.num_tokens * (4 * d.hidden_size + 3 * d.intermediate_size) * self.elem * 2
        if not self.device.startswith("cuda"):  # the CPU attention kernels materialize scores
            act += 4 * d.num_attention_heads * point.attention_pairs
        need = self.kv_bytes(point.kv_tokens, 1) + act
        free = free_bytes(self.device)
        if need > 0.8 * free:
            return f"needs {need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"
        return None

    def _regions(self, point: Point) -> tuple[Region, Region]:
        dev, dtype, d = self.device, self.dtype, self.dims
        b, ctx, chunk, prompts = point.num_decodes, point.context, point.chunk, point.prompts
        prefix = point.prefix
        attend: Any
        positions = []
        if b:
            shape = (b, d.num_kv_heads, ctx + 1, d.head_dim)
            k_cache = torch.randn(shape, device=dev, dtype=dtype)
            v_cache = torch.randn(shape, device=dev, dtype=dtype)
        if chunk:
            start = torch.arange(prefix, prefix + chunk // prompts, device=dev)
            positions.append(start.repeat(prompts))
        if b:
            positions.append(torch.full((b,), ctx, device=dev))
        if point.kind == "linear":
            attend = no_attention()
        elif chunk and b:
            attend = mixed_attention(chunk, k_cache, v_cache, ctx)
        elif b:
            attend = decode_attention(k_cache, v_cache, ctx)
        elif prefix:
            if prompts != 1:
                raise ValueError("a chunk after a prefix is timed for one prompt")
            shape = (1, d.num_kv_heads, prefix + chunk, d.head_dim)
            attend = chunk_attention(
                torch.randn(shape, device=dev, dtype=dtype),
                torch.randn(shape, device=dev, dtype=dtype),
                prefix,
            )
        else:
            attend = prefill_attention(prompts)
        rope = self.stack.rotary(torch.cat(positions), dtype)
        x = torch.randn(point.num_tokens, d.hidden_size, device=dev, dtype=dtype)
        ids = torch.zeros(point.num_tokens, dtype=torch.long, device=dev)
        last = torch.randn(point.num_seqs, d.hidden_size, device=dev, dtype=dtype)
        out = torch.empty_like(x)

        def layers() -> None:
            out.copy_(self.stack.layers_forward(x, rope, attend))

        def outer() -> None:
            self.stack.outer_forward(ids, last)

        graphed = point.kind == "decode" or self.grid.graphs_everywhere
        if self.grid.cuda_graphs and self.timer.cuda and graphed:
            return as_graph(layers), as_graph(outer)
        return layers, outer

    def measure(self, point: Point) -> dict[str, Any]:
        with torch.inference_mode():
            layers, outer = self._regions(point)
            pairs = self.timer.run(layers, outer, self.grid.warmup, self.grid.repeats)
        del layers, outer
        if self.timer.cuda:
            torch.cuda.empty_cache()  # the next point's cache may need the memory just freed
        steps = np.array([lay * self.scale + out for lay, out in pairs])
        return point.features() | {
            "step_s": float(statistics.median(steps)),
            "step_s_p10": float(np.percentile(steps, 10)),
            "step_s_p90": float(np.percentile(steps, 90)),
            "repeats": len(steps),
        }
