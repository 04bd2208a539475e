"""task=benchmark_model: extract one or several ONNX models (optionally unfolded for training), run every
available registry benchmark of the chosen backend that serves their operators, once for all their
operations, and log one run per benchmark under each model's extraction run. An operation already measured
on this system with the same implementation and settings (the reuse store) or earlier in the same command
is reused, not measured again."""

from __future__ import annotations

import logging
import sqlite3
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dlbench import __version__
from dlbench.analysis.report import log_sweep, log_workload, print_summary
from dlbench.analysis.results import interference_record, summary_metrics, time_by_op_type
from dlbench.config import DlbenchConfig
from dlbench.core.context import AppContext
from dlbench.core.device import resolve_device
from dlbench.core.errors import TaskFailed
from dlbench.core.interference import InterferenceReport
from dlbench.core.values import Measurement, Operation, SweepResult
from dlbench.onnx.opdb import operations_frame
from dlbench.onnx.report import (
    extract,
    extraction_params,
    extraction_tags,
    log_extraction,
    model_paths,
    print_extraction,
)
from dlbench.onnx.unfold import Unfolding, load_table, unfold_operations
from dlbench.operators import workload
from dlbench.operators.measure import measure_with_progress, raise_for_result, sweep_params
from dlbench.operators.passes import with_passes
from dlbench.operators.plan import (
    Coverage,
    coverage_frame,
    model_coverage,
    plan_benchmarks,
    print_coverage,
    time_share_metrics,
)
from dlbench.operators.registry import OperatorBenchmark, load_registry
from dlbench.operators.reuse import FILE_NAME, Reused, ReuseKey, ReuseStore, costs, operation_params
from dlbench.operators.runner import run_settings
from dlbench.tracking.local_files import local_folder
from dlbench.tracking.runs import job_run_name, open_run
from dlbench.tracking.store import resolve_tracking

log = logging.getLogger(__name__)

EXTRACTION_RUN_TAG = "dlbench.extraction_run_id"


def unfolding_table(cfg: DlbenchConfig) -> Any:
    """The unfold strategy table chosen in the config (``unfold``: a map with ``strategies``), or None
    for forward operations only."""
    table = getattr(cfg, "unfold", None)
    if not table:
        return None
    loaded = load_table(table)
    return loaded if loaded.rules else None


@dataclass
class Reuse:
    """Results this command can take instead of measuring: the store (unless ``reuse=false``) and what the
    command itself measured so far (always: one command measures each distinct operation once)."""

    store: ReuseStore | None
    system_id: str
    memo: dict[tuple, Reused] = field(default_factory=dict)
    reused: int = 0
    measured: int = 0
    saved_s: float = 0.0

    def key(self, cfg: DlbenchConfig, entry: OperatorBenchmark, device: str) -> ReuseKey:
        settings = {k: v for k, v in asdict(cfg.measure).items() if k != "memory_fraction"}
        settings["keep_heap"] = int(cfg.keep_heap)  # another allocator behaviour is another measurement
        settings["fp32_math"] = cfg.fp32_math  # float32 on TF32 tensor cores is another measurement
        command = " ".join([*entry.command, "|", *entry.param_descr])
        return ReuseKey(self.system_id, entry.name, command, device, cfg.dtype, cfg.threads, settings, __version__)

    def lookup(self, key: ReuseKey, operations: list[Operation]) -> dict[int, Reused]:
        found = {op.id: self.memo[(key.values(), op.op_type, operation_params(op))] for op in operations
                 if (key.values(), op.op_type, operation_params(op)) in self.memo}  # fmt: skip
        rest = [op for op in operations if op.id not in found]
        if self.store is not None and rest:
            try:
                found.update(self.store.lookup(key, rest))
            except (sqlite3.Error, OSError) as err:
                log.warning("reuse store %s not read (%s); measuring everything", self.store.path, err)
        return found

    def remember(self, key: ReuseKey, operations: list[Operation], result: SweepResult, warmup: int, run_id: str):
        seconds = costs(operations, result, warmup)
        for op in operations:
            m = result.measurements.get(op.id)
            if m is not None and m.ok and m.stats is not None:
                memo_key = (key.values(), op.op_type, operation_params(op))
                self.memo[memo_key] = Reused(m.stats, seconds.get(op.id, 0.0), run_id)
        if self.store is not None:
            try:
                self.store.record(key, operations, result, seconds, run_id)
            except (sqlite3.Error, OSError) as err:
                log.warning("reuse store %s not written (%s); the results are in the MLflow run", self.store.path, err)


