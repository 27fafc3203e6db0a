"""The answer of a deployment search: one row per configuration, ranked, and what was done.

`table` has one row per configuration of the space. The configurations that found a fleet come
first, ranked by the objective (the fleet's dollars per hour, or its mean power: at a given
rate, its energy per hour and per token; ties by GPUs, then name), then the others in space
order with their status and the reason:

    found | no fleet (none up to max_instances) | dominated | cannot meet the SLOs |
    does not fit | cannot shard | dense model | no scale-out network | static P/D |
    no prefix caching | pipeline with tiers | duplicate | unit over max_instances

Columns: `rank`, `configuration`, `status`, `instances` (`prefill` and `decode` for P/D),
`num_gpus` (tensor x data x pipeline parallel per instance), `fleet_usd_per_hour`,
`usd_per_million_output_tokens`, `energy_per_output_token_j`, `fleet_power_w`, `slo_attainment`,
`goodput_rps`, `ttft_p99_s`, `tpot_p99_s`, `e2e_p99_s` (the first seed's probe at the answer),
`pareto` (on the front of cost against TTFT p99), `unit_completed_rps` (what one unit completed
at the whole rate), `units_at_least` (the bound that gives on any fleet), `num_probes`,
`confirmed` (the answer held on every seed), `note`, then the configuration's parts: `gpu`,
`tensor_parallel`, `data_parallel`, `pipeline_parallel` (stages per instance), `expert_parallel`
(the instance's: every GPU of a stage, or 1 for experts split by tensor), `layout` (a P/D
layout's pools with their own parallelism named in it: `1p1d[P tp8 / D dp32 ep32]`), `policy`,
`kv_tiers` (the tier option's name; only when the space lists tier options), `config_id`.

Over a band on the GPU step time (`search(..., robust=X)`), `status`, the fleet and its metrics
are those of the fewest units meeting the SLOs at nominal and at both ends of the band (the
metrics at nominal), so the ranking is the robust one, and these columns follow the metrics:
`flips` (the nominal fleet fails the SLOs at an end of the band on some seed; empty without a
nominal fleet), `nominal_rank` (the rank by the nominal fleets), `nominal_instances`,
`nominal_num_gpus`, `nominal_fleet_usd_per_hour`, `nominal_fleet_power_w` (the nominal fleet:
the fewest units meeting the SLOs at nominal), and `slow_<metric>` for each SLO's metric (the
band's fleet at the slow end, first seed). `SearchResult.robustness` names both choices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

SUMMARY_COLUMNS = (
    "num_gpus",
    "fleet_usd_per_hour",
    "usd_per_million_output_tokens",
    "energy_per_output_token_j",
    "fleet_power_w",
    "slo_attainment",
    "goodput_rps",
    "ttft_p99_s",
    "tpot_p99_s",
    "e2e_p99_s",
)
OBJECTIVE_COLUMN = {"cost": "fleet_usd_per_hour", "energy": "fleet_power_w"}
NOMINAL_COLUMNS = ("nominal_num_gpus", "nominal_fleet_usd_per_hour", "nominal_fleet_power_w")


def pareto_mask(cost: pd.Series, latency: pd.Series) -> pd.Series:
    """True where no other point is at most as costly and strictly faster, or cheaper and at
    most as slow (the lower-left front; NaN latencies are never on it)."""
    keep = pd.Series(False, index=cost.index)
    best = math.inf
    order = sorted(cost.index, key=lambda i: (cost[i], latency[i]))
    for i in order:
        if not math.isnan(latency[i]) and latency[i] < best:
            keep[i], best = True, latency[i]
    return keep


def build_table(rows: list[dict[str, Any]], objective: str) -> pd.DataFrame:
    """Rank the rows (one per configuration, in space order) as the module docstring says."""
    frame = pd.DataFrame(rows)
    for column in (*SUMMARY_COLUMNS, "unit_completed_rps"):
        if column not in frame.columns:
            frame[column] = math.nan
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype(float)
    for column in ("instances", "prefill", "decode", "units_at_least"):  # whole, or missing
        values = frame[column] if column in frame.columns else pd.Series(math.nan, frame.index)
        frame[column] = pd.to_numeric(values, errors="coerce").astype("Int64")
    found = frame["status"] == "found"
    target = OBJECTIVE_COLUMN[objective]
    ranked = frame[found].sort_values(
        [target, "num_gpus", "configuration"], kind="stable", na_position="last"
    )
    frame = pd.concat([ranked, frame[~found]], ignore_index=True)
    found = frame["status"] == "found"
    frame.insert(
        0, "rank", pd.array([i + 1 if ok else None for i, ok in enumerate(found)], "Int64")
    )
    front = pareto_mask(frame.loc[found, "fleet_usd_per_hour"], frame.loc[found, "ttft_p99_s"])
    frame["pareto"] = False
    frame.loc[front.index, "pareto"] = front
    band = _band_columns(frame, objective) if "flips" in frame.columns else []
    first = ["rank", "configuration", "status", "instances", "prefill", "decode"]
    tiers = ["kv_tiers"] if "kv_tiers" in frame.columns else []
    tail = ["pareto", "unit_completed_rps", "units_at_least", "num_probes", "confirmed", "note",
            "gpu", "tensor_parallel", "data_parallel", "pipeline_parallel", "expert_parallel",
            "layout", "policy",
            *tiers, "config_id"]  # fmt: skip
    rest = [c for c in frame.columns if c not in (*first, *SUMMARY_COLUMNS, *band, *tail)]
    return frame[[*first, *SUMMARY_COLUMNS, *band, *tail, *rest]]


def _band_columns(frame: pd.DataFrame, objective: str) -> list[str]:
    """Type the columns a band adds (in place), rank the nominal fleets, and name the columns
    in their order."""
    frame["flips"] = frame["flips"].astype("boolean")
    frame["nominal_instances"] = pd.to_numeric(frame["nominal_instances"]).astype("Int64")
    for column in NOMINAL_COLUMNS:
        if column not in frame.columns:
            frame[column] = math.nan
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype(float)
    nominal = frame[frame["nominal_instances"].notna()].sort_values(
        [f"nominal_{OBJECTIVE_COLUMN[objective]}", "nominal_num_gpus", "configuration"],
        kind="stable",
        na_position="last",
    )
    ranks = pd.Series(pd.NA, index=frame.index, dtype="Int64")
    ranks[nominal.index] = range(1, len(nominal) + 1)
    frame["nominal_rank"] = ranks
    slow = [c for c in frame.columns if c.startswith("slow_")]
    for column in slow:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype(float)
    return ["flips", "nominal_rank", "nominal_instances", *NOMINAL_COLUMNS, *slow]


def _records_note(counts: dict[str, Any]) -> str:
    """The results saved before that were not reused, if any."""
    note = ""
    if counts.get("recomputed"):
        n = counts["recomputed"]
        note += (
            f"; {n} saved result{'s' if n > 1 else ''} did not validate and "
            f"{'were' if n > 1 else 'was'} recomputed (first: configs/{counts['first_recomputed']})"
        )
    if counts.get("unsaved"):
        note += f"; {counts['unsaved']} result(s) not saved: a folder holds their configs/ file"
    return note


def _band_note(question: dict[str, Any], counts: dict[str, Any]) -> str:
    """What a band added to the search, if it had one."""
    percent = question.get("robust_percent")
    if percent is None:
        return ""
    slow, fast = question["band_scales"][1:]
    return (
        f"; every candidate judged at nominal and at both ends of the ±{percent:g} % band (GPU "
        f"time x{slow:g} and x{fast:g}): {counts.get('flips', 0)} of "
        f"{counts.get('nominal_found', 0)} nominal fleets flip within it"
    )


@dataclass(repr=False)
class SearchResult:
    """A deployment search's table (see the module docstring), its counts and its question."""

    table: pd.DataFrame
    counts: dict[str, Any]
    question: dict[str, Any]

    @property
    def ranked(self) -> pd.DataFrame:
        """The configurations that found a fleet, best first."""
        return self.table[self.table["status"] == "found"]

    @property
    def best(self) -> pd.Series | None:
        ranked = self.ranked
        return ranked.iloc[0] if len(ranked) else None

    def robustness(self) -> dict[str, Any] | None:
        """Over a band (None without one): the robust choice (the best row) and the nominal one
        (the cheapest nominal fleet: `configuration`, `instances`, `num_gpus`, `value` of the
        objective), whether they differ (configuration or fleet size), what robustness costs
        (`cost_pct`: the robust choice's objective over the nominal one's, in percent), and how
        many nominal fleets flip within the band."""
        percent = self.question.get("robust_percent")
        if percent is None:
            return None
        objective = OBJECTIVE_COLUMN[self.question["objective"]]
        table = self.table

        def choice(row: pd.Series | None, prefix: str) -> dict[str, Any] | None:
            if row is None:
                return None
            return {
                "configuration": row["configuration"],
                "instances": int(row[f"{prefix}instances"]),
                "num_gpus": int(row[f"{prefix}num_gpus"]),
                "value": float(row[f"{prefix}{objective}"]),
            }

        robust = choice(self.best, "")
        firsts = table[table["nominal_rank"] == 1]
        nominal = choice(firsts.iloc[0] if len(firsts) else None, "nominal_")
        cost_pct = None
        if robust is not None and nominal is not None and nominal["value"] > 0:
            cost_pct = round(100.0 * (robust["value"] / nominal["value"] - 1.0), 9)
        differs = None
        if robust is not None or nominal is not None:
            differs = (
                robust is None
                or nominal is None
                or (
                    (robust["configuration"], robust["instances"])
                    != (nominal["configuration"], nominal["instances"])
                )
            )
        return {
            "band_percent": percent,
            "scales": self.question["band_scales"],
            "objective": objective,
            "robust_choice": robust,
            "nominal_choice": nominal,
            "differs": differs,
            "cost_pct": cost_pct,
            "flips": int(table["flips"].fillna(False).sum()),
            "flipped": list(table.loc[table["flips"].fillna(False), "configuration"]),
        }

    def pareto(self) -> pd.DataFrame:
        """The ranked configurations on the front of fleet cost against TTFT p99, cheapest first."""
        front = self.table[self.table["pareto"]]
        return front.sort_values("fleet_usd_per_hour", kind="stable")

    def describe(self) -> str:
        """What the search did, in one paragraph."""
        c = self.counts
        aside = ", ".join(f"{n} {why}" for why, n in c["set_aside_by_reason"].items())
        pruned = ", ".join(f"{n} {why}" for why, n in c["pruned_by_reason"].items())
        seeds = len(self.question["seeds"]) - 1
        more = f"{seeds} more seed(s)"
        if self.question.get("workload") == "trace":
            distinct = self.question.get("trace_windows", 1)
            more += f" (each replays its own window of the trace: {distinct} distinct)"
        return (
            f"{c['configurations']} configurations: {c['set_aside']} set aside before simulating"
            f"{f' ({aside})' if aside else ''}; {c['simulated']} simulated "
            f"({c['unit_probed']} probed on one unit, {c['pruned']} pruned after that"
            f"{f': {pruned}' if pruned else ''}); {c['fleet_searched']} fleets searched, "
            f"{c['found']} found, {c['confirmed']} confirmed on {more}; "
            f"{c['probes']} probes, {c['requests']:,} simulated requests, "
            f"{self.question['wall_s']:.1f} s on {self.question['workers']} worker(s) "
            f"({self.question['backend']})"
            f"{_band_note(self.question, c)}"
            f"{_records_note(c)}"
        )

    def no_answer(self) -> str:
        """Why no configuration is ranked: every one was set aside before simulating (none could
        run, so none was tried against the SLOs), or none of those tried meets them."""
        c = self.counts
        if c["configurations"] and c["set_aside"] == c["configurations"]:
            why = ", ".join(f"{n} {reason}" for reason, n in c["set_aside_by_reason"].items())
            return (
                f"every one of the {c['configurations']} configurations was set aside before "
                f"simulating ({why}): none could run, so none was tried against the SLOs"
            )
        percent = self.question.get("robust_percent")
        band = "" if percent is None else f" over the ±{percent:g} % band"
        return f"no configuration of the space meets the SLOs{band} at this rate"

    def __repr__(self) -> str:
        best = self.best
        answer = (
            self.no_answer()
            if best is None
            else (f"best {best['configuration']} x {best['instances']}")
        )
        return f"SearchResult({self.counts['configurations']} configurations, {answer})"
