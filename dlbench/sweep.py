"""An operator sweep: one configured benchmark measured by each matching implementation, each an MLflow
run with params, hardware tags, per-operation metrics and the protocol's CSVs as artifacts."""

from __future__ import annotations

import hashlib
import logging
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from dlbench.app import AppContext, TaskFailed
from dlbench.config import DlbenchConfig
from dlbench.model import Operation, SweepResult
from dlbench.progress import progress
from dlbench.registry import OperatorBenchmark, Registry, load_registry
from dlbench.results import plot_results, results_frame, summary_metrics
from dlbench.runner import RunSettings, SweepFiles, measure_operations
from dlbench.workload import operations_from_benchmark

log = logging.getLogger(__name__)


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def run_settings(cfg: DlbenchConfig, device: str) -> RunSettings:
    m = cfg.measure
    return RunSettings(
        warmup=m.warmup,
        min_reps=m.min_reps,
        max_reps=m.max_reps,
        min_time_s=m.min_time_s,
        threads=cfg.threads,
        device=device,
        dtype=cfg.dtype,
        timeout_s=cfg.timeout,
        op_budget_s=m.op_budget_s,
        memory_fraction=m.memory_fraction,
    )


def select_implementations(registry: Registry, op_type: str, backend: str, device: str) -> list[OperatorBenchmark]:
    """Entries of ``backend`` serving ``op_type`` on ``device``; a clear error when there is none."""
    matching = registry.serving(op_type, backend, device)
    if matching:
        return matching
    others = registry.serving(op_type)
    offered = ", ".join(f"{e.name} (backend={e.backend}, device={','.join(e.devices)})" for e in others) or "none"
    raise TaskFailed(
        f"no {backend!r} benchmark for {op_type} on device {device!r} is registered; registered for {op_type}: "
        f"{offered}"
    )


def sweep_params(cfg: DlbenchConfig, entry: OperatorBenchmark, benchmark_name: str, n_ops: int, device: str) -> dict:
    return {
        "benchmark": benchmark_name,
        "implementation": entry.name,
        "backend": entry.backend,
        "op_type": cfg.benchmark.op_type if cfg.benchmark else "",
        "batch_size": cfg.batch_size,
        "dtype": cfg.dtype,
        "threads": cfg.threads,
        "device": device,
        "n_operations": n_ops,
        "timeout": cfg.timeout,
        **{f"measure.{k}": v for k, v in asdict(cfg.measure).items()},
        "command": " ".join(entry.command),
    }


def operations_digest(entry: OperatorBenchmark, operations: Sequence[Operation]) -> str:
    """A short fingerprint of what a sweep measures: each operation's id and parameters, and the
    implementation's parameter order. Resuming only takes results from a run with the same fingerprint."""
    text = repr([list(entry.param_descr), [(op.id, op.op_type, op.params) for op in operations]])
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:16]


def sweep_tags(ctx: AppContext, kind: str, benchmark_name: str, implementation: str = "") -> dict[str, str]:
    from dlbench.system import hardware_tags

    tags = {**hardware_tags(), "dlbench.kind": kind, "dlbench.benchmark": benchmark_name, **ctx.extra_tags}
    if implementation:
        tags["dlbench.implementation"] = implementation
    if ctx.sweep_id:
        tags["dlbench.sweep"] = ctx.sweep_id
        tags["dlbench.job"] = ctx.job
    if ctx.overrides:
        tags["dlbench.overrides"] = " ".join(ctx.overrides)
    return tags


def measure_with_progress(
    entry: OperatorBenchmark,
    operations: Sequence[Operation],
    settings: RunSettings,
    workdir: Path,
    stem: str,
    quiet: bool,
) -> tuple[SweepResult, SweepFiles]:
    """``measure_operations`` with a progress bar fed by the rows the executable has written so far."""
    bar = progress(len(operations), f"{stem}", quiet=quiet)
    out_path = workdir / f"{stem}_out.csv"

    def poll() -> None:
        try:
            with out_path.open("rb") as handle:
                done = max(0, sum(1 for _ in handle) - 1)
        except OSError:
            return
        bar.update(max(0, min(done, len(operations)) - bar.n))

    try:
        return measure_operations(entry, operations, settings, workdir, stem=stem, on_poll=poll)
    finally:
        bar.close()


