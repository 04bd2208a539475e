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
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import pandas as pd

from dlbench.analysis import match
from dlbench.analysis.data_parallel import measured_scaling_metrics, predict_data_parallel
from dlbench.analysis.evaluation import Evaluation, log_evaluation, print_evaluation
from dlbench.analysis.match import match_profile
from dlbench.analysis.predict import (
    FRAMEWORK_MODES,
    FRAMEWORK_OPS,
    bracketed_step_ms,
    framework_terms,
    measured_step_ms,
    prediction_frame,
    prediction_metrics,
    prediction_terms,
)
from dlbench.analysis.report import log_workload
from dlbench.analysis.results import interference_record
from dlbench.analysis.step_run import not_costed_time, ran_params, read_step_profile, step_run
from dlbench.analysis.timeline import gpu_step, host_framework_ms, traced_lanes
from dlbench.config import DlbenchConfig
from dlbench.core.context import AppContext
from dlbench.core.device import resolve_device
from dlbench.core.dtypes import DTYPE_BYTES
from dlbench.core.errors import ConfigurationError, TaskFailed
from dlbench.core.folders import fresh_folder
from dlbench.core.interference import InterferenceReport
from dlbench.core.values import Measurement, Operation, SweepResult
from dlbench.onnx import unfold
from dlbench.onnx.errors import ExtractionError
from dlbench.onnx.extract import extract_operations
from dlbench.onnx.opdb import deduplicate
from dlbench.onnx.patterns import fuse_exported_gelus
from dlbench.onnx.step import graph_facts, training_step, with_dtype_costs
from dlbench.operators.measure import measure_with_progress
from dlbench.operators.plan import model_coverage, plan_benchmarks
from dlbench.operators.reference import GPU_WARMUP_ROUNDS, Drift, reference_benchmarks, reference_medians
from dlbench.operators.registry import Registry, load_registry
from dlbench.operators.runner import run_settings
from dlbench.tracking.runs import job_run_name, open_run
from dlbench.training.facts import effective_params
from dlbench.training.profile import BATCHES_FILE
from dlbench.training.scripts import (
    MIN_STEADY_STEPS,
    check_ran_in_dtype,
    check_steady_steps,
    check_training_dtype,
    run_training,
    training_entry,
)
from dlbench.training.threads import ThreadAgreement

#: The optimizer's op_types (:mod:`dlbench.onnx.update`); training runs PyTorch's whatever the backend measures
UPDATE_OP_TYPES = ("SGD", "Adam", "AdamW", "RMSprop", "ZeroGrad", "ClipGradNorm")
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


@dataclass
class MachineRecord:
    """What else the machine did while each benchmark of the evaluation measured: the reports, and per
    operation whether its time was taken on a busy machine. The run's ``dlbench.noisy`` follows each report
    (a run that fails later keeps it)."""

    run: Any
    reports: list[tuple[str, InterferenceReport]] = field(default_factory=list)
    busy: dict[int, bool] = field(default_factory=dict)

    def add(self, name: str, result: SweepResult, operations: Sequence[Operation]) -> None:
        if result.interference is not None:
            self.reports.append((name, result.interference))
            for op in operations:
                self.busy[op.id] = bool(result.interference.operation_columns(op.id)["machine_busy"])
            self.run.set_tags(interference_record(self.reports)[1])


