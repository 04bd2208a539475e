"""The forest plot of a comparison: per operation (and total) the ratio B / A with its confidence interval,
grouped by pair of sides and sorted by ratio within each, the noise band shaded, coloured by verdict; as a
matplotlib figure (PNG) and as a self-contained HTML page (the figure as inline SVG above the table) that
MLflow's artifact view opens."""

from __future__ import annotations

import html
import io
import math

import pandas as pd

from dlbench.analysis.comparison.change import TOTAL, is_total

COLOURS = {"slower": "#c0392b", "faster": "#1e8449", "same": "#7f8c8d", "unsure": "#d68910", "moved": "#7d3c98"}
#: beyond this many operations the plot shows the most changed ones (the table keeps all)
MAX_ROWS = 60


def shown_rows(changes: pd.DataFrame, limit: int = MAX_ROWS) -> pd.DataFrame:
    """The rows drawn, pair by pair (``pair``: one group per pair of sides, in their order): each group's
    total, then its operations sorted by ratio; the operations farthest from 1 over all pairs up to ``limit``."""
    finite = changes.dropna(subset=["ratio"])
    if "pair" not in finite.columns:
        finite = finite.assign(pair="")
    ops = finite[~is_total(finite["operation"])]
    if len(ops) > limit:
        distance = ops["ratio"].clip(lower=1e-12).map(lambda r: abs(math.log(r)))
        ops = ops.loc[distance.sort_values(ascending=False).index[:limit]]
    groups = []
    for pair in dict.fromkeys(finite["pair"]):
        mine = ops[ops["pair"] == pair].sort_values("ratio")
        total = finite[(finite["pair"] == pair) & is_total(finite["operation"])]
        groups.append(pd.concat([total, mine]))
    return pd.concat(groups, ignore_index=True) if groups else finite.iloc[0:0]


def forest_figure(changes: pd.DataFrame, threshold: float, title: str):
    """The figure: one row per operation, pair by pair under the pair's heading (each pair's total at its top,
    bold), ratio with its interval, the band [1 / (1 + threshold), 1 + threshold] shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = shown_rows(changes)
    height = max(2.5, 0.28 * len(rows) + 1.4)
    fig, ax = plt.subplots(figsize=(10.0, height))
    ax.axvspan(1.0 / (1.0 + threshold), 1.0 + threshold, color="#d5d8dc", alpha=0.6,
               label=f"noise threshold ±{threshold:.0%}")  # fmt: skip
    ax.axvline(1.0, color="black", linewidth=0.8)
    for y, row in enumerate(rows.itertuples(index=False)):
        colour = COLOURS.get(row.verdict, "black")
        low, high = row.low, row.high
        if low == low and high == high:
            ax.plot([low, high], [y, y], color=colour, linewidth=2)
        ax.plot([row.ratio], [y], marker="D" if row.operation.endswith(TOTAL) else "o", color=colour)
    several = rows["pair"].nunique() > 1
    for start in rows.index[rows["pair"] != rows["pair"].shift()]:  # a line and a heading above each pair
        if several:
            ax.axhline(start - 0.5, color="#555555", linewidth=0.6)
            ax.annotate(str(rows.at[start, "pair"]), (0.0, start - 0.45), xycoords=("axes fraction", "data"),
                        fontsize=7, fontweight="bold", va="bottom")  # fmt: skip
    ax.set_ylim(len(rows) - 0.5, -1.0 if several else -0.5)  # the first pair's heading inside the axes
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([_label(r, several) for r in rows.itertuples(index=False)], fontsize=7)
    for tick, operation in zip(ax.get_yticklabels(), rows["operation"], strict=True):
        if operation.endswith(TOTAL):
            tick.set_fontweight("bold")
    ax.set_xlabel("B / A (ratio of medians, 95% interval); > 1: B slower")
    ax.set_title(title, fontsize=9)
    handles = [plt.Line2D([], [], color=c, marker="o", label=v) for v, c in COLOURS.items()]
    ax.legend(handles=[*ax.get_legend_handles_labels()[0], *handles], fontsize=7, loc="upper left",
              bbox_to_anchor=(1.01, 1.0))  # fmt: skip
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def _label(row, several: bool) -> str:
    """The row's operation (without its pair's label where the pair's heading says it) and verdict."""
    name = getattr(row, "key", "") if several else row.operation
    return f"{name or row.operation} [{row.verdict}]"


def forest_html(changes: pd.DataFrame, threshold: float, title: str, summary: str) -> str:
    """A page with the figure as inline SVG, the summary, and the table of changes."""
    import matplotlib
    import matplotlib.pyplot as plt

    fig = forest_figure(changes, threshold, title)
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # labels stay text: found and copied in the browser
        fig.savefig(buffer, format="svg")
    plt.close(fig)
    svg = buffer.getvalue()
    svg = svg[svg.find("<svg") :]  # the XML prologue does not belong inside HTML
    svg = svg.replace("<svg ", '<svg style="max-width:100%;height:auto" ', 1)  # fits the view (it has a viewBox)
    table = changes.to_html(index=False, float_format=lambda v: f"{v:.4g}", border=0, classes="changes")
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>"
        f"{html.escape(title)}</title><style>body{{font-family:sans-serif;margin:1em}}"
        "table.changes{border-collapse:collapse;font-size:12px}table.changes td,table.changes th"
        "{padding:2px 8px;border-bottom:1px solid #ddd}</style></head><body>"
        f"<h3>{html.escape(title)}</h3><p>{html.escape(summary)}</p>{svg}{table}</body></html>"
    )
