"""task=evaluate: predict a training benchmark's step time from operator benchmarks and check it against
the instrumented training, as one MLflow run with per-operation and per-op_type tables and plots.

Steps: run the instrumented training (profile, unprofiled step times, what the script ran with, and its
network exported to ONNX by the context manager), extract and unfold the network into a training step's
operations, measure them with the chosen backend's benchmarks, match profiled operators to operations, log.
"""

from __future__ import annotations

import logging
import os
import shlex
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from dlbench.analysis import data_parallel as ddp_model
from dlbench.analysis import match
from dlbench.analysis.causes import CauseCheck, outlier_findings
from dlbench.analysis.evaluation import Evaluation, log_evaluation, print_evaluation
from dlbench.analysis.match import match_profile
from dlbench.analysis.predict import (
    FRAMEWORK_MODES,
    FRAMEWORK_OPS,
    framework_terms,
    measured_step_ms,
    prediction_frame,
    prediction_metrics,
    prediction_terms,
)
from dlbench.analysis.ran_as import step_as_ran
from dlbench.analysis.ran_as_tensors import placed_as_ran
from dlbench.analysis.report import log_workload
from dlbench.analysis.results import MachineRecord, interference_record
from dlbench.analysis.step_interval import StepRounds, interval_metrics, pooled_step_ms, predicted_per_round
from dlbench.analysis.step_run import not_costed_time, ran_params, read_step_profile, step_run
from dlbench.analysis.timeline import gpu_step, host_framework_ms, traced_lanes
from dlbench.config import DlbenchConfig
from dlbench.core.context import AppContext
from dlbench.core.cores import physical_cores
from dlbench.core.device import resolve_device
from dlbench.core.dtypes import DTYPE_BYTES
from dlbench.core.errors import ConfigurationError, TaskFailed
from dlbench.core.folders import fresh_folder
from dlbench.core.values import Operation
from dlbench.onnx import unfold
from dlbench.onnx.errors import ExtractionError
from dlbench.onnx.extract import extract_operations
from dlbench.onnx.opdb import deduplicate
from dlbench.onnx.patterns import fuse_exported_gelus
from dlbench.onnx.step import graph_facts, training_step, with_dtype_costs
from dlbench.operators.collectives import measure_allreduce, measure_gradient_copies
from dlbench.operators.footprint_file import rotation_notes, with_rotation_columns
from dlbench.operators.launch import FRAMEWORK_OUT, read_launch_ms
from dlbench.operators.measure import measure_with_progress
from dlbench.operators.plan import model_coverage
from dlbench.operators.reference import Drift
from dlbench.operators.registry import Registry, load_registry
from dlbench.operators.runner import run_settings
from dlbench.operators.step_benchmarks import measure_reference, measure_step
from dlbench.operators.step_rounds import step_launch_ms
from dlbench.tracking.local_files import keep_model
from dlbench.tracking.runs import job_run_name, open_run
from dlbench.training.facts import effective_params, script_params
from dlbench.training.profile import BATCHES_FILE
from dlbench.training.scripts import (
    MIN_STEADY_STEPS,
    TrainingRounds,
    TrainingRun,
    check_ran_in_dtype,
    check_steady_steps,
    check_training_dtype,
    run_training,
    training_entry,
)
from dlbench.training.threads import ThreadAgreement

FRAMEWORK_OP_TYPE = "FrameworkOverhead"

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


def measure_framework(
    cfg: DlbenchConfig, ctx: AppContext, registry: Registry, device: str, run, machine: MachineRecord
) -> dict[str, float]:
    """ms per one-element operator of PyTorch's plain dispatch, autograd recording and autograd engine (the
    FrameworkOverhead benchmark of the torch backend: training runs PyTorch whatever ``backend`` measures)."""
    entries = registry.serving(FRAMEWORK_OP_TYPE, "torch", device)
    if not entries or entries[0].unavailable_reason:
        log.warning("no torch %s benchmark on %s: the prediction has no framework terms", FRAMEWORK_OP_TYPE, device)
        return {}
    operations = [
        Operation(mode, FRAMEWORK_OP_TYPE, (("ops", FRAMEWORK_OPS), ("mode", mode)), name=f"framework_{name}")
        for name, mode in FRAMEWORK_MODES.items()
    ]
    result, files = measure_with_progress(
        entries[0], operations, run_settings(cfg, device), ctx.output_dir / "protocol", "framework", cfg.quiet
    )
    run.log_files(files.existing(), "protocol")
    machine.add(entries[0].name, result, operations)
    if result.interrupted:
        raise KeyboardInterrupt(f"{entries[0].name} was interrupted")
    return {
        name: result.measurements[mode].stats.median_ms / FRAMEWORK_OPS
        for name, mode in FRAMEWORK_MODES.items()
        if result.measurements[mode].ok
    }


