"""An extraction for people and runs: the configured model extracted, its node counts and skipped nodes as
tables, its params, a printed summary, and its artifacts logged to a run."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dlbench.config import DlbenchConfig
from dlbench.core.context import AppContext
from dlbench.core.errors import TaskFailed
from dlbench.core.values import Operation
from dlbench.onnx.errors import ExtractionError
from dlbench.onnx.extract import Extraction, extract_operations
from dlbench.onnx.opdb import deduplicate, summary_table, write_csv


def model_path(cfg: DlbenchConfig, ctx: AppContext) -> Path:
    """``cfg.model`` resolved against the directory dlbench was started from."""
    if not cfg.model:
        raise TaskFailed(f"task={cfg.task} needs an ONNX file: add model=path/to/model.onnx")
    path = Path(cfg.model).expanduser()
    return path if path.is_absolute() else ctx.start_dir / path


def extract(cfg: DlbenchConfig, ctx: AppContext) -> tuple[Extraction, list[Operation]]:
    """The extraction at ``cfg.batch_size`` and its deduplicated operations."""
    path = model_path(cfg, ctx)
    try:
        extraction = extract_operations(path, cfg.batch_size)
    except ExtractionError as err:
        raise TaskFailed(str(err)) from err
    return extraction, deduplicate(extraction.operations())


def node_counts_frame(extraction: Extraction) -> pd.DataFrame:
    total = extraction.total_nodes or 1
    return pd.DataFrame(
        [
            {"op_type": op_type, "nodes": count, "share": count / total}
            for op_type, count in extraction.node_counts.items()
        ]
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
        "operations": len(operations),
    }
    params.update({f"nodes.{op_type}": count for op_type, count in extraction.node_counts.items()})
    return params


def print_extraction(extraction: Extraction, frame: pd.DataFrame) -> None:
    print(
        f"{extraction.path}: {extraction.model_name}, opset {extraction.opset}, batch size "
        f"{extraction.batch_size}, {extraction.total_nodes} nodes "
        f"({extraction.constant_nodes} constants), {len(frame)} distinct operations"
    )
    print(summary_table(frame))
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
    if extraction.skipped:
        run.log_table(skipped_frame(extraction), "skipped_nodes.csv")
    run.log_metrics({"nodes": extraction.total_nodes, "operations": len(frame)})
    return path
