"""The data-parallel training benchmark (DistributedDataParallel under torchrun) and its evaluation."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import artifact_text, job_runs, run_dlbench

ROOT = Path(__file__).resolve().parents[2]

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


def ddp_rebuilt_buckets(bucket_cap_mb: float | None, tmp_path: Path) -> tuple[list[int], list[int], float, float]:
    """A real DistributedDataParallel (one gloo rank) trained three steps: the bucket sizes it rebuilt after
    the first backward pass, the parameter sizes, and its limits as mlp_ddp.py reports them."""
    import importlib.util

    import torch
    import torch.distributed as dist

    spec = importlib.util.spec_from_file_location("mlp_ddp", ROOT / "TrainingBenchmarks" / "mlp_ddp.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        sizes = [(784, 512), (512, 512), (512, 256), (256, 10)]
        model = torch.nn.Sequential(*(torch.nn.Linear(a, b) for a, b in sizes))
        ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
        for _ in range(3):  # rebuilt in the second step's forward, logged after it
            ddp(torch.randn(4, 784)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
        rebuilt = [int(b) for b in str(ddp._get_ddp_logging_data()["rebuilt_bucket_sizes"]).split(",")]
        cap, first = script.bucket_limits_mb(ddp)
    finally:
        dist.destroy_process_group()
    return rebuilt, [p.numel() * p.element_size() for p in model.parameters()], cap, first


@pytest.mark.parametrize("bucket_cap_mb", [None, 1.0, 0.5])
def test_buckets_are_those_ddp_rebuilds_with_the_limits_the_script_reports(bucket_cap_mb, tmp_path: Path) -> None:
    from dlbench.analysis.data_parallel import ddp_buckets

    rebuilt, sizes, cap, first = ddp_rebuilt_buckets(bucket_cap_mb, tmp_path)
    # DDP's default closes the first bucket at 1 MiB, an explicit bucket_cap_mb at the cap
    assert first == (1.0 if bucket_cap_mb is None else bucket_cap_mb)
    assert ddp_buckets(sizes, cap, first) == rebuilt
    if bucket_cap_mb is not None:  # without a reported first limit, the explicit cap's rule
        assert ddp_buckets(sizes, cap) == rebuilt


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


def test_an_all_reduce_that_cannot_hide_is_exposed_in_full() -> None:
    from dlbench.analysis.data_parallel import overlap_with_backward

    shared = overlap_with_backward(10.0, [100, 100], [2.0, 2.0], hidden=False)
    assert shared.exposed_ms == shared.communication_ms == 4.0
    assert shared.exposed_if_hidden_ms == pytest.approx(2.0)  # the other model, for comparison
    assert list(shared.schedule["start_ms"]) == [5.0, 10.0]  # the schedule is still when each could start


def test_on_cpus_whose_cores_the_ranks_take_the_all_reduce_does_not_hide() -> None:
    from dlbench.analysis.data_parallel import communication_hides

    assert not communication_hides("auto", "cpu", 2, 1, 2)[0]  # 2 ranks x 1 thread on 2 cores
    assert not communication_hides("auto", "cpu", 2, 0, 8)[0]  # threads=0: every core
    assert communication_hides("auto", "cpu", 2, 1, 4)[0]  # two idle cores for gloo
    assert communication_hides("auto", "cuda", 2, 0, 2)[0]
    assert communication_hides("backward", "cpu", 2, 1, 2)[0]
    assert not communication_hides("none", "cuda", 2, 1, 8)[0]
    with pytest.raises(ValueError, match="communication_overlap"):
        communication_hides("sometimes", "cpu", 2, 1, 2)


def test_gradient_copies_lengthen_the_backward_pass_and_follow_the_all_reduce() -> None:
    from dlbench.analysis.data_parallel import bucket_copy_ms, data_parallel_metrics, data_parallel_step

    copy = bucket_copy_ms([400, 400, 40], 4, {100: 1.0, 10: 0.25})
    assert copy == pytest.approx(2.25)
    # the copies make the 10 ms backward pass 12 ms: one 3 ms bucket ready at its end is exposed from there
    step = data_parallel_step(10.0, [840], [3.0], 2.0, True, "")
    assert step.overlap.schedule["ready_ms"].tolist() == [12.0] and step.overlap.exposed_ms == 3.0
    metrics = data_parallel_metrics(20.0, 25.0, step, 2)  # the two steps as the caller's step model says
    assert metrics["ddp_gradient_copies_ms"] == 4.0
    assert metrics["scaling_efficiency_predicted"] == pytest.approx(20.0 / 25.0)


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
        metrics["step_time_single_process_predicted_ms"]
        + metrics["ddp_gradient_copies_ms"]
        + metrics["allreduce_exposed_ms"],
        rel=1e-3,
    )  # metrics are logged rounded
    assert metrics["ddp_gradient_copies_ms"] > 0
    # evaluate.single_process: the same script as one process, measured
    assert metrics["step_time_single_process_measured_ms"] > 0
    assert metrics["scaling_efficiency_measured"] == pytest.approx(
        metrics["step_time_single_process_measured_ms"] / metrics["step_time_measured_ms"], rel=1e-2
    )
    assert metrics["scaling_efficiency_predicted"] == pytest.approx(
        metrics["step_time_single_process_predicted_ms"] / metrics["step_time_predicted_ms"], rel=1e-2
    )  # on a CPU both steps are sums of terms: the data-parallel one with DDP's two terms added
    assert "exposed communication" in done.stdout and "DDP gradient copies" in done.stdout
    # two ranks on this CPU: every operator benchmark ran beside a copy of itself, whose files are gone
    assert "operator benchmarks timed beside 1 copy" in artifact_text(store, run.info.run_id, "notes.txt")
    from mlflow.tracking import MlflowClient

    logged = MlflowClient(store.uri).list_artifacts(run.info.run_id, "protocol")
    assert logged and not [a.path for a in logged if "_beside" in a.path]
