"""task=evaluate model=X.onnx as users run it: a served model's latency predicted per engine from its
operator benchmarks and measured end to end, tracked in a real SQLite MLflow store."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from helpers import FAST, Store, artifact_text, mlflow_runs, run_dlbench
from onnx import TensorProto, helper

ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
ENGINES = ("onnxruntime", "torch")


def unconvertible_model(path: Path) -> Path:
    """A small CNN that onnxruntime runs and the torch engine cannot convert (an AveragePool padded on one side
    in ceil mode)."""
    rng = np.random.default_rng(0)
    weight = helper.make_tensor("w", TensorProto.FLOAT, [8, 3, 3, 3], rng.standard_normal(216).astype(np.float32))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("AveragePool", ["r"], ["y"], kernel_shape=[2, 2], pads=[0, 0, 1, 1],
                              ceil_mode=1)]  # fmt: skip
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8, 16, 16])],
                              [weight])  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def exported_transformer_encoder(path: Path) -> Path:
    """A plain ``nn.TransformerEncoder`` exported by ``torch.onnx.export`` (its graph has Mod nodes)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 2).eval()
    torch.onnx.export(encoder, (torch.randn(2, 8, 32),), str(path), input_names=["x"], dynamo=False,
                      opset_version=17)  # fmt: skip
    return path