def evaluation_params(cfg: DlbenchConfig, entry, device: str, table, unfold_table) -> dict[str, object]:
    """What dlbench decides about the evaluation; what the script ran with comes from its own report."""
    return {
        "benchmark": cfg.benchmark.name if cfg.benchmark else "",
        "training": entry.name,
        "backend": cfg.backend,
        "benchmark_device": device,
        "threads_requested": cfg.threads,
        "keep_heap": cfg.keep_heap,
        "benchmark_dtype": cfg.dtype,
        "command": shlex.join(entry.command),
        **{f"profile.{k}": v for k, v in asdict(cfg.profile).items()},
        **{f"evaluate.outliers.{k}": v for k, v in asdict(cfg.evaluate.outliers).items()},
        "evaluate.rounds": cfg.evaluate.rounds,
        "evaluate.caches": cfg.evaluate.caches,
        **{f"measure.{k}": v for k, v in asdict(cfg.measure).items()},
        **{f"match.training.{k}": v for k, v in table.training.items()},
        "match_table": table.source,
        "unfold_table": unfold_table.source,
    }


def with_evaluation_caches(cfg: DlbenchConfig) -> DlbenchConfig:
    """The config the evaluation measures with: ``measure.caches`` is ``evaluate.caches`` (and logged so)."""
    if cfg.evaluate.caches != "hot" and cfg.backend != "torch":
        raise ConfigurationError(
            f"backend={cfg.backend} times its kernels with hot caches only, and evaluate.caches={cfg.evaluate.caches} "
            "needs the embedded torch kernels: add evaluate.caches=hot, or use backend=torch"
        )
    return replace(cfg, measure=replace(cfg.measure, caches=cfg.evaluate.caches))


@dataclass(frozen=True)
class Setup:
    """What an evaluation decides before it opens its run: the script, its arguments, where it trains."""

    registry: Registry
    entry: Any
    arguments: list[str]
    device: str
    table: Any
    unfold_table: Any
    workdir: Path
    load_start: float


@dataclass(frozen=True)
class TrainedStep:
    """The instrumented training and the training step extracted from the network it exported."""

    trained: TrainingRun
    threads: ThreadAgreement
    bench_cfg: DlbenchConfig
    batches: pd.DataFrame
    measured_ms: float
    profiled_ms: float
    batch_size: int
    extraction: Any
    facts: Any
    step: Any
    placed: Any
    profile: pd.DataFrame
    folded: pd.DataFrame
    notes: tuple[str, ...]


def prepare(cfg: DlbenchConfig, ctx: AppContext) -> Setup:
    """The checks made before anything runs, and the evaluation's working folder (a fresh one)."""
    bench = cfg.benchmark
    if bench is None or bench.kind != "training":
        raise ConfigurationError(
            "task=evaluate needs a training benchmark (e.g. +benchmark=resnet_cifar task=evaluate) or, for a served "
            "model's latency, a model file (task=evaluate model=X.onnx, dispatched to tasks/inference.py)"
        )
    registry = load_registry(ctx.config_dirs)
    entry, arguments = training_entry(cfg, registry)
    check_training_dtype(cfg, entry)
    check_steady_steps(cfg, entry)
    workdir = fresh_folder(ctx.output_dir / "evaluate", bench.name)
    load_start = os.getloadavg()[0]
    if cfg.threads == 0 and load_start > (os.cpu_count() or 1):
        log.warning(
            "load average %.1f on %d cores and threads=0: OpenMP threads of an oversubscribed machine wait on each "
            "other and times swing many-fold; consider threads=1",
            load_start,
            os.cpu_count() or 1,
        )
    device = resolve_device(cfg.device)
    return Setup(registry, entry, arguments, device, match_table(cfg), training_unfold_table(cfg), workdir, load_start)


