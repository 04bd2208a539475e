"""The data-parallel training benchmark (DistributedDataParallel under torchrun) and its evaluation."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import job_runs, run_dlbench

from dlbench.tracking.store import TrackingTarget  # noqa: F401  (the store fixture's module)

SMALL = ("threads=1", "steps=8", "profile.warmup=2", "profile.batches=2", "quiet=true")


@pytest.mark.slow
def test_ddp_training_logs_one_run_with_every_ranks_profile(tmp_path: Path, store) -> None:
    from mlflow.tracking import MlflowClient

    done = run_dlbench("+benchmark=mlp_ddp", "world_size=2", *SMALL, cwd=tmp_path, store=store, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    parents = [r for r in job_runs(store) if r.data.tags.get("dlbench.kind") == "training"]
    assert len(parents) == 1
    run = parents[0]
    assert run.data.params["world_size"] == "2"
    client = MlflowClient(tracking_uri=store.uri)
    rank1 = {Path(a.path).name for a in client.list_artifacts(run.info.run_id, "profile/rank1")}
    assert {"batch_2_ops.csv", "batch_3_ops.csv", "summary_ops.csv"} <= rank1
    # rank 0 published the profiled batches as child runs, rank 1 published none of its own
    children = [r for r in job_runs(store) if r.data.tags.get("dlbench.kind") == "profiled_batch"]
    assert sorted(r.data.tags["dlbench.batch"] for r in children) == ["2", "3"]
