"""Op-level timings as rows of the unit costs' fit: the GPU's own terms, without host time.

Vidur's per-operation timings (microsoft/vidur, MIT), imported as table profiles in
`calibration/profiles/imported/vidur/`, time every linear-layer operation of a step (norms,
projections, rotary, MLP, the embedding and LM head) on one GPU, with no engine around them. At
tensor parallelism 1 (no collectives: Vidur's are NCCL's, not the custom all-reduce engines run
in graphs), each table's linear part at a few step sizes is a row of the fit: the counted events
of `sim.costs.step_events.basis` less the host time per step, against the measured seconds. They
pin what the published deployments cannot tell apart (the kernel floor per layer against the
host time per step, the GEMMs below and above their ridge) and price the Ampere generation,
which no published deployment in the training file ran. This project's H200 measurements of
decode attention (`calibration/profiles/measured/*_h200_table`) pin the KV read's efficiency.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from sim.costs.catalog import HARDWARE, MODELS
from sim.costs.step_events import basis, ridge_tokens

ROOT = Path(__file__).resolve().parents[1]
TABLES = tuple(
    ROOT / "calibration/profiles/imported/vidur" / f"{name}.yaml"
    for name in (
        "llama-2-7b_h100-sxm",
        "codellama-34b_h100-sxm",
        "llama-2-7b_a100-80g",
        "llama-3-8b_a100-80g",
        "codellama-34b_a100-80g",
    )
)
TOKENS = (1, 8, 32, 128, 512, 2048, 4096)
# this project's H200 measurements (calibration/gpu_tables.sh, CUDA graphs): decode attention
# over the KV cache, where the KV read dominates the step
ATTENTION_TABLES = tuple(
    ROOT / "calibration/profiles/measured" / f"{name}_h200_table/profile.yaml"
    for name in ("llama-2-7b", "llama-3-8b")
)
DECODE = ((16, 1024), (16, 4096), (64, 1024), (64, 4096), (128, 2048))  # (batch, context)


@dataclass
class OpRow:
    table: str  # the table's name
    tokens: int
    row: dict[str, float]  # {unit cost key: seconds per unit}
    measured_s: float


def _interp(xs: list[float], ys: list[float], x: float) -> float:
    for i in range(1, len(xs)):
        if x <= xs[i]:
            a = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
            return ys[i - 1] + a * (ys[i] - ys[i - 1])
    return ys[-1]


def attention_rows(tables: tuple[Path, ...] = ATTENTION_TABLES) -> list[OpRow]:
    """Each measured table's decode attention at `DECODE` (B sequences over L cached tokens
    each) as rows of the KV read: `t_kv_s_per_token`'s events times B x L."""
    out = []
    for path in tables:
        doc = yaml.safe_load(path.read_text())
        model = MODELS[doc["provenance"]["model"]["name"]]
        terms = basis(model, HARDWARE["h200"], "vllm")
        grid = doc["table"]["decode_attention"]
        for batch, context in DECODE:
            measured = grid["seconds"][grid["batch"].index(batch)][grid["context"].index(context)]
            if measured is None:  # not measured (the KV cache did not fit)
                continue
            row = {k: m * batch * context for k, m in terms["t_kv_s_per_token"].items()}
            out.append(OpRow(f"{doc['name']} attention", batch * context, row, measured))
    return out


def op_rows(tables: tuple[Path, ...] = TABLES) -> list[OpRow]:
    """Each table's linear part at `TOKENS` as linear rows over the unit costs, and the
    measured decode attention (`attention_rows`)."""
    out = attention_rows()
    for path in tables:
        doc = yaml.safe_load(path.read_text())
        provenance = doc["provenance"]
        model = MODELS[provenance["model"]["name"]]
        gpu = next(g for g in sorted(HARDWARE, key=len, reverse=True) if g in doc["name"])
        hw = HARDWARE[gpu]
        terms = basis(model, hw, "vllm")
        ridge = ridge_tokens(model, hw)
        linear = doc["table"]["linear"]
        for n in TOKENS:
            row: dict[str, float] = {}
            parts = (
                ("t_mem_s", 1.0),
                ("t_flop_s_per_token", min(n, ridge)),
                ("t_flop_high_s_per_token", max(n - ridge, 0.0)),
            )
            for coefficient, count in parts:
                for key, m in terms.get(coefficient, {}).items():
                    if key.startswith("host_s@"):
                        continue  # the tables time the GPU alone
                    row[key] = row.get(key, 0.0) + m * count
            measured = _interp(linear["tokens"], linear["seconds"], n)
            out.append(OpRow(str(doc["name"]), n, row, measured))
    return out
