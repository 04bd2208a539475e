"""A finished profiling session published to the MLflow run a runner opened (``MLFLOW_RUN_ID``): step series,
run-level figures, and one nested child run per profiled batch."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from dlbench.training.profile import BATCHES_FILE, SUMMARY_FILE, ProfiledBatch


def operator_metrics(batch: ProfiledBatch) -> dict[str, float]:
    """Per operator name (all input shapes together): self CPU and self device milliseconds."""
    cpu: dict[str, float] = {}
    device: dict[str, float] = {}
    for row in batch.rows:
        cpu[row[1]] = cpu.get(row[1], 0.0) + row[4] / 1e3
        device[row[1]] = device.get(row[1], 0.0) + row[6] / 1e3
    metrics = {"batch_time_s": batch.wall_s, "self_cpu_ms_total": sum(cpu.values())}
    metrics.update({f"op_self_cpu_ms/{_metric_name(name)}": v for name, v in cpu.items()})
    if any(device.values()):
        metrics["self_device_ms_total"] = sum(device.values())
        metrics.update({f"op_self_device_ms/{_metric_name(name)}": v for name, v in device.items() if v})
    return metrics


def _metric_name(name: str) -> str:
    """MLflow metric names allow letters, digits and ``_-. :/``; anything else becomes ``_``."""
    cleaned = "".join(c if c.isalnum() or c in "_-. :/" else "_" for c in name)
    return cleaned.replace("/", "_")[:200]


def publish_to_mlflow(
    series: Mapping[str, list[tuple[int, float]]],
    metrics: Mapping[str, float],
    out_dir: Path,
    profiled: Iterable[ProfiledBatch],
    params: Mapping[str, object] | None = None,
) -> None:
    """Log a finished session to the MLflow run named by ``MLFLOW_RUN_ID``: per-step ``series`` (step time,
    samples per second, logged values), run-level ``metrics`` and the summary files in ``out_dir`` on that
    run, the script's effective ``params`` (names the runner already logged keep the runner's value), and one
    nested child run per ``profiled`` batch with its operator metrics, table and trace. Writes
    ``published.json`` (the child run ids) to ``out_dir`` when done, so a runner can check."""
    from dlbench.tracking.run import TrackedRun, attach_run_from_env

    parent = attach_run_from_env()
    if parent is None:
        return
    records = [
        (name, value, step)
        for name, pairs in series.items()
        if name != "samples"  # the batch size; samples_per_s carries it
        for step, value in pairs
    ]
    parent.log_metric_records(records)
    parent.log_metrics(metrics)
    for name in (SUMMARY_FILE, BATCHES_FILE):
        if (out_dir / name).exists():
            parent.log_artifact(out_dir / name, "profile")
    parent_run = parent.client.get_run(parent.run_id)
    logged = parent_run.data.params
    parent.log_params({k: v for k, v in (params or {}).items() if k not in logged})
    inherited = {k: v for k, v in parent_run.data.tags.items() if k.startswith("dlbench.") and k != "dlbench.run_id"}
    children = {}
    for batch in profiled:
        tags = {**inherited, "dlbench.kind": "profiled_batch", "dlbench.batch": str(batch.batch_idx)}
        with TrackedRun(
            parent.target,
            run_name=f"batch_{batch.batch_idx}",
            params={"batch": batch.batch_idx},
            tags=tags,
            parent_run_id=parent.run_id,
            experiment_id=parent_run.info.experiment_id,
        ) as child:
            child.log_metrics(operator_metrics(batch))
            child.log_artifact(batch.ops_path, "profile")
            if batch.trace_path is not None and batch.trace_path.exists():
                child.log_artifact(batch.trace_path, "profile")
            children[str(batch.batch_idx)] = child.run_id
    published = {"parent_run_id": parent.run_id, "child_run_ids": children}
    (out_dir / "published.json").write_text(json.dumps(published, indent=2) + "\n", encoding="utf-8")
