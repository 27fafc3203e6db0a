"""The run report: one self-contained `report.html` built from a results folder.

The report is made from the files of the folder only (`summary.json`, `scenario.yaml`, the PNG
plots), never from a live `Results`, so `batchsim report results/<name>` rebuilds exactly what
`batchsim run` wrote, and a folder copied elsewhere still rebuilds. Sections: the curated summary
table (the terminal table's rows, variants as columns; with KV tiers below the GPU, their hit
rates, traffic and load wait, and a note that the fleet's price includes their rent), the plots,
every metric per variant, the step-cost profile of each variant with its provenance, and the
resolved scenario.

Self-contained: images are inlined as base64 PNG, the CSS is inline, nothing refers to another
file or to the network (the only link, to `trace.json` when present, is relative), so the file
can be mailed or archived on its own. The file is written to a temporary name and renamed, and
only into a folder batchsim wrote (`sim.io.destination.is_ours`).
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from sim.errors import ScenarioError
from sim.inputs.strict_yaml import load_yaml
from sim.inputs.text import read_text
from sim.io.destination import MARKER, is_ours
from sim.metrics.side_by_side import has_tiers, summary_html

# (file stem, heading, caption) of the plots embedded when present, in order
PLOTS = (
    ("latency_cdf", "Latency distributions",
     "Empirical CDFs of time to first token, time per output token and end-to-end latency."),
    ("slots", "Batch slots over time",
     "Which request held each batch slot of instance 0 (hatched: padding of static batches)."),
    ("timeline", "Batch size, queue length and KV use over time",
     "Time-weighted means per bin, summed over the instances of a variant."),
    ("tasks", "Tasks",
     "Agents' tasks or rollouts: the CDF of task durations (first call's arrival to last "
     "answer) and, for rollouts, each wave's makespan with its median trajectory marked."),
    ("over_time", "Load, fleet, latency and rent per window",
     "Per window of timeline.csv: arrival rate and completions; instances serving (solid) and "
     "billed (dashed) with scaling events; TTFT p90 of each window's arrivals against the "
     "target; their SLO attainment; the fleet's rent in dollars per hour. A fleet or a rent "
     "that never changes has no panel."),
)  # fmt: skip
SESSION_FILE = "session.json"  # what `batchsim serve` served: scenario, variant, model, speed
# the timeline's caption when a variant has KV tiers (its fourth panel)
TIERS_CAPTION = (
    " The last panel: blocks held by each KV tier below the GPU (solid DRAM, dashed NVMe, "
    "dotted the shared remote store, counted once)."
)
TIERS_NOTE = (
    '<p class="muted">KV tiers below the GPU: prefix hit % by where the tokens were found (they '
    'add up to "prefix hit %"), traffic to and from each tier, and the seconds steps waited on '
    "loads. Fleet $/h and $ per 1M output tokens include the tiers' "
    "rent (host DRAM and NVMe on every instance, the shared store once; an unbounded tier "
    "costs nothing).</p>"
)

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 2em auto;
       max-width: 1400px; padding: 0 1.5em; color: #222; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.8em 0; }
th, td { padding: 0.25em 0.8em; border-bottom: 1px solid #eee; text-align: right; }
th:first-child, td:first-child { text-align: left; }
thead th { background: #f4f4f4; }
figure { margin: 1em 0 2em; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.95em; }
pre { background: #f8f8f8; padding: 1em; overflow-x: auto; font-size: 12px; }
.muted { color: #666; } .warn { color: #8a4b00; font-weight: 600; }
"""


def _esc(value: Any) -> str:
    return html.escape(str(value))


def _format(value: Any, scale: float, fmt: str) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "-"
    return "-" if math.isnan(number) else fmt.format(number * scale)


def _summary_table(variants: dict[str, dict[str, Any]]) -> str:
    frame = pd.DataFrame.from_dict(variants, orient="index")
    return summary_html(frame) + (TIERS_NOTE if has_tiers(frame) else "")


