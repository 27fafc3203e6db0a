"""The plot of a deployment search: fleet cost against TTFT p99, with the Pareto front.

Every configuration that found a fleet is one point (its fewest instances at the searched rate):
cost on x (the fleet's dollars per hour), TTFT p99 on y. The front joins the points no other
point beats on both (cheaper and at most as slow, or as cheap and faster); each of them is
labelled with its configuration and fleet size. Points take one colour per GPU, a filled marker
for colocated fleets and a hollow one for prefill/decode pools. The table's columns are those of
`sim.whatif.search_result` (`status`, `fleet_usd_per_hour`, `ttft_p99_s`, `pareto`, `gpu`,
`layout`, `configuration`, `instances`, `prefill`, `decode`).
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from sim.io.plot_units import latency_unit


def _fleet(row: pd.Series) -> str:
    if row["layout"] != "colocated" and pd.notna(row.get("prefill")):
        return f"{int(row['prefill'])}P+{int(row['decode'])}D"
    return f"x{int(row['instances'])}"


def pareto_figure(table: pd.DataFrame, *, title: str = "") -> Figure:
    """Fleet $/h against TTFT p99 of every configuration found, the front drawn and labelled."""
    fig = Figure(figsize=(10, 6), layout="constrained")
    ax = fig.subplots()
    found = table[table["status"] == "found"]
    scale, unit = latency_unit("ttft", found["ttft_p99_s"])
    found = found.assign(ttft_p99_s=found["ttft_p99_s"] * scale)
    gpus = list(dict.fromkeys(found["gpu"]))
    for i, gpu in enumerate(gpus):
        for colocated in (True, False):
            rows = found[(found["gpu"] == gpu) & ((found["layout"] == "colocated") == colocated)]
            if not len(rows):
                continue
            ax.scatter(
                rows["fleet_usd_per_hour"],
                rows["ttft_p99_s"],
                s=40,
                color=f"C{i}",
                facecolors=f"C{i}" if colocated else "none",
                label=f"{gpu}, {'colocated' if colocated else 'P/D'}",
                alpha=0.8,
            )
    front = found[found["pareto"]].sort_values("fleet_usd_per_hour")
    if len(front):
        ax.step(
            front["fleet_usd_per_hour"],
            front["ttft_p99_s"],
            where="post",
            color="0.3",
            lw=1.2,
            label="Pareto front",
        )
        for _, row in front.iterrows():
            text = f"{row['configuration']} {_fleet(row)}"
            ax.annotate(
                text,
                (row["fleet_usd_per_hour"], row["ttft_p99_s"]),
                fontsize=7,
                textcoords="offset points",
                xytext=(5, 4),
                color="0.2",
            )
    ax.set_xlabel("fleet cost ($/h, fewest instances meeting the SLOs)")
    ax.set_ylabel(f"TTFT p99 ({unit})")
    ax.set_title(title or "Cost against TTFT p99 of every configuration that meets the SLOs")
    ax.grid(True, alpha=0.3)
    if len(found):
        ax.legend(loc="upper right", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no configuration meets the SLOs", ha="center", transform=ax.transAxes)
    return fig
