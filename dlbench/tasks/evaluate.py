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
from pathlib import Path

import pandas as pd

from dlbench import PROJECT_ROOT
from dlbench.app import AppContext, TaskFailed
from dlbench.config import DlbenchConfig
from dlbench.evaluate import SGD_OP_TYPE, builtin_sgd_benchmark
from dlbench.model import Measurement

log = logging.getLogger(__name__)


def export_model(cfg: DlbenchConfig, entry, arguments: list[str], workdir: Path) -> Path:
    """Run the training script with ``--export-onnx`` (its own arguments, so the model is the one trained)."""
    from dlbench.protocol import run_command

    path = workdir / f"{entry.name}_bs{cfg.batch_size}.onnx"
    command = [*entry.command, *arguments, "--export-onnx", str(path)]
    result = run_command(
        command, timeout=cfg.timeout, env=_script_env(), cwd=workdir, stderr_path=workdir / "export_stderr.txt"
    )
    failure = result.describe_failure()
    if failure or not path.exists():
        tail = "\n".join(result.stderr.strip().splitlines()[-10:])
        raise TaskFailed(f"exporting {entry.name} to ONNX: the script {failure or 'wrote no model'}\n{tail}")
    return path


def _script_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p),
        "MLFLOW_RUN_ID": "",  # the instrumentation must not publish: this task logs one run itself
    }
    env.update(extra or {})
    return env


def run_training(cfg: DlbenchConfig, entry, arguments: list[str], workdir: Path) -> tuple[Path, object]:
    """The instrumented training with its profile window; returns the profile folder and the process."""
    from dlbench.instrument import BATCHES_FILE, ENV_BATCHES, ENV_DIR, ENV_WARMUP
    from dlbench.protocol import run_command

    profile_dir = workdir / "profile"
    shutil.rmtree(profile_dir, ignore_errors=True)
    profile_dir.mkdir(parents=True)
    env = _script_env(
        {
            ENV_WARMUP: str(cfg.profile.warmup),
            ENV_BATCHES: str(cfg.profile.batches),
            ENV_DIR: str(profile_dir),
            "DLBENCH_THREADS": str(cfg.threads),
        }
    )
    result = run_command(
        [*entry.command, *arguments], timeout=cfg.timeout, env=env, cwd=workdir, stderr_path=workdir / "stderr.txt"
    )
    failure = result.describe_failure()
    if failure or not (profile_dir / BATCHES_FILE).exists() or not list(profile_dir.glob("batch_*_ops.csv")):
        tail = "\n".join(result.stderr.strip().splitlines()[-10:])
        raise TaskFailed(
            f"training {entry.name}: the script {failure or 'wrote no profile'} ({profile_dir})"
            + (f"\n{tail}" if tail else "")
        )
    return profile_dir, result


def training_unfold_table(cfg: DlbenchConfig):
    """The unfold strategy table of ``cfg.unfold``; a training step always has its backward pass, so an
    empty table (``unfold=none``, the default of task=benchmark_model) means the shipped one here."""
    from dlbench.unfold import load_table

    table = load_table(cfg.unfold) if getattr(cfg, "unfold", None) else None
    if table is None or not any(table.rules.values()):
        table = load_table()
    return table


def match_table(cfg: DlbenchConfig):
    from dlbench.match import load_table

    node = cfg.match
    if node.operators:
        return load_table({"operators": node.operators, "framework": node.framework, "training": node.training})
    return load_table()