def _all_metrics(variants: dict[str, dict[str, Any]]) -> str:
    keys: list[str] = []
    for metrics in variants.values():
        keys.extend(k for k in metrics if k not in keys)
    head = "".join(f"<th>{_esc(v)}</th>" for v in variants)
    rows = []
    for key in keys:
        cells = "".join(f"<td>{_format(m.get(key), 1.0, '{:.6g}')}</td>" for m in variants.values())
        rows.append(f"<tr><td>{_esc(key)}</td>{cells}</tr>")
    return (f"<details><summary>Every metric ({len(keys)})</summary><table><thead><tr>"
            f"<th>metric</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
            "</details>")  # fmt: skip


def _plots(folder: Path, tiers: bool) -> str:
    parts = []
    for stem, heading, caption in PLOTS:
        path = folder / f"{stem}.png"
        if not path.is_file():
            continue
        if stem == "timeline" and tiers:
            caption += TIERS_CAPTION
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        parts.append(f'<figure id="plot-{stem}"><h3>{_esc(heading)}</h3>'
                     f'<img alt="{_esc(heading)}" src="data:image/png;base64,{data}">'
                     f"<figcaption>{_esc(caption)}</figcaption></figure>")  # fmt: skip
    if not parts:
        return '<p class="muted">No plots in this folder (run without --no-plots).</p>'
    return "\n".join(parts)


def _variants(scenario: dict[str, Any]) -> dict[str, Any]:
    found = scenario.get("variants")
    return found if isinstance(found, dict) else {}


def _profiles(scenario: dict[str, Any]) -> str:
    """The profile of each variant; variants sharing one profile are listed together."""
    groups: dict[str, list[str]] = {}
    texts: dict[str, str] = {}
    for name, spec in _variants(scenario).items():
        profile = spec.get("profile") if isinstance(spec, dict) else None
        if not isinstance(profile, dict):
            continue
        text = yaml.safe_dump(profile, sort_keys=False)
        groups.setdefault(text, []).append(str(name))
        texts[text] = ", ".join(
            f"{k}: {profile[k]}" for k in ("name", "source", "model_form") if k in profile
        )
    if not groups:
        return '<p class="muted">No profile recorded in scenario.yaml.</p>'
    parts = []
    for text, names in groups.items():
        parts.append(f"<h3>{_esc(', '.join(names))}</h3><p>{_esc(texts[text])}</p>"
                     f"<pre>{_esc(text)}</pre>")  # fmt: skip
    return "\n".join(parts)


def _read_folder(folder: Path) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """(summary.json document, scenario.yaml text, its mapping), each checked for its shape: a
    folder that is not a complete results folder is a ScenarioError naming the file."""
    summary_path = folder / "summary.json"
    if not folder.exists():
        raise ScenarioError("no such folder; expected a results folder", file=str(folder))
    if not folder.is_dir():
        raise ScenarioError("is a file; expected a results folder", file=str(folder))
    if not summary_path.is_file():
        raise ScenarioError("not a results folder (no summary.json)", file=str(folder))
    text = read_text(summary_path, "summary file")
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ScenarioError(f"not valid JSON: {exc}", file=str(summary_path)) from None
    except RecursionError:
        raise ScenarioError("not valid JSON: nested too deeply", file=str(summary_path)) from None
    variants = document.get("variants") if isinstance(document, dict) else None
    if not isinstance(variants, dict) or not all(isinstance(v, dict) for v in variants.values()):
        raise ScenarioError(
            'not a batchsim summary: expected {"variants": {name: {metric: value}}}',
            file=str(summary_path),
        )
    scenario_path = folder / "scenario.yaml"
    scenario_text = read_text(scenario_path, "scenario file")
    scenario = load_yaml(scenario_text, str(scenario_path))
    if not isinstance(scenario, dict):
        raise ScenarioError("expected the resolved scenario mapping", file=str(scenario_path))
    return document, scenario_text, scenario


REPLAY_PLOTS = (
    ("replay_scatter", "Per request: simulated against measured",
     "Log axes; the dashed diagonal is perfect agreement."),
    ("replay_cdf", "Distributions: measured (black) and simulated",
     "Empirical CDFs over the requests both sides completed."),
)  # fmt: skip


