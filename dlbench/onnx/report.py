"""An extraction for people and runs: the configured model extracted, its node counts and skipped nodes as
tables, its params, a printed summary, and its artifacts logged to a run."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pandas as pd

from dlbench.config import DlbenchConfig
from dlbench.core.context import AppContext
from dlbench.core.errors import ConfigurationError, TaskFailed
from dlbench.core.values import Operation
from dlbench.onnx.errors import ExtractionError, ModelSettingError
from dlbench.onnx.extract import Extraction, extract_operations
from dlbench.onnx.opdb import deduplicate, summary_table, write_csv


def model_paths(cfg: DlbenchConfig, ctx: AppContext) -> list[Path]:
    """``cfg.model`` (one path, a list, or paths joined by commas) resolved against the directory dlbench
    was started from."""
    entries = cfg.model if isinstance(cfg.model, list | tuple) else [cfg.model] if cfg.model else []
    paths: list[Path] = []
    for entry in entries:
        whole = Path(str(entry)).expanduser()
        whole = whole if whole.is_absolute() else ctx.start_dir / whole
        parts = [whole] if whole.exists() or "," not in str(entry) else [Path(p.strip()) for p in str(entry).split(",")]
        for part in parts:
            part = part.expanduser()
            paths.append(part if part.is_absolute() else ctx.start_dir / part)
    if not paths:
        raise ConfigurationError(
            f"task={cfg.task} needs an ONNX file: add model=path/to/model.onnx (several: model=[a.onnx,b.onnx])"
        )
    return list(dict.fromkeys(paths))


def model_path(cfg: DlbenchConfig, ctx: AppContext) -> Path:
    """The first configured model (see :func:`model_paths`)."""
    return model_paths(cfg, ctx)[0]


def extract(cfg: DlbenchConfig, ctx: AppContext, path: Path | None = None) -> tuple[Extraction, list[Operation]]:
    """The extraction of ``path`` (default: the configured model) at ``cfg.batch_size`` and ``cfg.dims``,
    and its deduplicated operations."""
    path = path or model_path(cfg, ctx)
    try:
        extraction = extract_operations(path, cfg.batch_size, dims=dict(cfg.dims))
    except ExtractionError as err:
        failure = ConfigurationError if isinstance(err, ModelSettingError) else TaskFailed
        raise failure(str(err)) from err
    return extraction, deduplicate(extraction.operations())


def node_counts_frame(extraction: Extraction) -> pd.DataFrame:
    """Per op_type: nodes, share of the model's nodes, and how many are constant, layout-only, operators
    and skipped."""
    total = extraction.total_nodes or 1
    constant = extraction.constant_counts
    layout = Counter(n.op_type for n in extraction.layout_nodes)
    compute = Counter(n.op_type for n in extraction.compute_nodes)
    skipped = Counter(s.op_type for s in extraction.skipped)
    return pd.DataFrame(
        [
            {
                "op_type": op_type,
                "nodes": count,
                "share": count / total,
                "constant": constant.get(op_type, 0),
                "layout": layout[op_type],
                "operator": compute[op_type],
                "skipped": skipped[op_type],
            }
            for op_type, count in extraction.node_counts.items()
        ],
        columns=["op_type", "nodes", "share", "constant", "layout", "operator", "skipped"],
    )


def layout_frame(extraction: Extraction) -> pd.DataFrame:
    """Layout-only nodes: name, op type, shapes, and why their cost is zero."""
    return pd.DataFrame(
        [
            {
                "node": n.name,
                "layer": n.layer,
                "op_type": n.op_type,
                "input_shapes": json.dumps([list(s) if s is not None else None for s in n.input_shapes]),
                "output_shapes": json.dumps([list(s) if s is not None else None for s in n.output_shapes]),
                "cost_ms": 0.0,
                "reason": n.reason,
            }
            for n in extraction.layout_nodes
        ],
        columns=["node", "layer", "op_type", "input_shapes", "output_shapes", "cost_ms", "reason"],
    )


def skipped_frame(extraction: Extraction) -> pd.DataFrame:
    return pd.DataFrame(
        [{"node": s.name, "op_type": s.op_type, "reason": s.reason} for s in extraction.skipped],
        columns=["node", "op_type", "reason"],
    )


def extraction_params(extraction: Extraction, operations: list[Operation]) -> dict[str, object]:
    params: dict[str, object] = {
        "model": extraction.model_name,
        "model_path": extraction.path,
        "model_sha256": extraction.sha256,
        "opset": extraction.opset,
        "ir_version": extraction.ir_version,
        "producer": extraction.producer,
        "batch_size": extraction.batch_size,
        "training": extraction.training,
        "nodes": extraction.total_nodes,
        "nodes_extracted": len(extraction.nodes),
        "nodes_skipped": len(extraction.skipped),
        "nodes_constant": extraction.constant_nodes,
        "nodes_layout": len(extraction.layout_nodes),
        "operations": len(operations),
        "rebatched_from": extraction.rebatched_from if extraction.rebatched_from is not None else "",
    }
    params.update({f"dims.{name}": size for name, size in extraction.dims})
    # MLflow takes at most 100 params a call and runs batch them; a model with very many op types keeps
    # its full table in node_counts.csv
    params.update({f"nodes.{op_type}": count for op_type, count in list(extraction.node_counts.items())[:60]})
    return params


def print_extraction(extraction: Extraction, frame: pd.DataFrame) -> None:
    dims = ", ".join(f"{name}={size}" for name, size in extraction.dims)
    rebatched = f" (re-batched from {extraction.rebatched_from})" if extraction.rebatched_from is not None else ""
    print(
        f"{extraction.path}: {extraction.model_name}, opset {extraction.opset}, batch size "
        f"{extraction.batch_size}{rebatched}{f', dims {dims}' if dims else ''}, {extraction.total_nodes} nodes "
        f"({extraction.constant_nodes} constant, {len(extraction.layout_nodes)} layout-only, "
        f"{len(extraction.compute_nodes)} operators), {len(frame)} distinct operations"
    )
    print(summary_table(frame))
    if extraction.layout_nodes:
        layout = Counter(n.op_type for n in extraction.layout_nodes)
        reasons = {n.op_type: n.reason for n in extraction.layout_nodes}
        print(f"\n{len(extraction.layout_nodes)} layout-only nodes, cost 0 (layout_nodes.csv lists them):")
        for op_type, count in layout.most_common():
            print(f"  {op_type:12s} {count:5d}  {reasons[op_type]}")
    if extraction.skipped:
        print(f"\n{len(extraction.skipped)} nodes not extracted:")
        for skipped in extraction.skipped:
            print(f"  {skipped.reason}")
    for note in extraction.notes:
        print(f"note: {note}")


def extraction_tags(extraction: Extraction) -> dict[str, str]:
    """What identifies the model of a run: its name and the SHA-256 of its file."""
    return {"dlbench.model": extraction.model_name, "dlbench.model_sha256": extraction.sha256}


def log_extraction(run, out_dir: Path, extraction: Extraction, frame: pd.DataFrame) -> Path:
    """Artifacts of an extraction: the operation database CSV (written to ``out_dir``), node counts,
    skipped nodes."""
    path = write_csv(frame, out_dir / f"{extraction.model_name}_operations.csv")
    run.log_artifact(path)
    run.log_table(node_counts_frame(extraction), "node_counts.csv")
    if extraction.layout_nodes:
        run.log_table(layout_frame(extraction), "layout_nodes.csv")
    if extraction.skipped:
        run.log_table(skipped_frame(extraction), "skipped_nodes.csv")
    run.log_metrics({"nodes": extraction.total_nodes, "operations": len(frame)})
    return path
