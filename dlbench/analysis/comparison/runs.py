"""Runs side by side: operator sweeps, training runs, evaluations and rooflines found through MLflow's search
API, as sorted pandas tables across systems, implementations and batch sizes, with a list of what could not
be compared. Where one configuration was run more than once, the newest finished run stands for it (the
others stay in the runs table, marked ``superseded_by``)."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dlbench.analysis.marks import flags, mark_reasons, marked_values, run_marks
from dlbench.core.values import TIME_UNITS_TO_MS

DEFAULT_KINDS = ("operator_sweep", "training", "evaluation", "roofline")
RUN_COLUMNS = ("run_id", "run_name", "status", "kind", "benchmark", "implementation", "backend", "system",
               "batch_size", "dtype", "device", "threads", "noisy", "start_time")  # fmt: skip
#: Per-kind metrics a comparable run must have; a run without one is listed as a problem.
REQUIRED_METRICS = {
    "operator_sweep": ("total_time_ms",),
    "training": ("step_time_s_median", "samples_per_s_median"),
    "evaluation": ("step_time_predicted_ms", "step_time_measured_ms"),
    "roofline": ("bandwidth_gbs",),
}
#: Metrics of runs made before they were renamed: old name -> name now
RENAMED_METRICS = {"network_total_ms": "total_time_ms", "total_ms": "distinct_operations_time_ms",
                   "mean_gflops_per_s": "gflops_per_s_mean", "max_gflops_per_s": "gflops_per_s_max"}  # fmt: skip
#: Counts of operations without a time, in runs logged before ``operations_missing``
PARTIAL_STATUSES = ("operations_failed", "operations_unsupported", "operations_missing")
#: What makes two runs repeats of one configuration
CONFIGURATION = ("kind", "benchmark", "implementation", "system", "batch_size", "dtype", "device", "threads")


@dataclass
class Comparison:
    """Tables of a comparison; ``problems`` has one row per run (or run and operation) left out."""

    runs: pd.DataFrame
    operations: pd.DataFrame
    problems: list[dict[str, str]] = field(default_factory=list)

    def problems_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.problems, columns=["run_id", "run_name", "problem"])


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    return frame[name] if name in frame.columns else pd.Series([None] * len(frame), index=frame.index, dtype=object)


def run_table(found: pd.DataFrame, kinds: Sequence[str] = (), benchmarks: Sequence[str] = ()) -> pd.DataFrame:
    """One row per run from ``tracking.search_runs`` output: identity columns, then every metric."""
    if found is None or found.empty:
        return pd.DataFrame(columns=list(RUN_COLUMNS))
    runs = pd.DataFrame(
        {
            "run_id": _column(found, "run_id"),
            "run_name": _column(found, "tags.mlflow.runName"),
            "status": _column(found, "status"),
            "kind": _column(found, "tags.dlbench.kind"),
            "benchmark": _column(found, "tags.dlbench.benchmark").fillna(_column(found, "params.benchmark")),
            "implementation": _column(found, "tags.dlbench.implementation").fillna(_column(found, "params.backend")),
            "backend": _column(found, "params.backend"),
            "system": _column(found, "tags.system.id"),
            "batch_size": pd.to_numeric(_column(found, "params.batch_size"), errors="coerce"),
            "dtype": _column(found, "params.dtype"),
            "device": _column(found, "params.device"),
            "threads": _column(found, "params.threads"),
            "noisy": flags(_column(found, "tags.dlbench.noisy"), found.index),  # measured on a busy machine
            "start_time": _column(found, "start_time"),
        }
    )
    metrics = found[[c for c in found.columns if c.startswith("metrics.")]]
    metrics = metrics.rename(columns=lambda c: c[len("metrics.") :])
    for old, new in RENAMED_METRICS.items():
        if old in metrics.columns:
            metrics[new] = metrics[new].fillna(metrics[old]) if new in metrics.columns else metrics[old]
            metrics = metrics.drop(columns=old)
    runs = mark_partial_totals(pd.concat([runs.reset_index(drop=True), metrics.reset_index(drop=True)], axis=1))
    wanted = set(kinds or DEFAULT_KINDS)
    runs = runs[runs["kind"].isin(wanted)]
    if benchmarks:
        runs = runs[runs["benchmark"].isin(set(benchmarks))]
    return runs.reset_index(drop=True)


def mark_partial_totals(runs: pd.DataFrame) -> pd.DataFrame:
    """``totals_complete`` for every run, and no partial sum under a complete total's name: a run logged
    before totals said whether they were complete (no ``totals_complete`` metric) with failed or unsupported
    operations has its ``total_time_ms`` moved to ``partial_total_time_ms`` and its per-sample figures
    cleared, as a run logged now has them."""
    out = runs.copy()
    holes = sum(
        (pd.to_numeric(out[c], errors="coerce").fillna(0) for c in PARTIAL_STATUSES if c in out.columns),
        pd.Series(0.0, index=out.index),
    )
    complete = pd.to_numeric(_column(out, "totals_complete"), errors="coerce").fillna((holes == 0).astype(float))
    has_totals = _column(out, "total_time_ms").notna() | _column(out, "partial_total_time_ms").notna()
    out["totals_complete"] = complete.where(has_totals | _column(out, "totals_complete").notna())
    partial = out["totals_complete"] == 0
    if "total_time_ms" in out.columns:
        moved = out["total_time_ms"].where(partial)
        out["partial_total_time_ms"] = _column(out, "partial_total_time_ms").fillna(moved)
        for column in ("total_time_ms", "time_per_sample_ms", "distinct_operations_time_ms"):
            if column in out.columns:
                out[column] = out[column].mask(partial)
    return out


def mark_repeats(runs: pd.DataFrame) -> pd.DataFrame:
    """``repeats`` (runs of the same configuration) and ``superseded_by``: empty for the run that stands for
    its configuration (the newest finished one, else the newest), else that run's id. Sorted by kind,
    benchmark, series and batch size."""
    if runs.empty:
        return runs.assign(repeats=pd.Series(dtype=int), superseded_by=pd.Series(dtype=object))
    out = runs.copy()
    columns = out[[c for c in CONFIGURATION if c in out.columns]]
    key = pd.Series(["|".join(map(str, row)) for row in columns.itertuples(index=False)], index=out.index)
    rank = out.assign(_key=key, _finished=out["status"] == "FINISHED").sort_values(
        ["_key", "_finished", "start_time"], ascending=[True, False, False], kind="stable"
    )
    first = rank.groupby("_key")["run_id"].transform("first")
    out["repeats"] = key.map(key.value_counts()).astype(int)
    out["superseded_by"] = first.where(first != rank["run_id"], "").reindex(out.index)
    out["series"] = _series(out)
    return out.sort_values(
        ["kind", "benchmark", "series", "batch_size", "start_time"], kind="stable", ignore_index=True
    )


def current(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs that stand for their configuration (see :func:`mark_repeats`)."""
    return runs[runs["superseded_by"] == ""] if "superseded_by" in runs.columns else runs