def _comparison(folder: Path) -> str:
    """The "Measured vs simulated" section of a replay's folder (empty for other folders)."""
    path = folder / "comparison.json"
    if not path.is_file():
        return ""
    doc = json.loads(read_text(path, "comparison"))
    measured = doc.get("measured", {})
    parts = [
        '<section id="comparison"><h2>Measured vs simulated</h2>',
        f"<p>Measured run: {_esc(measured.get('file', ''))} ({_esc(measured.get('format', ''))}"
        f", {_esc(measured.get('requests', ''))} requests), replayed with its exact arrivals "
        "and lengths. Error = simulated / measured - 1 (positive: the simulation is slower)."
        "</p>",
    ]
    if doc.get("engine_from_log"):
        parts.append(f"<p>From the engine log: {_esc(', '.join(doc['engine_from_log']))}.</p>")
    for name, variant in doc.get("variants", {}).items():
        rows = []
        for metric, stats in variant["distributions"].items():
            latency = metric in ("ttft", "tpot", "itl", "e2e")
            for stat, cell in stats.items():
                label = f"{metric} {stat} (ms)" if latency else metric
                scale = 1000.0 if latency else 1.0
                err = cell["error_pct"]
                rows.append(
                    f"<tr><td>{_esc(label)}</td><td>{_format(cell['measured'], scale, '{:.1f}')}"
                    f"</td><td>{_format(cell['simulated'], scale, '{:.1f}')}</td>"
                    f"<td>{'' if err is None else f'{err:+.1f}%'}</td></tr>"
                )
        agreement = "".join(
            f"<tr><td>{_esc(m)}</td><td>{_format(a['median_ape_pct'], 1.0, '{:.1f}')}%</td>"
            f"<td>{_format(a['bias_pct'], 1.0, '{:+.1f}')}%</td>"
            f"<td>{_format(a['pearson_r'], 1.0, '{:.3f}')}</td><td>{a['n']}</td></tr>"
            for m, a in variant["per_request"].items()
        )
        counts = variant["counts"]
        left = counts["measured_requests"] - counts["compared_requests"]
        note = ""
        if left:
            reasons = ", ".join(f"{k}: {v}" for k, v in counts["rejected_reasons"].items())
            rejected = counts["rejected_by_simulator"]
            note = (f"<p>Left out of the comparison: {left} requests ({rejected} "
                    f"rejected by the simulator{': ' + _esc(reasons) if reasons else ''}; "
                    f"{counts['unfinished_in_simulation']} unfinished).</p>")  # fmt: skip
        parts.append(
            f"<h3>{_esc(name)}</h3><table><thead><tr><th>metric</th><th>measured</th>"
            f"<th>simulated</th><th>error</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
            "<table><thead><tr><th>per request</th><th>median |error|</th><th>bias</th>"
            f"<th>Pearson r</th><th>n</th></tr></thead><tbody>{agreement}</tbody></table>{note}"
        )
    for stem, heading, caption in REPLAY_PLOTS:
        png = folder / f"{stem}.png"
        if png.is_file():
            data = base64.b64encode(png.read_bytes()).decode("ascii")
            parts.append(f'<figure id="plot-{stem}"><h3>{_esc(heading)}</h3>'
                         f'<img alt="{_esc(heading)}" src="data:image/png;base64,{data}">'
                         f"<figcaption>{_esc(caption)}</figcaption></figure>")  # fmt: skip
    parts.append("</section>")
    return "\n".join(parts)


def _json(path: Path, what: str) -> dict[str, Any] | None:
    """The mapping in `path`, or None when the folder has no such file."""
    if not path.is_file():
        return None
    try:
        doc = json.loads(read_text(path, what))
    except ValueError as exc:
        raise ScenarioError(f"not valid JSON: {exc}", file=str(path)) from None
    if not isinstance(doc, dict):
        raise ScenarioError("expected a JSON object", file=str(path))
    return doc


