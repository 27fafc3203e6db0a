"""The fit plot: measured step times (markers) against the fitted profile (lines).

Three panels: decode step time against batch size B, one colour per context length L; prefill
step time against prompt tokens, one colour per number of prompts; and every point's fitted
against measured time (mixed steps included) on log axes with the identity line, which shows the
worst misfits whatever their kind. Built with matplotlib's Figure API, never pyplot, like
`sim.io.plots`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from calibration.fit import predict
from calibration.raw import StepTable
from sim.costs.profile import Profile


def _subset(table: StepTable, rows: np.ndarray) -> StepTable:
    return table.select(rows)


def fit_figure(table: StepTable, profile: Profile) -> Figure:
    fig = Figure(figsize=(15, 4.5), layout="constrained")
    decode_ax, prefill_ax, parity_ax = fig.subplots(1, 3)
    c = profile.coefficients
    decode = table.num_prefill_tokens == 0
    contexts = np.unique(table.context_tokens_per_seq[decode])
    colours = [f"C{i % 10}" for i in range(len(contexts))]
    for context, colour in zip(contexts, colours, strict=True):
        rows = _subset(table, decode & (table.context_tokens_per_seq == context))
        order = np.argsort(rows.num_seqs)
        decode_ax.plot(rows.num_seqs[order], rows.step_s[order] * 1e3, "o", color=colour)
        decode_ax.plot(
            rows.num_seqs[order],
            predict(c, rows)[order] * 1e3,
            "-",
            color=colour,
            label=f"L={context:g}",
        )
    decode_ax.set(xscale="log", xlabel="sequences B", ylabel="step ms", title="decode")
    if len(contexts):
        decode_ax.legend(fontsize="small", ncol=2)
    prefill = (table.num_prefill_tokens > 0) & (table.num_prefill_tokens == table.num_tokens)
    for i, seqs in enumerate(np.unique(table.num_seqs[prefill])):
        rows = _subset(table, prefill & (table.num_seqs == seqs))
        order = np.argsort(rows.num_tokens)
        colour = f"C{i % 10}"
        prefill_ax.plot(rows.num_tokens[order], rows.step_s[order] * 1e3, "o", color=colour)
        prefill_ax.plot(
            rows.num_tokens[order],
            predict(c, rows)[order] * 1e3,
            "-",
            color=colour,
            label=f"{seqs:g} prompt(s)",
        )
    prefill_ax.set(
        xscale="log", yscale="log", xlabel="prompt tokens", ylabel="step ms", title="prefill"
    )
    if prefill.any():
        prefill_ax.legend(fontsize="small")
    fitted = predict(c, table) * 1e3
    measured = table.step_s * 1e3
    for kind, marker in (("decode", "o"), ("prefill", "s"), ("mixed", "^")):
        of_kind = np.array([k == kind for k in table.kind])
        if of_kind.any():
            parity_ax.plot(measured[of_kind], fitted[of_kind], marker, label=kind, alpha=0.7)
    low, high = float(min(measured.min(), fitted.min())), float(max(measured.max(), fitted.max()))
    parity_ax.plot([low, high], [low, high], "k--", linewidth=0.8)
    parity_ax.set(
        xscale="log",
        yscale="log",
        xlabel="measured ms",
        ylabel="fitted ms",
        title=f"all points ({profile.model_form})",
    )
    parity_ax.legend(fontsize="small")
    fig.suptitle(profile.name)
    return fig


def plot_fit(table: StepTable, profile: Profile, path: Path) -> Path:
    # a modest dpi keeps the committed PNGs small
    fit_figure(table, profile).savefig(path, dpi=80)
    return path