def reuse_store_path(cfg: DlbenchConfig, ctx: AppContext) -> Path:
    """``reuse_store``, else ``dlbench_reuse.db`` in dlbench's own folder ``.dlbench/`` (beside a SQLite MLflow
    store, else where dlbench started: :func:`dlbench.tracking.local_files.local_folder`)."""
    if cfg.reuse_store:
        path = Path(cfg.reuse_store).expanduser()
        return path if path.is_absolute() else ctx.start_dir / path
    uri = resolve_tracking(cfg.mlflow.tracking_uri, cfg.mlflow.experiment, ctx.start_dir).uri
    return local_folder(uri, ctx.start_dir) / FILE_NAME


def run(cfg: DlbenchConfig, ctx: AppContext) -> int:
    from dlbench.tracking.system import hardware_tags

    paths = model_paths(cfg, ctx)
    table = unfolding_table(cfg)
    store = ReuseStore(reuse_store_path(cfg, ctx)) if cfg.reuse else None
    reuse = Reuse(store, hardware_tags().get("system.id", ""))
    failures, rows = [], []
    for path in paths:
        start = time.perf_counter()
        try:
            coverage = benchmark_model(cfg, ctx, table, path, reuse)
        except TaskFailed as err:
            if len(paths) == 1:
                raise
            failures.append(str(err))
            log.error("%s", err)
            continue
        rows.append((coverage, time.perf_counter() - start))
    if len(paths) > 1:
        print_zoo(rows, reuse, cfg.backend)
    if failures:
        raise TaskFailed("\n".join(failures))
    return 0


def print_zoo(rows: list[tuple[Coverage, float]], reuse: Reuse, backend: str) -> None:
    print(f"\n{'model':28s} {'nodes':>6s} {'const':>6s} {'layout':>6s} {'served':>6s} {'unserved':>8s} "
          f"{'served%':>8s} {'wall_s':>7s}")  # fmt: skip
    for c, seconds in rows:
        print(f"{c.model[:28]:28s} {c.total:6d} {c.constant:6d} {c.layout:6d} {c.served:6d} "
              f"{c.unserved + c.skipped:8d} {100 * c.served_fraction:7.1f}% {seconds:7.1f}")  # fmt: skip
    print(
        f"operations: {reuse.measured} measured, {reuse.reused} reused (saving about {reuse.saved_s:.1f} s of "
        f"measuring); backend {backend!r}"
    )
    for warning in reuse.store.warnings if reuse.store else ():
        print(f"warning: {warning}")


