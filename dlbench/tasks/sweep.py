"""An operator sweep: one configured benchmark measured by each matching implementation, each an MLflow
run with params, hardware tags, per-operation metrics and the protocol's CSVs as artifacts."""

from __future__ import annotations

import logging

from dlbench.analysis.report import log_sweep, log_workload, print_summary
from dlbench.config import DlbenchConfig
from dlbench.core.context import AppContext
from dlbench.core.device import check_ranks_fit, resolve_device
from dlbench.core.errors import TaskFailed
from dlbench.core.values import SweepResult
from dlbench.operators.measure import measure_with_progress, operations_digest, raise_for_result, sweep_params
from dlbench.operators.passes import with_passes
from dlbench.operators.plan import select_implementations
from dlbench.operators.reference import reference_benchmarks
from dlbench.operators.registry import load_registry
from dlbench.operators.runner import run_settings
from dlbench.operators.workload import operations_from_benchmark
from dlbench.tracking.resume import find_resume_point
from dlbench.tracking.runs import job_run_name, open_run, run_place
from dlbench.tracking.ui import run_link

log = logging.getLogger(__name__)


def run(cfg: DlbenchConfig, ctx: AppContext) -> int:
    assert cfg.benchmark is not None
    bench = cfg.benchmark
    device = resolve_device(cfg.device)
    registry = load_registry(ctx.config_dirs)
    implementations = select_implementations(registry, bench.op_type, cfg.backend, device)
    unavailable = [f"{e.name} is not available: {e.unavailable_reason}" for e in implementations if not e.available]
    if len(unavailable) == len(implementations):
        raise TaskFailed("\n".join(unavailable))  # before the store is opened: nothing will be measured
    operations = operations_from_benchmark(bench, cfg.dtype, cfg.amp, cfg.channels_last, device)
    check_ranks_fit((op.param_dict["world_size"] for op in operations if "world_size" in op.param_dict), device)
    place = run_place(cfg, ctx)
    target = place.target
    settings = run_settings(cfg, device)
    probe = reference_benchmarks(registry, device)  # the machine's speed over each sweep: machine_drift_pct
    failures: list[str] = []
    for entry in implementations:
        reason = entry.unavailable_reason
        if reason:
            failures.append(f"{entry.name} is not available: {reason}")
            continue
        params = sweep_params(cfg, entry, bench.name, len(operations), device)
        # a tag, not a param: a hash among the params is what MLflow's compare page would plot first
        tags = {"dlbench.operations_sha1": operations_digest(entry, operations)}
        workdir = ctx.output_dir / "protocol"
        resume = (
            find_resume_point(target, params, tags["dlbench.operations_sha1"], cfg.gc.stale_after_s)
            if cfg.resume
            else None
        )
        todo = with_passes(operations, entry.passes, cfg.dtype)  # FLOPs of every pass one time covers
        if resume is not None:
            todo = [op for op in todo if op.id not in resume.done_ids]
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
        name = job_run_name(cfg, bench.name, [entry.name], device)
        try:
            with open_run(
                cfg, ctx, kind="operator_sweep", benchmark=bench.name, name=name, params=params,
                implementation=entry.name, tags=tags,
            ) as tracked:  # fmt: skip
                log_workload(tracked, operations, workload_name(bench), benchmark_source(ctx, bench.name))
                if todo:
                    result, files = measure_with_progress(
                        entry, todo, settings, workdir, f"{entry.name}_{bench.name}", cfg.quiet, probe
                    )
                    if result.extra.get("drift_note"):
                        log.warning("%s: %s", entry.name, result.extra["drift_note"])
                else:
                    result, files = SweepResult({}), None
                kept = resume.kept if resume is not None else None
                frame = log_sweep(tracked, cfg, todo, result, files, tracked.run_name, kept=kept)
                if resume is not None:
                    tracked.log_metrics({"operations_resumed": float(len(operations) - len(todo))})
                print_summary(
                    frame, tracked.run_name, tracked.run_id, result,
                    run_link(target, place.experiment_id, tracked.run_id),
                )  # fmt: skip
                raise_for_result(entry.name, result, f"{len(frame[frame.status == 'ok'])} operations were kept")
        except TaskFailed as err:  # reported once, with the others, when every implementation had its turn
            failures.append(str(err))
    if failures:
        raise TaskFailed("\n".join(failures))
    return 0


def workload_name(bench) -> str:
    """The dataset name of a configured benchmark: ``<model>-<benchmark>`` (``resnet50-conv``) where the
    benchmark names its model, else the benchmark's name."""
    return f"{bench.model_name}-{bench.name}" if bench.model_name else bench.name


def benchmark_source(ctx: AppContext, name: str) -> str:
    """The YAML file the benchmark came from (first on the config path), for the dataset's source."""
    for directory in reversed(ctx.config_dirs):  # a user's --config-dir overrides the shipped files
        path = directory / "benchmark" / f"{name}.yaml"
        if path.is_file():
            return str(path)
    return f"benchmark/{name}.yaml"