def train_step(cfg: DlbenchConfig, setup: Setup, run, params: dict[str, object]) -> TrainedStep:
    """Train the script under the profiler (its network exported; its tensors recorded in the last warm-up batch
    when the outliers' causes are checked) and make its network a training step's operations."""
    entry, bench_name = setup.entry, cfg.benchmark.name  # type: ignore[union-attr]
    log.info("training %s (profiling %d batches after %d)", entry.name, cfg.profile.batches, cfg.profile.warmup)
    stats = cfg.evaluate.outliers.causes and cfg.profile.warmup > 0
    trained = run_training(cfg, entry, setup.arguments, setup.workdir, export=True, tensor_stats=stats)
    run.log_params(script_params(trained.facts, params))
    check_ran_in_dtype(cfg, entry, trained.facts)
    threads = ThreadAgreement.of(cfg.threads, trained.facts)  # the benchmarks run with the script's threads
    thread_notes = threads.announce(run)
    batches = pd.read_csv(trained.profile_dir / BATCHES_FILE)
    measured_ms, profiled_ms, steady = measured_step_ms(batches, cfg.profile.warmup)
    if steady < MIN_STEADY_STEPS:
        raise TaskFailed(
            f"training {entry.name} ran {len(batches)} steps: {steady} unprofiled after the warm-up "
            f"(profile.warmup={cfg.profile.warmup}, profile.batches={cfg.profile.batches}), fewer than the "
            f"{MIN_STEADY_STEPS} the measured step time needs; run more steps"
        )
    assert trained.model_path is not None
    batch_size = int(trained.facts.get("observed", {}).get("batch_size", cfg.batch_size))
    try:
        extraction = extract_operations(trained.model_path, batch_size, training=True)
    except ExtractionError as err:
        raise TaskFailed(str(err)) from err
    forward = with_dtype_costs(deduplicate(extraction.operations()), cfg.dtype)
    time_column = "self_device_us" if setup.device == "cuda" else "self_cpu_us"
    profile, folded = read_step_profile(trained.profile_dir, time_column)  # optimizer, clipping: one row each
    forward, fused_notes = fuse_exported_gelus(forward, trained.model_path, set(profile["name"]))
    unfolding = unfold.unfold_operations(forward, setup.unfold_table)
    facts = graph_facts(trained.model_path, batch_size).with_inferred_outputs(extraction.nodes)
    ran = step_run(trained.facts, profile, folded)  # the loss and optimizer the script ran
    step = training_step(forward, unfolding, facts, setup.table.training, DTYPE_BYTES.get(cfg.dtype, 4), ran)
    step, as_ran = step_as_ran(step, profile, setup.table, trained.facts, cfg.dtype, setup.device)
    run.log_table(as_ran, "ran_as.csv")  # each operation's dtype and memory format, as the profile says it ran
    placed = None
    if cfg.evaluate.caches == "step":  # each operation's footprint in this step decides its cache state
        step, placed = placed_as_ran(step, unfolding, extraction.nodes, facts, cfg.dtype, setup.device)
    run.set_tags({"dlbench.model_sha256": extraction.sha256})
    log_workload(run, step.operations, f"{bench_name}-training-step", str(trained.model_path))
    run.log_params({"model_nodes": extraction.total_nodes, "operations": len(step.operations), **ran_params(ran)})
    notes = (*thread_notes, *fused_notes, *step.notes, *(placed.run_notes() if placed else []))
    return TrainedStep(trained, threads, replace(cfg, threads=threads.benchmark), batches, measured_ms, profiled_ms,
                       batch_size, extraction, facts, step, placed, profile, folded, notes)  # fmt: skip


