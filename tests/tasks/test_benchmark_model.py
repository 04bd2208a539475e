"""task=extract and task=benchmark_model as users run them, tracked in a real SQLite MLflow store."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import tempfile
from dataclasses import replace
from pathlib import Path

import onnx
import pytest
from helpers import FAST, Store, artifact_text, mlflow_runs, run_dlbench, write_fake_benchmark
from mlflow.tracking import MlflowClient
from onnx_models import exported

from dlbench import CONF_DIR
from dlbench.config import DlbenchConfig, MlflowConfig
from dlbench.core.context import AppContext
from dlbench.core.errors import TaskFailed
from dlbench.onnx.extract import extract_operations
from dlbench.onnx.opdb import deduplicate, read_operations
from dlbench.onnx.unfold import load_table
from dlbench.tasks.benchmark_model import EXTRACTION_RUN_TAG, benchmark_model

GEMM = ("M", "K", "N", "transA", "transB", "batch")


def fake_backend(directory: Path) -> Path:
    """A config directory with prebuilt 'custom' benchmarks for Gemm/MatMul and Relu (fast, no torch)."""
    write_fake_benchmark(directory, name="fake_gemm", synonyms=("Gemm", "MatMul"), param_descr=GEMM)
    return write_fake_benchmark(directory, name="fake_relu")


def results(store: Store, run_id: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(artifact_text(store, run_id, "results.csv"))))


def test_extract_prints_the_table_and_logs_one_run_with_the_database(tmp_path: Path, store: Store) -> None:
    model = exported("mlp")
    result = run_dlbench("task=extract", f"model={model}", "batch_size=32", cwd=tmp_path, store=store)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(
        line.split() == ["0", "Gemm", "1", "forward", "M=32;K=784;N=256;transA=0;transB=1;batch=1"] for line in lines
    )
    (run,) = mlflow_runs(store)
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert params["model"] == "mlp" and params["batch_size"] == "32"
    assert params["model_sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
    assert params["nodes.Gemm"] == "3" and params["nodes.Relu"] == "2" and int(params["opset"]) >= 13
    assert run.data.tags["dlbench.model"] == "mlp" and run.data.tags["dlbench.kind"] == "extraction"
    with tempfile.TemporaryDirectory() as tmp:
        path = MlflowClient(tracking_uri=store.uri).download_artifacts(run.info.run_id, "mlp_operations.csv", tmp)
        expected = deduplicate(extract_operations(model, 32).operations())
        assert read_operations(path) == [replace(op, node=None) for op in expected]  # the CSV holds no ONNX node
    counts = list(csv.DictReader(io.StringIO(artifact_text(store, run.info.run_id, "node_counts.csv"))))
    assert {(r["op_type"], r["nodes"]) for r in counts} == {("Gemm", "3"), ("Relu", "2")}


def test_extract_of_a_missing_model_fails_naming_the_file(tmp_path: Path, store: Store) -> None:
    result = run_dlbench("task=extract", "model=nowhere/model.onnx", cwd=tmp_path, store=store)
    assert result.returncode != 0
    assert "nowhere/model.onnx: no such ONNX file" in result.stderr + result.stdout


def test_benchmark_model_runs_each_serving_benchmark_once_under_the_extraction_run(
    tmp_path: Path, store: Store
) -> None:
    conf = fake_backend(tmp_path / "conf")
    model = exported("resnet")
    result = run_dlbench(
        "task=benchmark_model", f"model={model}", "batch_size=4", "backend=custom", *FAST,
        "--config-dir", str(conf), cwd=tmp_path, store=store,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    runs = mlflow_runs(store)
    [parent] = [
        r for r in runs if r.data.tags["dlbench.kind"] == "model_benchmark" and "mlflow.parentRunId" not in r.data.tags
    ]
    children = {r.data.params["implementation"]: r for r in runs if r.info.run_id != parent.info.run_id}
    assert set(children) == {"fake_gemm", "fake_relu"}
    for child in children.values():
        assert child.info.status == "FINISHED"
        assert child.data.tags[EXTRACTION_RUN_TAG] == parent.info.run_id
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
    relu_rows = results(store, children["fake_relu"].info.run_id)
    # 4 distinct ReLU problems (one per stage width and the stem) cover the 13 ReLU nodes
    assert len(relu_rows) == 4 and sum(int(r["count"]) for r in relu_rows) == 13
    assert sum(len(r["nodes"].split(";")) for r in relu_rows) == 13
    assert all(r["status"] == "ok" and r["pass"] == "forward" for r in relu_rows)
    [gemm_row] = results(store, children["fake_gemm"].info.run_id)
    assert (gemm_row["p.M"], gemm_row["p.K"], gemm_row["p.N"], gemm_row["nodes"]) == ("4", "64", "10", "/head/Gemm")
    coverage = list(csv.DictReader(io.StringIO(artifact_text(store, parent.info.run_id, "coverage.csv"))))
    status = {r["op_type"]: (r["status"], int(r["nodes"])) for r in coverage}
    assert status["Conv"] == ("no benchmark", 15) and status["Relu"] == ("served", 13)
    assert status["Flatten"] == ("layout-only", 1)  # a view: neither served nor unserved
    # 53 nodes, one of them layout-only: 13 ReLU + 1 Gemm of the 52 operators are served (4 significant digits)
    assert parent.data.metrics["nodes_served_fraction"] == pytest.approx(
        (13 + 1) / 52, rel=5e-4
    )  # metrics keep 4 significant digits
    assert parent.data.metrics["nodes_layout"] == 1 and parent.data.metrics["nodes_unserved"] == 52 - 14
    relu_total = sum(float(r["median_ms"]) * int(r["count"]) for r in relu_rows)
    assert parent.data.metrics["time_ms.Relu.forward"] == pytest.approx(relu_total, rel=5e-4)
    combined = list(csv.DictReader(io.StringIO(artifact_text(store, parent.info.run_id, "model_results.csv"))))
    assert len(combined) == 5 and {r["implementation"] for r in combined} == {
        children["fake_relu"].data.tags["mlflow.runName"],
        children["fake_gemm"].data.tags["mlflow.runName"],
    }
    assert "Conv" in result.stdout and "28.8%" in result.stdout  # 15 of 52 operator nodes
    # every run that measured carries the interference record, as a sweep's run does
    for run in (parent, *children.values()):
        assert run.data.tags["dlbench.noisy"] in ("true", "false")
        assert "interference.load_avg_1m_max" in run.data.metrics
    assert all(r["machine_busy"] in ("True", "False") for r in relu_rows + combined)
    busy = sum(r["machine_busy"] == "True" for r in combined)
    assert parent.data.metrics["operations_machine_busy"] == busy
    if parent.data.tags["dlbench.noisy"] == "true":
        assert any(c.data.tags["dlbench.noisy"] == "true" for c in children.values())
    # no convolution was measured: the model's sum is partial and says so
    assert "model_total_ms" not in parent.data.metrics and parent.data.metrics["totals_complete"] == 0
    assert parent.data.metrics["partial_model_total_ms"] > 0 and parent.data.metrics["operations_missing"] > 0


def context(tmp_path: Path, conf: Path) -> AppContext:
    return AppContext(config_dirs=(CONF_DIR, conf), start_dir=tmp_path, output_dir=tmp_path / "out")


def test_unfolded_model_measures_backward_problems_naming_their_forward_nodes(tmp_path: Path, store: Store) -> None:
    conf = fake_backend(tmp_path / "conf")
    cfg = DlbenchConfig(
        task="benchmark_model",
        model=str(exported("mlp")),
        batch_size=16,
        backend="custom",
        quiet=True,
        mlflow=MlflowConfig(tracking_uri=store.uri, experiment=store.experiment),
    )
    benchmark_model(cfg, context(tmp_path, conf), load_table())
    runs = {r.data.params.get("implementation", "parent"): r for r in mlflow_runs(store)}
    rows = results(store, runs["fake_gemm"].info.run_id)
    passes = [(r["pass"], r["p.M"], r["p.K"], r["p.N"], r["nodes"]) for r in rows]
    assert ("forward", "16", "784", "256", "/layers/layers.0/Gemm") in passes
    assert ("backward_a", "16", "256", "784", "/layers/layers.0/Gemm") in passes  # dX = dY @ W
    assert ("backward_b", "256", "16", "784", "/layers/layers.0/Gemm") in passes  # dW = dY^T @ X
    assert len(rows) == 9
    relu = results(store, runs["fake_relu"].info.run_id)
    assert sorted(r["p.mode"] for r in relu) == ["0", "0", "1", "1"]
    assert runs["parent"].data.params["unfold"] == "True"
    database = artifact_text(store, runs["parent"].info.run_id, "mlp_operations.csv")
    assert "backward_b" in database and json.dumps("/layers/layers.0/Gemm") in database.replace('""', '"')


def test_a_failing_benchmark_fails_the_task_but_keeps_the_others(tmp_path: Path, store: Store) -> None:
    conf = tmp_path / "conf"
    write_fake_benchmark(conf, name="fake_gemm", synonyms=("Gemm",), param_descr=GEMM, behaviour="exit_3")
    write_fake_benchmark(conf, name="fake_relu")
    cfg = DlbenchConfig(
        task="benchmark_model",
        model=str(exported("mlp")),
        backend="custom",
        quiet=True,
        mlflow=MlflowConfig(tracking_uri=store.uri, experiment=store.experiment),
    )
    with pytest.raises(TaskFailed, match="fake_gemm"):
        benchmark_model(cfg, context(tmp_path, conf))
    status = {r.data.params.get("implementation", "parent"): r.info.status for r in mlflow_runs(store)}
    assert status == {"parent": "FINISHED", "fake_gemm": "FAILED", "fake_relu": "FINISHED"}


def test_a_backend_that_serves_nothing_is_an_error_listing_the_operators(tmp_path: Path, store: Store) -> None:
    cfg = DlbenchConfig(
        task="benchmark_model",
        model=str(exported("mlp")),
        backend="nobody",
        quiet=True,
        mlflow=MlflowConfig(tracking_uri=store.uri, experiment=store.experiment),
    )
    expected = (
        r"no available 'nobody' benchmark on cpu serves any operator of .*mlp\.onnx; it needs: Gemm \(3\), Relu \(2\)"
    )
    with pytest.raises(TaskFailed, match=expected):
        benchmark_model(cfg, context(tmp_path, tmp_path))


@pytest.mark.slow
def test_benchmark_model_with_the_torch_backend_measures_real_kernels(tmp_path: Path, store: Store) -> None:
    result = run_dlbench(
        "task=benchmark_model", f"model={exported('mlp')}", "batch_size=8", "backend=torch", *FAST,
        cwd=tmp_path, store=store,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    runs = {r.data.params.get("implementation", "parent"): r for r in mlflow_runs(store)}
    assert {"torch_gemm", "torch_relu"} <= set(runs)
    rows = results(store, runs["torch_gemm"].info.run_id)
    assert len(rows) == 3 and all(r["status"] == "ok" and float(r["median_ms"]) > 0 for r in rows)


@pytest.mark.skipif(
    "unfold" not in DlbenchConfig.__dataclass_fields__,
    reason="needs the top-level `unfold` config key and the `unfold: none` default (lead's config.py/config.yaml)",
)
def test_unfold_is_chosen_on_the_command_line(tmp_path: Path, store: Store) -> None:
    conf = fake_backend(tmp_path / "conf")
    result = run_dlbench(
        "task=benchmark_model", f"model={exported('mlp')}", "batch_size=8", "backend=custom", "unfold=default",
        *FAST, "--config-dir", str(conf), cwd=tmp_path, store=store,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    runs = {r.data.params.get("implementation", "parent"): r for r in mlflow_runs(store)}
    assert len(results(store, runs["fake_gemm"].info.run_id)) == 9  # 3 forward GEMMs, 2 backward each
    assert runs["parent"].data.params["unfold"] == "True"


# ------------------------------------------------------------------------------ several models and reuse


def _mlp_variant(path: Path) -> Path:
    """An MLP sharing its first layer and ReLU with tests.onnx_models.MLP (784 -> 256), then 256 -> 64."""
    import torch
    from torch import nn

    torch.manual_seed(1)
    module = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 64)).eval()
    torch.onnx.export(module, (torch.randn(2, 784),), str(path), input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, dynamo=False)  # fmt: skip
    return path


def _parents(store: Store) -> dict[str, object]:
    return {r.data.params["model"]: r for r in mlflow_runs(store) if "mlflow.parentRunId" not in r.data.tags}


def _protocol_rows(tmp_path: Path, name: str) -> int:
    [found] = list(tmp_path.glob(f".dlbench/**/protocol/{name}.csv"))
    return len(found.read_text().splitlines())


def test_two_models_sharing_layers_measure_the_shared_operations_once(tmp_path: Path, store: Store) -> None:
    conf = fake_backend(tmp_path / "conf")
    variant = _mlp_variant(tmp_path / "variant.onnx")
    common = ("task=benchmark_model", "batch_size=8", "backend=custom", *FAST, f"reuse_store={tmp_path / 'r.db'}",
              "--config-dir", str(conf))  # fmt: skip
    first = run_dlbench(f"model=[{exported('mlp')},{variant}]", *common, cwd=tmp_path, store=store)
    assert first.returncode == 0, first.stderr
    parents = _parents(store)
    assert set(parents) == {"mlp", "variant"}
    # mlp: 3 GEMMs + 2 ReLU problems; the variant shares its 784->256 GEMM and the 256-wide ReLU
    assert parents["mlp"].data.metrics["operations_new"] == 5 and parents["mlp"].data.metrics["operations_reused"] == 0
    assert parents["variant"].data.metrics["operations_new"] == 1
    assert parents["variant"].data.metrics["operations_reused"] == 2
    assert _protocol_rows(tmp_path, "fake_gemm_variant") == 1  # only 256 -> 64 went to the benchmark
    assert "operations: 6 measured, 2 reused" in first.stdout
    [child] = [r for r in mlflow_runs(store) if r.data.params.get("benchmark") == "variant"
               and r.data.params.get("implementation") == "fake_gemm"]  # fmt: skip
    rows = {r["p.N"]: r for r in results(store, child.info.run_id)}
    assert rows["256"]["reused_from_run"] != "" and rows["64"]["reused_from_run"] == ""
    assert rows["256"]["status"] == "ok" and float(rows["256"]["median_ms"]) > 0
    # the machine's state is recorded for the row measured here, not claimed for one another run measured
    assert rows["64"]["machine_busy"] in ("True", "False") and rows["256"]["machine_busy"] == ""

    again = run_dlbench(f"model=[{exported('mlp')},{variant}]", *common, cwd=tmp_path, store=store)
    assert again.returncode == 0, again.stderr
    assert "operations: 0 measured, 8 reused" in again.stdout

    fresh = run_dlbench("reuse=false", f"model=[{exported('mlp')},{variant}]", *common, cwd=tmp_path, store=store)
    assert fresh.returncode == 0, fresh.stderr
    assert "operations: 6 measured, 2 reused" in fresh.stdout  # within one command, still once each


def test_a_corrupt_reuse_store_is_named_ignored_and_rebuilt(tmp_path: Path, store: Store) -> None:
    conf = fake_backend(tmp_path / "conf")
    reuse = tmp_path / "r.db"
    reuse.write_text("this is not SQLite\n" * 100)
    result = run_dlbench(
        "task=benchmark_model", f"model={exported('mlp')}", "backend=custom", *FAST, f"reuse_store={reuse}",
        "--config-dir", str(conf), cwd=tmp_path, store=store,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"reuse store {reuse} cannot be read" in result.stderr + result.stdout
    assert list(tmp_path.glob("r.db.corrupt-*")) and reuse.stat().st_size > 0


def test_zoo_models_in_one_command_measure_each_distinct_operation_once(tmp_path: Path, store: Store) -> None:
    from dlbench.core.descriptors import CONV, POOL

    conf = fake_backend(tmp_path / "conf")
    write_fake_benchmark(conf, name="fake_conv", synonyms=("Conv",), param_descr=CONV)
    write_fake_benchmark(conf, name="fake_pool", synonyms=("MaxPool",), param_descr=POOL)
    names = ("bvlc_alexnet", "zfnet512", "squeezenet")
    paths = [Path(onnx.__file__).parent / "backend/test/data/light" / f"light_{n}.onnx" for n in names]
    result = run_dlbench(
        "task=benchmark_model", f"model=[{','.join(map(str, paths))}]", "batch_size=2", "backend=custom", *FAST,
        f"reuse_store={tmp_path / 'r.db'}", "--config-dir", str(conf), cwd=tmp_path, store=store,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    served = ("Conv", "Relu", "Gemm", "MaxPool")
    distinct = {
        (op.op_type, op.params) for path in paths for op in extract_operations(path, 2).operations()
        if op.op_type in served
    }  # fmt: skip
    parents = _parents(store)
    assert sum(r.data.metrics["operations_new"] for r in parents.values()) == len(distinct)
    for name in ("light_bvlc_alexnet", "light_zfnet512", "light_squeezenet"):
        metrics = parents[name].data.metrics
        assert metrics["nodes_constant"] > 0 and metrics["nodes_served"] > 0
        assert metrics["nodes_served"] + metrics["nodes_unserved"] + metrics["nodes_skipped"] + metrics[
            "nodes_constant"] + metrics["nodes_layout"] == metrics["nodes_total"]  # fmt: skip
        assert metrics["time_share.Conv"] > 0
    assert "light_squeezenet" in result.stdout and "served%" in result.stdout


def test_models_joined_by_a_comma_without_brackets_say_what_to_write(tmp_path: Path, store: Store) -> None:
    result = run_dlbench("task=benchmark_model", "model=a.onnx,b.onnx", cwd=tmp_path, store=store)
    assert result.returncode != 0 and "key=[value1,value2]" in result.stderr + result.stdout


def test_an_open_sequence_stops_before_anything_is_measured(tmp_path: Path, store: Store) -> None:
    import torch
    from onnx_models import EncoderLayer

    path = tmp_path / "seq.onnx"
    torch.onnx.export(EncoderLayer().eval(), (torch.randn(2, 16, 64),), str(path), input_names=["x"],
                      dynamic_axes={"x": {0: "batch", 1: "seq"}}, dynamo=False)  # fmt: skip
    conf = fake_backend(tmp_path / "conf")
    common = ("task=benchmark_model", f"model={path}", "backend=custom", *FAST, "--config-dir", str(conf))
    result = run_dlbench(*common, cwd=tmp_path, store=store)
    assert result.returncode == 2 and "set dims.seq=N" in result.stderr  # a configuration mistake
    with_seq = run_dlbench("dims.seq=24", f"reuse_store={tmp_path / 'r.db'}", *common, cwd=tmp_path, store=store)
    assert with_seq.returncode == 0, with_seq.stderr
    parent = _parents(store)["seq"]
    assert parent.data.params["dims.seq"] == "24" and parent.data.params["dims.batch"] == "8"
