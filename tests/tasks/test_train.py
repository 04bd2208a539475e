"""Training benchmarks end to end: ``python -m dlbench +benchmark=...`` runs the instrumented script in its
own process, tracked in a real SQLite MLflow store; failures end the run FAILED with the script's stderr."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from helpers import REPO, Store, artifact_text, mlflow_runs, run_dlbench
from mlflow.tracking import MlflowClient

from dlbench.config import DlbenchConfig
from dlbench.core.errors import TaskFailed
from dlbench.operators.registry import TrainingBenchmark
from dlbench.training.scripts import resolve_parameters

CRASHING_SCRIPT = """\
import sys
import torch
from dlbench.instrument import op_performance_analysis
for batch_idx in range(10):
    with op_performance_analysis(batch_idx):
        torch.ones(4, 4) @ torch.ones(4, 4)
    if batch_idx == 2:
        print("diverged: loss is nan at batch 2", file=sys.stderr)
        sys.exit(3)
"""

HANGING_SCRIPT = """\
import sys, time
print("stuck in the data loader", file=sys.stderr, flush=True)
time.sleep(3600)
"""

UNINSTRUMENTED_SCRIPT = """\
import torch
for batch_idx in range(10):
    torch.ones(4, 4) @ torch.ones(4, 4)
print("trained without instrumentation")
"""


def write_training(conf: Path, name: str, exe: str, parameters: str) -> Path:
    """A config directory with ``training/<name>.yaml`` and the matching ``benchmark/<name>.yaml``."""
    (conf / "training").mkdir(parents=True, exist_ok=True)
    (conf / "benchmark").mkdir(parents=True, exist_ok=True)
    (conf / "training" / f"{name}.yaml").write_text(
        f"name: {name}\nexe: {exe}\nparameters: {parameters}\ndescription: test training benchmark\n"
    )
    (conf / "benchmark" / f"{name}.yaml").write_text(
        f"# @package benchmark\nname: {name}\nkind: training\ntraining: {name}\n"
    )
    return conf


def tiny_mlp_conf(conf: Path) -> Path:
    return write_training(
        conf,
        "tiny_mlp",
        f"[python, {REPO / 'TrainingBenchmarks' / 'mlp.py'}]",
        "--batch-size ${batch_size} --steps ${steps} --lr ${lr} --threads 1 --hidden 32 --layers 1",
    )


def script_conf(conf: Path, name: str, source: str) -> Path:
    script = conf / f"{name}.py"
    conf.mkdir(parents=True, exist_ok=True)
    script.write_text(source)
    return write_training(conf, name, f"[python, {script}]", "--steps ${steps}")


@pytest.mark.slow
def test_training_run_logs_steps_and_one_child_run_per_profiled_batch(tmp_path: Path, store: Store):
    conf = tiny_mlp_conf(tmp_path / "conf")
    overrides = ["+benchmark=tiny_mlp", "batch_size=4", "steps=6", "lr=0.1", "profile.warmup=2", "profile.batches=3"]
    result = run_dlbench(*overrides, "--config-dir", str(conf), cwd=tmp_path, store=store, timeout=300)
    assert result.returncode == 0, result.stderr

    runs = mlflow_runs(store)
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = sorted((r for r in runs if r is not parent), key=lambda r: r.info.run_name)
    assert parent.info.status == "FINISHED"
    params = parent.data.params
    assert params["benchmark"] == "tiny_mlp" and params["training"] == "tiny_mlp"
    assert params["batch_size"] == "4" and params["steps"] == "6" and params["lr"] == "0.1"
    assert params["profile.warmup"] == "2" and params["profile.batches"] == "3"
    assert "--batch-size 4 --steps 6 --lr 0.1" in params["parameters"]
    tags = parent.data.tags
    assert tags["dlbench.kind"] == "training" and tags["cpu.model"] and tags["torch.version"]

    client = MlflowClient(tracking_uri=store.uri)
    for name in ("step_time_s", "samples_per_s", "loss"):
        history = client.get_metric_history(parent.info.run_id, name)
        assert sorted(m.step for m in history) == list(range(6)), name
        assert all(m.value > 0 for m in history), name
    assert parent.data.metrics["profiled_batches"] == 3
    assert parent.data.metrics["step_time_s_median"] > 0
    parent_artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"stderr.txt", "stdout.txt", "config.yaml", "profile"} <= parent_artifacts
    summary = list(csv.DictReader(io.StringIO(artifact_text(store, parent.info.run_id, "profile/summary_ops.csv"))))
    addmm = [row for row in summary if row["name"] == "aten::addmm"]
    assert addmm and all(row["batches"] == "3" for row in addmm)

    assert [c.info.run_name for c in children] == ["batch_2", "batch_3", "batch_4"]
    for child in children:
        assert child.info.status == "FINISHED"
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.data.tags["dlbench.kind"] == "profiled_batch"
        assert child.data.metrics["batch_time_s"] > 0
        assert child.data.metrics["op_self_cpu_ms/aten::addmm"] > 0
        batch = child.info.run_name.split("_")[1]
        files = {a.path for a in client.list_artifacts(child.info.run_id, "profile")}
        assert files == {f"profile/batch_{batch}_ops.csv", f"profile/batch_{batch}_trace.json"}


@pytest.mark.slow
def test_crashing_script_ends_the_run_failed_with_its_stderr(tmp_path: Path, store: Store):
    conf = script_conf(tmp_path / "conf", "crashy", CRASHING_SCRIPT)
    result = run_dlbench("+benchmark=crashy", "steps=10", "--config-dir", str(conf), cwd=tmp_path, store=store)
    assert result.returncode != 0
    assert "training benchmark crashy: the script exited with status 3" in result.stderr
    assert "diverged: loss is nan at batch 2" in result.stderr
    (run,) = mlflow_runs(store)
    assert run.info.status == "FAILED"
    assert "diverged: loss is nan at batch 2" in artifact_text(store, run.info.run_id, "stderr.txt")
    assert "exited with status 3" in artifact_text(store, run.info.run_id, "error.txt")


def test_hanging_script_is_killed_after_the_timeout_and_the_run_fails(tmp_path: Path, store: Store):
    conf = script_conf(tmp_path / "conf", "hangs", HANGING_SCRIPT)
    result = run_dlbench("+benchmark=hangs", "timeout=3", "--config-dir", str(conf), cwd=tmp_path, store=store)
    assert result.returncode != 0
    assert "training benchmark hangs: the script timed out after" in result.stderr
    (run,) = mlflow_runs(store)
    assert run.info.status == "FAILED"
    assert "stuck in the data loader" in artifact_text(store, run.info.run_id, "stderr.txt")


def test_script_that_writes_no_profile_fails_the_run(tmp_path: Path, store: Store):
    conf = script_conf(tmp_path / "conf", "bare", UNINSTRUMENTED_SCRIPT)
    result = run_dlbench("+benchmark=bare", "steps=10", "--config-dir", str(conf), cwd=tmp_path, store=store)
    assert result.returncode != 0
    assert "ended without writing its profile" in result.stderr
    (run,) = mlflow_runs(store)
    assert run.info.status == "FAILED"
    assert "trained without instrumentation" in artifact_text(store, run.info.run_id, "stdout.txt")


def test_missing_script_fails_the_run_naming_the_path(tmp_path: Path, store: Store):
    conf = write_training(tmp_path / "conf", "ghost", "[python, /opt/nowhere/ghost_train.py]", "--steps ${steps}")
    result = run_dlbench("+benchmark=ghost", "--config-dir", str(conf), cwd=tmp_path, store=store)
    assert result.returncode != 0
    assert "script not found: /opt/nowhere/ghost_train.py" in result.stderr
    (run,) = mlflow_runs(store)
    assert run.info.status == "FAILED"


def test_too_few_steps_for_the_profile_window_is_refused(tmp_path: Path, store: Store):
    conf = tiny_mlp_conf(tmp_path / "conf")
    result = run_dlbench(
        "+benchmark=tiny_mlp", "steps=3", "profile.warmup=5", "--config-dir", str(conf), cwd=tmp_path, store=store
    )
    assert result.returncode != 0
    assert "steps=3 but profile.warmup=5: no batch would be profiled" in result.stderr


@pytest.mark.slow
def test_multirun_goes_on_after_a_failing_job(tmp_path: Path, store: Store):
    conf = tiny_mlp_conf(tmp_path / "conf")
    script_conf(conf, "crashy", CRASHING_SCRIPT)
    result = run_dlbench(
        "-m", "+benchmark=crashy,tiny_mlp", "batch_size=2", "steps=6", "profile.warmup=1", "profile.batches=1",
        "--config-dir", str(conf), cwd=tmp_path, store=store, timeout=300,
    )  # fmt: skip
    assert result.returncode != 0
    runs = [r for r in mlflow_runs(store) if r.data.tags["dlbench.kind"] == "training"]  # not the sweep's run
    statuses = {r.data.params["benchmark"]: r.info.status for r in runs}
    assert statuses == {"crashy": "FAILED", "tiny_mlp": "FINISHED"}
    assert len({r.data.tags["dlbench.sweep"] for r in runs}) == 1


@pytest.mark.slow
def test_shipped_resnet_cifar_benchmark_trains_and_is_profiled(tmp_path: Path, store: Store):
    result = run_dlbench(
        "+benchmark=resnet_cifar", "batch_size=4", "steps=4", "threads=1", "profile.warmup=1", "profile.batches=2",
        cwd=tmp_path, store=store, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    runs = mlflow_runs(store)
    assert len(runs) == 3
    child = next(r for r in runs if "mlflow.parentRunId" in r.data.tags)
    assert child.data.metrics["op_self_cpu_ms/aten::mkldnn_convolution"] > 0


def entry(parameters: str) -> TrainingBenchmark:
    return TrainingBenchmark("t", ("python", "t.py"), parameters, "", Path("conf/training/t.yaml"))


def test_parameters_resolve_against_the_config_and_split_without_a_shell():
    cfg = DlbenchConfig(task="list", batch_size=16, steps=40, lr=0.2)
    args = resolve_parameters(
        entry("--batch-size ${batch_size} --steps ${steps} --lr ${lr} --name 'a b; rm -rf x'"), cfg
    )
    assert args == ["--batch-size", "16", "--steps", "40", "--lr", "0.2", "--name", "a b; rm -rf x"]


def test_unknown_interpolation_names_the_training_file():
    with pytest.raises(TaskFailed, match=r"training entry conf/training/t.yaml: field parameters .*epochs"):
        resolve_parameters(entry("--epochs ${epochs}"), DlbenchConfig(task="list"))
