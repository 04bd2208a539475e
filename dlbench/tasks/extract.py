"""task=extract: read each configured ONNX model into its operation database, print it, and log it as one
MLflow run per model."""

from __future__ import annotations

from dlbench.config import DlbenchConfig
from dlbench.core.context import AppContext
from dlbench.onnx.opdb import operations_frame
from dlbench.onnx.report import (
    extract,
    extraction_params,
    extraction_tags,
    log_extraction,
    model_paths,
    print_extraction,
)
from dlbench.tracking.runs import open_run
from dlbench.tracking.store import import_tracking_in_background


def run(cfg: DlbenchConfig, ctx: AppContext) -> int:
    paths = model_paths(cfg, ctx)
    imported = import_tracking_in_background()
    for path in paths:
        extraction, operations = extract(cfg, ctx, path)
        imported()
        frame = operations_frame(operations)
        print_extraction(extraction, frame)
        name = f"extract-{extraction.model_name}-bs{cfg.batch_size}"
        with open_run(
            cfg, ctx, kind="extraction", benchmark=extraction.model_name, name=name,
            params=extraction_params(extraction, operations), tags=extraction_tags(extraction),
        ) as tracked:  # fmt: skip
            log_extraction(tracked, ctx.output_dir, extraction, frame)
            print(f"\nMLflow run {tracked.run_id} ({tracked.target.uri}, experiment {tracked.target.experiment})")
    return 0
