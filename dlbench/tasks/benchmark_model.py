"""task=benchmark_model: extract an ONNX model (optionally unfolded for training), run every available
registry benchmark of the chosen backend that serves its operators, once for all their operations, and
log one run per benchmark under the extraction run."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dlbench.app import AppContext, TaskFailed
from dlbench.config import DlbenchConfig
from dlbench.extract import Extraction
from dlbench.model import Operation
from dlbench.opdb import operations_frame
from dlbench.registry import OperatorBenchmark, Registry, load_registry
from dlbench.tasks.extract import extract, extraction_params, extraction_tags, log_extraction, print_extraction
from dlbench.unfold import Unfolding, load_table, unfold_operations

log = logging.getLogger(__name__)

EXTRACTION_RUN_TAG = "dlbench.extraction_run_id"


@dataclass(frozen=True)
class BenchmarkPlan:
    """Which benchmark measures which operations, and what nothing here serves."""

    assignments: tuple[tuple[OperatorBenchmark, tuple[Operation, ...]], ...]
    unavailable: Mapping[str, str]  # benchmark name -> why it cannot run here
    unserved: Mapping[str, int]  # op_type -> ONNX nodes of it no available benchmark serves


def plan_benchmarks(registry: Registry, operations: Sequence[Operation], backend: str, device: str) -> BenchmarkPlan:
    """Every available ``backend`` entry for ``device`` gets all operations whose op_type it serves."""
    by_entry: dict[str, list[Operation]] = {}
    entries: dict[str, OperatorBenchmark] = {}
    unavailable: dict[str, str] = {}
    unserved: Counter[str] = Counter()
    for op in operations:
        served = False
        for entry in registry.serving(op.op_type, backend, device):
            reason = entry.unavailable_reason
            if reason:
                unavailable[entry.name] = reason
                continue
            entries[entry.name] = entry
            by_entry.setdefault(entry.name, []).append(op)
            served = True
        if not served:
            unserved[op.op_type] += len(op.nodes) if op.nodes else op.count
    return BenchmarkPlan(
        assignments=tuple((entries[name], tuple(ops)) for name, ops in by_entry.items()),
        unavailable=unavailable,
        unserved=dict(unserved.most_common()),
    )


def coverage_frame(extraction: Extraction, plan: BenchmarkPlan) -> pd.DataFrame:
    """Per op_type of the model: its nodes, whether a benchmark serves it, and its share of all nodes."""
    total = extraction.total_nodes or 1
    served_types = {op.op_type for _, ops in plan.assignments for op in ops}
    skipped = Counter(s.op_type for s in extraction.skipped)
    rows = []
    for op_type, count in extraction.node_counts.items():
        if op_type in served_types:
            status = "served"
        elif op_type == "Constant":
            status = "weights"
        elif skipped.get(op_type) == count:
            status = "not extracted"
        else:
            status = "no benchmark"
        rows.append({"op_type": op_type, "nodes": count, "share": count / total, "status": status})
    return pd.DataFrame(rows, columns=["op_type", "nodes", "share", "status"])


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
    """Extract, plan, and measure; ``table`` (an :class:`dlbench.unfold.UnfoldTable`) adds the backward
    problems of training."""
    from dlbench.results import summary_metrics
    from dlbench.sweep import (
        log_sweep,
        measure_with_progress,
        print_summary,
        raise_for_result,
        resolve_device,
        run_settings,
        sweep_params,
    )
    from dlbench.tracking import TrackedRun, prepare_store, resolve_tracking

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

    target = resolve_tracking(cfg.mlflow.tracking_uri, cfg.mlflow.experiment, ctx.start_dir)
    experiment_id = prepare_store(target, cfg.mlflow.connect_timeout_s)
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
    tags = {**extraction_tags(ctx, extraction, "model_benchmark")}
    parent_name = cfg.mlflow.run_name or f"{extraction.model_name}-{cfg.backend}-bs{cfg.batch_size}-{device}"
    with TrackedRun(target, parent_name, params, tags, experiment_id=experiment_id) as parent:
        log_extraction(parent, ctx, extraction, frame)
        parent.log_table(coverage, "coverage.csv")
        node_share = float(coverage.loc[coverage["status"] == "served", "nodes"].sum()) / (extraction.total_nodes or 1)
        parent.log_metrics({"nodes_served_fraction": node_share})
        for entry, ops in plan.assignments:
            run_name = f"{extraction.model_name}-{entry.name}-bs{cfg.batch_size}-{device}"
            child_params = {
                **sweep_params(cfg, entry, extraction.model_name, len(ops), device),
                "op_type": ",".join(sorted({op.op_type for op in ops})),
                "model_sha256": extraction.sha256,
            }
            child_tags = {
                **extraction_tags(ctx, extraction, "model_benchmark"),
                "dlbench.implementation": entry.name,
                EXTRACTION_RUN_TAG: parent.run_id,
            }
            try:
                with TrackedRun(
                    target, run_name, child_params, child_tags, parent_run_id=parent.run_id, experiment_id=experiment_id
                ) as child:
                    result, files = measure_with_progress(
                        entry,
                        ops,
                        settings,
                        ctx.output_dir / "protocol",
                        f"{entry.name}_{extraction.model_name}",
                        cfg.quiet,
                    )
                    results = log_sweep(child, cfg, ctx, ops, result, files, run_name)
                    results.insert(4, "pass", [unfolding.pass_of(op.id) for op in ops])
                    child.log_table(results, "results.csv")
                    print_summary(results, run_name, child.run_id)
                    model_total_ms += summary_metrics(results).get("network_total_ms", 0.0)
                    measured.append(results)
                    raise_for_result(entry.name, result)
            except TaskFailed as err:
                failures.append(str(err))
                log.error("%s", err)
        parent.log_metrics({"model_total_ms": model_total_ms, **time_by_op_type(measured)})
        if measured:
            parent.log_table(pd.concat(measured, ignore_index=True), "model_results.csv")
        print(
            f"\nMLflow run {parent.run_id} ({target.uri}, experiment {target.experiment}); "
            f"sum over benchmarks of median x count: {model_total_ms:.4g} ms"
        )
    if not plan.assignments:
        failures.append(f"no available {cfg.backend!r} benchmark on {device} serves any operator of {extraction.path}")
    if failures:
        raise TaskFailed("\n".join(failures))
    return 0


def time_by_op_type(frames: Sequence[pd.DataFrame]) -> dict[str, float]:
    """Milliseconds per op_type and pass over the whole model (median x count of every measured
    operation), e.g. ``time_ms.Conv.backward_data``; where several benchmarks serve an op_type their
    figures add up, so read them per implementation from ``model_results.csv`` in that case."""
    totals: Counter[str] = Counter()
    for frame in frames:
        ok = frame[frame["status"] == "ok"]
        for op_type, pass_name, median, count in zip(
            ok["op_type"], ok["pass"], ok["median_ms"], ok["count"], strict=True
        ):
            totals[f"time_ms.{op_type}.{pass_name}"] += float(median) * int(count)
    return dict(totals)


def print_coverage(coverage: pd.DataFrame, plan: BenchmarkPlan, backend: str, device: str) -> None:
    print(f"\nbenchmarks of backend {backend!r} on {device}:")
    for entry, ops in plan.assignments:
        counts = Counter(op.op_type for op in ops)
        print(f"  {entry.name}: {len(ops)} operations ({', '.join(f'{t} {n}' for t, n in counts.items())})")
    for name, reason in plan.unavailable.items():
        print(f"  {name}: not available here ({reason})")
    missing = coverage[coverage["status"] != "served"]
    if len(missing):
        print("operators no benchmark serves (share of the model's nodes):")
        for row in missing.itertuples():
            print(f"  {row.op_type:24s} {row.nodes:5d} nodes  {100 * row.share:5.1f}%  {row.status}")
    if not plan.assignments:
        print("  (no benchmark serves any operator of this model)")