def check_metrics(runs: pd.DataFrame) -> list[dict[str, str]]:
    """Runs that did not finish or lack a metric their kind needs."""
    problems = []
    for row in runs.itertuples(index=False):
        if row.status != "FINISHED":
            problems.append({"run_id": row.run_id, "run_name": row.run_name, "problem": f"run status {row.status}"})
        for metric in REQUIRED_METRICS.get(row.kind, ()):
            value = getattr(row, metric, None) if metric in runs.columns else None
            if value is None or (isinstance(value, float) and math.isnan(value)):
                problems.append({"run_id": row.run_id, "run_name": row.run_name, "problem": _why_missing(row, metric)})
    return problems


def _why_missing(row: Any, metric: str) -> str:
    partial = getattr(row, "partial_total_time_ms", None)
    if metric == "total_time_ms" and partial is not None and partial == partial:
        return (
            f"total_time_ms is NA: not every operation has a time (partial_total_time_ms {partial:.4g} ms, left "
            "out of the totals compared and plotted)"
        )
    return f"metric {metric} is missing"


def results_in_ms(results: pd.DataFrame, where: str) -> tuple[pd.DataFrame, list[str]]:
    """A results table with its time column in milliseconds: ``median_ms`` as it is, ``median_<unit>``
    (s, us, ns) converted; a table with no understood time column, or with two that disagree, is refused
    (returned empty) and the reason returned."""
    columns = [c for c in results.columns if c.startswith("median_") and c[len("median_") :] in TIME_UNITS_TO_MS]
    if not columns:
        return results.iloc[0:0], [f"{where}: no median_<unit> time column (columns: {', '.join(results.columns)})"]
    notes = []
    if len(columns) > 1:
        converted = [pd.to_numeric(results[c], errors="coerce") * TIME_UNITS_TO_MS[c[7:]] for c in columns]
        if not all(
            ((converted[0] - other).abs() <= 1e-6 * converted[0].abs() + 1e-12).all() for other in converted[1:]
        ):
            return results.iloc[0:0], [f"{where}: time columns {', '.join(columns)} disagree (mixed units)"]
    column = "median_ms" if "median_ms" in columns else columns[0]
    out = results.copy()
    out["median_ms"] = pd.to_numeric(out[column], errors="coerce") * TIME_UNITS_TO_MS[column[len("median_") :]]
    if column != "median_ms":
        notes.append(f"{where}: times converted from {column} to median_ms")
    return out, notes