def measure_step(
    cfg: DlbenchConfig, ctx: AppContext, operations, device: str, run, machine: MachineRecord
) -> tuple[dict, dict, object]:
    """Every operation some available benchmark of ``cfg.backend`` serves, measured; protocol files logged."""
    registry = load_registry(ctx.config_dirs)
    plan = plan_benchmarks(registry, operations, cfg.backend, device)
    settings = run_settings(cfg, device)
    measurements: dict[int, Measurement] = {}
    implementations: dict[int, str] = {}
    workdir = ctx.output_dir / "protocol"
    assignments = list(plan.assignments)
    served = {op.id for _, ops in assignments for op in ops}
    for op_type in UPDATE_OP_TYPES:  # training runs PyTorch's optimizer whatever backend measures the rest
        update = tuple(op for op in operations if op.op_type == op_type and op.id not in served)
        if update:
            assignments.append((optimizer_benchmark(registry, device, op_type), update))
    for entry, ops in assignments:
        log.info("measuring %d operations with %s", len(ops), entry.name)
        result, files = measure_with_progress(entry, ops, settings, workdir, f"{entry.name}_evaluate", cfg.quiet)
        for op in ops:
            measurements[op.id] = result.measurements[op.id]
            implementations[op.id] = entry.name
        run.log_files(files.existing(), "protocol")
        machine.add(entry.name, result, ops)
        if result.interrupted:
            raise KeyboardInterrupt(f"{entry.name} was interrupted")
    return measurements, implementations, plan


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


def measure_reference(
    cfg: DlbenchConfig, ctx: AppContext, registry: Registry, device: str, when: str
) -> dict[str, float]:
    """Median ms of the reference operations (:mod:`dlbench.operators.reference`) now, with PyTorch's kernels
    and the benchmarks' settings; those without a torch benchmark here are left out. On a GPU: device-bound
    sizes, timed with CUDA events after a round that brings the clocks up from idle."""
    medians: dict[str, float] = {}
    rounds = (GPU_WARMUP_ROUNDS if device == "cuda" else 0) + 1
    for entry, op in reference_benchmarks(registry, device):
        for _ in range(rounds):  # the last round counts
            result, _ = measure_with_progress(
                entry, [op], run_settings(cfg, device), ctx.output_dir / "protocol", f"{op.name}_{when}", True
            )  # a stem per operation: the GEMM's and the convolution's protocol files stay apart
            if result.interrupted:
                raise KeyboardInterrupt(f"{entry.name} was interrupted")
        medians.update(reference_medians(result.measurements, device))
    return medians


def optimizer_benchmark(registry: Registry, device: str, op_type: str = "SGD"):
    """The torch entry that times PyTorch's optimizer update ``op_type``: training runs it whatever
    ``backend`` measures the other operations."""
    entries = registry.serving(op_type, "torch", device)
    if not entries:
        raise TaskFailed(f"no torch benchmark of {op_type} on {device} is registered (see conf/registry/)")
    return entries[0]


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
        "evaluate.bracket": cfg.evaluate.bracket,
        "evaluate.caches": cfg.evaluate.caches,
        **{f"measure.{k}": v for k, v in asdict(cfg.measure).items()},
        **{f"match.training.{k}": v for k, v in table.training.items()},
        "match_table": table.source,
        "unfold_table": unfold_table.source,
    }


def with_evaluation_caches(cfg: DlbenchConfig) -> DlbenchConfig:
    """The config the evaluation measures with: ``measure.caches`` is ``evaluate.caches`` (and logged so)."""
    if cfg.evaluate.caches == "cold" and cfg.backend != "torch":
        raise ConfigurationError(
            f"backend={cfg.backend} times its kernels with hot caches only, and evaluate.caches=cold (the default) "
            "needs the embedded torch kernels: add evaluate.caches=hot, or use backend=torch"
        )
    return replace(cfg, measure=replace(cfg.measure, caches=cfg.evaluate.caches))


