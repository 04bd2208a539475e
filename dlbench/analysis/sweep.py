"""A finished multirun summed up for its own run: one row per job, an operation x swept-value table, plots
of time, time per sample and GFLOP/s against the batch size (or whatever was swept), and a description."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pandas as pd

from dlbench.analysis.comparison.runs import operation_table, run_table
from dlbench.analysis.marks import marked_values, run_marks

SUMMED_KINDS = ("operator_sweep", "training", "evaluation", "model_benchmark")
#: Per-run columns of the jobs table, where the runs have them
JOB_METRICS = ("total_time_ms", "time_per_sample_ms", "total_time_with_contended_ms",
               "time_per_sample_with_contended_ms", "gflops_per_s_mean", "operations_ok", "operations_failed",
               "step_time_s_median", "samples_per_s_median", "step_time_predicted_ms", "step_time_measured_ms",
               "model_total_ms")  # fmt: skip
#: Operations drawn per figure (the costliest); the tables hold all
MAX_PLOTTED_OPERATIONS = 12


@dataclass
class SweepSummary:
    """``jobs``: one row per job's run; ``operations``: one row per operation and run; ``x``: the column
    the plots run along (``batch_size`` where it varies, else ``swept``, the swept values as text)."""

    swept: tuple[str, ...]
    jobs: pd.DataFrame
    operations: pd.DataFrame
    x: str
    problems: list[dict[str, str]] = field(default_factory=list)

    @property
    def numeric_x(self) -> bool:
        return self.x == "batch_size"

    @property
    def noisy_jobs(self) -> int:
        """Jobs whose run was measured on a busy machine (tag ``dlbench.noisy``)."""
        return int(self.jobs["noisy"].sum()) if "noisy" in self.jobs else 0

    def by_value(self) -> pd.DataFrame:
        """Median ms per operation (rows: benchmark, implementation, operation) and swept value (columns)."""
        if self.operations.empty:
            return pd.DataFrame()
        table = self.operations.pivot_table(
            index=["benchmark", "implementation", "id", "key"], columns="swept", values="median_ms", aggfunc="first"
        )
        order = self.jobs.drop_duplicates("swept").sort_values(self.x, kind="stable")["swept"]
        index = ["benchmark", "implementation", "id", "key"]
        table = table[[c for c in order if c in table.columns]].reset_index()
        table = table.merge(marked_values(self.operations, index, lambda r: str(r.swept)), on=index, how="left")
        table["marked"] = table["marked"].fillna("")  # which values are not ok, and why
        return table.sort_values(["benchmark", "implementation", "id"], kind="stable")

    def groups(self) -> list[tuple[str, pd.DataFrame, pd.DataFrame]]:
        """(title, operations, jobs) per benchmark and implementation (and other swept values when the
        plots run along the batch size)."""
        others = [k for k in self.swept if k != "batch_size"] if self.numeric_x else []
        keys = ["benchmark", "implementation", *(f"param.{k}" for k in others)]
        out = []
        for values, jobs in self.jobs.groupby(keys, sort=True, dropna=False):
            values = values if isinstance(values, tuple) else (values,)
            title = " ".join(str(v) for v in values if v == v and v)
            ops = self.operations[self.operations["run_id"].isin(jobs["run_id"])]
            out.append((title, ops, jobs))
        return out


def _label(row: pd.Series, swept: Sequence[str]) -> str:
    if list(swept) == ["batch_size"]:
        return f"bs{row['param.batch_size']}"
    return ",".join(f"{k}={row[f'param.{k}']}" for k in swept)


def summarize_sweep(
    children: pd.DataFrame, read_results: Callable[[str], pd.DataFrame], swept: Sequence[str]
) -> SweepSummary:
    """The jobs' runs (``tracking.sweep.child_runs``) and their results tables, joined along the swept
    parameters."""
    swept = tuple(swept)
    runs = run_table(children, SUMMED_KINDS)
    if runs.empty:
        empty = pd.DataFrame(columns=["run_id", "swept", "batch_size"])
        return SweepSummary(swept, empty, pd.DataFrame(), "batch_size")
    params = children.set_index("run_id")
    for key in swept:
        column = f"params.{key}"
        runs[f"param.{key}"] = runs["run_id"].map(params[column]) if column in params else None
    runs["swept"] = [_label(row, swept) for _, row in runs.iterrows()]
    x = "batch_size" if runs["batch_size"].nunique() > 1 or swept == ("batch_size",) else "swept"
    runs["marked"] = run_marks(runs)  # a noisy run, or operations whose status was not ok
    jobs_columns = ["run_id", "run_name", "status", "kind", "benchmark", "implementation", "system", "dtype",
                    "batch_size", *(f"param.{k}" for k in swept), "swept", "noisy", "marked"]  # fmt: skip
    jobs = runs[[*jobs_columns, *(m for m in JOB_METRICS if m in runs.columns)]]
    jobs = jobs.sort_values(["benchmark", "implementation", x, "swept"], kind="stable", ignore_index=True)
    operations, problems = operation_table(runs, read_results)
    if not operations.empty:
        operations = operations.merge(runs[["run_id", "swept", *(f"param.{k}" for k in swept)]], on="run_id")
        operations["time_per_sample_ms"] = operations["median_ms"] / operations["batch_size"]
        operations = operations.sort_values(["benchmark", "implementation", x, "id"], kind="stable", ignore_index=True)
    return SweepSummary(swept, jobs, operations, x, problems)


def _number(value: object, unit: str = "") -> str:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "-"
    return f"{number:.4g}{unit}" if math.isfinite(number) else "-"


#: Columns of the sweep run's description: (title, jobs column, scale), shown where some job has a value
NOTE_COLUMNS = (
    ("total time ms (median x occurrences)", "total_time_ms", 1.0),
    ("ms per sample", "time_per_sample_ms", 1.0),
    ("total ms with contended operations (upper bound)", "total_time_with_contended_ms", 1.0),
    ("GFLOP/s (all FLOPs / all time)", "gflops_per_s_mean", 1.0),
    ("step time ms (median)", "step_time_s_median", 1e3),
    ("samples/s (median)", "samples_per_s_median", 1.0),
    ("step ms predicted", "step_time_predicted_ms", 1.0),
    ("step ms measured", "step_time_measured_ms", 1.0),
)


def sweep_note(title: str, summary: SweepSummary, status: str, artifacts: Sequence[str]) -> str:
    """The sweep run's description in markdown: what was swept, each job's totals, where the plots are."""
    jobs = summary.jobs
    counts = jobs["status"].value_counts().to_dict() if len(jobs) else {}
    if not len(jobs):
        return (
            f"**{title}** ({status}): no job opened a run (the launcher stopped before, see the command's output). "
            f"Swept: {', '.join(summary.swept) or 'nothing'}."
        )
    shown = [(t, c, k) for t, c, k in NOTE_COLUMNS if c in jobs.columns and jobs[c].notna().any()]
    noisy = summary.noisy_jobs
    lines = [
        f"**{title}** ({status}): **{noisy} of {len(jobs)} jobs noisy**; {len(jobs)} job runs, "
        + ", ".join(f"{n} {s.lower()}" for s, n in counts.items()),
        "",
        f"Swept: {', '.join(summary.swept) or 'nothing'}. Each job's run is a child of this one.",
    ]
    if noisy:
        lines += ["", f"{noisy} job(s) were measured while the machine was busy (tag `dlbench.noisy`, column noisy "
                  "below): their numbers are distorted and drawn hollow in the plots."]  # fmt: skip
    lines += [
        "",
        "| job | status | noisy | batch size | " + " | ".join(t for t, _, _ in shown) + " |",
        "|---|---|---|---|" + "---|" * len(shown),
    ]
    for _, row in jobs.iterrows():
        values = [_number(row[c] * k if row[c] == row[c] and row[c] is not None else None) for _, c, k in shown]
        flag = "**yes**" if row.get("noisy") else "no"
        lines.append(
            f"| {row['run_name']} | {row['status']} | {flag} | {_number(row['batch_size'])} | "
            + " | ".join(values)
            + " |"
        )
    if artifacts:
        lines += ["", "Artifacts: " + ", ".join(f"`{a}`" for a in artifacts)]
    return "\n".join(lines)


def sweep_figures(summary: SweepSummary, limit: int = 8) -> list[tuple[str, object]]:
    """(artifact file, figure) per group of jobs: operations against the swept value, or the training
    step time and throughput."""
    from dlbench.analysis.plots import plot_sweep_operations, plot_sweep_training

    figures: list[tuple[str, object]] = []
    xlabel = "batch size" if summary.numeric_x else ", ".join(summary.swept)
    for title, operations, jobs in summary.groups():
        if len(figures) >= limit:
            break
        slug = "-".join(title.split()) or "sweep"
        if not operations.empty:
            cost = operations.assign(weighted=operations["median_ms"] * operations["count"].fillna(1))
            top = cost.groupby("key")["weighted"].mean().sort_values(ascending=False).index[:MAX_PLOTTED_OPERATIONS]
            shown = operations[operations["key"].isin(top)]
            note = "" if len(top) == operations["key"].nunique() else f" ({len(top)} costliest operations shown)"
            fig = plot_sweep_operations(shown, jobs, summary.x, xlabel, f"{title}{note}", summary.numeric_x)
            figures.append((f"sweep/{slug}_vs_{summary.x}.png", fig))
        elif "samples_per_s_median" in jobs or "step_time_measured_ms" in jobs:
            fig = plot_sweep_training(jobs, summary.x, xlabel, title, summary.numeric_x)
            figures.append((f"sweep/{slug}_step_time_vs_{summary.x}.png", fig))
    return figures
