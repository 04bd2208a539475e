"""The model-zoo CNNs the onnx package ships (opset 9, batch fixed at 1, weights made by ConstantOfShape):
re-batched only where provably consistent, shapes held to what onnxruntime computes, weights folded as
constants, layout-only nodes in a class of their own, and layer names that do not change with the batch."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from onnx_models import exported
from ort_shapes import actual_shapes, mismatches

from dlbench.onnx.errors import ExtractionError
from dlbench.onnx.extract import extract_operations
from dlbench.onnx.opdb import deduplicate
from dlbench.onnx.rebatch import rebatched_model

ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
          "vgg19", "zfnet512")  # fmt: skip


def zoo(name: str) -> Path:
    return ZOO / f"light_{name}.onnx"


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("name", MODELS)
def test_every_zoo_model_extracts_at_the_batch_size_with_nothing_skipped(name: str, batch: int):
    extraction = extract_operations(zoo(name), batch)
    assert extraction.skipped == ()
    assert extraction.rebatched_from == (None if batch == 1 else 1)
    first_dims = {n.input_shapes[0][0] for n in extraction.compute_nodes if n.op_type in ("Conv", "Gemm")}
    assert first_dims == {batch}
    assert sum(extraction.class_counts().values()) == extraction.total_nodes
    # the weights are ConstantOfShape nodes: all of them constants, none an operation
    assert extraction.constant_counts["ConstantOfShape"] == extraction.node_counts["ConstantOfShape"]
    assert "ConstantOfShape" not in {op.op_type for op in extraction.operations()}


def test_a_hard_coded_reshape_becomes_the_batch_not_a_gemm_of_one_row():
    extraction = extract_operations(zoo("resnet50"), 8)
    [gemm] = [n for n in extraction.compute_nodes if n.op_type == "Gemm"]
    assert dict(gemm.params)["M"] == 8 and dict(gemm.params)["K"] == 2048
    [reshape] = extraction.layout_nodes
    assert reshape.op_type == "Reshape" and reshape.output_shapes == ((8, 2048),)
    assert any("[1, 2048] -> [8, 2048]" in note and "every node's shapes checked" in note for note in extraction.notes)


@pytest.mark.parametrize("name", ["shufflenet", "bvlc_alexnet", "squeezenet"])
def test_rebatched_shapes_are_the_ones_onnxruntime_computes(name: str):
    model = rebatched_model(zoo(name), 3)
    extraction = extract_operations(zoo(name), 3)
    actual = actual_shapes(model)
    assert len(actual) > 40
    assert mismatches(extraction, model, actual) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_every_zoo_model_at_batch_2_has_onnxruntime_shapes(name: str):
    model = rebatched_model(zoo(name), 2)
    assert mismatches(extract_operations(zoo(name), 2), model, actual_shapes(model)) == []


def _fixed_model(path: Path, nodes, initializers, input_shape, output: str, output_shape) -> Path:
    graph = helper.make_graph(
        nodes, "fixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, input_shape)],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, output_shape)], initializers,
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def test_a_reshape_whose_constant_cannot_carry_the_batch_stops_naming_node_and_constant(tmp_path: Path):
    # (2, 6) -> reshape [3, 4]: the batch of 2 is split across rows, no entry of [3, 4] is the batch
    path = _fixed_model(
        tmp_path / "mixed.onnx",
        [helper.make_node("Relu", ["x"], ["r"], name="act"),
         helper.make_node("Reshape", ["r", "target"], ["y"], name="split_rows")],
        [helper.make_tensor("target", TensorProto.INT64, [2], [3, 4])], [2, 6], "y", [3, 4],
    )  # fmt: skip
    assert extract_operations(path, 2).skipped == ()
    with pytest.raises(ExtractionError) as caught:
        extract_operations(path, 4)
    message = str(caught.value)
    assert "mixed.onnx" in message and "fixed at 2" in message and "'split_rows' (Reshape)" in message
    assert "'target' = [3, 4]" in message and "batch_size=2" in message


def test_a_batch_folded_with_the_sequence_is_rewritten_and_checked(tmp_path: Path):
    # (1, 4, 6) -> transpose -> (4, 1, 6) -> reshape [4, 6]: [seq, batch, d] -> [seq * batch, d]
    path = _fixed_model(
        tmp_path / "fold.onnx",
        [helper.make_node("Transpose", ["x"], ["t"], name="swap", perm=[1, 0, 2]),
         helper.make_node("Reshape", ["t", "target"], ["y"], name="fold")],
        [helper.make_tensor("target", TensorProto.INT64, [2], [4, 6])], [1, 4, 6], "y", [4, 6],
    )  # fmt: skip
    [fold] = extract_operations(path, 3).layout_nodes
    assert fold.output_shapes == ((12, 6),)
    model = rebatched_model(path, 3)
    assert actual_shapes(model)["y"] == (12, 6)


def test_a_flatten_keeping_an_explicit_one_is_rewritten_to_the_batch(tmp_path: Path):
    path = _fixed_model(
        tmp_path / "flat.onnx",
        [helper.make_node("Reshape", ["x", "target"], ["f"], name="flat"),
         helper.make_node("Gemm", ["f", "w"], ["y"], name="fc", transB=1)],
        [helper.make_tensor("target", TensorProto.INT64, [2], [1, -1]),
         helper.make_tensor("w", TensorProto.FLOAT, [10, 12], [0.0] * 120)],
        [1, 3, 2, 2], "y", [1, 10],
    )  # fmt: skip
    extraction = extract_operations(path, 5)
    [gemm] = extraction.compute_nodes
    assert (dict(gemm.params)["M"], dict(gemm.params)["K"]) == (5, 12)  # not M=1, K=60


def test_constant_subgraphs_are_weights_not_operations():
    densenet = extract_operations(zoo("densenet121"), 1)
    # batch norm as ConstantOfShape -> Unsqueeze -> Mul/Add: the Unsqueeze chains fold with the weights
    assert densenet.constant_counts == {"ConstantOfShape": 836, "Unsqueeze": 242}
    types = Counter(op.op_type for op in densenet.operations())
    assert "Unsqueeze" not in types and types["Mul"] == 121 and types["Add"] == 121
    assert densenet.constant_nodes == 836 + 242 and len(densenet.constant_names) == densenet.constant_nodes


def test_layout_only_nodes_are_listed_with_the_reason_their_cost_is_zero():
    alexnet = extract_operations(zoo("bvlc_alexnet"), 1)
    layout = {n.op_type: n.reason for n in alexnet.layout_nodes}
    assert set(layout) == {"Reshape", "Dropout"} and "view" in layout["Reshape"]
    assert "inference Dropout" in layout["Dropout"]
    assert len(alexnet.layout_nodes) == 3
    assert {op.op_type for op in alexnet.operations()} == {"Conv", "Relu", "LRN", "MaxPool", "Gemm", "Softmax"}


def test_dropout_in_training_mode_and_a_real_cast_stay_operators(tmp_path: Path):
    path = _fixed_model(
        tmp_path / "modes.onnx",
        [helper.make_node("Dropout", ["x", "ratio", "on"], ["d"], name="train_drop"),
         helper.make_node("Cast", ["d"], ["same"], name="same_cast", to=TensorProto.FLOAT),
         helper.make_node("Cast", ["same"], ["half"], name="to_half", to=TensorProto.FLOAT16),
         helper.make_node("Cast", ["half"], ["y"], name="back", to=TensorProto.FLOAT)],
        [helper.make_tensor("ratio", TensorProto.FLOAT, [], [0.5]),
         helper.make_tensor("on", TensorProto.BOOL, [], [True])],
        [2, 3], "y", [2, 3],
    )  # fmt: skip
    extraction = extract_operations(path, 2)
    kinds = {n.name: n.kind for n in extraction.nodes}
    assert kinds == {"train_drop": "compute", "same_cast": "layout", "to_half": "compute", "back": "compute"}


def test_layer_names_are_recognisable_and_the_same_at_every_batch_size():
    small, large = extract_operations(zoo("resnet50"), 1), extract_operations(zoo("resnet50"), 8)
    assert [n.layer for n in small.nodes] == [n.layer for n in large.nodes]
    layers = [n.layer for n in small.compute_nodes]
    assert layers[0] == "gpu_0/conv1/Conv" and len(set(layers)) == len(layers)
    assert "gpu_0/res2_0_branch2a/Conv" in layers and "gpu_0/res2_0_branch2a_bn/BatchNormalization" in layers
    assert not any(layer.startswith("n") and layer[1:].isdigit() for layer in layers)
    merged = deduplicate(large.operations())
    conv = next(op for op in merged if op.count > 1 and op.op_type == "Conv")
    assert conv.name in layers and len(conv.nodes) == conv.count  # a representative name, every node


@pytest.mark.parametrize("batch", [1, 5])
def test_a_transformer_fixed_at_batch_2_follows_the_batch_through_merged_dimensions(batch: int):
    # torch's encoder layer reshapes [seq, batch, d] -> [seq * batch, d] and [batch * heads, s, d] ->
    # [batch, heads, s, d] with constants: each is rewritten where the batch lies in it
    path = exported("torch_encoder", dynamic_batch=False)
    extraction = extract_operations(path, batch)
    assert extraction.rebatched_from == 2 and extraction.skipped == ()
    model = rebatched_model(path, batch)
    assert mismatches(extraction, model, actual_shapes(model)) == []
    matmuls = [dict(n.params) for n in extraction.compute_nodes if n.op_type == "MatMul"]
    attention = [p for p in matmuls if (p["M"], p["K"], p["N"]) == (16, 16, 16)]  # q @ k^T, scores @ v
    assert len(attention) == 2 and {p["batch"] for p in attention} == {batch * 4}
