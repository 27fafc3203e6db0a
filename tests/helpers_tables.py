"""Small hand-made tables of one variant (requests, steps, ITL gaps, summary context) for
the metrics, output, timeline and plot tests."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sim.metrics.summary import SummaryContext

NAN = math.nan


# id, arrival, prompt, output tokens, first scheduled, first token, finish, rejected, max_itl
REQUESTS = [
    (0, 0.0, 10, 5, 0.0, 0.1, 0.5, False, 0.1),  # ttft .1, tpot .1, e2e .5, queue 0
    (1, 1.0, 20, 1, 1.2, 1.5, 1.5, False, 0.0),  # ttft .5, no tpot (one token), queue .2
    (2, 2.0, 30, 3, 2.0, 2.2, 3.0, False, 0.5),  # ttft .2, tpot .4, e2e 1
    (3, 3.0, 40, 0, NAN, NAN, NAN, True, 0.0),  # rejected
    (4, 4.0, 10, 11, 4.5, 5.0, 6.0, False, 0.3),  # ttft 1, tpot .1, e2e 2, queue .5
]


def make_requests(rows: list[tuple] = REQUESTS) -> pd.DataFrame:
    cols = ["id", "arrival_s", "num_prompt_tokens", "num_output_tokens", "first_scheduled_s",
            "first_token_s", "finish_s", "rejected", "max_itl_s"]  # fmt: skip
    df = pd.DataFrame(rows, columns=cols)
    df["instance"] = 0
    df["max_output_tokens"] = df["num_output_tokens"]
    df["queue_s"] = df["first_scheduled_s"] - df["arrival_s"]
    df["ttft_s"] = df["first_token_s"] - df["arrival_s"]
    df["e2e_s"] = df["finish_s"] - df["arrival_s"]
    many = df["num_output_tokens"] >= 2
    df["tpot_s"] = ((df["finish_s"] - df["first_token_s"]) / (df["num_output_tokens"] - 1)).where(
        many
    )
    # request 4 was preempted twice and recomputed 15 tokens
    df["num_preemptions"] = np.where(df["id"] == 4, 2, 0)
    df["num_recomputed_tokens"] = np.where(df["id"] == 4, 15, 0)
    return df


def make_steps(offset_s: float = 0.14) -> pd.DataFrame:
    """A prefill step, then a run of 4 padded decode steps lasting .05, .06, .07, .08 s."""
    return pd.DataFrame(
        {
            "instance": [0, 0],
            "start_s": [offset_s, offset_s + 0.1],
            "end_s": [offset_s + 0.1, offset_s + 0.36],
            "num_steps": [1, 4],
            "duration_s": [0.1, 0.05],
            "duration_increment_s": [0.0, 0.01],
            "num_seqs": [2, 4],
            "num_active_seqs": [2, 3],
            "num_tokens": [30, 4],
            "num_prefill_tokens": [30, 0],
            "num_decode_tokens": [0, 3],
            "sum_context_tokens": [30, 40],  # decode run reads 40, 43, 46, 49 tokens
            "context_growth_per_step": [0, 3],
            "kv_blocks_used": [4, 6],
            "num_waiting": [3, 1],
            "num_running": [2, 4],
            "num_preempted": [0, 0],
        }
    )


def make_itl() -> pd.DataFrame:
    return pd.DataFrame({"gap_s": [0.1, 0.2, 0.05, 0.5], "count": [10, 3, 1, 1]})


def make_context(**overrides: float | None) -> SummaryContext:
    base: dict = dict(slo_ttft_s=None, slo_tpot_s=None, warmup_s=0.0, cooldown_s=0.0,
                      flops_per_token=2.0, weight_bytes=100.0, kv_bytes_per_token=2.0,
                      peak_flops=1000.0, hbm_bandwidth_bytes_per_s=10000.0, kv_blocks_total=10,
                      block_size=16)  # fmt: skip
    base.update(overrides)
    return SummaryContext(**base)