def open_sequence_model(path: Path) -> Path:
    """A model with a symbolic ``seq`` dimension besides the batch."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])])  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def onnxruntime_session_ms(model: Path, calls: int = 30) -> float:
    """The median latency of ``model`` at batch 1 in an onnxruntime session of one thread, timed by hand."""
    import statistics
    import time

    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    feeds = {
        i.name: np.random.default_rng(0).standard_normal([d if isinstance(d, int) else 1 for d in i.shape])
        .astype(np.float32)
        for i in session.get_inputs()
    }  # fmt: skip
    for _ in range(5):
        session.run(None, feeds)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("model=nowhere/model.onnx",), "nowhere/model.onnx: no such ONNX file"),
        ((f"model=[{ZOO / 'light_squeezenet.onnx'},{ZOO / 'light_resnet50.onnx'}]",), "one model at a time"),
        ((f"model={ZOO / 'light_squeezenet.onnx'}", "measure.caches=cold"), "measure.caches=hot"),
        (("+benchmark=mlp", "evaluate.compile=true"), "needs evaluate.mode=inference"),
        (("+benchmark=mlp", "evaluate.mode=serving"), "evaluate.mode='serving': use training or inference"),
        (("+benchmark=relu", "evaluate.mode=inference"), "serves a training benchmark's network"),
    ],
)
def test_a_configuration_mistake_exits_2_with_a_short_message(
    tmp_path: Path, store: Store, overrides: tuple[str, ...], message: str
) -> None:
    result = run_dlbench("task=evaluate", *overrides, cwd=tmp_path, store=store)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


def test_an_open_symbolic_dimension_exits_2_naming_the_setting(tmp_path: Path, store: Store) -> None:
    model = open_sequence_model(tmp_path / "seq.onnx")
    result = run_dlbench("task=evaluate", f"model={model}", cwd=tmp_path, store=store)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "dims.seq" in result.stderr + result.stdout and "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_zoo_model_is_predicted_and_measured_per_engine(tmp_path: Path, store: Store) -> None:
    model = ZOO / "light_squeezenet.onnx"
    result = run_dlbench("task=evaluate", f"model={model}", "batch_size=1", "threads=1", *FAST,
                         cwd=tmp_path, store=store)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    (run,) = mlflow_runs(store)
    assert run.info.status == "FINISHED" and run.data.tags["dlbench.kind"] == "inference"
    metrics, params = run.data.metrics, run.data.params
    assert params["training"] == "False" and params["batch_size"] == "1" and params["threads"] == "1"
    table = list(csv.DictReader(io.StringIO(artifact_text(store, run.info.run_id, "inference_operations.csv"))))
    assert len(table) == int(params["operations"])
    rounds = pd.read_csv(io.StringIO(artifact_text(store, run.info.run_id, "inference_rounds.csv")))
    assert params["evaluate.rounds"] == "2"
    for engine in ENGINES:
        prefix = f"engine/{engine}/"
        # onnxruntime's operator figure is the second one, beside the nodes its session runs
        operators = prefix + ("original_nodes/" if engine == "onnxruntime" else "")
        assert metrics[operators + "operations_missing"] == 0
        assert all(float(row[f"{engine}_term_ms"]) >= 0 for row in table)
        assert metrics[prefix + "measured_ms"] > 0
        # evaluate.rounds=2 (FAST): end to end, benchmarks, end to end, benchmarks; the error is paired by round
        # (the geometric mean of the rounds' predicted / measured) with its interval over the rounds
        mine = rounds[rounds["engine"] == engine]
        assert list(mine["round"]) == [1, 2] and (mine["measured_ms"] > 0).all() and (mine["predicted_ms"] > 0).all()
        expected = 100 * (math.prod(mine["predicted_ms"] / mine["measured_ms"]) ** 0.5 - 1)
        # (the logged figures are rounded to four significant digits: their error moves by a few hundredths)
        assert metrics[prefix + "error_pct"] == pytest.approx(expected, rel=1e-2, abs=5e-2)
        assert metrics[prefix + "error_lo_pct"] <= metrics[prefix + "error_pct"] <= metrics[prefix + "error_hi_pct"]
        assert metrics[prefix + "measured_lo_ms"] <= metrics[prefix + "measured_hi_ms"]
        assert f"{engine} error " in result.stdout and "95% interval" in result.stdout
    # against a real onnxruntime session of the same model timed here (one thread, as dlbench was told): the
    # measured latency within a factor of 2, the prediction from operator benchmarks within a factor of 3
    session_ms = onnxruntime_session_ms(model)
    assert 0.5 < metrics["engine/onnxruntime/measured_ms"] / session_ms < 2.0, session_ms
    assert 1 / 3 < metrics["engine/onnxruntime/predicted_ms"] / session_ms < 3.0, session_ms
    nodes = list(csv.DictReader(io.StringIO(artifact_text(
        store, run.info.run_id, "end_to_end/light_squeezenet_b1_onnxruntime_session_nodes.csv"))))  # fmt: skip
    assert not any(row["op_type"] == "BatchNormalization" for row in nodes)
    assert metrics["engine/onnxruntime/nodes"] == sum(int(row["count"]) for row in nodes)
    assert "from its original nodes" in result.stdout
    pools = [row for row in table if row["op_type"] == "MaxPool"]
    assert pools and all(row["torch_benchmark"] == "torch_maxpool" for row in pools)
    assert all(row["params"].endswith("mode=2") for row in pools)  # inference pooling: no max positions kept
    facts = json.loads(artifact_text(store, run.info.run_id, "end_to_end/light_squeezenet_b1_end_to_end.json"))
    assert facts["threads"] == 1 and facts["engines"]["torch"]["torch_threads"] == 1
    assert facts["max_relative_difference"]["torch_vs_onnxruntime"] < 1e-4
    # evaluate.caches=step (the default): the torch kernels rotate over each operation's footprint in one
    # forward pass, which never exceeds the weights and activations that forward touches
    assert params["evaluate.caches"] == "step"
    footprints = [float(row["footprint_bytes"]) for row in table]
    assert all(0 <= f <= metrics["forward_working_set_bytes"] for f in footprints) and max(footprints) > 0


@pytest.mark.slow
def test_an_exported_transformer_encoder_is_predicted_and_measured_on_both_engines(
    tmp_path: Path, store: Store
) -> None:
    model = exported_transformer_encoder(tmp_path / "encoder.onnx")
    result = run_dlbench("task=evaluate", f"model={model}", "batch_size=2", "threads=1", *FAST,
                         cwd=tmp_path, store=store)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    (run,) = mlflow_runs(store)
    assert run.info.status == "FINISHED"
    for engine in ENGINES:
        assert run.data.metrics[f"engine/{engine}/measured_ms"] > 0
        assert f"engine/{engine}/error_pct" in run.data.metrics
    assert "dlbench.engines_unable" not in run.data.tags
    facts = json.loads(artifact_text(store, run.info.run_id, "end_to_end/encoder_b2_end_to_end.json"))
    assert facts["engines"]["torch"]["torch_module"] == "onnx2torch"
    assert facts["max_relative_difference"]["torch_vs_onnxruntime"] < 1e-4


@pytest.mark.slow
def test_an_engine_that_cannot_run_the_model_is_named_and_the_other_is_still_reported(
    tmp_path: Path, store: Store
) -> None:
    model = unconvertible_model(tmp_path / "onesided.onnx")
    result = run_dlbench("task=evaluate", f"model={model}", "batch_size=1", "threads=1", *FAST,
                         cwd=tmp_path, store=store)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr  # one engine evaluated: the run stands
    (run,) = mlflow_runs(store)
    metrics, tags = run.data.metrics, run.data.tags
    assert run.info.status == "FINISHED"
    assert metrics["engine/onnxruntime/measured_ms"] > 0 and "engine/onnxruntime/error_pct" in metrics
    assert "engine/torch/measured_ms" not in metrics and "engine/torch/error_pct" not in metrics
    assert tags["dlbench.engines_unable"] == "torch"
    assert "asymmetric pads is converted for 2-D and 3-D, floor mode" in tags["dlbench.engine.torch.unable"]
    assert "torch" in tags["mlflow.note.content"] and "torch cannot be evaluated fully" in result.stdout
    summary = list(csv.DictReader(io.StringIO(artifact_text(store, run.info.run_id, "inference_summary.csv"))))
    assert {row["engine"]: bool(row["unable"]) for row in summary} == {"onnxruntime": False, "torch": True}


@pytest.mark.slow
def test_a_training_benchmark_in_inference_mode_serves_the_real_module_and_predicts_it(
    tmp_path: Path, store: Store
) -> None:
    result = run_dlbench("task=evaluate", "+benchmark=mlp", "evaluate.mode=inference", "threads=1", *FAST,
                         cwd=tmp_path, store=store)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    (run,) = mlflow_runs(store)
    metrics, params = run.data.metrics, run.data.params
    assert run.info.status == "FINISHED" and params["model"] == "mlp" and params["torch_served"] == "torch"
    for engine in ENGINES:
        assert metrics[f"engine/{engine}/measured_ms"] > 0 and f"engine/{engine}/error_pct" in metrics
    table = list(csv.DictReader(io.StringIO(artifact_text(store, run.info.run_id, "inference_operations.csv"))))
    assert {row["op_type"] for row in table} >= {"Gemm"}  # the eval-mode export of the script's own network
    assert "Dropout" not in {row["op_type"] for row in table}