def log_sweep(
    run,
    cfg: DlbenchConfig,
    ctx: AppContext,
    operations,
    result: SweepResult,
    files: SweepFiles | None,
    title: str,
    kept: pd.DataFrame | None = None,
):
    """Everything measured goes to the run, whatever failed: metrics, tables, CSVs, stderr, plot.

    ``kept``: results of an earlier run that a resumed sweep did not measure again; they join this run's
    rows in ``results.csv`` (column ``source_run_id`` says which run measured each row).
    """
    import matplotlib.pyplot as plt

    frame = results_frame(operations, result, implementation=run.run_name)
    frame["source_run_id"] = run.run_id
    if kept is not None and len(kept):
        frame = pd.concat([kept, frame], ignore_index=True).sort_values("id", kind="stable", ignore_index=True)
    from dlbench.roofline import attach_roofline

    # arithmetic intensity and fraction of the roofline bound, when this system has a roofline run
    frame = attach_roofline(run, frame, cfg.dtype, f"{title}: roofline")
    ok = frame[frame["status"] == "ok"]
    run.log_metric_series("median_ms", ok["median_ms"].tolist(), ok["id"].tolist())
    flops_rows = ok[ok["gflops_per_s"].notna()]
    run.log_metric_series("gflops_per_s", flops_rows["gflops_per_s"].tolist(), flops_rows["id"].tolist())
    run.log_metrics(summary_metrics(frame))
    run.log_table(frame, "results.csv")
    for path in (files.input_csv, files.output_csv, files.stderr_txt) if files else ():
        if path.exists():
            run.log_artifact(path, "protocol")
    if ctx.config_yaml:
        run.log_text(ctx.config_yaml, "config.yaml")
    if result.run_error:
        run.log_text(result.run_error + "\n", "run_error.txt")
    failed = frame[frame["status"] != "ok"]
    if len(failed):
        run.log_table(failed[["id", "name", "error"]], "failed_operations.csv")
    if len(ok):
        fig = plot_results(frame, title)
        run.log_figure(fig, "results.png")
        plt.close(fig)
    return frame


RESUME_KEYS = ("benchmark", "implementation", "batch_size", "dtype", "device", "threads", "operations_sha1")


@dataclass(frozen=True)
class ResumePoint:
    """What an earlier run of the same sweep already measured: its ok rows of ``results.csv``."""

    run_id: str
    status: str
    kept: pd.DataFrame

    @property
    def done_ids(self) -> set[int]:
        return {int(i) for i in self.kept["id"]}


def _quoted(value: object) -> str:
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def find_resume_point(target, params: dict) -> ResumePoint | None:
    """The latest run in the experiment with the same benchmark, implementation, batch size, dtype, device,
    threads and operations, and the operations it measured successfully; None when there is none."""
    from dlbench.tracking import download_artifact, search_runs

    conditions = [f"params.{key} = {_quoted(params[key])}" for key in RESUME_KEYS]
    conditions.append("tags.`dlbench.kind` = 'operator_sweep'")
    runs = search_runs(target, " and ".join(conditions), max_results=1)
    if runs.empty:
        return None
    latest = runs.iloc[0]
    run_id, status = str(latest["run_id"]), str(latest["status"])
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = download_artifact(target, run_id, "results.csv", Path(tmp))
        except Exception as err:  # noqa: BLE001 - a run that logged no table has nothing to resume from
            log.warning("resume: run %s has no results.csv (%s); measuring everything", run_id, err)
            return ResumePoint(run_id, status, pd.DataFrame(columns=["id", "status", "source_run_id"]))
        previous = pd.read_csv(path)
    kept = previous[previous["status"] == "ok"].copy()
    if "source_run_id" not in kept:
        kept["source_run_id"] = run_id
    kept["source_run_id"] = kept["source_run_id"].fillna(run_id)
    return ResumePoint(run_id, status, kept)


