"""docs/accuracy.md and the CI accuracy gate's sample, written by `calibration.fit_unit_costs`.

The document quotes leave-one-configuration-out errors (each configuration predicted by unit
costs fitted without it) beside the fit's own, per model family and GPU generation, per engine,
and their signs. The gate (`calibration/training/accuracy_gate.json`) is a fixed sample of
training configurations, the first of each engine and GPU in the file, at their lowest and
highest concurrency, with the errors the shipped unit costs give when simulated;
tests/calibration/test_accuracy_gate.py simulates them again and fails when one moves by more
than one point or their median by more than half a point.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pandas as pd

from calibration.published_events import CONFIG, simulated_errors

METRICS = (("tput_err", "throughput per GPU"), ("tpot_err", "mean TPOT"), ("ttft_err", "mean TTFT"))
GROUPINGS = (
    ("kind", "model class"),
    ("family_generation", "model family and GPU generation"),
    ("framework", "engine"),
    ("gpu", "GPU"),
)


def _table(frame: pd.DataFrame, by: str, label: str) -> list[str]:
    head = (
        f"| {label} | points | configurations | throughput/GPU median / worst | TPOT median "
        "/ worst | mean TTFT median / worst | throughput optimistic |"
    )
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|"]
    for name, g in frame.groupby(by, sort=True):
        lines.append("| " + " | ".join(error_cells(str(name), g)) + " |")
    return lines


def error_cells(name: str, g: pd.DataFrame) -> list[str]:
    """A group's cells: its name, points, configurations, median and worst |error| of
    throughput per GPU, TPOT and mean TTFT, and the share of optimistic throughput."""
    cells = [name, str(len(g)), str(g["config_id"].nunique())]
    for metric, _ in METRICS:
        a = g[metric].abs()
        cells.append(f"{a.median():.1f} % / {a.max():.1f} %")
    cells.append(f"{(g['tput_err'] > 0).mean() * 100:.0f} %")
    return cells


def _overall(frame: pd.DataFrame) -> dict[str, float]:
    return {m: float(frame[m].abs().median()) for m, _ in METRICS}


def spread_rows(points: pd.DataFrame) -> list[str]:
    """Markdown rows: the run-to-run spread of each statistic over repeated points."""
    keys = [*CONFIG, "conc"]
    out = []
    for column, label in (("tput_per_gpu", "throughput per GPU"), ("tpot_mean_s", "mean TPOT"),
                          ("ttft_mean_s", "mean TTFT")):
        g = points.groupby(keys)[column]
        spread = ((g.max() - g.min()) / g.median())[g.size() > 1].dropna() * 100
        out.append(f"| {label} | {len(spread)} | {spread.median():.1f} % | "
                   f"{spread.quantile(0.9):.1f} % |")
    return out


def pd_section(path: Path) -> list[str]:
    """docs/accuracy.md's section on the prefill/decode-disaggregated and MTP points, from
    `calibration/training/pd_judged.csv` (written by `python -m calibration.fit_unit_costs`), or
    nothing when that file is absent."""
    if not path.is_file():
        return []
    table = pd.read_csv(path)
    skipped = table[table["not_simulated"].notna()] if "not_simulated" in table else table[:0]
    done = table.drop(skipped.index)
    lines = [
        "## Prefill/decode-disaggregated and MTP deployments",
        "",
        "Every disaggregated or MTP row of the training file (Dynamo with TensorRT-LLM or SGLang",
        "on GB200 NVL72, SGLang on MI355X; some with DeepSeek-R1's MTP) mapped to a",
        "`disaggregation:` scenario (or one instance with `speculative:`) by",
        "`calibration/published_pd.py` and simulated as a user writes it. What the rows do not",
        "publish is stated there: the KV link, and MTP's draft tokens (each deployment's launch",
        "script: three for TensorRT-LLM, one for SGLang on MI355X) and acceptance (counted from",
        "the training rows' streamed chunks: first position 0.76 with TensorRT-LLM and 0.93 with",
        "SGLang, 0.5 after; about 2.3 tokens a step with three drafts). Dynamo's SGLang pools",
        "place the 32 redundant experts their recipe sets (so EP 48 holds DeepSeek-R1's 256),",
        "each data-parallel rank chunks its own prompts (SGLang divides its chunk over the",
        "ranks), and a point that ran cold waits the engine's fitted cold start, as above.",
        "Throughput per GPU counts every prefill and decode GPU; TTFT adds the engine's",
        "front-end time as above.",
        "",
        "The decode pools of the points without MTP enter the fit by their mean TPOT",
        "(`calibration/pd_fit.py`: the decode steps' counted events, linear about the unit costs",
        "they were counted at, counted twice: at the shipped costs, then at the first fit's).",
        "Each such configuration is judged here by a fit that left it out; MTP points, never",
        "fitted, by the whole fit. The last column is the same points with every disaggregated",
        "pool left out of the fit: what fitting on them moved.",
        "",
        "| group | points | configurations | throughput/GPU median / worst | TPOT median / worst "
        "| mean TTFT median / worst | throughput optimistic | no pools in the fit: "
        "throughput / TPOT median |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    done = done.assign(group=done["framework"] + done["mtp"].map({True: " + MTP", False: ""}))
    done = done.assign(config_id=pd.factorize(done["config"])[0])
    for name, g in [("all", done), *done.groupby("group", sort=True)]:
        cells = error_cells(str(name), g)
        if "tput_err_no_pd" in g:
            cells.append(f"{g['tput_err_no_pd'].abs().median():.1f} / "
                         f"{g['tpot_err_no_pd'].abs().median():.1f} %")  # fmt: skip
        else:
            cells.append("")
        lines.append("| " + " | ".join(cells) + " |")
    within = int(((done["tput_err"].abs() <= 15) & (done["tpot_err"].abs() <= 15)).sum())
    lines += [
        "",
        f"{within} of {len(done)} points are within 15 % in both throughput and TPOT.",
    ]
    reasons = skipped["not_simulated"].astype(str)
    memory = int(reasons.str.contains("does not fit").sum())
    if memory:
        lines.append(
            f"{memory} points are not simulated: their layout does not fit the catalog's memory "
            "(DeepSeek-R1 in fp8 on 4 GB200s with data-parallel attention, each rank holding "
            "the dense weights)."
        )
    if len(skipped) > memory:
        other = reasons[~reasons.str.contains("does not fit")].iloc[0]
        lines.append(f"{len(skipped) - memory} more are not simulated: {other}.")
    return [*lines, ""]


def write_accuracy_doc(
    path: Path,
    points: pd.DataFrame,
    fitted: pd.DataFrame,
    cv: pd.DataFrame,
    stats: dict[str, Any],
    costs: dict[str, float],
    frontend: dict[str, float],
    regime_rows: list[str] | None = None,
) -> None:
    """Write docs/accuracy.md from the fit's and the cross-validation's errors."""
    from sim.costs.step_events import PRIORS

    held = points.assign(**cv)
    own = points.assign(**fitted)
    cv_all, fit_all = _overall(held), _overall(own)
    lines = [
        "# Accuracy of the default step model",
        "",
        "Generated by `python -m calibration.fit_unit_costs` (do not edit by hand). The default",
        "step model (a scenario without `profile`, or `profile: events`; sim/costs/",
        "step_events.py) counts each step's kernels, collectives, bytes and FLOPs for the model,",
        "layout and engine, and prices them with unit costs (sim/costs/unit_costs.yaml) fitted on",
        f"{stats['points']} published closed-loop points in {stats['configs']} configurations",
        "(calibration/training/inferencex_train.csv: SemiAnalysis InferenceX, Apache-2.0; its",
        "README says how they were measured) and on "
        f"{stats.get('op_rows', 0)} op-level timings of the GPU alone",
        "(calibration/op_level.py: Vidur's H100 and A100 linear layers, this project's H200",
        "decode attention), and on the mean TPOT of "
        f"{stats.get('pd_points', 0)} prefill/decode-disaggregated points' decode pools in "
        f"{stats.get('pd_configs', 0)}",
        "configurations (calibration/pd_fit.py; their judge is the next section). MTP points",
        "are not in the fit (their acceptance is stated, not measured). Each row runs with the KV",
        "cache dtype its launch script set (`calibration.published_events.kv_dtype`: fp8 for",
        "Llama, TensorRT-LLM, ATOM and SGLang's DeepSeek-R1 on B200).",
        "",
        "**Every error below is a prediction of a configuration the fit did not see**: each",
        "configuration (model, GPU, engine, precision, layout, lengths; all its concurrencies) is",
        "left out in turn, the unit costs refitted on the rest, and its points simulated with",
        "those. The fit's own error is given beside the totals only. Errors are simulated /",
        'measured - 1; "optimistic" is simulated throughput above measured.',
        "",
        "| | throughput/GPU | mean TPOT | mean TTFT |",
        "|---|---:|---:|---:|",
        f"| median \\|error\\|, configuration left out | {cv_all['tput_err']:.1f} % | "
        f"{cv_all['tpot_err']:.1f} % | {cv_all['ttft_err']:.1f} % |",
        f"| median \\|error\\|, fit (for comparison) | {fit_all['tput_err']:.1f} % | "
        f"{fit_all['tpot_err']:.1f} % | {fit_all['ttft_err']:.1f} % |",
        "",
        f"Throughput optimistic at {(held['tput_err'] > 0).mean() * 100:.0f} % of points "
        f"(fit: {(own['tput_err'] > 0).mean() * 100:.0f} %).",
        "",
        "![measured vs simulated, configuration left out](accuracy_scatter.png)",
        "",
    ]
    lines += pd_section(path.parent.parent / "calibration/training/pd_judged.csv")
    if regime_rows:
        lines += [
            "## Whole regimes left out",
            "",
            "Harder than one configuration: every point of a regime is left out at once, the",
            "unit costs and front-end times refitted on the rest, and the regime predicted. A GPU",
            "generation left out takes its vendor's values (or the priors, when the vendor has no",
            "other generation in the fit); an engine left out takes the priors of its host time.",
            "The regime's disaggregated decode pools leave with it (Dynamo's and SGLang's own",
            "pools count as SGLang or TensorRT-LLM, GB200 as Blackwell, the decode pool's TP as",
            "the layout's), so that nothing of the regime reaches the fit.",
            "",
            "| left out | points | configurations | throughput/GPU median / worst | TPOT median "
            "/ worst | mean TTFT median / worst | throughput optimistic | dense tput / TPOT "
            "median | MoE tput / TPOT median |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
            *regime_rows,
            "",
        ]
    for by, label in GROUPINGS:
        lines += [f"## By {label} (configuration left out)", ""]
        lines += _table(held, by, label)
        lines.append("")
    cold = int(points["cold"].sum()) if "cold" in points else 0
    cold_costs = ", ".join(f"{k.split('@')[1]} {v:.0f} s" for k, v in sorted(costs.items())
                           if k.startswith("cold_start_s@"))
    lines += [
        "## TTFT and cold starts",
        "",
        "TTFT is reported apart and not used to fit the step costs. The benchmark runs without",
        f"warm-up: {cold} points show a cold start (p99 TTFT of 20 s or more and at least 10x",
        "the median: the first wave of requests waited for the engine's first-use compilation).",
        "Those points are simulated with `engine.cold_start_s` (off by default), fitted per",
        f"engine from their duration ({cold_costs}); it adds to their run's duration and to",
        "the first wave's TTFT, never to TPOT. Measured run-to-run spread, (max - min) / median",
        "over repeated runs of one configuration and concurrency:",
        "",
        "| statistic | repeated points | median spread | p90 spread |",
        "|---|---:|---:|---:|",
    ]
    lines += spread_rows(points)
    lines += [
        "",
        "Each engine's front-end time (HTTP, tokenization, first streamed chunk) is the median",
        "of measured minus simulated mean TTFT over the fitted points, added to the simulated",
        "TTFT above:",
        "",
        "| engine | front-end s |",
        "|---|---:|",
    ]
    lines += [f"| {e} | {v:.3f} |" for e, v in sorted(frontend.items())]
    lines += [
        "",
        "## Unit costs",
        "",
        "Fitted values with their priors (the value each is drawn towards, with a ridge of",
        f"{stats['ridge']} on log(value / prior); sources in sim/costs/step_events.py `PRIORS`).",
        "A unit cost no training point uses keeps its prior.",
        "",
        "| unit cost | fitted | prior |",
        "|---|---:|---:|",
    ]
    for key, value in sorted(costs.items()):
        lines.append(f"| `{key}` | {value:.4g} | {PRIORS[key.split('@')[0]][0]:.4g} |")
    lines += [
        "",
        "## What is not modelled",
        "",
        "- Cold starts beyond one stall: a point that ran cold waits the engine's fitted",
        "  `cold_start_s` before its first step; how the compilation spreads over the first",
        "  steps is not modelled.",
        "- Server-side queueing behind a seat or KV limit the row does not publish (mean TTFT of",
        "  tens of seconds at a few points).",
        "- Disaggregated points' throughput and TTFT are not fitted: they depend on the prefill",
        "  pool and the KV transfer through the clients' loop (only the decode pool's TPOT is a",
        "  linear row); MTP speculation is judged, never fitted.",
        "",
    ]
    path.write_text("\n".join(lines))


def gate_sample(points: pd.DataFrame, per_config: int = 2) -> pd.DataFrame:
    """The gate's points: the first configuration of each (engine, GPU) in file order, at its
    lowest and highest concurrency."""
    firsts = points.drop_duplicates(["framework", "gpu"])["config_id"].tolist()
    chosen = []
    for config in firsts:
        g = points[points["config_id"] == config].sort_values("conc")
        picked = g.iloc[[0, -1]] if per_config > 1 and len(g) > 1 else g.iloc[[0]]
        chosen.append(picked)
    return pd.concat(chosen)


def write_gate(path: Path, points: pd.DataFrame) -> None:
    """Simulate the gate's sample with the shipped unit costs and record its errors."""
    sample = gate_sample(points)
    records = []
    for row in sample.itertuples():
        errs = simulated_errors(row)
        records.append(
            {
                "row_index": int(row.row_index),
                "config": str(row.config),
                "conc": int(row.conc),
                "tput_err": round(errs["tput_err"], 3),
                "tpot_err": round(errs["tpot_err"], 3),
            }
        )
    doc = {
        "generator": "python -m calibration.fit_unit_costs",
        "data": "calibration/training/inferencex_train.csv",
        "tolerance_points": 1.0,
        "median_tolerance_points": 0.5,
        "median_abs_tput_err": round(statistics.median(abs(r["tput_err"]) for r in records), 3),
        "median_abs_tpot_err": round(statistics.median(abs(r["tpot_err"]) for r in records), 3),
        "points": records,
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")