def operation_table(runs: pd.DataFrame, read_results) -> tuple[pd.DataFrame, list[dict[str, str]]]:
    """Per-operation rows of every operator sweep (``read_results(run_id)`` returns its results.csv as a
    DataFrame, or raises), joined with the run's identity columns (its status as ``run_status``). Every row
    with a time stays, whatever its status (``marked`` when not ok or its run was noisy); a row without a
    time is a problem."""
    frames = []
    problems = []
    identity = [c for c in RUN_COLUMNS if c in runs.columns]
    for row in runs[runs["kind"] == "operator_sweep"].itertuples(index=False):
        where = f"run {row.run_name or row.run_id}"
        try:
            results = read_results(row.run_id)
        except Exception as err:  # noqa: BLE001 - a run without its table is reported, not fatal
            problems.append({"run_id": row.run_id, "run_name": row.run_name, "problem": f"no results.csv: {err}"})
            continue
        results, notes = results_in_ms(results, where)
        for note in notes:
            kind = "problem" if results.empty else "note"
            problems.append({"run_id": row.run_id, "run_name": row.run_name, "problem": f"{kind}: {note}"})
        if results.empty:
            continue
        if "status" not in results.columns:
            results = results.assign(status="ok")  # a table of an executable that reports times only
        timed = results["median_ms"].notna()  # a time with any status stays, marked by its status
        for op in results[~timed].itertuples(index=False):
            why = getattr(op, "error", "") or "no time"
            problems.append(
                {"run_id": row.run_id, "run_name": row.run_name, "problem": f"operation {op.id} {op.status}: {why}"}
            )
        results = results[timed]
        keep = ("id", "key", "name", "op_type", "count", "flops", "bytes", "median_ms", "gflops_per_s", "status")
        part = results[[c for c in keep if c in results]].copy()
        if "key" not in part:  # a table written before operations had keys
            part.insert(1, "key", part["name"] if "name" in part else part["id"].astype(str))
        for column in identity:  # the run's status beside the operation's own
            part["run_status" if column == "status" else column] = getattr(row, column)
        frames.append(part)
    if not frames:
        columns = ["run_status" if c == "status" else c for c in identity]
        return pd.DataFrame(columns=[*columns, "id", "name", "median_ms", "status", "marked"]), problems
    operations = pd.concat(frames, ignore_index=True)
    operations["marked"] = mark_reasons(operations) != ""
    return operations, problems


