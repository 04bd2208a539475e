"""The data-parallel training benchmark (DistributedDataParallel under torchrun) and its evaluation."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import job_runs, run_dlbench

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


def test_buckets_are_those_ddp_computes_for_the_gradients_in_ready_order() -> None:
    import torch
    import torch.distributed as dist

    from dlbench.analysis.data_parallel import FIRST_BUCKET_BYTES, ddp_buckets

    layers = [
        torch.nn.Linear(784, 2048),
        torch.nn.Linear(2048, 2048),
        torch.nn.Linear(2048, 512),
        torch.nn.Linear(512, 10),
    ]
    params = [p for layer in layers for p in layer.parameters()]
    sizes = [p.numel() * p.element_size() for p in params]
    for cap_mb in (25, 4, 1):
        # DDP's own assignment over the parameters in the order their gradients become ready
        indices, _ = dist._compute_bucket_assignment_by_size(params[::-1], [FIRST_BUCKET_BYTES, cap_mb * 1024 * 1024])
        expected = [sum(sizes[::-1][i] for i in bucket) for bucket in indices]
        assert ddp_buckets(sizes, cap_mb) == expected


def test_interpolation_between_measured_sizes_is_linear_on_log_scales() -> None:
    from dlbench.analysis.data_parallel import interpolated_ms

    measured = {1024: 1.0, 4096: 4.0}
    assert interpolated_ms(measured, 2048) == pytest.approx(2.0)  # time ~ bytes: the geometric middle
    assert interpolated_ms(measured, 512) == 1.0  # below: latency-bound
    assert interpolated_ms(measured, 8192) == pytest.approx(8.0)  # above: bandwidth-bound


def test_only_communication_outlasting_the_backward_pass_is_exposed() -> None:
    from dlbench.analysis.data_parallel import overlap_with_backward

    # two equal buckets, ready at 5 and 10 ms of a 10 ms backward pass
    hidden = overlap_with_backward(10.0, [100, 100], [2.0, 2.0])
    assert hidden.communication_ms == 4.0 and hidden.exposed_ms == pytest.approx(2.0)
    # a slow first all-reduce delays the second: it starts at 5 + 8 = 13 and ends at 21
    queued = overlap_with_backward(10.0, [100, 100], [8.0, 8.0])
    assert list(queued.schedule["start_ms"]) == [5.0, 13.0] and queued.exposed_ms == pytest.approx(11.0)


@pytest.mark.slow
def test_evaluate_predicts_the_data_parallel_step_with_its_exposed_communication(tmp_path: Path, store) -> None:
    done = run_dlbench(
        "task=evaluate", "+benchmark=mlp_ddp", "world_size=2", *SMALL, "steps=12", "evaluate.bracket=false",
        "measure.warmup=1", "measure.min_reps=3", "measure.min_time_s=0", "measure.target_rel_ci=0.5",
        cwd=tmp_path, store=store, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    run = next(r for r in job_runs(store) if r.data.tags.get("dlbench.kind") == "evaluation")
    metrics = run.data.metrics
    assert metrics["world_size"] == 2 and metrics["allreduce_buckets"] >= 1
    assert 0 <= metrics["allreduce_exposed_ms"] <= metrics["allreduce_total_ms"]
    assert metrics["step_time_predicted_ms"] == pytest.approx(
        metrics["step_time_single_process_predicted_ms"] + metrics["allreduce_exposed_ms"], rel=1e-3
    )  # metrics are logged rounded
    assert 0 < metrics["scaling_efficiency_predicted"] <= 1
    assert "exposed communication" in done.stdout
