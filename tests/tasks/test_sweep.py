"""End-to-end operator sweeps as users run them, tracked in a real SQLite MLflow store."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from helpers import FAST, Store, artifact_text, mlflow_runs, run_dlbench, write_fake_benchmark
from mlflow.tracking import MlflowClient

from dlbench.tracking.naming import short_host


def test_relu_sweep_is_one_run_with_params_tags_metrics_and_artifacts(tmp_path: Path, store: Store) -> None:
    result = run_dlbench("+benchmark=relu", "batch_size=2", *FAST, cwd=tmp_path, store=store)
    assert result.returncode == 0, result.stderr
    (run,) = mlflow_runs(store)
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert params["benchmark"] == "relu" and params["implementation"] == "torch_relu"
    assert params["batch_size"] == "2" and params["device"] == "cpu" and params["n_operations"] == "6"
    assert params["measure.min_reps"] == "2"
    tags = run.data.tags
    for key in ("cpu.model", "host.name", "python.version", "torch.version", "dlbench.version", "system.id"):
        assert tags.get(key), key
    assert run.data.tags["mlflow.runName"] == f"relu-torch_relu-bs2-fp32fw-{short_host()}"
    client = MlflowClient(tracking_uri=store.uri)
    per_operation = {k for k in run.data.metrics if k.startswith("op/")}
    names = ("stem", "l1_64", "l1_256", "l2_512", "l3_1024", "l4_2048")
    assert per_operation == {f"op/{n}/{m}" for n in names for m in ("median_ms", "gflops_per_s")}
    assert all(run.data.metrics[f"op/{n}/median_ms"] > 0 for n in names)
    assert run.data.metrics["operations_ok"] == 6 and run.data.metrics["total_time_ms"] > 0
    rows = list(csv.DictReader(io.StringIO(artifact_text(store, run.info.run_id, "results.csv"))))
    assert [r["name"] for r in rows] == ["stem", "l1_64", "l1_256", "l2_512", "l3_1024", "l4_2048"]
    assert all(r["status"] == "ok" and float(r["median_ms"]) >= float(r["min_ms"]) > 0 for r in rows)
    assert rows[0]["p.N"] == "2" and rows[0]["p.C"] == "64"
    protocol = {a.path for a in client.list_artifacts(run.info.run_id, "protocol")}
    assert protocol == {
        "protocol/torch_relu_relu.csv",
        "protocol/torch_relu_relu_out.csv",
        "protocol/torch_relu_relu_samples.csv",
        "protocol/torch_relu_relu_stderr.txt",
    }
    assert "batch_size: 2" in artifact_text(store, run.info.run_id, "config.yaml")
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert "results.png" in names


def test_a_sweep_measures_in_interleaved_rounds_with_a_reference_probe(tmp_path: Path, store: Store) -> None:
    in_rounds = [a for a in FAST if not a.startswith("measure.rounds=")]  # the default: 4 interleaved rounds
    result = run_dlbench("+benchmark=relu", "batch_size=1", *in_rounds, cwd=tmp_path, store=store)
    assert result.returncode == 0, result.stderr
    (run,) = mlflow_runs(store)
    assert run.data.params["measure.rounds"] == "4" and float(run.data.params["measure.contended_below"]) == 0
    rounds = artifact_text(store, run.info.run_id, "protocol/torch_relu_relu_rounds.csv").splitlines()
    assert rounds[0].startswith("# interleaving seed ") and len(rounds) == 2 + 6 * 4, "every operation, every round"
    rows = list(csv.DictReader(io.StringIO(artifact_text(store, run.info.run_id, "results.csv"))))
    assert "cpu_efficiency" in rows[0] and all(0 < float(r["cpu_efficiency"]) <= 1 for r in rows if r["cpu_efficiency"])
    assert "machine_drift_pct" in run.data.metrics and "operations_contended" in run.data.metrics
    assert run.data.tags["dlbench.drifted"] in ("true", "false")


def test_default_store_is_mlflow_db_in_the_start_directory(tmp_path: Path) -> None:
    result = run_dlbench("+benchmark=globalavgpool", "batch_size=1", *FAST, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "mlflow.db").exists()
    (run,) = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert run.data.params["benchmark"] == "globalavgpool"
    assert (tmp_path / ".dlbench").is_dir(), "Hydra's output folder lives under .dlbench/"
    assert not (tmp_path / "outputs").exists()


@pytest.mark.slow
def test_multirun_over_batch_size_gives_one_run_per_value_sharing_a_sweep_tag(tmp_path: Path, store: Store) -> None:
    result = run_dlbench("-m", "+benchmark=softmax", "batch_size=1,2,3", *FAST, cwd=tmp_path, store=store)
    assert result.returncode == 0, result.stderr
    runs = [r for r in mlflow_runs(store) if r.data.tags["dlbench.kind"] != "sweep"]  # the sweep's own run apart
    assert sorted(r.data.params["batch_size"] for r in runs) == ["1", "2", "3"]
    assert all(r.info.status == "FINISHED" for r in runs)
    sweeps = {r.data.tags["dlbench.sweep"] for r in runs}
    assert len(sweeps) == 1 and sweeps != {""}
    assert sorted(r.data.tags["dlbench.job"] for r in runs) == ["0", "1", "2"]


def test_prebuilt_executable_is_registered_through_config_dir_alone(tmp_path: Path, store: Store) -> None:
    conf = write_fake_benchmark(tmp_path / "myconf", name="my_relu")
    listing = run_dlbench("task=list", "--config-dir", str(conf), cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    assert any(
        line.split()[:2] == ["my_relu", "custom"] and "available" in line for line in listing.stdout.splitlines()
    )
    result = run_dlbench(
        "+benchmark=relu", "backend=custom", "batch_size=1", *FAST, "--config-dir", str(conf), cwd=tmp_path, store=store
    )
    assert result.returncode == 0, result.stderr
    (run,) = mlflow_runs(store)
    assert run.data.params["implementation"] == "my_relu"
    rows = list(csv.DictReader(io.StringIO(artifact_text(store, run.info.run_id, "results.csv"))))
    # the fake reports 1000 us * (1 + sum of params) per row: checks order, alignment and the us unit
    stem = rows[0]
    assert float(stem["median_ms"]) == pytest.approx(1 + 1 + 64 + 112 + 112 + 0)


def test_missing_executable_is_listed_as_unavailable_with_its_path(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    (conf / "registry").mkdir(parents=True)
    (conf / "registry" / "ghost.yaml").write_text(
        "name: ghost_conv\nsynonyms: [Conv]\nexe: /opt/nowhere/ghost_conv\nparam_descr: [N, C]\nbackend: ghost\n"
    )
    listing = run_dlbench("task=list", "--config-dir", str(conf), cwd=tmp_path)
    assert "ghost_conv" in listing.stdout
    assert "not available: executable not found: /opt/nowhere/ghost_conv" in listing.stdout
    result = run_dlbench("+benchmark=conv", "backend=ghost", *FAST, "--config-dir", str(conf), cwd=tmp_path)
    assert result.returncode != 0
    assert "ghost_conv is not available: executable not found: /opt/nowhere/ghost_conv" in result.stderr


def test_unknown_backend_names_what_is_registered(tmp_path: Path, store: Store) -> None:
    result = run_dlbench("+benchmark=relu", "backend=tpu_magic", *FAST, cwd=tmp_path, store=store)
    assert result.returncode != 0
    assert "no 'tpu_magic' benchmark for Relu" in result.stderr and "torch_relu (backend=torch" in result.stderr


@pytest.mark.parametrize(
    ("behaviour", "expected"),
    [
        ("crash_after_first", "was killed by SIGSEGV"),
        ("exit_3", "exited with status 3"),
        ("no_output", "wrote no output file"),
        ("nan_second", "id 1: time 'nan' is not a finite positive number"),
        ("negative_second", "id 1: time '-5' is not a finite positive number"),
        ("garbage_second", "id 'this is not' is not an integer"),
        ("skip_second", "no result row for id 1"),
    ],
)
def test_misbehaving_executable_fails_the_run_but_keeps_what_was_measured(
    tmp_path: Path, store: Store, behaviour: str, expected: str
) -> None:
    conf = write_fake_benchmark(tmp_path / "conf", name="flaky", behaviour=behaviour)
    result = run_dlbench(
        "+benchmark=relu", "backend=custom", "batch_size=1", *FAST, "--config-dir", str(conf), cwd=tmp_path, store=store
    )
    assert result.returncode != 0
    assert expected in result.stderr and "flaky" in result.stderr
    (run,) = mlflow_runs(store)
    assert run.info.status == "FAILED"
    client = MlflowClient(tracking_uri=store.uri)
    protocol = {a.path for a in client.list_artifacts(run.info.run_id, "protocol")}
    assert "protocol/flaky_relu_stderr.txt" in protocol
    if behaviour == "exit_3":
        assert "fake benchmark done" in artifact_text(store, run.info.run_id, "protocol/flaky_relu_stderr.txt")
    rows = list(csv.DictReader(io.StringIO(artifact_text(store, run.info.run_id, "results.csv"))))
    ok = [r["id"] for r in rows if r["status"] == "ok"]
    if behaviour in ("crash_after_first", "nan_second", "negative_second", "garbage_second", "skip_second"):
        assert "0" in ok and "1" not in ok, "the first operation was measured and must be kept"
    if behaviour == "exit_3":
        assert len(ok) == 6, "rows written before a non-zero exit are kept"
    assert "error.txt" in {a.path for a in client.list_artifacts(run.info.run_id)}


def test_hanging_executable_is_killed_after_the_timeout(tmp_path: Path, store: Store) -> None:
    conf = write_fake_benchmark(tmp_path / "conf", name="sleepy", behaviour="hang")
    result = run_dlbench(
        "+benchmark=relu",
        "backend=custom",
        "timeout=2",
        *FAST,
        "--config-dir",
        str(conf),
        cwd=tmp_path,
        store=store,
        timeout=120,
    )
    assert result.returncode != 0
    assert "sleepy" in result.stderr and "timed out after" in result.stderr
    (run,) = mlflow_runs(store)
    assert run.info.status == "FAILED"
