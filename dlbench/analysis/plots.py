"""Figures of evaluations, rooflines and comparisons (matplotlib, Agg backend); each returns a Figure."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from dlbench.analysis.marks import HOLLOW_MEANING, OK

#: Line styles and markers taken in turn after the ten colours, so no two series of one legend look alike
LINE_STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")


def series_styles(n: int) -> list[tuple[str, str, str]]:
    """(colour, marker, line style) for ``n`` series, no two alike: the ten default colours, then each again
    with the next marker and line style."""
    return [(f"C{i % 10}", MARKERS[(i // 10) % len(MARKERS)], LINE_STYLES[(i // 10) % len(LINE_STYLES)])
            for i in range(n)]  # fmt: skip


def draw_series(ax, xs, ys, marked, style: tuple[str, str, str], label: str, markersize: float = 5) -> bool:
    """A line with filled markers, and hollow ones on the points ``marked`` (not ok); True if any was."""
    color, marker, line = style
    xs, ys = list(xs), list(ys)
    marked = [bool(m) for m in marked] if marked is not None else [False] * len(xs)
    ax.plot(xs, ys, color=color, marker=marker, linestyle=line, markersize=markersize, label=label)
    hollow = [(x, y) for x, y, m in zip(xs, ys, marked, strict=True) if m]
    if hollow:
        ax.plot([x for x, _ in hollow], [y for _, y in hollow], linestyle="none", marker=marker, color=color,
                markerfacecolor="white", markeredgewidth=1.5, markersize=markersize + 1, zorder=3)  # fmt: skip
    return bool(hollow)


def hollow_handle():
    """The legend entry that says what a hollow marker means."""
    from matplotlib.lines import Line2D

    return Line2D([], [], linestyle="none", marker="o", color="black", markerfacecolor="white", label=HOLLOW_MEANING)


def _marked(frame: pd.DataFrame) -> pd.Series:
    return frame["marked"].astype(bool) if "marked" in frame else pd.Series(False, index=frame.index)


def _with_upper_bounds(jobs: pd.DataFrame, column: str) -> tuple[pd.Series, pd.Series]:
    """A jobs' total (``total_time_ms``, ``time_per_sample_ms``), where a job has none its total with the
    contended operations (``total_time_with_contended_ms``: an upper bound), and which values are such bounds."""
    nothing = pd.Series(float("nan"), index=jobs.index)
    clean = pd.to_numeric(jobs.get(column, nothing), errors="coerce")
    upper = pd.to_numeric(jobs.get(column.replace("_ms", "_with_contended_ms"), nothing), errors="coerce")
    bound = clean.isna() & upper.notna()
    return clean.fillna(upper), bound


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_predicted_vs_measured(per_type: pd.DataFrame, title: str, profiled_ms: float = math.nan):
    """Per op_type: benchmark prediction next to the time it took in the profiled training step (the
    profiler's own cost included: compare the step's total with the unprofiled step, not these bars)."""
    plt = _pyplot()
    frame = per_type.sort_values("in_training_ms", ascending=True)
    fig, ax = plt.subplots(figsize=(9, 0.4 * len(frame) + 1.8))
    y = range(len(frame))
    ax.barh([i + 0.2 for i in y], frame["predicted_ms"].fillna(0), height=0.4, label="benchmarks (predicted)")
    step = f" ({profiled_ms:.4g} ms)" if math.isfinite(profiled_ms) else ""
    ax.barh([i - 0.2 for i in y], frame["in_training_ms"], height=0.4, label=f"in training, profiled step{step}")
    ax.set_yticks(list(y))
    ax.set_yticklabels(frame["op_type"])
    ax.set_xlabel("time per training step [ms] (benchmarks: no profiler; training: profiler on)")
    ax.legend(loc="lower right")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def plot_time_breakdown(breakdown: pd.DataFrame, title: str, measured_ms: float, predicted_ms: float):
    """Where the profiled step goes (operations by op_type and pass, framework, unmatched, outside
    operators), with the measured and predicted step times for reference."""
    plt = _pyplot()
    frame = breakdown[breakdown["ms"] > 0].sort_values("ms", ascending=True)
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(frame) + 2))
    colors = ["tab:gray" if kind == "unexplained" else "tab:blue" for kind in frame["kind"]]
    ax.barh(frame["part"], frame["ms"], color=colors)
    for i, (ms, share) in enumerate(zip(frame["ms"], frame["share_pct"], strict=True)):
        ax.text(ms, i, f" {share:.1f}%", va="center", fontsize=8)
    text = f"measured step {measured_ms:.4g} ms (unprofiled), predicted {predicted_ms:.4g} ms"
    ax.set_xlabel(f"profiled time per step [ms]; {text}")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def plot_roofline(frame: pd.DataFrame, peaks_gflops: Mapping[str, float], bandwidth_gbs: float, title: str):
    """Operations at (arithmetic intensity, achieved GFLOP/s) under the machine's roofs."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5.5))
    points = frame.dropna(subset=["intensity", "gflops_per_s"])
    points = points[(points["intensity"] > 0) & (points["gflops_per_s"] > 0)]
    lo = min([points["intensity"].min() / 2] if len(points) else [0.01])
    hi = max([points["intensity"].max() * 2] if len(points) else [1000.0])
    lo, hi = min(lo, 0.01), max(hi, 1000.0)
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    for dtype, peak in peaks_gflops.items():
        ax.plot(xs, [min(peak, x * bandwidth_gbs) for x in xs], label=f"roof {dtype}: {peak:.4g} GFLOP/s")
    if len(points):
        labels = points["op_type"] if "op_type" in points else pd.Series("operation", index=points.index)
        types = sorted(set(labels))
        hollow = False
        for op_type, (color, marker, _) in zip(types, series_styles(len(types)), strict=True):
            sub = points[labels == op_type]
            marked = sub["status"].astype(str) != OK if "status" in sub else pd.Series(False, index=sub.index)
            ax.scatter(sub["intensity"], sub["gflops_per_s"], s=18, marker=marker, color=color, label=op_type)
            if marked.any():
                hollow = True
                ax.scatter(sub.loc[marked, "intensity"], sub.loc[marked, "gflops_per_s"], s=26, marker=marker,
                           facecolors="white", edgecolors=color, zorder=3)  # fmt: skip
        if hollow:
            ax.add_artist(ax.legend(handles=[hollow_handle()], loc="lower right", fontsize=7))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity [FLOP/byte]")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"{title} (bandwidth {bandwidth_gbs:.4g} GB/s)")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_time_vs_batch(frame: pd.DataFrame, title: str, value: str = "median_ms"):
    """One line per (series) of ``value`` against ``batch_size``; ``frame`` has columns series,
    batch_size and ``value``, and optionally ``marked`` (a point drawn hollow: a noisy run, an operation not ok)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    groups = list(frame.groupby("series", sort=True))
    hollow = False
    for (series, sub), style in zip(groups, series_styles(len(groups)), strict=True):
        sub = sub.sort_values("batch_size")
        hollow |= draw_series(ax, sub["batch_size"], sub[value], _marked(sub), style, str(series))
    ax.set_xlabel("batch size")
    ax.set_ylabel(value)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    if frame["series"].nunique() <= 20:
        handles, _ = ax.get_legend_handles_labels()
        ax.legend(handles=handles + ([hollow_handle()] if hollow else []), fontsize=7)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def plot_implementations(frame: pd.DataFrame, title: str):
    """Per operation, the time of each implementation (columns) side by side, log scale."""
    plt = _pyplot()
    n = len(frame)
    fig, ax = plt.subplots(figsize=(9, 0.35 * n * max(1, len(frame.columns) / 2) + 2))
    width = 0.8 / max(len(frame.columns), 1)
    for j, column in enumerate(frame.columns):
        values = frame[column].astype(float)
        ax.barh([i + j * width for i in range(n)], values.where(values > 0, math.nan), height=width, label=column)
    ax.set_yticks([i + 0.4 - width / 2 for i in range(n)])
    ax.set_yticklabels([str(i) for i in frame.index], fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("median time per call [ms]")
    ax.legend(fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def plot_results(frame: pd.DataFrame, title: str):  # -> matplotlib Figure
    """Bar chart of median time per operation (with min-max whiskers) and GFLOP/s where known; an operation
    whose status is not ok (unstable, contended, ...) or that ran while the machine was busy (``machine_busy``)
    is drawn hatched in orange, why in its label. Every sweep draws it, so it is a plain Figure (saved through
    Agg, freed when dropped): pyplot's import, backend selection and figure manager are start-up cost a sweep
    does not need."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    shown = frame[frame["median_ms"].notna()]  # every operation with a time, whatever its status
    busy = shown["machine_busy"].eq(True) if "machine_busy" in shown else pd.Series(False, index=shown.index)
    why = [", ".join(([str(s)] if str(s) != OK else []) + (["machine busy"] if b else []))
           for s, b in zip(shown["status"], busy, strict=True)]  # fmt: skip
    marked = pd.Series([bool(w) for w in why], index=shown.index)
    has_flops = shown["gflops_per_s"].notna().any()
    fig = Figure(figsize=(13 if has_flops else 8, 0.35 * len(frame) + 1.8))
    axes = fig.subplots(1, 2 if has_flops else 1)
    axes = list(axes) if has_flops else [axes]
    labels = [f"{n} [{w}]" if w else str(n) for n, w in zip(shown["name"], why, strict=True)]
    colors = ["tab:orange" if m else "tab:blue" for m in marked]
    hatches = ["//" if m else "" for m in marked]
    lower = (shown["median_ms"] - shown["min_ms"]).clip(lower=0)
    upper = (shown["max_ms"] - shown["median_ms"]).clip(lower=0)
    axes[0].barh(labels, shown["median_ms"], xerr=[lower, upper], color=colors, hatch=hatches, capsize=2)
    axes[0].set_xlabel("median time per call [ms] (whiskers: min-max)")
    axes[0].invert_yaxis()
    if has_flops:
        flops_colors = ["tab:orange" if m else "tab:green" for m in marked]
        axes[1].barh(labels, shown["gflops_per_s"].fillna(0), color=flops_colors, hatch=hatches)
        axes[1].set_xlabel("GFLOP/s")
        axes[1].invert_yaxis()
        axes[1].set_yticklabels([])
    if marked.any():
        legend = [Patch(color="tab:blue", label="ok"),
                  Patch(facecolor="tab:orange", hatch="//", label="not ok: why in [brackets]")]  # fmt: skip
        fig.legend(handles=legend, fontsize=8, loc="upper right", ncol=2)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 1, 0.93 if marked.any() else 1))
    return fig


