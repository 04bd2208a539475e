"""task=evaluate model=X.onnx: predict a served model's forward latency from its operator benchmarks and
measure it end to end, per engine (an onnxruntime session, a PyTorch eval forward), as one MLflow run.

Steps: extract the model for inference (BatchNormalization with running statistics, pooling without max
positions; inference Dropout is the identity and costs nothing), measure its operations with each engine's
backend, write the model with every dimension fixed and time it end to end on both engines with the same
threads, log predicted, measured and error per engine, the terms and the per-operation table."""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, replace
from typing import Any

from dlbench.analysis.inference import (
    ENGINE_BACKENDS,
    inference_metrics,
    inference_table,
    overhead_terms,
    print_inference,
    summary_frame,
)
from dlbench.config import DlbenchConfig
from dlbench.core.context import AppContext
from dlbench.core.device import resolve_device
from dlbench.core.errors import ConfigurationError, TaskFailed
from dlbench.core.values import Measurement, Operation
from dlbench.onnx.errors import ExtractionError, ModelSettingError
from dlbench.onnx.extract import extract_operations
from dlbench.onnx.footprint import placed_forward
from dlbench.onnx.opdb import deduplicate
from dlbench.onnx.rebatch import rebatched_model
from dlbench.onnx.report import model_paths
from dlbench.onnx.step import graph_facts
from dlbench.operators.end_to_end import measure_end_to_end
from dlbench.operators.measure import measure_with_progress
from dlbench.operators.plan import plan_benchmarks
from dlbench.operators.registry import load_registry
from dlbench.operators.runner import RunSettings, run_settings
from dlbench.tracking.runs import job_run_name, open_run

log = logging.getLogger(__name__)


def _measure_engines(
    cfg: DlbenchConfig, ctx: AppContext, run: Any, registry: Any, operations: list[Operation], settings: RunSettings
) -> tuple[dict[str, dict[int, Measurement]], dict[str, dict[int, str]]]:
    """Each engine's operator benchmarks of the operations (torch's in ``evaluate.caches``, onnxruntime's hot),
    by engine: the measurements and which benchmark measured each; the protocol files logged."""
    measured: dict[str, dict[int, Measurement]] = {}
    implementations: dict[str, dict[int, str]] = {}
    for engine, backend in ENGINE_BACKENDS.items():
        measured[engine], implementations[engine] = {}, {}
        for entry, ops in plan_benchmarks(registry, operations, backend, settings.device).assignments:
            log.info("measuring %d operations with %s for the %s prediction", len(ops), entry.name, engine)
            caches = cfg.evaluate.caches if backend == "torch" else "hot"
            result, files = measure_with_progress(
                entry, ops, replace(settings, caches=caches), ctx.output_dir / "protocol",
                f"{entry.name}_inference", cfg.quiet,
            )  # fmt: skip
            run.log_files(files.existing(), "protocol")
            if result.interrupted:
                raise KeyboardInterrupt(f"{entry.name} was interrupted")
            for op in ops:
                measured[engine][op.id] = result.measurements[op.id]
                implementations[engine][op.id] = entry.name
    return measured, implementations


def run(cfg: DlbenchConfig, ctx: AppContext) -> int:
    paths = model_paths(cfg, ctx)
    if len(paths) != 1:
        raise ConfigurationError(f"task=evaluate predicts one model at a time, got {len(paths)}: give model=X.onnx")
    path = paths[0]
    device = resolve_device(cfg.device)
    if device != "cpu":
        raise ConfigurationError(f"task=evaluate model=... measures on the CPU (device={cfg.device}): use device=cpu")
    if cfg.measure.caches != "hot":
        raise ConfigurationError("task=evaluate model=... times onnxruntime, hot caches only: use measure.caches=hot")
    try:
        extraction = extract_operations(path, cfg.batch_size, training=False, dims=dict(cfg.dims))
        fixed = rebatched_model(path, cfg.batch_size, dict(cfg.dims))
    except ExtractionError as err:
        raise (ConfigurationError if isinstance(err, ModelSettingError) else TaskFailed)(str(err)) from err
    operations = deduplicate(extraction.operations())
    placed = None
    if cfg.evaluate.caches == "step":  # the torch kernels: each operation's footprint in one forward pass
        operations, placed = placed_forward(operations, extraction.nodes, graph_facts(path, cfg.batch_size))
    workdir = ctx.output_dir / "inference"
    workdir.mkdir(parents=True, exist_ok=True)
    fixed_path = workdir / f"{extraction.model_name}_b{cfg.batch_size}.onnx"
    fixed_path.write_bytes(fixed.SerializeToString())
    registry = load_registry(ctx.config_dirs)
    settings = run_settings(cfg, device)
    params = {
        "model": extraction.model_name, "model_path": str(path), "model_sha256": extraction.sha256,
        "batch_size": cfg.batch_size, **{f"dims.{k}": v for k, v in dict(cfg.dims).items()},
        "engines": ",".join(ENGINE_BACKENDS), "threads": settings.threads, "operations": len(operations),
        "nodes": extraction.total_nodes, "nodes_skipped": len(extraction.skipped), "training": False,
        **{f"measure.{k}": v for k, v in asdict(cfg.measure).items()},
        "evaluate.caches": cfg.evaluate.caches,  # the torch kernels' (onnxruntime's time hot caches only)
    }  # fmt: skip
    name = job_run_name(cfg, extraction.model_name, ["inference"], device)
    load_start = os.getloadavg()[0]
    with open_run(cfg, ctx, kind="inference", benchmark=extraction.model_name, name=name, params=params) as run:
        measured, implementations = _measure_engines(cfg, ctx, run, registry, operations, settings)
        log.info("timing %s end to end on %s", extraction.model_name, ", ".join(ENGINE_BACKENDS))
        end_to_end = measure_end_to_end(fixed_path, list(ENGINE_BACKENDS), settings, workdir)
        for file in end_to_end.files:
            run.log_artifact(file, "end_to_end")
        table = inference_table(operations, measured, implementations)
        table["footprint_bytes"] = table["id"].map({op.id: op.footprint_bytes for op in operations})
        overheads = overhead_terms(table, end_to_end.facts)
        summary = summary_frame(table, end_to_end.stats, end_to_end.errors, overheads)
        run.log_table(table, "inference_operations.csv")
        run.log_table(summary, "inference_summary.csv")
        agreement = end_to_end.facts.get("max_relative_difference", {})
        run.log_metrics({
            **inference_metrics(table, end_to_end.stats, overheads),
            **{f"outputs_{k}": float(v) for k, v in agreement.items()},
            "load_average_start": load_start, "load_average_end": os.getloadavg()[0],
            **({"forward_working_set_bytes": placed.working_set_bytes} if placed else {}),
        })  # fmt: skip
        print_inference(extraction.model_name, cfg.batch_size, settings.threads, summary)
        for key, value in agreement.items():
            if value > 1e-3:
                log.warning("the engines' outputs differ (%s: %.3g of the largest output)", key, value)
        print(f"MLflow run {run.run_id} ({run.target.uri}, experiment {run.target.experiment})")
    if end_to_end.errors:
        raise TaskFailed(
            "; ".join(f"{engine} could not be measured end to end: {why}" for engine, why in end_to_end.errors.items())
        )
    return 0