def by_batch_size(operations: pd.DataFrame) -> pd.DataFrame:
    """Median ms per operation (benchmark, id and name) and series (system | implementation | dtype), one
    column per batch size; sorted by benchmark, series and operation."""
    if operations.empty:
        return pd.DataFrame()
    frame = operations.assign(series=_series(operations))
    table = frame.pivot_table(
        index=["benchmark", "series", "id", "key"], columns="batch_size", values="median_ms", aggfunc="first"
    )
    table.columns = [f"bs{int(c)}" for c in table.columns]
    index = ["benchmark", "series", "id", "key"]
    marks = marked_values(frame, index, lambda r: f"bs{int(r.batch_size)}")
    table = table.reset_index().merge(marks, on=index, how="left")
    table["marked"] = table["marked"].fillna("")
    return table.sort_values(["benchmark", "series", "id"], kind="stable", ignore_index=True)


def left_out_totals(runs: pd.DataFrame) -> dict[str, int]:
    """Per benchmark: operator sweeps whose total is partial (operations without a time), which
    :func:`run_totals` leaves out."""
    sweeps = runs[runs["kind"] == "operator_sweep"]
    partial = sweeps[_column(sweeps, "totals_complete") == 0]
    return {str(k): int(v) for k, v in partial["benchmark"].value_counts().items()}


def run_totals(runs: pd.DataFrame) -> pd.DataFrame:
    """Per operator sweep whose every operation has a time: benchmark, series, batch size,
    ``total_time_ms`` (sum of median x occurrences), ``time_per_sample_ms`` and ``marked`` (a noisy run, or
    operations whose status was not ok). A partial total is never among them (:func:`left_out_totals` counts
    those)."""
    columns = ["benchmark", "series", "batch_size", "total_time_ms", "time_per_sample_ms", "marked"]
    sweeps = runs[runs["kind"] == "operator_sweep"].copy()
    if sweeps.empty or "total_time_ms" not in sweeps.columns:
        return pd.DataFrame(columns=columns)
    sweeps["series"] = _series(sweeps)
    sweeps["total_time_ms"] = pd.to_numeric(sweeps["total_time_ms"], errors="coerce")
    sweeps["time_per_sample_ms"] = sweeps["total_time_ms"] / sweeps["batch_size"]
    sweeps["marked"] = run_marks(sweeps)
    return sweeps[columns].dropna(subset=["total_time_ms"]).sort_values(["benchmark", "series", "batch_size"])


def training_totals(runs: pd.DataFrame) -> pd.DataFrame:
    """Per training run and evaluation (its measured, unprofiled step): benchmark, series (system |
    kind), batch size, ``step_time_ms`` (median) and ``samples_per_s``."""
    parts = []
    training = runs[runs["kind"] == "training"]
    if len(training) and "step_time_s_median" in training.columns:
        step_ms = pd.to_numeric(training["step_time_s_median"], errors="coerce") * 1e3
        samples = pd.to_numeric(training.get("samples_per_s_median"), errors="coerce")
        parts.append(
            training.assign(
                step_time_ms=step_ms, samples_per_s=samples.fillna(training["batch_size"] / (step_ms / 1e3))
            )
        )
    evaluations = runs[runs["kind"] == "evaluation"]
    if len(evaluations) and "step_time_measured_ms" in evaluations.columns:
        step_ms = pd.to_numeric(evaluations["step_time_measured_ms"], errors="coerce")
        parts.append(
            evaluations.assign(step_time_ms=step_ms, samples_per_s=evaluations["batch_size"] / (step_ms / 1e3))
        )
    columns = ["benchmark", "series", "batch_size", "step_time_ms", "samples_per_s", "marked", "run_id"]
    if not parts:
        return pd.DataFrame(columns=columns)
    frame = pd.concat(parts, ignore_index=True)
    frame["marked"] = run_marks(frame)
    frame["series"] = frame["system"].fillna("").astype(str) + " | " + frame["kind"]
    return frame[columns].dropna(subset=["step_time_ms"]).sort_values(["benchmark", "series", "batch_size"])