def run(cfg: DlbenchConfig, ctx: AppContext) -> int:
    cfg = with_evaluation_caches(cfg)
    setup = prepare(cfg, ctx)
    bench, device, registry = cfg.benchmark, setup.device, setup.registry
    assert bench is not None
    name = job_run_name(cfg, bench.name, ["eval", cfg.backend], device)
    params = evaluation_params(cfg, setup.entry, device, setup.table, setup.unfold_table)
    with open_run(cfg, ctx, kind="evaluation", benchmark=bench.name, name=name, params=params) as run:
        reference_before = measure_reference(cfg, ctx, registry, device, "before")
        t = train_step(cfg, setup, run, params)
        machine = MachineRecord(run)  # round 1's training is the profiled one
        trainings = TrainingRounds(cfg, setup.entry, setup.arguments, setup.workdir, run,
                                   t.trained.profile_dir / BATCHES_FILE)  # fmt: skip
        beside = ddp_model.ranks_beside(effective_params(t.trained.facts), device)  # a DDP step's other ranks here
        measurements, implementations, plan, medians = measure_step(
            t.bench_cfg, ctx, t.step.operations, device, run, machine, cfg.evaluate.rounds, trainings, beside
        )
        weights = {
            op.id: measurements[op.id].stats.median_ms * op.count
            for op in t.step.operations
            if op.id in measurements and measurements[op.id].ok
        }
        matched = match_profile(t.profile, t.step.operations, t.step.passes, setup.table, weights)
        frame = prediction_frame(t.step, measurements, implementations, matched.assigned_us)
        frame = with_rotation_columns(frame, t.step.operations, ctx.output_dir / "protocol", "_evaluate")
        framework_ms = measure_framework(t.bench_cfg, ctx, registry, device, run, machine)
        frame["machine_busy"] = frame["id"].map(machine.busy)
        if device == "cuda":  # the framework's cost is the host's: its issuing time, not the events' span
            framework_ms = host_framework_ms(read_launch_ms(ctx.output_dir / "protocol", FRAMEWORK_OUT), framework_ms)
        measured_ms, measured_rounds, steady_counts = pooled_step_ms(
            [pd.read_csv(path) for path in trainings.batches], cfg.profile.warmup
        )
        drift = Drift(reference_before, measure_reference(cfg, ctx, registry, device, "after"))
        terms = prediction_terms(frame, framework_terms(t.facts.autograd_nodes, len(t.extraction.layout_nodes),
                                                        framework_ms))  # fmt: skip
        terms, metrics, dp_notes = predict_step(cfg, ctx, setup, t, run, (frame, terms, matched), measured_ms,
                                                framework_ms.get("dispatch", 0.0))  # fmt: skip
        predicted_rounds = predicted_per_round(frame, medians, float(terms["ms"].sum()),
                                               metrics["step_time_predicted_ms"])  # fmt: skip
        rounds = StepRounds(tuple(measured_rounds), tuple(steady_counts), tuple(predicted_rounds))
        metrics.update(interval_metrics(rounds))
        metrics.update(model_coverage(t.extraction, plan.served_types).metrics())
        metrics.update({"load_average_start": setup.load_start, "load_average_end": os.getloadavg()[0]})
        metrics.update({**drift.metrics(), **interference_record(machine.reports)[0]})
        metrics.update(t.threads.metrics())
        metrics.update({"step_working_set_bytes": t.placed.working_set_bytes} if t.placed else {})
        notes = list(t.notes) + [f"benchmark {n} not available here: {r}" for n, r in plan.unavailable.items()]
        not_costed_notes, not_costed_metrics = not_costed_time(t.step.not_costed, t.profile, t.profiled_ms)
        notes += not_costed_notes + dp_notes + rotation_notes(frame)
        metrics.update(not_costed_metrics)
        if drift.note():
            notes.append(drift.note())
            run.set_tags({"dlbench.drifted": "true"})
        check = CauseCheck(cfg.dtype, t.threads.benchmark, setup.workdir / "causes", cfg.timeout, device)
        found, causes, findings, found_metrics = outlier_findings(
            frame, matched, metrics, cfg.evaluate.outliers, t.trained.profile_dir, check
        )
        metrics.update(found_metrics)
        run.log_table(causes, "outlier_causes.csv")
        evaluation = Evaluation(frame, terms, matched, metrics, t.profiled_ms, tuple(notes), found, tuple(findings),
                                rounds.frame())  # fmt: skip
        log_evaluation(run, evaluation, cfg.backend, f"{bench.name} bs{t.batch_size} {cfg.backend} {device}")
        log_training_files(run, t.trained, setup.workdir, ctx.start_dir)
        print_evaluation(run.run_name, run.run_id, evaluation)
    return 0


