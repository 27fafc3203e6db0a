"""The default step model (counted events, fitted unit costs) against the op-level timings the
repository holds, per part of a step: its linear layers (every GEMM, norm and activation of a
step without attention) and its decode attention.

Sources: Vidur's per-operation H100 and A100 timings as imported tables
(`calibration/profiles/imported/vidur/`, microsoft/vidur, MIT; the linear table sums each
layer's operations and, at tensor parallelism 2, two measured all-reduces per layer) and this
project's H200 measurements (`calibration/profiles/measured/llama-2-7b_h200_table/`, CUDA
graphs). Neither is in the unit costs' fit (published deployments only): this is how the
counted model agrees with kernel timings it never saw. The events model's host time per step is
left out (the tables time the GPU alone); a table's decode-attention grid is compared where it
was measured (Vidur's H100 attention is an analytic stand-in, `synthetic: true`, and skipped).

    python -m calibration.check_events            # a table per part, and the medians
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

import yaml

from sim.costs.catalog import HARDWARE, MODELS, HardwareSpec
from sim.costs.step_events import events_profile, lookup, unit_key

ROOT = Path(__file__).resolve().parents[1]
TABLES = (
    *sorted((ROOT / "calibration/profiles/imported/vidur").glob("*.yaml")),
    ROOT / "calibration/profiles/measured/llama-2-7b_h200_table/profile.yaml",
)
TOKENS = (1, 16, 64, 256, 1024, 4096)
DECODE = ((1, 1024), (16, 1024), (64, 2048), (128, 4096))  # (batch, context per sequence)


def _interp(xs: list[float], ys: list[float], x: float) -> float | None:
    if not xs or x < xs[0] or x > xs[-1]:
        return None
    for i in range(1, len(xs)):
        if x <= xs[i]:
            a = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
            lo, hi = ys[i - 1], ys[i]
            if lo is None or hi is None:
                return None
            return lo + a * (hi - lo)
    return ys[-1]


def _setup(doc: dict[str, Any]) -> tuple[str, HardwareSpec] | None:
    """The catalog model and GPU (with its tensor-parallel degree) a table was measured on."""
    provenance = doc.get("provenance") or {}
    model = (provenance.get("model") or {}).get("name") or provenance.get("model_name")
    name = str(doc.get("name", ""))
    gpu = next((g for g in sorted(HARDWARE, key=len, reverse=True) if g in name), None)
    if model is None:
        model = next((m for m in sorted(MODELS, key=len, reverse=True) if name.find(m) >= 0),
                     None)  # fmt: skip
    if model not in MODELS or gpu is None or gpu in ("a40",):  # no unit costs for the A40's
        return None  # generation's vendor value would be a guess: skipped
    tp = 1
    for part in name.split("_"):
        if part.startswith("tp") and part[2:].isdigit():
            tp = int(part[2:])
    return model, HARDWARE[gpu].model_copy(update={"tensor_parallel": tp})


def compare(path: Path) -> tuple[str, list[tuple[str, float, float]]]:
    """(label, [(point, measured s, events s)]) of one table."""
    doc = yaml.safe_load(path.read_text())
    setup = _setup(doc)
    if setup is None:
        return path.stem, []
    model_name, hw = setup
    model = MODELS[model_name]
    profile = events_profile(model, hw)
    c = profile.coefficients
    host = lookup(unit_key("host_s", hw, "vllm"), {})[0]
    from sim.costs.step_events import catalog_unit_costs

    host = lookup(unit_key("host_s", hw, "vllm"), catalog_unit_costs())[0]
    ridge = c.ridge_tokens or float("inf")

    def linear(n: int) -> float:
        low = c.t_flop_s_per_token * min(n, ridge)
        high = (c.t_flop_high_s_per_token or 0.0) * max(n - ridge, 0.0)
        return c.t_mem_s - host + low + high

    table = doc["table"]
    out = []
    lin = table.get("linear") or {}
    for n in TOKENS:
        measured = _interp(lin.get("tokens", []), lin.get("seconds", []), n)
        if measured is not None:
            out.append((f"linear {n} tok", measured, linear(n)))
    synthetic = bool(((doc.get("provenance") or {}).get("attention") or {}).get("synthetic"))
    grid = table.get("decode_attention")
    if grid and not synthetic and "synthetic: true" not in path.read_text():
        for batch, context in DECODE:
            if batch not in grid["batch"]:
                continue
            row = grid["seconds"][grid["batch"].index(batch)]
            measured = _interp(grid["context"], row, context)
            if measured is not None:
                out.append((f"decode attn B{batch} L{context}", measured,
                            c.t_kv_s_per_token * batch * context))  # fmt: skip
    label = f"{model_name} on {hw.name}" + (f" tp{hw.tensor_parallel}" if hw.tensor_parallel > 1
                                             else "")  # fmt: skip
    return label, out


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    linear_errs: list[float] = []
    attn_errs: list[float] = []
    print("| table | point | measured ms | events ms | events / measured |")
    print("|---|---|---:|---:|---:|")
    for path in TABLES:
        label, rows = compare(path)
        for point, measured, events in rows:
            ratio = events / measured
            (linear_errs if point.startswith("linear") else attn_errs).append(abs(ratio - 1))
            print(f"| {label} | {point} | {measured * 1e3:.3f} | {events * 1e3:.3f} | "
                  f"{ratio:.2f} |")  # fmt: skip
    for name, errs in (("linear layers", linear_errs), ("decode attention", attn_errs)):
        if errs:
            print(f"{name}: median |events / measured - 1| {statistics.median(errs) * 100:.1f} %,"
                  f" worst {max(errs) * 100:.1f} % ({len(errs)} points)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