def plot_ratio_distribution(frame: pd.DataFrame, title: str):
    """How far in-training time strays from benchmark time: a histogram of in-training / benchmark per
    operation (log scale), weighted by the operation's in-training time, so the costly ones dominate."""
    plt = _pyplot()
    ratios = frame[["ratio_training_to_benchmark", "in_training_ms"]].dropna()
    ratios = ratios[(ratios["ratio_training_to_benchmark"] > 0) & (ratios["in_training_ms"] > 0)]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    if len(ratios):
        low = min(ratios["ratio_training_to_benchmark"].min(), 0.5)
        high = max(ratios["ratio_training_to_benchmark"].max(), 2.0)
        bins = [low * (high / low) ** (i / 30) for i in range(31)]
        ax.hist(ratios["ratio_training_to_benchmark"], bins=bins, weights=ratios["in_training_ms"], color="tab:blue")
        ax.axvline(1.0, color="black", linewidth=1)
        ax.set_xscale("log")
    ax.set_xlabel("in-training time / benchmark time per operation (1: the benchmark predicts it exactly)")
    ax.set_ylabel("in-training time [ms per step]")
    ax.set_title(f"{title}: {len(ratios)} operations")
    fig.tight_layout()
    return fig


def _along(frame: pd.DataFrame, x: str, order: list) -> pd.Series:
    """Positions on the x axis: the batch size itself, or the index of a categorical value in ``order``."""
    return frame[x] if not order else frame[x].map({v: i for i, v in enumerate(order)})