def measure_step(cfg: DlbenchConfig, ctx: AppContext, operations, device: str, run) -> tuple[dict, dict, object]:
    """Every operation some available benchmark of ``cfg.backend`` serves, measured; protocol files logged."""
    from dlbench.registry import load_registry
    from dlbench.sweep import measure_with_progress, run_settings
    from dlbench.tasks.benchmark_model import plan_benchmarks

    registry = load_registry(ctx.config_dirs)
    plan = plan_benchmarks(registry, operations, cfg.backend, device)
    settings = run_settings(cfg, device)
    measurements: dict[int, Measurement] = {}
    implementations: dict[int, str] = {}
    workdir = ctx.output_dir / "protocol"
    assignments = list(plan.assignments)
    served = {op.id for _, ops in assignments for op in ops}
    # the optimizer is PyTorch's whatever the backend: its in-place update has a built-in benchmark
    sgd = tuple(op for op in operations if op.op_type == SGD_OP_TYPE and op.id not in served)
    if sgd:
        assignments.append((builtin_sgd_benchmark(), sgd))
    for entry, ops in assignments:
        log.info("measuring %d operations with %s", len(ops), entry.name)
        result, files = measure_with_progress(entry, ops, settings, workdir, f"{entry.name}_evaluate", cfg.quiet)
        for op in ops:
            measurements[op.id] = result.measurements[op.id]
            implementations[op.id] = entry.name
        for path in (files.input_csv, files.output_csv, files.stderr_txt):
            if path.exists():
                run.log_artifact(path, "protocol")
        if result.interrupted:
            raise KeyboardInterrupt(f"{entry.name} was interrupted")
    return measurements, implementations, plan


def run(cfg: DlbenchConfig, ctx: AppContext) -> int:
    from dlbench.extract import ExtractionError, extract_operations
    from dlbench.match import match_profile, profile_per_step
    from dlbench.opdb import deduplicate
    from dlbench.plots import plot_predicted_vs_measured, plot_time_breakdown
    from dlbench.predict import (
        graph_facts,
        measured_step_ms,
        op_type_frame,
        prediction_frame,
        prediction_metrics,
        time_breakdown,
        training_step,
    )
    from dlbench.registry import load_registry
    from dlbench.sweep import resolve_device, sweep_tags
    from dlbench.tracking import TrackedRun, prepare_store, resolve_tracking
    from dlbench.training import check_profile_window, resolve_parameters
    from dlbench.unfold import unfold_operations

    bench = cfg.benchmark
    if bench is None or bench.kind != "training":
        raise TaskFailed("task=evaluate needs a training benchmark, e.g. +benchmark=resnet_cifar task=evaluate")
    registry = load_registry(ctx.config_dirs)
    try:
        entry = registry.training(bench.training)
    except KeyError as err:
        raise TaskFailed(f"benchmark {bench.name!r}: {err.args[0]}") from None
    check_profile_window(cfg)
    device = resolve_device(cfg.device)
    arguments = resolve_parameters(entry, cfg)
    table = match_table(cfg)
    unfold_table = training_unfold_table(cfg)
    workdir = ctx.output_dir / "evaluate" / bench.name
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)

    target = resolve_tracking(cfg.mlflow.tracking_uri, cfg.mlflow.experiment, ctx.start_dir)
    experiment_id = prepare_store(target, cfg.mlflow.connect_timeout_s)
    run_name = cfg.mlflow.run_name or f"evaluate-{bench.name}-{cfg.backend}-bs{cfg.batch_size}-{device}"
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
    tags = sweep_tags(ctx, "evaluation", bench.name)
    load_start = os.getloadavg()[0]
    if cfg.threads == 0 and load_start > (os.cpu_count() or 1):
        log.warning(
            "load average %.1f on %d cores and threads=0: OpenMP threads of an oversubscribed machine wait on each "
            "other and times swing many-fold; consider threads=1",
            load_start,
            os.cpu_count() or 1,
        )
    with TrackedRun(target, run_name, params, tags, experiment_id=experiment_id) as run:
        run.set_tags({"dlbench.run_id": run.run_id})
        if ctx.config_yaml:
            run.log_text(ctx.config_yaml, "config.yaml")
        model_path = export_model(cfg, entry, arguments, workdir)
        try:
            extraction = extract_operations(model_path, cfg.batch_size, training=True)
        except ExtractionError as err:
            raise TaskFailed(str(err)) from err
        forward = deduplicate(extraction.operations())
        unfolding = unfold_operations(forward, unfold_table)
        facts = graph_facts(model_path, cfg.batch_size).with_inferred_outputs(extraction.nodes)
        step = training_step(forward, unfolding, facts, table.training)
        run.set_tags({"dlbench.model_sha256": extraction.sha256})
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
        print_evaluation(run_name, run.run_id, per_type, metrics, uncovered, matched)
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