def evaluation_totals(runs: pd.DataFrame) -> pd.DataFrame:
    """Per evaluation: benchmark, series (system | predicted or measured), batch size and step time."""
    evaluations = runs[runs["kind"] == "evaluation"]
    rows = []
    for column, label in (("step_time_predicted_ms", "predicted"), ("step_time_measured_ms", "measured")):
        if column not in evaluations.columns:
            continue
        part = evaluations[["benchmark", "system", "batch_size", column]].rename(columns={column: "step_ms"})
        part = part.assign(series=part["system"].fillna("").astype(str) + " | " + label,
                           marked=run_marks(evaluations))  # fmt: skip
        rows.append(part[["benchmark", "series", "batch_size", "step_ms", "marked"]])
    if not rows:
        return pd.DataFrame(columns=["benchmark", "series", "batch_size", "step_ms", "marked"])
    return pd.concat(rows, ignore_index=True).dropna()


def implementations_side_by_side(operations: pd.DataFrame) -> pd.DataFrame:
    """Per (benchmark, system, batch size, dtype, operation): one median_ms column per implementation,
    and ``<impl>_over_<first>`` ratios when several implementations measured the same operation."""
    if operations.empty:
        return pd.DataFrame()
    index = ["benchmark", "system", "batch_size", "dtype", "id", "key"]
    table = operations.pivot_table(index=index, columns="implementation", values="median_ms", aggfunc="first")
    table = table.dropna(how="any")
    if table.shape[1] < 2 or table.empty:
        return pd.DataFrame()
    names = sorted(table.columns, key=lambda c: (not str(c).startswith("torch"), str(c)))
    base = names[0]
    for other in names[1:]:
        table[f"{other}_over_{base}"] = table[other] / table[base]
    marks = marked_values(operations, index, lambda r: str(r.implementation))
    table = table.reset_index().merge(marks, on=index, how="left")
    table["marked"] = table["marked"].fillna("")
    return table.sort_values(index, kind="stable", ignore_index=True)


def evaluation_table(runs: pd.DataFrame) -> pd.DataFrame:
    columns = ["benchmark", "system", "implementation", "batch_size", "step_time_predicted_ms",
               "step_time_measured_ms", "prediction_error_pct", "prediction_error_lo_pct", "prediction_error_hi_pct",
               "unexplained_time_pct", "run_id"]  # fmt: skip
    evaluations = runs[runs["kind"] == "evaluation"]
    present = [c for c in columns if c in evaluations.columns]
    return evaluations[present].sort_values(["benchmark", "system", "batch_size"], ignore_index=True)


def _series(frame: pd.DataFrame) -> pd.Series:
    parts = [frame[c].fillna("").astype(str) for c in ("system", "implementation", "dtype") if c in frame.columns]
    series = parts[0]
    for part in parts[1:]:
        series = series + " | " + part
    return series


def artifact_reader(target: Any) -> Any:
    """``read_results(run_id)`` for :func:`operation_table`, downloading ``results.csv`` through tracking."""
    from dlbench.tracking.store import download_artifact

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one bar per run is noise here

    def read(run_id: str) -> pd.DataFrame:
        with tempfile.TemporaryDirectory() as tmp:
            path = download_artifact(target, run_id, "results.csv", Path(tmp))
            return pd.read_csv(path)

    return read


def compare_runs(
    found: pd.DataFrame, read_results, kinds: Iterable[str] = (), benchmarks: Iterable[str] = ()
) -> Comparison:
    """Everything :mod:`dlbench.tasks.compare` logs, from search results and an artifact reader."""
    runs = mark_repeats(run_table(found, tuple(kinds), tuple(benchmarks)))
    problems = check_metrics(runs)
    problems += [
        {"run_id": row.run_id, "run_name": row.run_name, "problem": f"note: superseded by {row.superseded_by}, "
         "the newest finished run of the same configuration (only that one is compared)"}
        for row in runs[runs["superseded_by"] != ""].itertuples(index=False)
    ]  # fmt: skip
    operations, more = operation_table(current(runs), read_results)
    return Comparison(runs=runs, operations=operations, problems=problems + more)
