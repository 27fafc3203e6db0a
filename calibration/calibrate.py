"""`batchsim calibrate`: probe the device, benchmark the grid, write the raw CSV, fit a profile.

Probes: memory bandwidth from a large device-to-device copy (bytes read + written per second)
and FLOP/s from a large square matmul in the benchmark dtype (2 n^3 per product); both are the
best of a few repeats. They go into the raw CSV's metadata with the device name, torch and CUDA
versions, dtype, model dimensions, layers timed and the scaling, the grid, and every skipped
point, and from there into the profile's provenance. Progress goes to stderr (tqdm when it is
installed, else one rewritten line).
"""

from __future__ import annotations

import datetime as dt
import platform
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import torch

from calibration.bench import Bench, Timer
from calibration.bench_model import CPU_EXAMPLE, TINY, ModelDims, dims_for
from calibration.grid import Grid
from calibration.raw import write_raw
from calibration.report import FitOutcome, fit_timings
from sim.errors import ScenarioError

T = TypeVar("T")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
EXTRA_MODELS = {d.name: d for d in (CPU_EXAMPLE, TINY)}


def progress(items: list[T], desc: str) -> Iterable[T]:
    try:
        from tqdm import tqdm
    except ImportError:
        return _line_progress(items, desc)
    return tqdm(items, desc=desc, file=sys.stderr)


def _line_progress(items: list[T], desc: str) -> Iterator[T]:
    started = time.perf_counter()
    for i, item in enumerate(items):
        elapsed = time.perf_counter() - started
        print(f"\r{desc}: {i}/{len(items)} ({elapsed:.0f} s)", end="", file=sys.stderr)
        yield item
    print(f"\r{desc}: {len(items)}/{len(items)} done", file=sys.stderr)


def _best(fn: Callable[[], Any], device: str, repeats: int = 5) -> float:
    """Fastest of a few timed calls of `fn`, in seconds."""
    timer = Timer(device)
    return min(t for t, _ in timer.run(fn, lambda: None, warmup=1, repeats=repeats))


def probes(device: str, dtype: torch.dtype) -> dict[str, float]:
    cuda = device.startswith("cuda")
    numel = (1 << 30 if cuda else 1 << 25) // 2  # 1 GiB on a GPU, 64 MiB of fp32 on a CPU
    src = torch.empty(numel, device=device, dtype=torch.float16).fill_(1)
    dst = torch.empty_like(src)
    copy_s = _best(lambda: dst.copy_(src), device)
    n = 8192 if cuda else 1024
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    matmul_s = _best(lambda: a @ b, device)
    return {
        "copy_bytes": 2.0 * src.numel() * src.element_size(),
        "bandwidth_gb_per_s": 2.0 * src.numel() * src.element_size() / copy_s / 1e9,
        "matmul_n": float(n),
        "tflop_per_s": 2.0 * n**3 / matmul_s / 1e12,
    }


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"{platform.processor() or platform.machine()} CPU ({torch.get_num_threads()} threads)"


def resolve_dims(model: str) -> ModelDims:
    if model in EXTRA_MODELS:
        return EXTRA_MODELS[model]
    try:
        return dims_for(model)
    except KeyError:
        known = ", ".join([*sorted(EXTRA_MODELS), "or a catalog model"])
        raise ScenarioError(f"unknown model {model!r} ({known})", path="--model") from None


def run_calibration(
    model: str, device: str, dtype_name: str, grid: Grid, out_dir: Path, name: str | None = None
) -> FitOutcome:
    raw_path = out_dir / "raw.csv"
    benchmark(model, device, dtype_name, grid, raw_path)
    return fit_timings(raw_path, out_dir, name=name, source="measured")


def benchmark(model: str, device: str, dtype_name: str, grid: Grid, raw_path: Path) -> None:
    """Probe the device, time every point of the grid, write the raw CSV and its metadata."""
    try:
        torch.device(device)
    except RuntimeError:
        raise ScenarioError(
            f"{device!r} is not a torch device (cpu, cuda, cuda:1, ...)", path="--device"
        ) from None
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ScenarioError("CUDA is not available to torch on this machine", path="--device")
    dims = resolve_dims(model)
    dtype = DTYPES[dtype_name]
    bench = Bench(dims, grid, device, dtype)
    started = time.perf_counter()
    probe = probes(device, dtype)
    rows, skipped = [], []
    for point in progress(grid.points(), f"calibrating {dims.name} on {device}"):
        reason = bench.skip_reason(point)
        if reason is None:
            try:
                rows.append(bench.measure(point))
                continue
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
                reason = "out of memory"
        skipped.append(f"{point.label()}: {reason}")
        print(f"\nskipped {point.label()}: does not fit ({reason})", file=sys.stderr)
    if len(rows) < 2:
        raise ScenarioError("fewer than 2 grid points fit on this device; nothing to fit")
    meta: dict[str, Any] = {
        "generator": "batchsim calibrate (calibration/calibrate.py)",
        "device": {"name": device_name(device), "torch_device": device, "probes": probe},
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "dtype": dtype_name,
        "model": dims.as_dict(),
        "layers_timed": bench.layers_timed,
        "scaling": (
            f"step_s = layers_s * {dims.num_layers}/{bench.layers_timed} + outer_s, where "
            "layers_s times the built layers and outer_s the embedding, final norm, LM head and "
            "greedy sampling; one KV cache is shared by the timed layers"
        ),
        "timing": "CUDA events" if device.startswith("cuda") else "time.perf_counter",
        "grid": grid.describe(),
        "skipped_points": skipped,
        "benchmark_s": round(time.perf_counter() - started, 1),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    write_raw(raw_path, rows, meta)