def benchmark_model(
    cfg: DlbenchConfig, ctx: AppContext, table: Any = None, path: Path | None = None, reuse: Reuse | None = None
) -> Coverage:
    """Extract, plan, and measure one model; ``table`` (an :class:`dlbench.onnx.unfold.UnfoldTable`) adds the
    backward problems of training. Returns the model's coverage; raises :class:`TaskFailed` naming every
    benchmark that failed (the others' results are logged)."""
    reuse = reuse or Reuse(None, "")
    extraction, forward = extract(cfg, ctx, path)
    unfolding = unfold_operations(forward, table) if table is not None else Unfolding(tuple(forward), {})
    operations = workload.with_precision(
        unfolding.operations, cfg.dtype, cfg.amp, cfg.channels_last, resolve_device(cfg.device)
    )
    frame = operations_frame(operations, unfolding.sources)
    print_extraction(extraction, frame)

    device = resolve_device(cfg.device)
    registry = load_registry(ctx.config_dirs)
    plan = plan_benchmarks(registry, operations, cfg.backend, device)
    summary = model_coverage(extraction, plan.served_types)
    print_coverage(coverage_frame(extraction, plan), plan, cfg.backend, device, summary)

    failures: list[str] = []
    served = {op.id for _, ops in plan.assignments for op in ops}
    # the sum over benchmarks, and the operations without a time in it (unserved ones included)
    tally = _ModelTally(missing=sum(1 for op in operations if op.id not in served))
    before = (reuse.reused, reuse.measured, reuse.saved_s)
    params = {
        **extraction_params(extraction, forward),
        "backend": cfg.backend,
        "device": device,
        "unfold": table is not None,
        "operations_measured": len(operations),
        "benchmarks": ",".join(entry.name for entry, _ in plan.assignments),
        "reuse": cfg.reuse,
    }
    model_tags = extraction_tags(extraction)
    name = job_run_name(cfg, extraction.model_name, [cfg.backend], device)
    with open_run(
        cfg, ctx, kind="model_benchmark", benchmark=extraction.model_name, name=name, params=params, tags=model_tags
    ) as parent:
        log_extraction(parent, ctx.output_dir, extraction, frame)
        parent.log_metrics(summary.metrics())
        for entry, entry_ops in plan.assignments:
            try:
                _measure_entry(cfg, ctx, parent, _Model(extraction, unfolding, model_tags, device), entry, entry_ops,
                               reuse, tally)  # fmt: skip
            except TaskFailed as err:
                failures.append(str(err))
                log.error("%s", err)
        coverage = _log_model_totals(parent, coverage_frame(extraction, plan, tally.measured), tally, reuse, before)
    if not plan.assignments:
        failures.append(nothing_served(cfg.backend, device, extraction.path, coverage))
    if failures:
        raise TaskFailed("\n".join(failures))
    return summary


@dataclass
class _ModelTally:
    """What the benchmarks of one model measured so far, summed into the model's run."""

    total_ms: float = 0.0
    missing: int = 0
    measured: list[pd.DataFrame] = field(default_factory=list)
    reports: list[tuple[str, InterferenceReport]] = field(default_factory=list)

    def add(self, entry_name: str, results: pd.DataFrame, result: SweepResult) -> None:
        totals = summary_metrics(results)
        self.total_ms += totals.get("total_time_ms", totals.get("partial_total_time_ms", 0.0))
        self.missing += int(totals["operations_missing"])
        if result.interference is not None:
            self.reports.append((entry_name, result.interference))
        self.measured.append(results)


@dataclass(frozen=True)
class _Model:
    """One model being benchmarked: its extraction, its unfolding, its runs' tags, the device."""

    extraction: Any
    unfolding: Unfolding
    tags: dict[str, str]
    device: str


def _measure_entry(
    cfg: DlbenchConfig, ctx: AppContext, parent: Any, model: _Model, entry: OperatorBenchmark,
    entry_ops: list[Operation], reuse: Reuse, tally: _ModelTally,
) -> None:  # fmt: skip
    """One benchmark's operations of the model in a child run: reused where the store has them, the others
    measured; raises :class:`TaskFailed` (the child run ends FAILED) after its results are counted."""
    extraction = model.extraction
    ops = with_passes(entry_ops, entry.passes, cfg.dtype)  # FLOPs of every pass one time covers
    run_name = job_run_name(cfg, extraction.model_name, [entry.name], model.device)
    child_params = {
        **sweep_params(cfg, entry, extraction.model_name, len(ops), model.device),
        "op_type": ",".join(sorted({op.op_type for op in ops})),
        "model_sha256": extraction.sha256,
    }
    with open_run(
        cfg, ctx, kind="model_benchmark", benchmark=extraction.model_name, name=run_name,
        params=child_params, implementation=entry.name,
        tags={**model.tags, EXTRACTION_RUN_TAG: parent.run_id}, parent_run_id=parent.run_id,
    ) as child:  # fmt: skip
        op_types = "+".join(sorted({op.op_type.lower() for op in ops}))
        log_workload(child, ops, f"{extraction.model_name}-{op_types}", str(extraction.path))
        key = reuse.key(cfg, entry, model.device)
        found = reuse.lookup(key, list(ops))
        to_measure = [op for op in ops if op.id not in found]
        result, files = SweepResult({}), None
        if to_measure:
            result, files = measure_with_progress(
                entry, to_measure, run_settings(cfg, model.device), ctx.output_dir / "protocol",
                f"{entry.name}_{extraction.model_name}", cfg.quiet,
            )  # fmt: skip
            reuse.remember(key, to_measure, result, cfg.measure.warmup, child.run_id)
        combined = SweepResult(
            {**result.measurements, **{i: Measurement(i, r.stats) for i, r in found.items()}},
            run_error=result.run_error,
            stderr=result.stderr,
            interrupted=result.interrupted,
            extra={**result.extra, "reused": tuple(found)},
            interference=result.interference,  # the record of what this run measured
        )
        results = log_sweep(child, cfg, ops, combined, files, run_name)
        results.insert(4, "pass", [model.unfolding.pass_of(op.id) for op in ops])
        results["reused_from_run"] = [found[op.id].run_id if op.id in found else "" for op in ops]
        child.log_table(results, "results.csv")
        child.log_metrics({"operations_reused": float(len(found)), "operations_new": float(len(to_measure))})
        print_summary(results, run_name, child.run_id, result)
        tally.add(entry.name, results, result)
        reuse.reused += len(found)
        reuse.measured += len(to_measure)
        reuse.saved_s += sum(r.cost_s for r in found.values())
        raise_for_result(entry.name, result)