def _log_y(ax) -> None:
    """A log y axis labelled 1, 2, 5 x 10^k in plain numbers (a sweep spans a decade or two)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _x_axis(ax, x_order: list, xlabel: str, values) -> None:
    ax.set_xlabel(xlabel)
    if x_order:
        ax.set_xticks(range(len(x_order)))
        ax.set_xticklabels([str(v) for v in x_order], rotation=20, fontsize=8)
    else:
        ax.set_xscale("log", base=2)
        ticks = sorted({int(v) for v in values if v == v})
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks])
    ax.grid(True, which="both", alpha=0.3)


def plot_sweep_operations(
    operations: pd.DataFrame, jobs: pd.DataFrame, x: str, xlabel: str, title: str, numeric: bool = True
):
    """A sweep's operations against the swept value (the batch size: log-log): median time per call, time
    per sample, GFLOP/s, and the jobs' totals (sum of median x occurrences, and per sample; a job whose
    operations were contended with its total over them, an upper bound). Rows whose ``marked`` column is true
    (a status other than ok, a noisy run) and such totals are drawn hollow."""
    plt = _pyplot()
    x_order = [] if numeric else list(dict.fromkeys(jobs.sort_values(x)[x]))
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    panels = (
        (axes[0][0], "median_ms", "median time per call [ms]"),
        (axes[0][1], "time_per_sample_ms", "time per call per sample [ms]"),
        (axes[1][0], "gflops_per_s", "GFLOP/s"),
    )
    keys = list(dict.fromkeys(operations["key"])) if "key" in operations else []
    styles = dict(zip(keys, series_styles(len(keys)), strict=True))  # one look per operation in every panel
    marked = _marked(operations)
    hollow = False
    for ax, column, label in panels:
        for key, sub in operations.groupby("key", sort=False) if column in operations else ():
            sub = sub.dropna(subset=[column]).sort_values(x)
            if len(sub):
                hollow |= draw_series(ax, _along(sub, x, x_order), sub[column], marked[sub.index], styles[key],
                                      str(key), markersize=4)  # fmt: skip
        ax.set_ylabel(label)
        _log_y(ax)
        _x_axis(ax, x_order, xlabel, operations[x] if numeric else [])
    ax = axes[1][1]
    totals = jobs.sort_values(x)
    total_styles = (("C0", "s", "-"), ("C1", "D", "--"))
    for (column, label), style in zip((("total_time_ms", "total (median x occurrences)"),
                                       ("time_per_sample_ms", "per sample")), total_styles, strict=True):  # fmt: skip
        values, bound = _with_upper_bounds(totals, column)
        if values.notna().any():
            sub = totals.assign(**{column: values})[values.notna()]
            hollow |= draw_series(ax, _along(sub, x, x_order), sub[column], _marked(sub) | bound[sub.index], style,
                                  label)  # fmt: skip
    ax.set_ylabel("workload time [ms]")
    _log_y(ax)
    ax.legend(fontsize=8)
    _x_axis(ax, x_order, xlabel, totals[x] if numeric else [])
    handles, labels = axes[0][0].get_legend_handles_labels()
    if hollow:
        handles, labels = (
            [*handles, hollow_handle()],
            [*labels, "hollow: not ok (a status\nother than ok, busy machine)"],
        )
    if handles:
        fig.legend(handles, labels, loc="center left", bbox_to_anchor=(0.84, 0.5), fontsize=7, title="operation")
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 0.84 if handles else 1, 0.97))
    return fig


def plot_sweep_training(jobs: pd.DataFrame, x: str, xlabel: str, title: str, numeric: bool = True):
    """Training (or evaluation) runs of a sweep: step time and samples per second against the swept value."""
    plt = _pyplot()
    x_order = [] if numeric else list(dict.fromkeys(jobs.sort_values(x)[x]))
    frame = jobs.sort_values(x).copy()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    series = (
        ("step_time_s_median", 1e3, "training step (median)"),
        ("step_time_measured_ms", 1.0, "training step, measured"),
        ("step_time_predicted_ms", 1.0, "training step, predicted from operators"),
    )
    hollow = False
    for (column, scale, label), style in zip(series, series_styles(len(series)), strict=True):
        if column in frame and frame[column].notna().any():
            sub = frame.dropna(subset=[column])
            hollow |= draw_series(left, _along(sub, x, x_order), sub[column] * scale, _marked(sub), style, label)
    left.set_ylabel("step time [ms]")
    _log_y(left)
    handles, _ = left.get_legend_handles_labels()
    left.legend(handles=handles + ([hollow_handle()] if hollow else []), fontsize=8)
    throughput = frame.get("samples_per_s_median")
    if throughput is None or throughput.isna().all():
        throughput = frame["batch_size"] / (frame.get("step_time_measured_ms", pd.Series(dtype=float)) / 1e3)
    frame["throughput"] = throughput
    sub = frame.dropna(subset=["throughput"])
    draw_series(right, _along(sub, x, x_order), sub["throughput"], _marked(sub), ("tab:green", "o", "-"), "")
    right.set_ylabel("samples per second (median)")
    for ax in (left, right):
        _x_axis(ax, x_order, xlabel, frame[x] if numeric else [])
    fig.suptitle(title)
    fig.tight_layout()
    return fig
