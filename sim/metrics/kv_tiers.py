"""What the prefix cache and the KV tiers below the GPU did over a run, as summary keys.

Without prefix caching there are no keys. With it, as before tiers existed:
`prefix_cache_hit_rate` (prompt tokens found cached, on the GPU or in a tier below, over the
tokens looked up at admissions), `prefix_cache_block_hit_rate` (the same in full blocks),
`prefill_tokens_saved` and `prefix_cache_evictions` (GPU blocks evicted). With tiers, also per
tier kind: `kv_block_hit_rate_<tier>` for gpu and each tier below (blocks found there over blocks
looked up; they add up to the block hit rate) and `kv_token_hit_rate_<tier>` (their tokens over
the prompt tokens looked up; they add up to `prefix_cache_hit_rate`), `kv_<kind>_read_bytes`,
`kv_<kind>_written_bytes`, `kv_<kind>_evicted_blocks` and `kv_<kind>_blocks` (held at the end;
a shared store counted once), and `kv_load_wait_s`, the seconds steps waited on loads (every
request in such a step waited).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sim.core.kv.pool import KVPool
from sim.core.kv.tiers import TIER_KINDS, Tier


def cache_counters(pools: Sequence[KVPool]) -> dict[str, float]:
    caching = [pool for pool in pools if pool.caching]
    if not caching:
        return {}
    total: dict[str, float] = {}
    for pool in caching:
        for key, value in pool.cache_stats().items():
            total[key] = total.get(key, 0) + value
    bs = caching[0].block_size
    looked_blocks, looked_tokens = total["blocks"], total["tokens"]
    loaded = {kind: total.get(f"loaded_{kind}", 0.0) for kind in TIER_KINDS}
    hit_blocks = total["gpu"] + sum(loaded.values())

    def rate(n: float, of: float) -> float:
        return n / of if of else math.nan

    out = {
        "prefix_cache_hit_rate": rate(hit_blocks * bs, looked_tokens),
        "prefix_cache_block_hit_rate": rate(hit_blocks, looked_blocks),
        "prefill_tokens_saved": float(hit_blocks * bs),
        "prefix_cache_evictions": float(total["evictions"]),
    }
    tiers: dict[int, Tier] = {}
    for pool in caching:
        for tier in pool.lower_tiers():
            tiers[id(tier)] = tier
    if not tiers:
        return out
    out["kv_block_hit_rate_gpu"] = rate(total["gpu"], looked_blocks)
    out["kv_token_hit_rate_gpu"] = rate(total["gpu"] * bs, looked_tokens)
    kinds = sorted({t.kind for t in tiers.values()}, key=TIER_KINDS.index)
    for kind in kinds:
        out[f"kv_block_hit_rate_{kind}"] = rate(loaded[kind], looked_blocks)
        out[f"kv_token_hit_rate_{kind}"] = rate(loaded[kind] * bs, looked_tokens)
        stats = [t.stats() for t in tiers.values() if t.kind == kind]
        for key in ("read_bytes", "written_bytes", "evicted_blocks", "blocks"):
            out[f"kv_{kind}_{key}"] = float(sum(s[key] for s in stats))
    out["kv_load_wait_s"] = total["load_wait_s"]
    return out