def run(cfg: DlbenchConfig, ctx: AppContext) -> int:
    bench = cfg.benchmark
    if bench is None or bench.kind != "training":
        raise ConfigurationError(
            "task=evaluate needs a training benchmark (e.g. +benchmark=resnet_cifar task=evaluate) or, for a served "
            "model's latency, a model file (task=evaluate model=X.onnx, dispatched to tasks/inference.py)"
        )
    cfg = with_evaluation_caches(cfg)
    registry = load_registry(ctx.config_dirs)
    entry, arguments = training_entry(cfg, registry)
    check_training_dtype(cfg, entry)
    check_steady_steps(cfg, entry)
    device = resolve_device(cfg.device)
    table = match_table(cfg)
    unfold_table = training_unfold_table(cfg)
    workdir = fresh_folder(ctx.output_dir / "evaluate", bench.name)
    load_start = os.getloadavg()[0]
    if cfg.threads == 0 and load_start > (os.cpu_count() or 1):
        log.warning(
            "load average %.1f on %d cores and threads=0: OpenMP threads of an oversubscribed machine wait on each "
            "other and times swing many-fold; consider threads=1",
            load_start,
            os.cpu_count() or 1,
        )
    name = job_run_name(cfg, bench.name, ["eval", cfg.backend], device)
    params = evaluation_params(cfg, entry, device, table, unfold_table)
    with open_run(cfg, ctx, kind="evaluation", benchmark=bench.name, name=name, params=params) as run:
        reference_before = measure_reference(cfg, ctx, registry, device, "before")
        log.info("training %s (profiling %d batches after %d)", entry.name, cfg.profile.batches, cfg.profile.warmup)
        trained = run_training(cfg, entry, arguments, workdir, export=True)
        run.log_params(script_params(trained.facts, params))
        check_ran_in_dtype(cfg, entry, trained.facts)
        threads = ThreadAgreement.of(cfg.threads, trained.facts)  # the benchmarks run with the script's threads
        thread_notes, bench_cfg = threads.announce(run), replace(cfg, threads=threads.benchmark)
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
        time_column = "self_device_us" if device == "cuda" else "self_cpu_us"
        profile, folded = read_step_profile(trained.profile_dir, time_column)  # optimizer, clipping: one row each
        forward, fused_notes = fuse_exported_gelus(forward, trained.model_path, set(profile["name"]))
        unfolding = unfold.unfold_operations(forward, unfold_table)
        facts = graph_facts(trained.model_path, batch_size).with_inferred_outputs(extraction.nodes)
        ran = step_run(trained.facts, profile, folded)  # the loss and optimizer the script ran
        step = training_step(forward, unfolding, facts, table.training, DTYPE_BYTES.get(cfg.dtype, 4), ran)
        run.set_tags({"dlbench.model_sha256": extraction.sha256})
        log_workload(run, step.operations, f"{bench.name}-training-step", str(trained.model_path))
        run.log_params({"model_nodes": extraction.total_nodes, "operations": len(step.operations), **ran_params(ran)})
        machine = MachineRecord(run)
        measurements, implementations, plan = measure_step(bench_cfg, ctx, step.operations, device, run, machine)

        weights = {
            op.id: measurements[op.id].stats.median_ms * op.count
            for op in step.operations
            if op.id in measurements and measurements[op.id].ok
        }
        matched = match_profile(profile, step.operations, step.passes, table, weights)
        frame = prediction_frame(step, measurements, implementations, matched.assigned_us)
        framework_ms = measure_framework(bench_cfg, ctx, registry, device, run, machine)
        frame["machine_busy"] = frame["id"].map(machine.busy)
        if device == "cuda":  # the framework's cost is the host's: its issuing time, not the events' span
            framework_ms = host_framework_ms(ctx.output_dir / "protocol", framework_ms)
        bracket: dict[str, float] = {}
        if cfg.evaluate.bracket:
            log.info("training %s again after the benchmarks (evaluate.bracket)", entry.name)
            again = run_training(cfg, entry, arguments, workdir / "bracket")
            run.log_artifact(again.profile_dir / BATCHES_FILE, "profile/bracket")
            after = pd.read_csv(again.profile_dir / BATCHES_FILE)
            measured_ms, bracket = bracketed_step_ms(batches, after, cfg.profile.warmup)
        drift = Drift(reference_before, measure_reference(cfg, ctx, registry, device, "after"))
        layout = len(extraction.layout_nodes)
        terms = prediction_terms(frame, framework_terms(facts.autograd_nodes, layout, framework_ms))
        ran_with = effective_params(trained.facts)
        data_parallel: dict[str, float] = {}
        data_parallel_notes: list[str] = []
        if "bucket_cap_mb" in ran_with:  # a DistributedDataParallel script: its gradient all-reduce too
            world_size = int(ran_with.get("world_size", cfg.world_size))
            terms, data_parallel, data_parallel_notes = predict_data_parallel(
                registry, device, run_settings(bench_cfg, device), ctx.output_dir / "protocol", cfg.quiet, run,
                ran_with, world_size, frame, terms, cfg.evaluate.communication_overlap, DTYPE_BYTES.get(cfg.dtype, 4),
            )  # fmt: skip
            if cfg.evaluate.single_process and world_size > 1:
                data_parallel.update(single_process_scaling(cfg, registry, workdir / "single", measured_ms))
        coverage = model_coverage(extraction, plan.served_types)
        timeline = None
        if device == "cuda":  # host and device lanes overlap: the step is when both end, not the sum of terms
            timeline = gpu_step(frame, terms, ctx.output_dir / "protocol", profile["name"],
                                framework_ms.get("dispatch", 0.0))  # fmt: skip
        metrics = prediction_metrics(frame, matched, measured_ms, profiled_ms, terms,
                                     timeline.step_us / 1e3 if timeline else None)  # fmt: skip
        if timeline is not None:
            metrics.update({"predicted_host_ms": timeline.host_end_us / 1e3,
                            "predicted_device_busy_ms": timeline.device_busy_us / 1e3})  # fmt: skip
            metrics.update(traced_lanes(trained.profile_dir))
        metrics.update(data_parallel)
        metrics.update(coverage.metrics())
        metrics.update({"load_average_start": load_start, "load_average_end": os.getloadavg()[0]})
        metrics.update(drift.metrics())
        metrics.update(bracket)
        metrics.update(interference_record(machine.reports)[0])
        metrics.update(threads.metrics())
        notes = thread_notes + fused_notes + list(step.notes)
        notes += [f"benchmark {n} not available here: {r}" for n, r in plan.unavailable.items()]
        not_costed_notes, not_costed_metrics = not_costed_time(step.not_costed, profile, profiled_ms)
        notes += not_costed_notes
        metrics.update(not_costed_metrics)
        notes += data_parallel_notes
        drift_note = drift.note()
        if drift_note:
            notes.append(drift_note)
            run.set_tags({"dlbench.drifted": "true"})
        evaluation = Evaluation(frame, terms, matched, metrics, profiled_ms, tuple(notes))
        title = f"{bench.name} bs{batch_size} {cfg.backend} {device}"
        log_evaluation(run, evaluation, cfg.backend, title)
        run.log_artifact(trained.model_path, "model")
        run.log_files(sorted(trained.profile_dir.glob("*.csv")) + sorted(trained.profile_dir.glob("*.json")), "profile")
        run.log_files([workdir / "stderr.txt"])
        print_evaluation(run.run_name, run.run_id, evaluation)
    return 0


def single_process_scaling(
    cfg: DlbenchConfig, registry: Registry, workdir, data_parallel_ms: float
) -> dict[str, float]:
    """The data-parallel script trained again as one process (same batch, unprofiled steps' median): the measured
    single-process step and scaling efficiency."""
    log.info("training %s as one process (evaluate.single_process)", cfg.benchmark.training)  # type: ignore[union-attr]
    entry, arguments = training_entry(replace(cfg, world_size=1), registry)
    single = run_training(cfg, entry, arguments, workdir)
    single_ms, _, _ = measured_step_ms(pd.read_csv(single.profile_dir / BATCHES_FILE), cfg.profile.warmup)
    return measured_scaling_metrics(single_ms, data_parallel_ms)


def script_params(facts: dict, already: dict[str, object]) -> dict[str, object]:
    """What the script ran with (reported, else observed), minus names dlbench already logged itself."""
    return {k: v for k, v in effective_params(facts).items() if k not in already}