def run_operator_sweep(cfg: DlbenchConfig, ctx: AppContext) -> int:
    from dlbench.tracking import TrackedRun, prepare_store, resolve_tracking

    assert cfg.benchmark is not None
    bench = cfg.benchmark
    device = resolve_device(cfg.device)
    registry = load_registry(ctx.config_dirs)
    implementations = select_implementations(registry, bench.op_type, cfg.backend, device)
    operations = operations_from_benchmark(bench, cfg.dtype)
    target = resolve_tracking(cfg.mlflow.tracking_uri, cfg.mlflow.experiment, ctx.start_dir)
    experiment_id = prepare_store(target, cfg.mlflow.connect_timeout_s)
    settings = run_settings(cfg, device)
    failures: list[str] = []
    for entry in implementations:
        reason = entry.unavailable_reason
        if reason:
            failures.append(f"{entry.name} is not available: {reason}")
            log.error("%s is not available: %s", entry.name, reason)
            continue
        run_name = cfg.mlflow.run_name or f"{bench.name}-{entry.name}-bs{cfg.batch_size}-{device}"
        params = sweep_params(cfg, entry, bench.name, len(operations), device)
        params["operations_sha1"] = operations_digest(entry, operations)
        tags = sweep_tags(ctx, "operator_sweep", bench.name, entry.name)
        workdir = ctx.output_dir / "protocol"
        resume = find_resume_point(target, params) if cfg.resume else None
        todo = list(operations)
        if resume is not None:
            todo = [op for op in operations if op.id not in resume.done_ids]
            tags["dlbench.resumed_from"] = resume.run_id
            log.info(
                "resuming %s run %s: %d of %d operations measured there, %d to measure",
                resume.status,
                resume.run_id,
                len(operations) - len(todo),
                len(operations),
                len(todo),
            )
        elif cfg.resume:
            log.info("resume=true: no earlier run of this sweep in %s; measuring everything", target.experiment)
        log.info("measuring %d %s operations with %s", len(todo), bench.op_type, entry.name)
        try:
            with TrackedRun(target, run_name, params, tags, experiment_id=experiment_id) as run:
                run.set_tags({"dlbench.run_id": run.run_id})
                if todo:
                    result, files = measure_with_progress(
                        entry, todo, settings, workdir, f"{entry.name}_{bench.name}", cfg.quiet
                    )
                else:
                    result, files = SweepResult({}), None
                kept = resume.kept if resume is not None else None
                frame = log_sweep(run, cfg, ctx, todo, result, files, run_name, kept=kept)
                if resume is not None:
                    run.log_metrics({"operations_resumed": float(len(operations) - len(todo))})
                print_summary(frame, run_name, run.run_id)
                raise_for_result(entry.name, result, f"{len(frame[frame.status == 'ok'])} operations were kept")
        except TaskFailed as err:
            failures.append(str(err))
            log.error("%s", err)
    if failures:
        raise TaskFailed("\n".join(failures))
    return 0


def raise_for_result(name: str, result: SweepResult, kept: str = "") -> None:
    """After logging: re-raise an interrupt, or fail with every run-wide and per-operation problem."""
    if result.interrupted:
        raise KeyboardInterrupt(f"{name} was interrupted" + (f"; {kept}" if kept else ""))
    if not result.ok:
        problems = [result.run_error] if result.run_error else []
        problems += [f"id {i}: {result.measurements[i].error}" for i in result.failed_ids]
        raise TaskFailed(f"{name}: " + "\n  ".join(problems))


def print_summary(frame, run_name: str, run_id: str) -> None:
    columns = [
        c for c in ("id", "name", "median_ms", "min_ms", "iqr_ms", "reps", "gflops_per_s", "status") if c in frame
    ]
    with __import__("pandas").option_context("display.max_rows", 200, "display.width", 160):
        print(f"\n{run_name} (MLflow run {run_id})")
        print(frame[columns].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