def _header(folder: Path, name: str, variants: dict[str, Any], scenario: dict[str, Any]) -> str:
    """The report's title and the lines under it: what the folder is (a run of the scenario, a
    replay of a measured run against it, a serve session of one of its variants)."""
    replay = _json(folder / "comparison.json", "comparison")
    session = _json(folder / SESSION_FILE, "serve session")
    listed = f"{len(variants)} variant(s): {_esc(', '.join(variants))}."
    if replay is not None:
        measured = replay.get("measured", {})
        file = Path(str(measured.get("file", ""))).name
        clients = replay.get("replayed_by_clients")
        sent = (f"sent by {clients} closed-loop client(s), as the benchmark sent them"
                if clients else "at their measured arrivals")
        notes = "".join(f'<p class="{kind}">{_esc(replay[key])}</p>'
                        for key, kind in (("load_note", "muted"), ("window_note", "warn"))
                        if replay.get(key))  # fmt: skip
        return (f"<h1>batchsim report: replay of {_esc(file)} against {_esc(name)}</h1>"
                f"<p>The measured run {_esc(file)} ({_esc(measured.get('format', ''))}, "
                f"{_esc(measured.get('requests', ''))} requests) replayed through the scenario "
                f"{_esc(name)}: its exact requests, {sent}.</p>{notes}"
                f'<p class="muted">{listed} Simulated, each against the measurement.</p>')
    if session is not None:
        variant = str(session.get("variant", ""))
        return (f"<h1>batchsim report: serve session of {_esc(name)} variant "
                f"{_esc(variant)}</h1><p>The requests clients sent to <code>batchsim serve"
                f"</code> (model {_esc(session.get('model', ''))}, speed "
                f"{_esc(session.get('speed', ''))}), simulated live by variant {_esc(variant)} "
                f"of the scenario {_esc(name)}.</p>")  # fmt: skip
    description = ""
    first: Any = next(iter(_variants(scenario).values()), {})
    if isinstance(first, dict) and first.get("description"):
        description = f"<p>{_esc(first['description'])}</p>"
    return (f"<h1>batchsim report: {_esc(name)}</h1>{description}<p class=\"muted\">{listed} "
            "Simulated; every variant ran on the same requests.</p>")


def render_report(folder: Path) -> str:
    """The HTML text of the report of results folder `folder`."""
    folder = Path(folder)
    document, scenario_text, scenario = _read_folder(folder)
    variants: dict[str, dict[str, Any]] = document["variants"]
    tiers = has_tiers(pd.DataFrame.from_dict(variants, orient="index"))
    name = str(document.get("scenario", folder.name))
    trace = ""
    if (folder / "trace.json").is_file():
        trace = ('<p>Timeline trace: <a href="trace.json">trace.json</a> (open it in Perfetto '
                 "or chrome://tracing).</p>")  # fmt: skip
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>batchsim report: {_esc(name)}</title><style>{CSS}</style></head>
<body>
{_header(folder, name, variants, scenario)}{trace}
<section id="summary"><h2>Summary</h2>{_summary_table(variants)}{_all_metrics(variants)}
</section>
{_comparison(folder)}<section id="plots"><h2>Plots</h2>{_plots(folder, tiers)}</section>
<section id="profile"><h2>Step-cost profile and provenance</h2>{_profiles(scenario)}</section>
<section id="scenario"><h2>Resolved scenario</h2>
<details><summary>scenario.yaml ({len(scenario_text.splitlines())} lines)</summary>
<pre>{_esc(scenario_text)}</pre></details></section>
</body></html>
"""


def write_report(folder: Path) -> Path:
    """Write `folder/report.html` (temporary file, then rename); return its path."""
    folder = Path(folder)
    path = folder / "report.html"
    text = render_report(folder)  # checks the folder before anything is written into it
    if not is_ours(folder):
        raise ScenarioError(
            f"not written by batchsim (no {MARKER} marker): its report.html is not replaced",
            file=str(folder),
        )
    tmp = folder / f".report.html.tmp-{os.getpid()}"
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
