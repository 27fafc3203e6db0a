"""Every simulation figure quoted in the README, the pages of docs/ and the shipped scenarios'
comments, with the run that produces it, so that a test can check the text and a script can
rewrite it.

A `Quote` is a document, a regular expression that matches exactly one place in it (a space
also matches a line break inside a YAML or Markdown comment), and one
function per capture group computing the number that group quotes from runs of this code (each
variant run once). A quoted number holds when it is within half a unit of its
last digit or `REL_TOL` (1 %) of the computed value, whichever is larger.

A quote whose run reads a file outside the repository (a public trace) names it in `needs`.
Where the file is absent its text is still matched but its values are not computed, and
`coverage()` counts them per missing file, so no figure goes unchecked without saying so.

    python tests/quoted_figures.py           # list the figures that drifted; store the runs
    python tests/quoted_figures.py --write   # rewrite them in place (same number of decimals)

Each run a quote reads is stored in tests/quoted_runs.json under a key of the code that can
change it (tests/quoted_runs.py): the check reads a stored run where this code made it and
repeats the others; running this file stores them again.

Not quoted here, on purpose: wall-clock timings (docs/speed.md, install and test times), which
depend on the machine and come from `benchmarks/`; and the roofline-vs-measured ratios, computed
by `python -m calibration.check_roofline` from reference timings outside this repository.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from itertools import takewhile
from pathlib import Path
from typing import Any

import yaml
from quoted_runs import Store, Summary, recording, track

ROOT = Path(__file__).resolve().parents[1]
REL_TOL = 0.01
NUM = r"([\d.]+)"

Value = Callable[[], float]


STORE = Store()  # the stored runs (tests/quoted_runs.py), used where this code made them


@functools.cache
def _loaded(scenario: str, *overrides: str) -> tuple[Any, frozenset[str]]:
    """A shipped scenario, loaded, and the files it read outside the repository."""
    from sim.scenario.load import load_scenario

    with recording() as reads:
        loaded = load_scenario(ROOT / "scenarios" / f"{scenario}.yaml", overrides=list(overrides))
    return loaded, frozenset(reads)


def fresh_summary(scenario: str, variant: str, *overrides: str) -> tuple[Summary, set[str]]:
    """metric -> value of one variant of a shipped scenario, run alone now, and the files the
    run read outside the repository: a variant's run does not depend on the others, and a check
    that quotes a few variants of a large scenario runs only those."""
    import dataclasses

    from sim.simulate import simulate

    loaded, load_reads = _loaded(scenario, *overrides)
    one = [v for v in loaded.variants if v.variant == variant]
    assert one, f"{scenario} has no variant {variant!r}"
    with recording() as reads:
        result = simulate(dataclasses.replace(loaded, variants=one))
    return next(iter(result.variants.values())).summary(), reads | load_reads


def run_name(scenario: str, variant: str, *overrides: str) -> str:
    return " ".join((f"{scenario}:{variant}", *overrides))


@functools.cache
def variant_summary(scenario: str, variant: str, *overrides: str) -> dict[str, float]:
    """metric -> value of one variant of a shipped scenario: its stored run where this code
    made it, else a fresh one (stored when this file runs as a script)."""
    return STORE.get(
        run_name(scenario, variant, *overrides),
        functools.partial(fresh_summary, scenario, variant, *overrides),
    )


class _Summaries:
    """variant -> metric -> value, each variant run when first asked for."""

    def __init__(self, scenario: str, overrides: tuple[str, ...]) -> None:
        self.scenario, self.overrides = scenario, overrides

    def __getitem__(self, variant: str) -> dict[str, float]:
        return variant_summary(self.scenario, variant, *self.overrides)


def summary(scenario: str, *overrides: str) -> _Summaries:
    return _Summaries(scenario, overrides)


def m(scenario: str, variant: str, metric: str, scale: float = 1.0, *overrides: str) -> Value:
    return lambda: variant_summary(scenario, variant, *overrides)[metric] * scale


def ratio(a: Value, b: Value, minus_one: bool = False) -> Value:
    """a / b, or the relative change a / b - 1 in percent."""
    return lambda: (a() / b() - 1.0) * 100.0 if minus_one else a() / b()


def cut(before: Value, after: Value) -> Value:
    """How much lower `after` is than `before`, in percent of `before`."""
    return lambda: (1.0 - after() / before()) * 100.0


def prefix_reuse(scenario: str, scale: float = 1.0) -> Value:
    """Share of a shipped scenario's prompt blocks an admission would find in a cache that never
    evicts: its leading blocks that an earlier prompt also had (the first variant's workload and
    block size; looked up as the engine does, all but a prompt's last token)."""

    def value() -> float:
        import numpy as np

        from sim.core.block_hash import block_hashes
        from sim.scenario.load import load_scenario
        from sim.workload.generate import generate_requests

        resolved = load_scenario(ROOT / "scenarios" / f"{scenario}.yaml").variants[0]
        spec, bs = resolved.spec, resolved.spec.policy.block_size
        rng = np.random.default_rng(spec.seed)
        work = generate_requests(spec.workload, rng, resolved.base_dir, spec.model.max_model_len)
        content = work.content
        assert content is not None
        seen: set[int] = set()
        looked = found = 0
        for i, tokens in enumerate(work.prompt_tokens.tolist()):
            names = block_hashes(content.of(i), content.unit, tokens, bs)
            looked += len(names)
            found += sum(1 for _ in takewhile(seen.__contains__, names[: (tokens - 1) // bs]))
            seen.update(names)
        return found / looked * scale

    return value


def gain(a: Value, b: Value) -> Value:
    """a - b (points of a rate, dollars per hour)."""
    return lambda: a() - b()


def fit(key: str) -> Value:
    path = ROOT / "calibration/profiles/imported/llama-2-7b_a100-80g/profile.yaml"
    return lambda: float(yaml.safe_load(path.read_text())["fit"][key])


@dataclass(frozen=True)
class Quote:
    doc: str
    pattern: str
    values: tuple[Value, ...]
    needs: Path | None = None  # a file outside the repository the run reads (a public trace)

    @property
    def available(self) -> bool:
        return self.needs is None or self.needs.is_file()


def _rows(
    doc: str,
    scenario: str,
    layout: str,
    metrics: list[tuple[str, float]],
    variants: list[str],
    needs: Path | None = None,
) -> list[Quote]:
    """One Quote per table row: `layout` is the row after the variant name, NUM per number."""
    return [
        Quote(
            doc,
            rf"#   {re.escape(v)}\s+{layout}",
            tuple(m(scenario, v, metric, scale) for metric, scale in metrics),
            needs,
        )
        for v in variants
    ]


SD = "scenarios/speculative_decoding.yaml"
CP = "scenarios/chunked_prefill.yaml"
DG = "scenarios/disaggregation_goodput.yaml"
KV = "scenarios/kv_paging.yaml"
KT = "scenarios/kv_tiers.yaml"
PC = "scenarios/prefix_caching.yaml"
CA = "scenarios/coding_agents.yaml"
PR = "scenarios/profile_comparison.yaml"
AZURE = (ROOT / "scenarios" / "../../shared/traces/azure_llm_2023_conv.csv").resolve()
# the public trace prefix_caching.yaml replays, where the scenario's relative path points
MOONCAKE = (ROOT / "scenarios" / "../../shared/traces/mooncake_conversation.jsonl").resolve()
S, MS, PCT = 1.0, 1e3, 100.0
RATE22 = "workload.arrival.rate=22"
stall = functools.partial(m, "chunked_prefill")
disagg = functools.partial(m, "disaggregation_goodput")
paging = functools.partial(m, "kv_paging")
quick = functools.partial(m, "quickstart")
caching = functools.partial(m, "prefix_caching")
tiers = functools.partial(m, "kv_tiers")
pricing = functools.partial(m, "profile_comparison")
spec = functools.partial(m, "speculative_decoding")

SN = "scenarios/moe_single_node.yaml"
WE = "scenarios/moe_wide_ep.yaml"
node = functools.partial(m, "moe_single_node")
wide = functools.partial(m, "moe_wide_ep")
MOE_ROW = rf"{NUM}\s+{NUM}%\s+{NUM}/{NUM}\s+{NUM}/{NUM}\s+{NUM}\s+{NUM}\n"
MOE_METRICS = [("goodput_rps", S), ("slo_attainment", PCT), ("ttft_p50_s", MS),
               ("ttft_p99_s", MS), ("tpot_p50_s", MS), ("tpot_p99_s", MS),
               ("mean_batch_size", S), ("usd_per_million_output_tokens", S)]


def experts_touched(experts: int, top_k: int, tokens: int) -> Value:
    """Distinct experts per layer that `tokens` uniformly routed tokens touch (sim/costs/moe.py)."""

    def value() -> float:
        from sim.costs.moe import ExpertRouting

        return ExpertRouting(experts, top_k).distinct(tokens)

    return value


# kv_tiers.yaml's table: block hit rate, then by tier where the variant has it, and the rest
KT_HIT = [("prefix_cache_block_hit_rate", PCT), ("kv_block_hit_rate_gpu", PCT)]
KT_DRAM, KT_REMOTE = ("kv_block_hit_rate_dram", PCT), ("kv_block_hit_rate_remote", PCT)
KT_REST = [("ttft_p50_s", S), ("ttft_p99_s", S), ("fleet_usd_per_hour", S),
           ("usd_per_million_output_tokens", S), ("kv_load_wait_s", S)]
KT_TAIL = rf"{NUM} s\s+{NUM} s\s+{NUM}\s+{NUM}\s+{NUM} s\n"


def kt_hit(variant: str) -> Value:
    return tiers(variant, "prefix_cache_block_hit_rate", PCT)


# fmt: off
QUOTES: list[Quote] = [
    *_rows(CP, "chunked_prefill", rf"{NUM} s\s+{NUM} s\s+{NUM} s\s+{NUM} s\s+{NUM} s\s+{NUM}\n",
           [("stall_p99_s", S), ("itl_p99_s", S), ("itl_max_s", S), ("ttft_p50_s", S),
            ("ttft_p99_s", S), ("output_tokens_per_s", S)],
           ["prefill_first", "mixed", "chunked-512", "chunked-2048"]),
    Quote(CP, rf"cuts the p99 stall {NUM}x \({NUM} s -> {NUM} s\) and the worst one {NUM}x",
          (ratio(stall("prefill_first", "stall_p99_s"), stall("chunked-512", "stall_p99_s")),
           stall("prefill_first", "stall_p99_s"), stall("chunked-512", "stall_p99_s"),
           ratio(stall("prefill_first", "itl_max_s"), stall("chunked-512", "itl_max_s")))),
    Quote(CP, rf"\(p50 \+{NUM}%, p99 \+{NUM}%\)",
          (ratio(stall("chunked-512", "ttft_p50_s"), stall("prefill_first", "ttft_p50_s"), True),
           ratio(stall("chunked-512", "ttft_p99_s"), stall("prefill_first", "ttft_p99_s"), True))),
    Quote(CP, rf"still cuts stalls {NUM}x",
          (ratio(stall("prefill_first", "stall_p99_s"), stall("chunked-2048", "stall_p99_s")),)),
    *_rows(DG, "disaggregation_goodput",
           rf"{NUM}\s+{NUM}%\s+{NUM}/{NUM} s\s+{NUM} s\s+{NUM} s\n",
           [("goodput_rps", S), ("slo_attainment", PCT), ("ttft_p50_s", S), ("ttft_p99_s", S),
            ("tpot_p99_s", S), ("stall_p99_s", S)],
           ["colocated-strict", "chunked-strict", "disaggregated-strict"]),
    *_rows(DG, "disaggregation_goodput", rf"{NUM}\s+{NUM}%", [("goodput_rps", S),
           ("slo_attainment", PCT)], ["colocated-loose", "chunked-loose", "disaggregated-loose"]),
    Quote(DG, rf"KV transfer p50 {NUM} ms, link {NUM}% busy",
          (disagg("disaggregated-strict", "kv_transfer_p50_s", MS),
           disagg("disaggregated-strict", "link_utilization", PCT))),
    Quote(DG, rf"\(TPOT p99 {NUM} ms vs {NUM} ms\)",
          (disagg("disaggregated-strict", "tpot_p99_s", MS),
           disagg("colocated-strict", "tpot_p99_s", MS))),
    Quote(DG, rf"makes its TTFT p50 {NUM}x", (ratio(disagg("disaggregated-strict", "ttft_p50_s"),
                                                     disagg("colocated-strict", "ttft_p50_s")),)),
    Quote(DG, rf"the disaggregated TTFT p50 is {NUM} s and its goodput {NUM}",
          (disagg("disaggregated-loose", "ttft_p50_s", S, RATE22),
           disagg("disaggregated-loose", "goodput_rps", S, RATE22))),
    Quote(DG, rf"colocated keeps {NUM} req/s \({NUM}%\) and chunked {NUM} req/s \({NUM}%\)",
          (disagg("colocated-loose", "goodput_rps", S, RATE22),
           disagg("colocated-loose", "slo_attainment", PCT, RATE22),
           disagg("chunked-loose", "goodput_rps", S, RATE22),
           disagg("chunked-loose", "slo_attainment", PCT, RATE22))),
    Quote(DG, rf"\(strict: at most {NUM} req/s\)",
          (lambda: max(summary("disaggregation_goodput", RATE22)[v]["goodput_rps"]
                       for v in ("colocated-strict", "chunked-strict", "disaggregated-strict")),)),
    *_rows(KV, "kv_paging", rf"{NUM}\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}\n",
           [("mean_batch_size", S), ("max_batch_size", S), ("kv_reserved_utilization", S),
            ("internal_fragmentation", S), ("output_tokens_per_s", S)],
           ["paged", "max_length", "exact"]),
    Quote(KV, rf"Paged reaches a {NUM}x larger mean batch",
          (ratio(paging("paged", "mean_batch_size"), paging("max_length", "mean_batch_size")),)),
    Quote(KV, rf"and {NUM}x its output throughput",
          (ratio(paging("paged", "output_tokens_per_s"),
                 paging("max_length", "output_tokens_per_s")),)),
    *_rows(PC, "prefix_caching", rf"-\s+{NUM} s\s+{NUM} s\s+{NUM}\s+-\s+-\n",
           [("ttft_p50_s", S), ("ttft_p99_s", S), ("output_tokens_per_s", S)], ["no-cache"],
           MOONCAKE),
    *_rows(PC, "prefix_caching", rf"{NUM}%\s+{NUM} s\s+{NUM} s\s+{NUM}\s+{NUM} M\s+{NUM} M\n",
           [("prefix_cache_hit_rate", PCT), ("ttft_p50_s", S), ("ttft_p99_s", S),
            ("output_tokens_per_s", S), ("prefill_tokens_saved", 1e-6),
            ("prefix_cache_evictions", 1e-6)],
           ["least-load", "session-sticky", "prefix-affinity"], MOONCAKE),
    Quote(PC, rf"cuts TTFT p50 by {NUM}% behind a load balancer and {NUM}% with prefix affinity",
          (cut(caching("no-cache", "ttft_p50_s"), caching("least-load", "ttft_p50_s")),
           cut(caching("no-cache", "ttft_p50_s"), caching("prefix-affinity", "ttft_p50_s"))),
          MOONCAKE),
    Quote(PC, rf"which raises its TTFT p99 by {NUM}% over least-load",
          (ratio(caching("session-sticky", "ttft_p99_s"), caching("least-load", "ttft_p99_s"),
                 True),), MOONCAKE),
    *_rows(CA, "coding_agents",
           rf"{NUM}%\s+{NUM} s\s+{NUM} s\s+{NUM}%\s+{NUM} s\s+{NUM} ms\n",
           [("prefix_cache_hit_rate", PCT), ("task_duration_p50_s", S),
            ("task_duration_p99_s", S), ("task_slo_attainment", PCT), ("ttft_p50_s", S),
            ("tpot_p50_s", MS)],
           ["least-load", "session-sticky", "prefix-affinity"]),
    *_rows(KT, "kv_tiers", rf"{NUM}%\s+-\s+-\s+-\s+{NUM} s\s+{NUM} s\s+{NUM}\s+{NUM}\s+-\n",
           [KT_HIT[0], *KT_REST[:4]], ["gpu-only"], MOONCAKE),
    *_rows(KT, "kv_tiers", rf"{NUM}%\s+{NUM}%\s+{NUM}%\s+-\s+{KT_TAIL}",
           [*KT_HIT, KT_DRAM, *KT_REST],
           ["dram-64", "dram-256", "dram-1024", "dram-256-eviction"], MOONCAKE),
    *_rows(KT, "kv_tiers", rf"{NUM}%\s+{NUM}%\s+-\s+{NUM}%\s+{KT_TAIL}",
           [*KT_HIT, KT_REMOTE, *KT_REST],
           ["remote-512", "remote-2048", "remote-unbounded", "remote-2048-overlap"], MOONCAKE),
    *_rows(KT, "kv_tiers", rf"{NUM}%\s+{NUM}%\s+{NUM}%\s+{NUM}%\s+{KT_TAIL}",
           [*KT_HIT, KT_DRAM, KT_REMOTE, *KT_REST],
           ["dram-256+remote-512", "dram-256+remote-2048", "dram-256+remote-unbounded"], MOONCAKE),
    Quote(KT, rf"as an admission looks them up, {NUM}% of prompt blocks",
          (prefix_reuse("kv_tiers", PCT),), MOONCAKE),
    Quote(KT, rf"and adds {NUM} points, 256 GiB serves {NUM}% of blocks and cuts TTFT p50 by "
              rf"{NUM}% and p99 by {NUM}%, and 1024 GiB reaches {NUM}% \(p50 -{NUM}%\)",
          (gain(kt_hit("dram-64"), kt_hit("gpu-only")), kt_hit("dram-256"),
           cut(tiers("gpu-only", "ttft_p50_s"), tiers("dram-256", "ttft_p50_s")),
           cut(tiers("gpu-only", "ttft_p99_s"), tiers("dram-256", "ttft_p99_s")),
           kt_hit("dram-1024"),
           cut(tiers("gpu-only", "ttft_p50_s"), tiers("dram-1024", "ttft_p50_s"))), MOONCAKE),
    Quote(KT, rf"256 GiB per instance adds \${NUM}/h, \+{NUM}% per output token",
          (gain(tiers("dram-256", "fleet_usd_per_hour"), tiers("gpu-only", "fleet_usd_per_hour")),
           ratio(tiers("dram-256", "usd_per_million_output_tokens"),
                 tiers("gpu-only", "usd_per_million_output_tokens"), True)), MOONCAKE),
    Quote(KT, rf"2 TiB of it \({NUM}%\) holds more of the reuse than 4 TiB of DRAM split four ways "
              rf"\({NUM}%\)", (kt_hit("remote-2048"), kt_hit("dram-1024")), MOONCAKE),
    Quote(KT, rf"wait {NUM}x as long on loads \({NUM} s vs {NUM} s\)",
          (ratio(tiers("remote-2048", "kv_load_wait_s"), tiers("dram-1024", "kv_load_wait_s")),
           tiers("remote-2048", "kv_load_wait_s"), tiers("dram-1024", "kv_load_wait_s")), MOONCAKE),
    Quote(KT, rf"cuts that to {NUM} s and TTFT p50 by a further {NUM}%",
          (tiers("remote-2048-overlap", "kv_load_wait_s"),
           cut(tiers("remote-2048", "ttft_p50_s"), tiers("remote-2048-overlap", "ttft_p50_s"))),
          MOONCAKE),
    Quote(KT, rf"store adds {NUM} points, 2 TiB {NUM} points and an unbounded one reaches {NUM}%",
          (gain(kt_hit("dram-256+remote-512"), kt_hit("dram-256")),
           gain(kt_hit("dram-256+remote-2048"), kt_hit("dram-256")),
           kt_hit("dram-256+remote-unbounded")), MOONCAKE),
    Quote(KT, rf"lifts 256 GiB from {NUM}% to {NUM}%",
          (kt_hit("dram-256"), kt_hit("dram-256-eviction")), MOONCAKE),
    Quote("docs/scenarios.md",
          rf"the GPU alone hits {NUM} % of prompt blocks; 256 GiB of DRAM per instance {NUM} % "
          rf"\(TTFT p50 -{NUM} % for \+{NUM} % \$ per output token\); a 2 TiB shared store "
          rf"{NUM} %; an unbounded store reaches the trace's {NUM} % reuse",
          (kt_hit("gpu-only"), kt_hit("dram-256"),
           cut(tiers("gpu-only", "ttft_p50_s"), tiers("dram-256", "ttft_p50_s")),
           ratio(tiers("dram-256", "usd_per_million_output_tokens"),
                 tiers("gpu-only", "usd_per_million_output_tokens"), True),
           kt_hit("remote-2048"), prefix_reuse("kv_tiers", PCT)), MOONCAKE),
    *_rows(PR, "profile_comparison",
           rf"{NUM} / {NUM}\s+{NUM} / {NUM}\s+{NUM} / {NUM}\s+{NUM}\n",
           [("ttft_p50_s", MS), ("ttft_p99_s", MS), ("tpot_p50_s", MS), ("tpot_p99_s", MS),
            ("e2e_p50_s", S), ("e2e_p99_s", S), ("mean_batch_size", S)],
           ["roofline", "fitted", "table"], AZURE),
    Quote(PR, rf"its TPOT p50 is {NUM}% below",
          (cut(pricing("fitted", "tpot_p50_s"), pricing("roofline", "tpot_p50_s")),), AZURE),
    Quote(PR, rf"so its TTFT p99 is {NUM}% lower",
          (cut(pricing("fitted", "ttft_p99_s"), pricing("table", "ttft_p99_s")),), AZURE),
    Quote(PR, rf"{NUM} step groups fell outside",
          (pricing("table", "profile_extrapolated_steps"),), AZURE),
    *_rows(SD, "speculative_decoding", rf"{NUM} ms\s+{NUM} ms\s+{NUM} ms\s+{NUM} ms\s+{NUM}\n",
           [("tpot_p50_s", MS), ("tpot_p99_s", MS), ("ttft_p50_s", MS), ("itl_p50_s", MS),
            ("output_tokens_per_s", S)],
           ["k0", "k2", "k4", "k4-dynamic"]),
    *_rows(SD, "speculative_decoding", rf"{NUM}\s+{NUM}\s+{NUM}%\s+{NUM}%\n",
           [("spec_acceptance_rate", S), ("spec_tokens_per_step", S),
            ("spec_proposal_time_share", PCT), ("spec_step_share", PCT)],
           ["k2", "k4", "k4-dynamic"]),
    Quote(SD, rf"k = 2 cuts TPOT p50 {NUM}% \({NUM} -> {NUM} ms\) while k = 4 is already {NUM}%",
          (lambda: (1.0 - spec("k2", "tpot_p50_s")() / spec("k0", "tpot_p50_s")()) * 100.0,
           spec("k0", "tpot_p50_s", MS), spec("k2", "tpot_p50_s", MS),
           ratio(spec("k4", "tpot_p50_s"), spec("k0", "tpot_p50_s"), True))),
    Quote(SD, rf"speculates in {NUM}% of the steps yet stays {NUM}% slower",
          (spec("k4-dynamic", "spec_step_share", PCT),
           ratio(spec("k4-dynamic", "tpot_p50_s"), spec("k0", "tpot_p50_s"), True))),
    Quote("README.md", rf"\| SLO attainment \(TTFT 2 s, TPOT 100 ms\) \| {NUM} % \| {NUM} % \|",
          (quick("static", "slo_attainment", PCT), quick("continuous", "slo_attainment", PCT))),
    Quote("README.md", rf"\| TTFT p50 / p99 \| {NUM} s / {NUM} s \| {NUM} ms / {NUM} ms \|",
          (quick("static", "ttft_p50_s"), quick("static", "ttft_p99_s"),
           quick("continuous", "ttft_p50_s", MS), quick("continuous", "ttft_p99_s", MS))),
    Quote("README.md", rf"\| E2E p50 / p99 \| {NUM} s / {NUM} s \| {NUM} s / {NUM} s \|",
          (quick("static", "e2e_p50_s"), quick("static", "e2e_p99_s"),
           quick("continuous", "e2e_p50_s"), quick("continuous", "e2e_p99_s"))),
    Quote("README.md", rf"\| slot utilization \| {NUM} % \| {NUM} % \|",
          (quick("static", "slot_utilization", PCT),
           quick("continuous", "slot_utilization", PCT))),
    Quote("README.md", rf"\| longest decode stall \| {NUM} ms \| {NUM} ms \|",
          (quick("static", "itl_max_s", MS), quick("continuous", "itl_max_s", MS))),
    Quote("docs/scenarios.md",
          rf"cuts the p99 decode stall {NUM}x \({NUM} s to {NUM} ms\) for \+{NUM} %",
          (ratio(stall("prefill_first", "stall_p99_s"), stall("chunked-512", "stall_p99_s")),
           stall("prefill_first", "stall_p99_s"), stall("chunked-512", "stall_p99_s", MS),
           ratio(stall("chunked-512", "ttft_p50_s"), stall("prefill_first", "ttft_p50_s"), True))),
    Quote("docs/scenarios.md",
          rf"strict: P/D {NUM} req/s goodput vs {NUM} chunked vs {NUM} colocated",
          (disagg("disaggregated-strict", "goodput_rps"), disagg("chunked-strict", "goodput_rps"),
           disagg("colocated-strict", "goodput_rps"))),
    Quote("docs/scenarios.md", rf"paged reaches a {NUM}x larger mean batch",
          (ratio(paging("paged", "mean_batch_size"), paging("max_length", "mean_batch_size")),)),
    Quote("docs/scenarios.md",
          rf"cuts TPOT p50 {NUM} % with k = 2; k = 4 is already {NUM} % slower",
          (lambda: (1.0 - spec("k2", "tpot_p50_s")() / spec("k0", "tpot_p50_s")()) * 100.0,
           ratio(spec("k4", "tpot_p50_s"), spec("k0", "tpot_p50_s"), True))),
    Quote("docs/models.md", rf"two-regime fit, R\^2 {NUM}, worst error {NUM} %",
          (fit("r2"), lambda: fit("max_rel_error")() * 100.0)),
    *_rows(SN, "moe_single_node", MOE_ROW, MOE_METRICS,
           ["h100-8x-tp1", "h100-4x-tp2", "h100-1x-tp8", "h100-1x-dp8-ep8", "h200-8x-tp1",
            "b200-8x-tp1", "mi300x-8x-tp1"]),
    Quote(SN, rf"at a batch of 40, about {NUM} of the 128 per", (experts_touched(128, 4, 40),)),
    Quote(SN, rf"\(dp8-ep8: {NUM} % less per",
          (cut(node("h100-8x-tp1", "usd_per_million_output_tokens"),
               node("h100-1x-dp8-ep8", "usd_per_million_output_tokens")),)),
    Quote(SN, rf"\(B200 {NUM} ms\)", (node("b200-8x-tp1", "tpot_p50_s", MS),)),
    *_rows(WE, "moe_wide_ep", MOE_ROW, MOE_METRICS,
           ["tp8-x6", "dp8-ep8-x6", "wide-ep-2p1d", "wide-ep-2p1d-mtp"]),
    Quote(WE, rf"Wide EP decodes at {NUM} ms, {NUM}x faster than eight-way",
          (wide("wide-ep-2p1d", "tpot_p50_s", MS),
           ratio(wide("tp8-x6", "tpot_p50_s"), wide("wide-ep-2p1d", "tpot_p50_s")))),
    Quote(WE, rf"MTP cuts the TPOT to {NUM} ms and the cost per token by {NUM} %",
          (wide("wide-ep-2p1d-mtp", "tpot_p50_s", MS),
           cut(wide("wide-ep-2p1d", "usd_per_million_output_tokens"),
               wide("wide-ep-2p1d-mtp", "usd_per_million_output_tokens")))),
    Quote("docs/scenarios.md",
          rf"wide EP decodes {NUM}x faster than tp8 at a lower cost per token; MTP "
          rf"\(one token, 80 % accepted\) cuts TPOT to {NUM} ms",
          (ratio(wide("tp8-x6", "tpot_p50_s"), wide("wide-ep-2p1d", "tpot_p50_s")),
           wide("wide-ep-2p1d-mtp", "tpot_p50_s", MS))),
]
# fmt: on


@dataclass(frozen=True)
class Drift:
    doc: str
    quoted: str
    computed: float
    span: tuple[int, int]  # where the quoted number is in the document

    def fixed(self) -> str:
        decimals = len(self.quoted.partition(".")[2])
        return f"{self.computed:.{decimals}f}"

    def __str__(self) -> str:
        return f"{self.doc}: quotes {self.quoted}, the code gives {self.fixed()}"


def tolerance(quoted: str, computed: float) -> float:
    decimals = len(quoted.partition(".")[2])
    return max(0.5 * 10.0**-decimals, REL_TOL * abs(computed))


@dataclass(frozen=True)
class Coverage:
    """How many quoted values a check computes here, and how many it cannot (their run reads a
    file that is not on this machine), per missing file."""

    checked: int
    skipped: dict[str, int]

    @property
    def total(self) -> int:
        return self.checked + sum(self.skipped.values())

    def __str__(self) -> str:
        text = f"{self.checked} of {self.total} quoted values checked"
        for needs, count in sorted(self.skipped.items()):
            text += f"; {count} skipped: they need {needs}, absent here"
        return text


def coverage(quotes: list[Quote] = QUOTES) -> Coverage:
    skipped: dict[str, int] = {}
    for quote in quotes:
        if not quote.available:
            skipped[str(quote.needs)] = skipped.get(str(quote.needs), 0) + len(quote.values)
    checked = sum(len(q.values) for q in quotes if q.available)
    return Coverage(checked, skipped)


def _match(quote: Quote, root: Path) -> re.Match[str]:
    """The quote's one place in its document (its text is checked even when its values cannot
    be computed here); a pattern that matches zero or several times, or whose groups and values
    differ in number, is an error (the text and this list went apart)."""
    text = (root / quote.doc).read_text(encoding="utf-8")
    # a space in a pattern also matches a line break inside a comment ("\n#   ")
    found = list(re.finditer(quote.pattern.replace(" ", r"[\s#]+"), text))
    if len(found) != 1:
        raise AssertionError(f"{quote.doc}: {quote.pattern!r} matches {len(found)} times")
    if found[0].re.groups != len(quote.values):
        raise AssertionError(
            f"{quote.doc}: {quote.pattern!r} has {found[0].re.groups} numbers for "
            f"{len(quote.values)} values"
        )
    return found[0]


def check(quotes: list[Quote] = QUOTES, root: Path = ROOT) -> list[Drift]:
    """Every quoted number outside its tolerance. The values of a quote whose input is absent
    are not computed (`coverage` counts them), but its text must still match."""
    drifts = []
    for quote in quotes:
        match = _match(quote, root)
        if not quote.available:  # counted by coverage(); see test_quoted_figures
            continue
        for group, value in enumerate(quote.values, start=1):
            quoted, computed = match.group(group), value()
            if abs(float(quoted) - computed) > tolerance(quoted, computed):
                drifts.append(Drift(quote.doc, quoted, computed, match.span(group)))
    return drifts


def rewrite(drifts: list[Drift], root: Path = ROOT) -> None:
    """Put the computed numbers in place of the drifted ones (same number of decimals)."""
    for doc in {d.doc for d in drifts}:
        path = root / doc
        text = path.read_text(encoding="utf-8")
        for drift in sorted((d for d in drifts if d.doc == doc), key=lambda d: -d.span[0]):
            text = text[: drift.span[0]] + drift.fixed() + text[drift.span[1] :]
        path.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    track()  # the files the runs use key the stored runs
    found = check()
    for drift in found:
        print(drift)
    print(coverage())
    STORE.save()
    print(STORE)
    if "--write" in sys.argv[1:]:
        rewrite(found)
        print(f"rewrote {len(found)} figures")
