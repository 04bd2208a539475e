"""task=evaluate: predict a training benchmark's step time from operator benchmarks and check it against
the instrumented training, as one MLflow run with per-operation and per-op_type tables and plots.

Steps: export the script's model to ONNX at the batch size, extract and unfold it into a training step's
operations, run the instrumented training (profile + unprofiled step times), measure the operations
with the chosen backend's benchmarks, match profiled operators to operations, log.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
from dataclasses import asdict

import pandas as pd

from dlbench.analysis import match
from dlbench.analysis.match import match_profile, profile_per_step
from dlbench.analysis.plots import plot_predicted_vs_measured, plot_time_breakdown
from dlbench.analysis.predict import (
    measured_step_ms,
    op_type_frame,
    prediction_frame,
    prediction_metrics,
    time_breakdown,
)
from dlbench.analysis.report import log_workload
from dlbench.config import DlbenchConfig
from dlbench.core.context import AppContext
from dlbench.core.device import resolve_device
from dlbench.core.errors import TaskFailed
from dlbench.core.values import Measurement
from dlbench.onnx import unfold
from dlbench.onnx.errors import ExtractionError
from dlbench.onnx.extract import extract_operations
from dlbench.onnx.opdb import deduplicate
from dlbench.onnx.step import graph_facts, training_step
from dlbench.operators.measure import measure_with_progress
from dlbench.operators.plan import plan_benchmarks
from dlbench.operators.registry import Registry, load_registry
from dlbench.operators.runner import run_settings
from dlbench.tracking.runs import job_run_name, open_run
from dlbench.training.scripts import export_model, run_training, training_entry

#: The optimizer update's op_type; training runs PyTorch's optimizer whatever the backend measures
SGD_OP_TYPE = "SGD"

log = logging.getLogger(__name__)


def training_unfold_table(cfg: DlbenchConfig):
    """The unfold strategy table of ``cfg.unfold``; a training step always has its backward pass, so an
    empty table (``unfold=none``, the default of task=benchmark_model) means the shipped one here."""
    table = unfold.load_table(cfg.unfold) if getattr(cfg, "unfold", None) else None
    if table is None or not any(table.rules.values()):
        table = unfold.load_table()
    return table


def match_table(cfg: DlbenchConfig):
    node = cfg.match
    if node.operators:
        return match.load_table({"operators": node.operators, "framework": node.framework, "training": node.training})
    return match.load_table()


def measure_step(cfg: DlbenchConfig, ctx: AppContext, operations, device: str, run) -> tuple[dict, dict, object]:
    """Every operation some available benchmark of ``cfg.backend`` serves, measured; protocol files logged."""
    registry = load_registry(ctx.config_dirs)
    plan = plan_benchmarks(registry, operations, cfg.backend, device)
    settings = run_settings(cfg, device)
    measurements: dict[int, Measurement] = {}
    implementations: dict[int, str] = {}
    workdir = ctx.output_dir / "protocol"
    assignments = list(plan.assignments)
    served = {op.id for _, ops in assignments for op in ops}
    sgd = tuple(op for op in operations if op.op_type == SGD_OP_TYPE and op.id not in served)
    if sgd:
        assignments.append((optimizer_benchmark(registry, device), sgd))
    for entry, ops in assignments:
        log.info("measuring %d operations with %s", len(ops), entry.name)
        result, files = measure_with_progress(entry, ops, settings, workdir, f"{entry.name}_evaluate", cfg.quiet)
        for op in ops:
            measurements[op.id] = result.measurements[op.id]
            implementations[op.id] = entry.name
        for path in (files.input_csv, files.output_csv, files.stderr_txt, files.samples_csv):
            if path is not None and path.exists():
                run.log_artifact(path, "protocol")
        if result.interference is not None and result.interference.noisy:  # any noisy benchmark: a noisy run
            run.set_tags({"dlbench.noisy": "true", "dlbench.noisy_reason": result.interference.reason})
        if result.interrupted:
            raise KeyboardInterrupt(f"{entry.name} was interrupted")
    return measurements, implementations, plan


def optimizer_benchmark(registry: Registry, device: str):
    """The torch entry that times PyTorch's in-place optimizer update: training runs it whatever
    ``backend`` measures the other operations."""
    entries = registry.serving(SGD_OP_TYPE, "torch", device)
    if not entries:
        raise TaskFailed(f"no torch benchmark of {SGD_OP_TYPE} on {device} is registered (see conf/registry/)")
    return entries[0]


def run(cfg: DlbenchConfig, ctx: AppContext) -> int:
    bench = cfg.benchmark
    if bench is None or bench.kind != "training":
        raise TaskFailed("task=evaluate needs a training benchmark, e.g. +benchmark=resnet_cifar task=evaluate")
    registry = load_registry(ctx.config_dirs)
    entry, arguments = training_entry(cfg, registry)
    device = resolve_device(cfg.device)
    table = match_table(cfg)
    unfold_table = training_unfold_table(cfg)
    workdir = ctx.output_dir / "evaluate" / bench.name
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)

    name = job_run_name(cfg, bench.name, ["eval", cfg.backend], device)
    params = {
        "benchmark": bench.name,
        "training": entry.name,
        "backend": cfg.backend,
        "batch_size": cfg.batch_size,
        "dtype": cfg.dtype,
        "threads": cfg.threads,
        "device": device,
        "steps": cfg.steps,
        **{f"profile.{k}": v for k, v in asdict(cfg.profile).items()},
        **{f"measure.{k}": v for k, v in asdict(cfg.measure).items()},
        **{f"match.training.{k}": v for k, v in table.training.items()},
        "match_table": table.source,
        "unfold_table": unfold_table.source,
    }
    load_start = os.getloadavg()[0]
    if cfg.threads == 0 and load_start > (os.cpu_count() or 1):
        log.warning(
            "load average %.1f on %d cores and threads=0: OpenMP threads of an oversubscribed machine wait on each "
            "other and times swing many-fold; consider threads=1",
            load_start,
            os.cpu_count() or 1,
        )
    with open_run(cfg, ctx, kind="evaluation", benchmark=bench.name, name=name, params=params) as run:
        model_path = export_model(cfg, entry, arguments, workdir)
        try:
            extraction = extract_operations(model_path, cfg.batch_size, training=True)
        except ExtractionError as err:
            raise TaskFailed(str(err)) from err
        forward = deduplicate(extraction.operations())
        unfolding = unfold.unfold_operations(forward, unfold_table)
        facts = graph_facts(model_path, cfg.batch_size).with_inferred_outputs(extraction.nodes)
        step = training_step(forward, unfolding, facts, table.training)
        run.set_tags({"dlbench.model_sha256": extraction.sha256})
        log_workload(run, step.operations, f"{bench.name}-training-step", str(model_path))
        run.log_params({"model_nodes": extraction.total_nodes, "operations": len(step.operations)})
        log.info("training %s for %d steps (profiling %d)", entry.name, cfg.steps, cfg.profile.batches)
        profile_dir, process = run_training(cfg, entry, arguments, workdir)
        measurements, implementations, plan = measure_step(cfg, ctx, step.operations, device, run)

        time_column = "self_device_us" if device == "cuda" else "self_cpu_us"
        profile = profile_per_step(profile_dir, time_column)
        weights = {
            op.id: measurements[op.id].stats.median_ms * op.count
            for op in step.operations
            if op.id in measurements and measurements[op.id].ok
        }
        matched = match_profile(profile, step.operations, step.passes, table, weights)
        frame = prediction_frame(step, measurements, implementations, matched.assigned_us)
        per_type = op_type_frame(frame)
        batches = pd.read_csv(profile_dir / "batches.csv")
        measured_ms, profiled_ms = measured_step_ms(batches, cfg.profile.warmup)
        served_nodes = sum(
            count for op_type, count in extraction.node_counts.items() if registry.serving(op_type, cfg.backend, device)
        )
        metrics = prediction_metrics(frame, matched, measured_ms, profiled_ms, extraction.total_nodes, served_nodes)
        breakdown = time_breakdown(frame, matched, profiled_ms)
        uncovered = sorted(set(frame.loc[frame["status"] != "ok", "op_type"]))

        metrics.update({"load_average_start": load_start, "load_average_end": os.getloadavg()[0]})
        run.log_metrics({k: v for k, v in metrics.items() if v == v})
        run.log_table(frame, "operations.csv")
        run.log_table(per_type, "op_types.csv")
        run.log_table(breakdown, "time_breakdown.csv")
        run.log_table(matched.rows, "profile_matching.csv")
        run.log_table(matched.unmatched(), "unmatched_ops.csv")
        run.log_artifact(model_path, "model")
        for path in sorted(profile_dir.glob("*.csv")):
            run.log_artifact(path, "profile")
        for path in (workdir / "stderr.txt", workdir / "export_stderr.txt"):
            if path.exists():
                run.log_artifact(path)
        notes = list(step.notes)
        if uncovered:
            notes.append(f"op types without a {cfg.backend} benchmark measurement: {', '.join(uncovered)}")
        for name, reason in plan.unavailable.items():
            notes.append(f"benchmark {name} not available here: {reason}")
        run.log_text("\n".join(notes) + "\n", "notes.txt")
        run.set_tags({"dlbench.uncovered_op_types": ",".join(uncovered)})
        import matplotlib.pyplot as plt

        title = f"{bench.name} bs{cfg.batch_size} {cfg.backend} {device}"
        fig = plot_predicted_vs_measured(per_type, title)
        run.log_figure(fig, "predicted_vs_measured.png")
        plt.close(fig)
        fig = plot_time_breakdown(breakdown, title, measured_ms, metrics["step_time_predicted_ms"])
        run.log_figure(fig, "time_breakdown.png")
        plt.close(fig)
        print_evaluation(run.run_name, run.run_id, per_type, metrics, uncovered, matched)
        failed = frame[frame["status"] == "failed"]
        if len(failed):
            log.warning("%d operations failed to measure; see operations.csv", len(failed))
    return 0


def print_evaluation(run_name: str, run_id: str, per_type: pd.DataFrame, metrics: dict, uncovered, matched) -> None:
    def fmt(value: float) -> str:
        return f"{value:.4g}" if isinstance(value, float) and math.isfinite(value) else str(value)

    with pd.option_context("display.width", 160, "display.max_rows", 100):
        print(f"\n{run_name} (MLflow run {run_id})")
        print(per_type.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(
        f"step time: predicted {fmt(metrics['step_time_predicted_ms'])} ms, "
        f"measured {fmt(metrics['step_time_measured_ms'])} ms (median unprofiled step), "
        f"error {fmt(metrics['prediction_error_pct'])}%"
    )
    print(
        f"profiled step {fmt(metrics['step_time_profiled_ms'])} ms: unexplained {fmt(metrics['unexplained_time_pct'])}%"
        f" (framework {fmt(metrics['framework_time_pct'])}%, unmatched operators "
        f"{fmt(metrics['unmatched_operator_time_pct'])}%, outside operators {fmt(metrics['outside_operators_pct'])}%),"
        f" uncovered {fmt(metrics['uncovered_time_pct'])}%"
    )
    if uncovered:
        print(f"op types without a benchmark measurement: {', '.join(uncovered)}")
    top = matched.unmatched().head(5)
    if len(top):
        print(
            "costliest unmatched operators: "
            + ", ".join(f"{r.name} {r.time_us / 1e3:.3g} ms" for r in top.itertuples())
        )
