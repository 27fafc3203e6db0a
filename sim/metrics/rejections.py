"""Why requests were rejected: counts by cause, recovered from the tables after a run.

A policy rejects a request on arrival when no schedule could ever complete it (see
`sim.policies`); the engine only records `rejected`. The cause follows from the request and the
variant's limits, checked in the order the policies check them: a sequence (prompt + output)
longer than the model's `max_model_len`; a prompt over the per-step token budget of a policy
that never splits prompts (continuous batching without chunking); a sequence, or the
reservation the policy makes for it, larger than the KV pool of the smallest instance. A run in
which every request is rejected measures nothing, and this is what the CLI says instead.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from sim.metrics.results import VariantResult


def _pool_tokens(result: VariantResult) -> int:
    ctx = result.context
    sizes = [blocks for blocks, _, _ in ctx.instances] or [ctx.kv_blocks_total]
    return int(min(sizes)) * int(ctx.block_size)


def rejection_causes(result: VariantResult) -> dict[str, int]:
    """Rejected requests of one variant by cause (an empty dict when none was rejected)."""
    requests = result.requests
    if not len(requests) or "rejected" not in requests.columns:
        return {}
    rejected = requests[requests["rejected"].to_numpy(dtype=bool)]
    if not len(rejected):
        return {}
    scenario: dict[str, Any] = result.scenario or {}
    policy: dict[str, Any] = scenario.get("policy") or {}
    max_len = int((scenario.get("model") or {}).get("max_model_len") or np.iinfo(np.int64).max)
    prompt = rejected["num_prompt_tokens"].to_numpy(dtype=np.int64)
    total = prompt + rejected["max_output_tokens"].to_numpy(dtype=np.int64)
    reserve_all = policy.get("kv_reservation") in ("max_model_len", "max_length")
    need = np.maximum(total, max_len) if reserve_all else total
    pool = _pool_tokens(result)
    budget = policy.get("max_num_batched_tokens")
    whole_prompts = policy.get("name") == "continuous" and budget is not None
    causes: Counter[str] = Counter()
    for p, t, n in zip(prompt.tolist(), total.tolist(), need.tolist(), strict=True):
        if t > max_len:
            causes[f"longer than max_model_len ({max_len} tokens)"] += 1
        elif whole_prompts and p > int(budget or 0):
            causes[f"prompt over max_num_batched_tokens ({budget}), not chunked"] += 1
        elif n > pool:
            causes[f"larger than the KV pool ({pool} tokens)"] += 1
        else:
            causes["no instance could take it"] += 1
    return dict(causes.most_common())


def rejection_table(variants: dict[str, VariantResult]) -> pd.DataFrame:
    """`variant, cause, count`: one row per cause of rejection in each variant."""
    rows = [
        {"variant": name, "cause": cause, "count": count}
        for name, result in variants.items()
        for cause, count in rejection_causes(result).items()
    ]
    return pd.DataFrame(rows, columns=["variant", "cause", "count"])


def describe(causes: dict[str, int]) -> str:
    """`12 longer than max_model_len (4096 tokens), 3 larger than the KV pool (...)`."""
    return ", ".join(f"{count} {cause}" for cause, count in causes.items())
