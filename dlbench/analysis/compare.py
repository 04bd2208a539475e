"""Runs side by side: operator sweeps, evaluations and rooflines found through MLflow's search API, as
pandas tables across systems, implementations and batch sizes, with a list of what could not be compared."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dlbench.core.values import TIME_UNITS_TO_MS

DEFAULT_KINDS = ("operator_sweep", "evaluation", "roofline")
RUN_COLUMNS = ("run_id", "run_name", "status", "kind", "benchmark", "implementation", "backend", "system",
               "batch_size", "dtype", "device", "threads", "start_time")  # fmt: skip
#: Per-kind metrics a comparable run must have; a run without one is listed as a problem.
REQUIRED_METRICS = {
    "operator_sweep": ("total_ms",),
    "evaluation": ("step_time_predicted_ms", "step_time_measured_ms"),
    "roofline": ("bandwidth_gbs",),
}


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
            "start_time": _column(found, "start_time"),
        }
    )
    metrics = found[[c for c in found.columns if c.startswith("metrics.")]]
    metrics = metrics.rename(columns=lambda c: c[len("metrics.") :])
    runs = pd.concat([runs.reset_index(drop=True), metrics.reset_index(drop=True)], axis=1)
    wanted = set(kinds or DEFAULT_KINDS)
    runs = runs[runs["kind"].isin(wanted)]
    if benchmarks:
        runs = runs[runs["benchmark"].isin(set(benchmarks))]
    return runs.reset_index(drop=True)


def check_metrics(runs: pd.DataFrame) -> list[dict[str, str]]:
    """Runs that did not finish or lack a metric their kind needs."""
    problems = []
    for row in runs.itertuples(index=False):
        if row.status != "FINISHED":
            problems.append({"run_id": row.run_id, "run_name": row.run_name, "problem": f"run status {row.status}"})
        for metric in REQUIRED_METRICS.get(row.kind, ()):
            value = getattr(row, metric, None) if metric in runs.columns else None
            if value is None or (isinstance(value, float) and math.isnan(value)):
                problems.append(
                    {"run_id": row.run_id, "run_name": row.run_name, "problem": f"metric {metric} is missing"}
                )
    return problems


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
    DataFrame, or raises), joined with the run's identity columns."""
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
        if "status" in results.columns:
            failed = results[~results["status"].isin(("ok", "unstable"))]
            for op in failed.itertuples(index=False):
                problems.append(
                    {"run_id": row.run_id, "run_name": row.run_name, "problem": f"operation {op.id} failed: {op.error}"}
                )
            results = results[results["status"].isin(("ok", "unstable"))]
        keep = [
            c for c in ("id", "name", "op_type", "count", "flops", "bytes", "median_ms", "gflops_per_s") if c in results
        ]
        part = results[keep].copy()
        for column in identity:
            part[column] = getattr(row, column)
        frames.append(part)
    if not frames:
        return pd.DataFrame(columns=[*identity, "id", "name", "median_ms"]), problems
    return pd.concat(frames, ignore_index=True), problems


def by_batch_size(operations: pd.DataFrame) -> pd.DataFrame:
    """Median time per operation (benchmark, operation id) and series (system | implementation | dtype),
    one column per batch size."""
    if operations.empty:
        return pd.DataFrame()
    frame = operations.assign(series=_series(operations))
    table = frame.pivot_table(
        index=["benchmark", "id", "series"], columns="batch_size", values="median_ms", aggfunc="median"
    )
    table.columns = [f"bs{int(c)}" for c in table.columns]
    return table.reset_index()


def run_totals(runs: pd.DataFrame) -> pd.DataFrame:
    """Per operator sweep: benchmark, series, batch size and the network total (median x count)."""
    sweeps = runs[runs["kind"] == "operator_sweep"].copy()
    if sweeps.empty:
        return pd.DataFrame(columns=["benchmark", "series", "batch_size", "total_ms"])
    value = "network_total_ms" if "network_total_ms" in sweeps.columns else "total_ms"
    sweeps["series"] = _series(sweeps)
    sweeps["total_ms"] = pd.to_numeric(sweeps.get(value), errors="coerce")
    return sweeps[["benchmark", "series", "batch_size", "total_ms"]].dropna()


def evaluation_totals(runs: pd.DataFrame) -> pd.DataFrame:
    """Per evaluation: benchmark, series (system | predicted or measured), batch size and step time."""
    evaluations = runs[runs["kind"] == "evaluation"]
    rows = []
    for column, label in (("step_time_predicted_ms", "predicted"), ("step_time_measured_ms", "measured")):
        if column not in evaluations.columns:
            continue
        part = evaluations[["benchmark", "system", "batch_size", column]].rename(columns={column: "step_ms"})
        part = part.assign(series=part["system"].fillna("").astype(str) + " | " + label)
        rows.append(part[["benchmark", "series", "batch_size", "step_ms"]])
    if not rows:
        return pd.DataFrame(columns=["benchmark", "series", "batch_size", "step_ms"])
    return pd.concat(rows, ignore_index=True).dropna()


def implementations_side_by_side(operations: pd.DataFrame) -> pd.DataFrame:
    """Per (benchmark, system, batch size, dtype, operation): one median_ms column per implementation,
    and ``<impl>_over_<first>`` ratios when several implementations measured the same operation."""
    if operations.empty:
        return pd.DataFrame()
    index = ["benchmark", "system", "batch_size", "dtype", "id"]
    table = operations.pivot_table(index=index, columns="implementation", values="median_ms", aggfunc="median")
    table = table.dropna(how="any")
    if table.shape[1] < 2 or table.empty:
        return pd.DataFrame()
    names = sorted(table.columns, key=lambda c: (not str(c).startswith("torch"), str(c)))
    base = names[0]
    for other in names[1:]:
        table[f"{other}_over_{base}"] = table[other] / table[base]
    return table.reset_index()


def evaluation_table(runs: pd.DataFrame) -> pd.DataFrame:
    columns = ["benchmark", "system", "implementation", "batch_size", "step_time_predicted_ms",
               "step_time_measured_ms", "prediction_error_pct", "unexplained_time_pct", "run_id"]  # fmt: skip
    evaluations = runs[runs["kind"] == "evaluation"]
    return evaluations[[c for c in columns if c in evaluations.columns]].reset_index(drop=True)


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
    runs = run_table(found, tuple(kinds), tuple(benchmarks))
    problems = check_metrics(runs)
    operations, more = operation_table(runs, read_results)
    return Comparison(runs=runs, operations=operations, problems=problems + more)