def _log_model_totals(
    parent: Any, coverage: pd.DataFrame, tally: _ModelTally, reuse: Reuse, before: tuple[int, int, float]
) -> pd.DataFrame:
    """The model's run: its coverage, totals over benchmarks, interference and reuse; returns the coverage."""
    parent.log_table(coverage, "coverage.csv")
    interference, noisy = interference_record(tally.reports)
    if tally.reports:
        parent.set_tags(noisy)
    measured, missing = tally.measured, tally.missing
    busy = sum(int(frame["machine_busy"].eq(True).sum()) for frame in measured if "machine_busy" in frame)
    total = {"partial_model_total_ms" if missing else "model_total_ms": tally.total_ms}
    reused, new, saved = reuse.reused - before[0], reuse.measured - before[1], reuse.saved_s - before[2]
    parent.log_metrics({
        **total, "operations_missing": float(missing), "totals_complete": float(not missing), **interference,
        **({"operations_machine_busy": float(busy)} if tally.reports else {}),
        **time_by_op_type(measured), **time_share_metrics(coverage),
        "operations_reused": float(reused), "operations_new": float(new), "reuse_saved_s": saved,
    })  # fmt: skip
    if measured:
        parent.log_table(pd.concat(measured, ignore_index=True), "model_results.csv")
    print(
        f"\nMLflow run {parent.run_id} ({parent.target.uri}, experiment {parent.target.experiment}); "
        f"sum over benchmarks of median x count: {model_total_text(tally.total_ms, missing)}; operations: "
        f"{new} measured, {reused} reused (about {saved:.1f} s of measuring saved)"
    )
    return coverage


def model_total_text(total_ms: float, missing: int) -> str:
    if missing:
        return f"NA ({missing} operations without a time; the others sum to {total_ms:.4g} ms)"
    return f"{total_ms:.4g} ms"


def nothing_served(backend: str, device: str, path: str, coverage: pd.DataFrame) -> str:
    """Why nothing was measured, naming what the model needs."""
    needed = coverage[(coverage["unserved"] > 0) | (coverage["skipped"] > 0)]
    if needed.empty:
        return f"{path}: nothing to measure: every node is a constant or layout-only"
    wanted = ", ".join(f"{t} ({int(u) + int(s)})" for t, u, s in zip(
        needed["op_type"], needed["unserved"], needed["skipped"], strict=True))  # fmt: skip
    skipped = int(needed["skipped"].sum())
    note = f"; {skipped} nodes were not extracted (see the notes above)" if skipped else ""
    return (
        f"no available {backend!r} benchmark on {device} serves any operator of {path}; it needs: {wanted}{note}. "
        f"`python -m dlbench task=list` shows what is registered; try another backend=..."
    )
