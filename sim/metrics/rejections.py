"""Why requests were rejected: counts by cause.

A policy rejects a request on arrival when no schedule could ever complete it (a sequence longer
than the model's `max_model_len`, a prompt over the token budget of a policy that never splits
prompts, a sequence or reservation larger than the KV pool; a P/D cluster also refuses a request
no decode instance could hold) and says why; the requests table keeps that reason in
`reject_reason` (a streamed run counts them as they come). A run in which every request is
rejected measures nothing, and this is what the CLI says instead.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import pandas as pd


def rejection_causes(
    requests: pd.DataFrame, streamed: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Rejected requests by cause, from a requests table or a streamed run's counts (an empty
    dict when none was rejected)."""
    if streamed is not None:
        return dict(Counter(streamed).most_common())
    if not len(requests) or "rejected" not in requests.columns:
        return {}
    rejected = requests[requests["rejected"].to_numpy(dtype=bool)]
    if not len(rejected):
        return {}
    if "reject_reason" not in rejected.columns:
        return {"rejected": len(rejected)}
    reasons = rejected["reject_reason"].fillna("rejected").astype(str)
    return dict(Counter(reasons.tolist()).most_common())


def rejection_table(causes: Mapping[str, Mapping[str, int]]) -> pd.DataFrame:
    """`variant, cause, count`: one row per cause of rejection in each variant."""
    rows = [
        {"variant": name, "cause": cause, "count": count}
        for name, counts in causes.items()
        for cause, count in counts.items()
    ]
    return pd.DataFrame(rows, columns=["variant", "cause", "count"])


def describe(causes: dict[str, int]) -> str:
    """`12 longer than max_model_len, 3 larger than the KV pool`."""
    return ", ".join(f"{count} {cause}" for cause, count in causes.items())