def predict_step(
    cfg: DlbenchConfig, ctx: AppContext, setup: Setup, t: TrainedStep, run, tables: tuple, measured_ms: float,
    dispatch_ms: float,
) -> tuple[pd.DataFrame, dict[str, float], list[str]]:  # fmt: skip
    """The prediction's terms (a DDP step's all-reduce too; a GPU step's timeline), run-level metrics, notes."""
    frame, terms, matched = tables
    ran_with = effective_params(t.trained.facts)
    single_terms, data_parallel, dp_notes = terms, {}, []
    world_size = int(ran_with.get("world_size", cfg.world_size))
    if ddp_model.is_data_parallel(ran_with):  # a DistributedDataParallel script: its gradient all-reduce too
        ddp, terms, dp_notes = measure_data_parallel(t.bench_cfg, ctx, setup.registry, run, ran_with, frame, terms,
                                                     world_size)  # fmt: skip
    timeline = single = None
    if setup.device == "cuda":  # host and device lanes overlap: the step is when both end, not the sum of terms
        launch = step_launch_ms(ctx.output_dir / "protocol", cfg.evaluate.rounds)
        timeline, single = (gpu_step(frame, x, launch, t.folded, dispatch_ms) for x in (terms, single_terms))
    if dp_notes:  # the single-process and data-parallel steps from the same step model
        pairs = ((single, single_terms), (timeline, terms))
        steps = [x.step_us / 1e3 if x else float(y["ms"].sum()) for x, y in pairs]
        data_parallel = ddp_model.data_parallel_metrics(*steps, ddp, world_size)
        if cfg.evaluate.single_process and world_size > 1:
            data_parallel.update(single_process_scaling(cfg, setup.registry, setup.workdir / "single", measured_ms))
    metrics = prediction_metrics(frame, matched, measured_ms, t.profiled_ms, terms,
                                 timeline.step_us / 1e3 if timeline else None)  # fmt: skip
    if timeline is not None:
        metrics.update({"predicted_host_ms": timeline.host_end_us / 1e3,
                        "predicted_device_busy_ms": timeline.device_busy_us / 1e3})  # fmt: skip
        metrics.update(traced_lanes(t.trained.profile_dir))
    metrics.update(data_parallel)
    return terms, metrics, dp_notes


def log_training_files(run, trained: TrainingRun, workdir: Path, start_dir: Path) -> None:
    """The profile's tables, traces and tensor records, the script's stderr, as artifacts; the trained network
    stored once (``.dlbench/models/``, tag ``dlbench.model_file``: :func:`dlbench.tracking.local_files.keep_model`)."""
    assert trained.model_path is not None
    keep_model(run, trained.model_path, start_dir)
    run.log_files(sorted(trained.profile_dir.glob("*.csv")) + sorted(trained.profile_dir.glob("*.json*")), "profile")
    run.log_files([workdir / "stderr.txt"])


def measure_data_parallel(cfg: DlbenchConfig, ctx: AppContext, registry: Registry, run, ran_with, frame, terms, ranks):
    """DDP's step, the terms with its copies and all-reduce added, and notes: the all-reduce measured around each
    bucket, the copies by Mul at each parameter's size (beside the other ranks); files and schedule logged."""
    device, plan = resolve_device(cfg.device), ddp_model.DataParallelPlan.of(ran_with, DTYPE_BYTES.get(cfg.dtype, 4))
    settings, workdir = run_settings(cfg, device), ctx.output_dir / "protocol"
    allreduce, _, files = measure_allreduce(registry, device, plan.allreduce_sizes, ranks, settings, workdir, cfg.quiet)
    beside = replace(settings, beside=ddp_model.ranks_beside(ran_with, device))  # each rank copies its own
    copies, copy_files = measure_gradient_copies(registry, device, plan.copy_elements, beside, workdir, cfg.quiet)
    run.log_files([*files.existing(), *copy_files], "protocol")
    threads = int(ran_with.get("threads", 0) or 0)
    hides, reason = ddp_model.communication_hides(cfg.evaluate.communication_overlap, device, ranks, threads,
                                                  physical_cores())  # fmt: skip
    step, notes = ddp_model.predict_data_parallel(plan, allreduce, copies, frame, hides, reason, beside.beside)
    run.log_table(step.overlap.schedule, "data_parallel_buckets.csv")
    return step, ddp_model.data_parallel_terms(terms, step, ranks, len(plan.parameter_bytes)), notes


def single_process_scaling(
    cfg: DlbenchConfig, registry: Registry, workdir, data_parallel_ms: float
) -> dict[str, float]:
    """The data-parallel script trained again as one process (same batch, unprofiled steps' median): the measured
    single-process step and scaling efficiency."""
    log.info("training %s as one process (evaluate.single_process)", cfg.benchmark.training)  # type: ignore[union-attr]
    entry, arguments = training_entry(replace(cfg, world_size=1), registry)
    single = run_training(cfg, entry, arguments, workdir)
    single_ms, _, _ = measured_step_ms(pd.read_csv(single.profile_dir / BATCHES_FILE), cfg.profile.warmup)
    return ddp_model.measured_scaling_metrics(single_ms, data_parallel_ms)
