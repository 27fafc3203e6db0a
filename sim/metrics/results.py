"""What `simulate()` returns: flat per-request, per-step and inter-token tables, per variant.

`VariantResult` holds one variant's pandas tables; `Results` holds every variant of a scenario
(run on the same requests) and concatenates their tables with a `variant` column, so that
comparisons are one `groupby` away. Nothing here writes files: `sim.io.output` does that.

Tables (column names are part of the public contract):

* requests: one row per request: `id, instance, arrival_s, num_prompt_tokens, max_output_tokens,
  num_output_tokens, first_scheduled_s, first_token_s, finish_s, queue_s, ttft_s, tpot_s, e2e_s,
  max_itl_s, num_preemptions, num_recomputed_tokens, rejected`, and with speculative decoding
  `num_spec_steps, num_spec_proposed, num_spec_accepted` (its verify steps and their tokens).
* steps: one row per *step group*, a run of `num_steps` identical consecutive steps (a single step
  when `num_steps == 1`): `instance, start_s, end_s, num_steps, duration_s` (first step),
  `duration_increment_s` (each later step is this much longer, as attention reads one more token
  per slot), `num_seqs, num_active_seqs, num_tokens, num_prefill_tokens, num_decode_tokens,
  sum_context_tokens` (first step), `context_growth_per_step, kv_blocks_used` (held during the
  group's last step, before the requests it finished release theirs), `kv_block_seconds` (blocks
  held integrated over the group, exact), `num_waiting, num_running, num_preempted`, and for
  speculative decoding `num_spec_seqs, num_spec_proposed, num_spec_accepted, spec_proposal_s,
  spec_verify_s` (`docs/speculative.md`). `sim.metrics.summary.expand_steps` gives one row per
  step.
* itl: the pooled inter-token gaps as a weighted sample: `gap_s, count` (per token), and
  `tokens`, the size of the emission the gaps belong to (1 but for speculative decoding, whose
  emissions of n tokens give each `1/n` of the gap).

In a notebook a `Results` shows itself as the side-by-side summary table (`_repr_html_`), and
`side_by_side()` returns that table as a DataFrame; `repr()` stays one line, whatever the size
of the tables.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from sim.metrics.context import SummaryContext
from sim.metrics.instances import instance_summary, stall_summary, transfer_summary
from sim.metrics.rejections import rejection_causes, rejection_table
from sim.metrics.side_by_side import side_by_side, summary_html
from sim.metrics.streaming import StreamSummary
from sim.metrics.summary import summarize
from sim.metrics.timeline import timeline, worst_window_slo_attainment


@dataclass(repr=False)
class VariantResult:
    name: str
    requests: pd.DataFrame
    steps: pd.DataFrame
    itl: pd.DataFrame
    context: SummaryContext
    # resolved scenario of this variant (plain data, ready to dump as YAML)
    scenario: dict[str, Any] = field(default_factory=dict)
    # one row per instance: index, role (serve|prefill|decode), group, hardware, KV blocks, ...
    instances: pd.DataFrame = field(default_factory=pd.DataFrame)
    # a streamed run (no tables): the summary folded from its records as they came
    streamed: StreamSummary | None = None
    # run-level counts no table holds (prefix-cache lookups, a trace's dropped requests)
    counters: dict[str, float] = field(default_factory=dict)
    # an autoscaled run's scaling events, one row each (sim.topology.scaling.EVENT_COLUMNS);
    # empty for a fleet that never changes
    fleet_events: pd.DataFrame = field(default_factory=pd.DataFrame)

    def summary(self) -> dict[str, float]:
        if self.streamed is not None:
            out = self.streamed.summary()
        else:
            out = summarize(self.requests, self.steps, self.itl, self.context)
            out.update(stall_summary(self.requests, self.context))
            out.update(transfer_summary(self.requests, self.context))
        out.update(self.counters)
        if len(self.fleet_events):  # an autoscaled run: how bad its worst stretch was
            out["worst_window_slo_attainment"] = worst_window_slo_attainment(self.timeline())
        return out

    def timeline(self, window_s: float | None = None) -> pd.DataFrame:
        """Metrics per window of the run (`sim.metrics.timeline`); `window_s` None: the
        scenario's `metrics.window_s`, else a round length near 1 % of the arrival span."""
        return timeline(self, window_s)

    @property
    def num_requests(self) -> int:
        if self.streamed is not None:
            return int(self.streamed.counts["num_requests"])
        return len(self.requests)

    def rejections(self) -> dict[str, int]:
        """Rejected requests by cause (empty when none was rejected)."""
        streamed = self.streamed.reject_reasons if self.streamed is not None else None
        return rejection_causes(self.requests, streamed)

    def instance_summary(self) -> pd.DataFrame:
        """One row per instance: role, group, hardware, requests taken and step metrics."""
        if self.streamed is not None:
            return self.streamed.instance_summary(self.instances)
        return instance_summary(self.requests, self.steps, self.instances, self.context)

    def __repr__(self) -> str:
        return (
            f"VariantResult({self.name!r}: {self.num_requests} requests, "
            f"{len(self.steps)} step groups)"
        )


@dataclass(repr=False)
class Results:
    scenario_name: str
    variants: dict[str, VariantResult]

    def __repr__(self) -> str:
        sizes = {v.num_requests for v in self.variants.values()}
        each = f"{sizes.pop()} requests each" if len(sizes) == 1 else "requests differ"
        names = ", ".join(self.variants)
        return f"Results({self.scenario_name!r}: {len(self.variants)} variants [{names}], {each})"

    def _repr_html_(self) -> str:
        return f"<p><b>{html.escape(self.scenario_name)}</b></p>" + summary_html(self.summary())

    def side_by_side(self) -> pd.DataFrame:
        """The curated metrics (rows, unit in the label) of every variant (columns)."""
        return side_by_side(self.summary())

    def rejections(self) -> pd.DataFrame:
        """`variant, cause, count` of the requests no schedule could serve."""
        return rejection_table({name: v.rejections() for name, v in self.variants.items()})

    def __getitem__(self, name: str) -> VariantResult:
        return self.variants[name]

    def _concat(self, attr: str) -> pd.DataFrame:
        frames = [getattr(v, attr).assign(variant=name) for name, v in self.variants.items()]
        return pd.concat(frames, ignore_index=True)

    @property
    def requests(self) -> pd.DataFrame:
        return self._concat("requests")

    @property
    def steps(self) -> pd.DataFrame:
        return self._concat("steps")

    def instance_summary(self) -> pd.DataFrame:
        """Per-instance metrics of every variant, with a `variant` column."""
        frames = [v.instance_summary().assign(variant=n) for n, v in self.variants.items()]
        return pd.concat(frames, ignore_index=True)

    def summary(self) -> pd.DataFrame:
        """One row per variant, one column per metric."""
        rows = {name: v.summary() for name, v in self.variants.items()}
        return pd.DataFrame.from_dict(rows, orient="index").rename_axis("variant")
