"""A multirun is one MLflow run of its own: the jobs' runs are its children, and when the sweep ends it holds
an operation x swept-value table, plots against the batch size and a summary; a failed sweep still keeps
what its jobs measured. The experiment dlbench creates or first uses is marked as a training experiment."""

from __future__ import annotations

import csv
import io
import json
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from helpers import FAST, Store, artifact_text, mlflow_runs, run_dlbench, write_fake_benchmark
from mlflow.tracking import MlflowClient

from dlbench.analysis.sweep import summarize_sweep, sweep_figures, sweep_note
from dlbench.cli.callbacks import sweep_run_name, swept_overrides
from dlbench.cli.sweep import sweep_status
from dlbench.tracking.store import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, TrackingTarget, prepare_store
from dlbench.tracking.sweep import HANDOFF_FILE


def _split(store: Store) -> tuple[object, list]:
    runs = mlflow_runs(store)
    (sweep,) = [r for r in runs if r.data.tags["dlbench.kind"] == "sweep"]
    return sweep, sorted((r for r in runs if r is not sweep), key=lambda r: int(r.data.params["batch_size"]))


@pytest.mark.slow  # three measured jobs
def test_multirun_is_a_parent_run_with_the_jobs_as_children_a_table_and_plots(tmp_path: Path, store: Store) -> None:
    result = run_dlbench(
        "-m", "+benchmark=relu", "batch_size=1,2,4", *FAST, cwd=tmp_path, store=store,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    sweep, jobs = _split(store)
    assert sweep.info.status == "FINISHED" and sweep.info.run_name == "relu-sweep-bs1,2,4"
    assert sweep.data.params["batch_size"] == "1,2,4" and sweep.data.params["swept"] == "batch_size"
    assert sweep.data.tags["mlflow.source.name"].startswith("python -m dlbench -m +benchmark=relu batch_size=1,2,4")
    assert [j.data.params["batch_size"] for j in jobs] == ["1", "2", "4"]
    assert {j.data.tags["mlflow.parentRunId"] for j in jobs} == {sweep.info.run_id}
    assert sweep.data.metrics["jobs_finished"] == 3

    # the compare page lines up one layer across batch sizes: the same op/ keys in every job, no step series
    keys = [{k for k in j.data.metrics if k.startswith("op/")} for j in jobs]
    assert keys[0] == keys[1] == keys[2] and "op/stem/median_ms" in keys[0] and "median_ms" not in jobs[0].data.metrics
    datasets = [j.inputs.dataset_inputs[0].dataset for j in jobs]
    assert {d.name for d in datasets} == {"resnet50-relu"} and len({d.digest for d in datasets}) == 3
    assert "Slowest operations" in jobs[0].data.tags["mlflow.note.content"]
    assert jobs[0].data.tags["mlflow.source.name"].startswith("python -m dlbench +benchmark=relu batch_size=1 ")

    table = pd.read_csv(io.StringIO(artifact_text(store, sweep.info.run_id, "sweep/median_ms_by_batch_size.csv")))
    assert table.columns.tolist() == ["benchmark", "implementation", "id", "key", "bs1", "bs2", "bs4", "marked"]
    assert table["key"].tolist() == ["stem", "l1_64", "l1_256", "l2_512", "l3_1024", "l4_2048"]
    assert table.loc[0, "bs2"] == pytest.approx(jobs[1].data.metrics["op/stem/median_ms"], rel=1e-3)
    listed = list(csv.DictReader(io.StringIO(artifact_text(store, sweep.info.run_id, "sweep/jobs.csv"))))
    assert [float(r["total_time_ms"]) for r in listed] == [j.data.metrics["total_time_ms"] for j in jobs]
    client = MlflowClient(tracking_uri=store.uri)
    plots = [a.path for a in client.list_artifacts(sweep.info.run_id, "sweep") if a.path.endswith(".png")]
    assert plots == ["sweep/relu-torch_relu_vs_batch_size.png"]
    with tempfile.TemporaryDirectory() as tmp:
        assert (
            Path(client.download_artifacts(sweep.info.run_id, plots[0], tmp)).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        )
    note = sweep.data.tags["mlflow.note.content"]
    assert "relu-torch_relu-bs4" in note
    noisy = sum(j.data.tags.get("dlbench.noisy") == "true" for j in jobs)  # whatever the machine did meanwhile
    assert note.startswith(f"**relu-sweep-bs1,2,4** (FINISHED): **{noisy} of 3 jobs noisy**")
    assert sweep.data.metrics["jobs_noisy"] == noisy and sweep.data.tags["dlbench.noisy_jobs"] == str(noisy)
    assert f"runs/{sweep.info.run_id}/artifacts/sweep/relu-torch_relu_vs_batch_size.png?" in result.stdout

    (handoff,) = (tmp_path / ".dlbench" / "multirun").glob(f"*/{HANDOFF_FILE}")
    assert json.loads(handoff.read_text())["run_id"] == sweep.info.run_id
    assert f"runs/{sweep.info.run_id}?workflowType=machine_learning" in result.stdout


@pytest.mark.slow
def test_a_sweep_whose_jobs_fail_ends_failed_and_keeps_what_they_measured(tmp_path: Path, store: Store) -> None:
    conf = write_fake_benchmark(tmp_path / "conf", name="flaky", behaviour="exit_3")
    result = run_dlbench(
        "-m", "+benchmark=relu", "backend=custom", "batch_size=1,2", *FAST, "--config-dir", str(conf),
        cwd=tmp_path, store=store,
    )  # fmt: skip
    assert result.returncode != 0
    sweep, jobs = _split(store)
    assert sweep.info.status == "FAILED" and [j.info.status for j in jobs] == ["FAILED", "FAILED"]
    listed = list(csv.DictReader(io.StringIO(artifact_text(store, sweep.info.run_id, "sweep/jobs.csv"))))
    assert [r["status"] for r in listed] == ["FAILED", "FAILED"]
    rows = list(csv.DictReader(io.StringIO(artifact_text(store, sweep.info.run_id, "sweep/operations.csv"))))
    assert len(rows) == 12, "the rows the program wrote before its exit status 3 are in the sweep's table"


def test_swept_parameters_and_fixed_overrides_are_told_apart() -> None:
    swept, fixed = swept_overrides(["+benchmark=conv", "batch_size=1,8,32", "dtype=float32", "hydra.launcher.n_jobs=2"])
    assert swept == {"batch_size": ["1", "8", "32"]} and fixed == {"benchmark": "conv", "dtype": "float32"}
    assert sweep_run_name("conv", swept) == "conv-sweep-bs1,8,32"
    assert sweep_run_name("conv", {"dtype": ["float32", "bfloat16"]}) == "conv-sweep-dtype=float32,bfloat16"


def test_a_sweep_finishes_only_when_it_completed_and_every_job_run_finished() -> None:
    assert sweep_status(True, ["FINISHED", "FINISHED"]) == "FINISHED"
    assert sweep_status(True, ["FINISHED", "FAILED"]) == "FAILED"
    assert sweep_status(False, ["FINISHED", "FINISHED"]) == "FAILED", "a job failed before it opened its run"
    assert sweep_status(False, ["FINISHED", "KILLED"]) == "KILLED"
    assert sweep_status(True, []) == "FAILED"


def _children(kind: str, rows: list[dict]) -> pd.DataFrame:
    base = {"status": "FINISHED", "tags.dlbench.kind": kind, "tags.system.id": "s", "params.dtype": "float32",
            "params.device": "cpu", "params.threads": "0", "start_time": 1}  # fmt: skip
    return pd.DataFrame([{**base, **row} for row in rows])


def test_a_training_sweep_is_plotted_as_step_time_and_throughput_against_batch_size() -> None:
    children = _children(
        "training",
        [{"run_id": f"t{b}", "tags.dlbench.benchmark": "mlp", "tags.mlflow.runName": f"mlp-bs{b}",
          "params.batch_size": str(b), "metrics.step_time_s_median": 0.01 * b, "metrics.samples_per_s_median": 100.0}
         for b in (8, 16)],
    )  # fmt: skip
    summary = summarize_sweep(children, lambda run_id: pd.DataFrame(), ["batch_size"])
    assert summary.jobs["batch_size"].tolist() == [8, 16] and summary.operations.empty
    (name, _figure), *_ = sweep_figures(summary)
    assert name == "sweep/mlp_step_time_vs_batch_size.png"


def test_a_sweep_over_something_else_than_the_batch_size_is_tabulated_by_that_value() -> None:
    children = _children(
        "operator_sweep",
        [{"run_id": d, "tags.dlbench.benchmark": "relu", "tags.dlbench.implementation": "torch_relu",
          "tags.mlflow.runName": d, "params.batch_size": "4", "params.dtype": d, "metrics.total_time_ms": 2.0}
         for d in ("float32", "bfloat16")],
    )  # fmt: skip
    results = {
        "float32": pd.DataFrame({"id": [0], "key": ["stem"], "name": ["stem"], "count": [1], "median_ms": [2.0],
                                 "status": ["ok"]}),
        "bfloat16": pd.DataFrame({"id": [0], "key": ["stem"], "name": ["stem"], "count": [1], "median_ms": [1.0],
                                  "status": ["ok"]}),
    }  # fmt: skip
    summary = summarize_sweep(children, results.__getitem__, ["dtype"])
    assert summary.x == "swept"
    table = summary.by_value()
    assert table.columns.tolist()[-3:] == ["dtype=bfloat16", "dtype=float32", "marked"]
    assert table.loc[0, "dtype=float32"] == 2.0 and table.loc[0, "dtype=bfloat16"] == 1.0
    (name, _figure), *_ = sweep_figures(summary)
    assert name == "sweep/relu-torch_relu_vs_swept.png"


def test_the_experiment_is_marked_as_a_training_experiment_unless_the_user_chose(store_uri: str) -> None:
    client = MlflowClient(tracking_uri=store_uri)
    new = prepare_store(TrackingTarget(store_uri, "kind-new"))
    assert client.get_experiment(new).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    older = client.create_experiment("kind-older")  # made by an older dlbench, or by hand
    prepare_store(TrackingTarget(store_uri, "kind-older"))
    assert client.get_experiment(older).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    chosen = client.create_experiment("kind-chosen", tags={EXPERIMENT_KIND_TAG: "genai_development"})
    prepare_store(TrackingTarget(store_uri, "kind-chosen"))
    assert client.get_experiment(chosen).tags[EXPERIMENT_KIND_TAG] == "genai_development"


def test_mlflow_system_metrics_are_sampled_while_a_run_is_open(store_uri: str) -> None:
    """The sampler fires on its own clock: the run stays open until it has (a short job may end before)."""
    import time

    from dlbench.tracking.run import TrackedRun

    with TrackedRun(TrackingTarget(store_uri, "sampled"), "sampled", system_metrics_s=0.2) as run:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if "system/cpu_utilization_percentage" in run.client.get_run(run.run_id).data.metrics:
                break
            time.sleep(0.5)
        metrics = run.client.get_run(run.run_id).data.metrics
    assert "system/cpu_utilization_percentage" in metrics, sorted(metrics)


def test_the_sweep_note_leads_with_its_noisy_jobs_and_the_plots_draw_them_hollow() -> None:
    children = _children(
        "operator_sweep",
        [{"run_id": f"r{b}", "tags.dlbench.benchmark": "conv", "tags.dlbench.implementation": "torch_conv",
          "tags.mlflow.runName": f"conv-bs{b}", "params.batch_size": str(b), "metrics.total_time_ms": 2.0 * b,
          "tags.dlbench.noisy": "true" if b == 4 else "false"} for b in (1, 4, 16)],
    )  # fmt: skip
    status = {1: "ok", 4: "ok", 16: "contended"}
    results = {f"r{b}": pd.DataFrame({"id": [0], "key": ["l1_3x3"], "name": ["l1_3x3"], "count": [1],
                                      "median_ms": [1.0 * b], "status": [status[b]]}) for b in (1, 4, 16)}  # fmt: skip
    summary = summarize_sweep(children, results.__getitem__, ["batch_size"])
    assert summary.noisy_jobs == 1 and summary.jobs["noisy"].tolist() == [False, True, False]
    note = sweep_note("conv-sweep", summary, "FINISHED", [])
    assert note.startswith("**conv-sweep** (FINISHED): **1 of 3 jobs noisy**")
    assert "| conv-bs4 | FINISHED | **yes** |" in note
    assert summary.operations["marked"].tolist() == [False, True, True], "a noisy run's and a contended number"
    assert summary.by_value().loc[0, "marked"] == "bs4: noisy run; bs16: contended"
    (_name, figure), *_ = sweep_figures(summary)
    labels = [t.get_text() for t in figure.legends[0].get_texts()]
    assert labels[0] == "l1_3x3" and labels[-1].startswith("hollow: not ok")
