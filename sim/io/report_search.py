"""The report page of a deployment search: one self-contained `report.html`.

Built from what the search folder holds (`search.json`: the question, the counts and what was
done; `search.csv`: the table; `pareto.png`), like the run report: the CSS is inline, the plot is
inlined as base64 PNG, nothing refers to the network. Sections: the question, the answer, the
ranked configurations, the cost-against-TTFT front, and every configuration set aside or pruned
with the reason.
"""

from __future__ import annotations

import base64
import html
import math
from typing import Any

import pandas as pd

from sim.io.report import CSS

# (column, heading, scale, format) of the ranked table
RANKED = (
    ("rank", "#", 1.0, "{:.0f}"),
    ("configuration", "configuration", 1.0, "{}"),
    ("instances", "instances", 1.0, "{:.0f}"),
    ("num_gpus", "GPUs", 1.0, "{:.0f}"),
    ("fleet_usd_per_hour", "$/h", 1.0, "{:,.2f}"),
    ("usd_per_million_output_tokens", "$ per 1M output tok", 1.0, "{:.3f}"),
    ("energy_per_output_token_j", "J per output tok", 1.0, "{:.3f}"),
    ("slo_attainment", "SLO attainment %", 100.0, "{:.1f}"),
    ("goodput_rps", "goodput req/s", 1.0, "{:.2f}"),
    ("ttft_p99_s", "TTFT p99 ms", 1e3, "{:.0f}"),
    ("tpot_p99_s", "TPOT p99 ms", 1e3, "{:.1f}"),
    ("pareto", "on the front", 1.0, "{}"),
)
# over a band (`search --robust X`): the nominal fleet, and whether it flips within the band
BAND = (
    ("nominal_instances", "nominal instances", 1.0, "{:.0f}"),
    ("nominal_fleet_usd_per_hour", "nominal $/h", 1.0, "{:,.2f}"),
    ("flips", "flips in the band", 1.0, "{}"),
)


def _esc(value: Any) -> str:
    return html.escape(str(value))


def _cell(value: Any, scale: float, fmt: str) -> str:
    if value is pd.NA:
        return "-"
    if isinstance(value, (bool, str)) or fmt == "{}":
        return _esc("yes" if value is True else "" if value is False else value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "-"
    return "-" if math.isnan(number) else _esc(fmt.format(number * scale))


def fleet_text(row: pd.Series | dict[str, Any]) -> str:
    """`5` instances, or `2P+4D` for prefill/decode pools."""
    prefill = row.get("prefill")
    if prefill is not None and not pd.isna(prefill):
        return f"{int(prefill)}P+{int(row['decode'])}D"
    return f"{int(row['instances'])}"


def _ranked(table: pd.DataFrame) -> str:
    found = table[table["status"] == "found"]
    if not len(found):
        return "<p>No configuration of the space meets the SLOs at this rate.</p>"
    columns = RANKED + (BAND if "flips" in table.columns else ())
    head = "".join(f"<th>{_esc(h)}</th>" for _, h, _, _ in columns)
    body = []
    for _, row in found.iterrows():
        cells = []
        for column, _, scale, fmt in columns:
            value = fleet_text(row) if column == "instances" else row.get(column)
            cells.append(f"<td>{_cell(value, scale, '{}' if column == 'instances' else fmt)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _others(table: pd.DataFrame) -> str:
    rest = table[table["status"] != "found"]
    if not len(rest):
        return "<p>Every configuration of the space found a fleet.</p>"
    rows = "".join(
        f"<tr><td>{_esc(r['configuration'])}</td><td>{_esc(r['status'])}</td>"
        f"<td>{_esc(r['note'])}</td></tr>"
        for _, r in rest.iterrows()
    )
    return (f"<details><summary>{len(rest)} configurations</summary><table><thead><tr>"
            f"<th>configuration</th><th>status</th><th>why</th></tr></thead><tbody>{rows}"
            "</tbody></table></details>")  # fmt: skip


def _band(table: pd.DataFrame, question: dict[str, Any]) -> str:
    """Over a band: the nominal choice, what robustness costs, and the flips."""
    percent = question.get("robust_percent")
    if percent is None or "nominal_rank" not in table.columns:
        return ""
    nominal = table[table["nominal_rank"] == 1]
    found = table[table["status"] == "found"]
    flipped = list(table.loc[table["flips"].fillna(False).astype(bool), "configuration"])
    text = "<p>"
    if len(found):
        text += f"The answer meets the SLOs over the ±{percent:g} % band on the GPU step time. "
    if len(nominal):
        row = nominal.iloc[0]
        text += (
            f"<b>Nominal answer:</b> {_esc(row['configuration'])}, "
            f"{int(row['nominal_instances'])} instances, "
            f"${row['nominal_fleet_usd_per_hour']:,.2f}/h"
        )
        if len(found) and row["nominal_fleet_usd_per_hour"] > 0:
            extra = found.iloc[0]["fleet_usd_per_hour"] / row["nominal_fleet_usd_per_hour"] - 1
            text += f"; robustness costs {100 * extra:+.1f} %"
        text += ". "
    text += f"{len(flipped)} configuration(s) whose nominal fleet flips within the band"
    return text + (f": {_esc('; '.join(flipped))}.</p>" if flipped else ".</p>")


def render_search_report(
    table: pd.DataFrame, question: dict[str, Any], described: str, plot_png: bytes | None
) -> str:
    """The HTML text of a search's report page."""
    name = str(question.get("scenario", "search"))
    slos = ", ".join(str(s) for s in question.get("slos", []))
    found = table[table["status"] == "found"]
    if len(found):
        best = found.iloc[0]
        answer = (
            f"<p><b>Answer:</b> {_esc(best['configuration'])}, {_esc(fleet_text(best))} "
            f"instances ({int(best['num_gpus'])} GPUs), ${best['fleet_usd_per_hour']:,.2f}/h, "
            f"${best['usd_per_million_output_tokens']:.3f} per million output tokens.</p>"
        )
    else:
        answer = "<p><b>Answer:</b> no configuration of the space meets the SLOs.</p>"
    answer += _band(table, question)
    plot = '<p class="muted">No plot.</p>'
    if plot_png is not None:
        data = base64.b64encode(plot_png).decode("ascii")
        plot = (
            f'<figure><img alt="cost against TTFT p99" src="data:image/png;base64,{data}"></figure>'
        )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>batchsim search: {_esc(name)}</title><style>{CSS}</style></head>
<body>
<h1>batchsim search: {_esc(name)}</h1>
<section id="question"><h2>Question</h2>
<p>The {"cheapest" if question.get("objective") == "cost" else "least energy per token"}
fleet serving the {_esc(question.get("workload"))} workload of {_esc(question.get("file"))} at
{float(question.get("rate_rps", math.nan)):.4g} requests/s with {_esc(slos)}, over the space
{_esc(question.get("space"))}.</p>
{answer}<p class="muted">{_esc(described)}</p></section>
<section id="ranked"><h2>Configurations that meet the SLOs, best first</h2>{_ranked(table)}
</section>
<section id="pareto"><h2>Cost against TTFT p99</h2>{plot}</section>
<section id="others"><h2>Set aside, pruned or without a fleet</h2>{_others(table)}</section>
</body></html>
"""
