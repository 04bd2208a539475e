"""task=benchmark_model: extract an ONNX model (optionally unfolded for training), run every available
registry benchmark of the chosen backend that serves its operators, once for all their operations, and
log one run per benchmark under the extraction run."""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd

from dlbench.analysis.report import log_sweep, log_workload, print_summary
from dlbench.analysis.results import summary_metrics, time_by_op_type
from dlbench.config import DlbenchConfig
from dlbench.core.context import AppContext
from dlbench.core.device import resolve_device
from dlbench.core.errors import TaskFailed
from dlbench.onnx.opdb import operations_frame
from dlbench.onnx.report import extract, extraction_params, extraction_tags, log_extraction, print_extraction
from dlbench.onnx.unfold import Unfolding, load_table, unfold_operations
from dlbench.operators.measure import measure_with_progress, raise_for_result, sweep_params
from dlbench.operators.plan import coverage_frame, plan_benchmarks, print_coverage
from dlbench.operators.registry import load_registry
from dlbench.operators.runner import run_settings
from dlbench.tracking.runs import job_run_name, open_run

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


def run(cfg: DlbenchConfig, ctx: AppContext) -> int:
    return benchmark_model(cfg, ctx, unfolding_table(cfg))


def benchmark_model(cfg: DlbenchConfig, ctx: AppContext, table: Any = None) -> int:
    """Extract, plan, and measure; ``table`` (an :class:`dlbench.onnx.unfold.UnfoldTable`) adds the backward
    problems of training."""
    extraction, forward = extract(cfg, ctx)
    unfolding = unfold_operations(forward, table) if table is not None else Unfolding(tuple(forward), {})
    operations = list(unfolding.operations)
    frame = operations_frame(operations, unfolding.sources)
    print_extraction(extraction, frame)

    device = resolve_device(cfg.device)
    registry = load_registry(ctx.config_dirs)
    plan = plan_benchmarks(registry, operations, cfg.backend, device)
    coverage = coverage_frame(extraction, plan)
    print_coverage(coverage, plan, cfg.backend, device)

    settings = run_settings(cfg, device)
    failures: list[str] = []
    model_total_ms = 0.0
    measured: list[pd.DataFrame] = []
    params = {
        **extraction_params(extraction, forward),
        "backend": cfg.backend,
        "device": device,
        "unfold": table is not None,
        "operations_measured": len(operations),
        "benchmarks": ",".join(entry.name for entry, _ in plan.assignments),
    }
    model_tags = extraction_tags(extraction)
    name = job_run_name(cfg, extraction.model_name, [cfg.backend], device)
    with open_run(
        cfg, ctx, kind="model_benchmark", benchmark=extraction.model_name, name=name, params=params, tags=model_tags
    ) as parent:
        log_extraction(parent, ctx.output_dir, extraction, frame)
        parent.log_table(coverage, "coverage.csv")
        node_share = float(coverage.loc[coverage["status"] == "served", "nodes"].sum()) / (extraction.total_nodes or 1)
        parent.log_metrics({"nodes_served_fraction": node_share})
        for entry, ops in plan.assignments:
            run_name = job_run_name(cfg, extraction.model_name, [entry.name], device)
            child_params = {
                **sweep_params(cfg, entry, extraction.model_name, len(ops), device),
                "op_type": ",".join(sorted({op.op_type for op in ops})),
                "model_sha256": extraction.sha256,
            }
            try:
                with open_run(
                    cfg, ctx, kind="model_benchmark", benchmark=extraction.model_name, name=run_name,
                    params=child_params, implementation=entry.name,
                    tags={**model_tags, EXTRACTION_RUN_TAG: parent.run_id}, parent_run_id=parent.run_id,
                ) as child:  # fmt: skip
                    op_types = "+".join(sorted({op.op_type.lower() for op in ops}))
                    log_workload(child, ops, f"{extraction.model_name}-{op_types}", str(extraction.path))
                    result, files = measure_with_progress(
                        entry,
                        ops,
                        settings,
                        ctx.output_dir / "protocol",
                        f"{entry.name}_{extraction.model_name}",
                        cfg.quiet,
                    )
                    results = log_sweep(child, cfg, ops, result, files, run_name)
                    results.insert(4, "pass", [unfolding.pass_of(op.id) for op in ops])
                    child.log_table(results, "results.csv")
                    print_summary(results, run_name, child.run_id)
                    model_total_ms += summary_metrics(results).get("total_time_ms", 0.0)
                    measured.append(results)
                    raise_for_result(entry.name, result)
            except TaskFailed as err:
                failures.append(str(err))
                log.error("%s", err)
        parent.log_metrics({"model_total_ms": model_total_ms, **time_by_op_type(measured)})
        if measured:
            parent.log_table(pd.concat(measured, ignore_index=True), "model_results.csv")
        print(
            f"\nMLflow run {parent.run_id} ({parent.target.uri}, experiment {parent.target.experiment}); "
            f"sum over benchmarks of median x count: {model_total_ms:.4g} ms"
        )
    if not plan.assignments:
        failures.append(f"no available {cfg.backend!r} benchmark on {device} serves any operator of {extraction.path}")
    if failures:
        raise TaskFailed("\n".join(failures))
    return 0
