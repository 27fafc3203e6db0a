"""Whether a policy's running sequences leave room for KV next to sliding-window layers.

Sliding-window layers (sim/costs/architecture.py) keep each running sequence's last
`sliding_window` tokens apart from the block pool, so the more sequences may run, the fewer
blocks the full-attention layers get; past a point none.
"""

from __future__ import annotations

from sim.costs.catalog import (
    GiB,
    HardwareSpec,
    MiB,
    ModelSpec,
    Placement,
    free_kv_bytes,
    kv_bytes_per_token_on,
    place,
)


def check_sliding_fits(
    model: ModelSpec,
    hw: HardwareSpec,
    max_seqs: int,
    block_size: int,
    placed: Placement | None = None,
) -> None:
    """Raise ValueError when the sliding-window layers' windows for `max_seqs` running
    sequences leave no room for one KV block of the full-attention layers."""
    if placed is None:
        placed = place(model, hw, seats=max_seqs, block_size=block_size)
    per_seq = placed.sliding_kv_bytes_per_seq
    if not per_seq or placed.seats_blocks > 0:
        return
    room = free_kv_bytes(model, hw) - block_size * kv_bytes_per_token_on(model, hw)
    most = max(int(room // per_seq), 0)
    raise ValueError(
        f"{model.name}'s {model.num_sliding_layers} sliding-window layers keep "
        f"{per_seq / MiB:.1f} MiB per running sequence ({model.sliding_window} tokens), so "
        f"{max_seqs} sequences take {max_seqs * per_seq / GiB:.1f} GiB and leave no KV block "
        f"on {hw.name}; at most {most} fit"
    )
