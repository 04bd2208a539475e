"""Extraction of real networks exported from torch: operator counts, shapes and parameters follow from the
architecture; bad files and nodes give clear messages."""

from __future__ import annotations

import math
from pathlib import Path

import onnx
import pytest
import torch
from onnx import helper
from onnx_models import export, exported
from torch import nn

from dlbench.onnx.errors import ExtractionError
from dlbench.onnx.extract import extract_operations
from dlbench.onnx.opdb import deduplicate

BATCH = 32


def by_type(extraction, op_type):
    return [node for node in extraction.nodes if node.op_type == op_type]


def resnet_convolutions(batch: int) -> list[tuple[int, ...]]:
    """(N, C, H, W, K, kernel, pad, stride) of every Conv of tests.onnx_models.SmallResNet in graph order,
    written from the architecture, not from the export."""
    convs = [(batch, 3, 32, 32, 16, 7, 3, 2)]
    channels, size = 16, 8  # after the stem (16x16) and the 3x3/2 max pool
    for width, stride in ((16, 1), (32, 2), (64, 2)):
        for block_stride in (stride, 1):
            out = size // block_stride
            convs.append((batch, channels, size, size, width, 3, 1, block_stride))
            convs.append((batch, width, out, out, width, 3, 1, 1))
            if block_stride != 1 or channels != width:
                convs.append((batch, channels, size, size, width, 1, 0, block_stride))
            channels, size = width, out
    return convs


@pytest.fixture(scope="module")
def resnet():
    return extract_operations(exported("resnet"), BATCH)


def test_resnet_operator_counts_follow_the_architecture(resnet):
    counts = resnet.node_counts
    assert counts["Conv"] == 15  # stem + 6 blocks x 2 + 2 projections
    assert counts["BatchNormalization"] == 15
    assert counts["Relu"] == 13  # stem + 6 blocks x 2
    assert counts["Add"] == 6
    assert counts["MaxPool"] == counts["GlobalAveragePool"] == counts["Gemm"] == 1
    assert resnet.skipped == ()
    assert resnet.opset >= 13 and len(resnet.sha256) == 64
    assert resnet.model_name == "resnet"


def test_resnet_convolutions_have_the_architecture_shapes_at_the_batch_size(resnet):
    found = []
    for node in by_type(resnet, "Conv"):
        p = dict(node.params)
        assert p["pads_0"] == p["pads_1"] == p["pads_2"] == p["pads_3"]
        assert p["strides_0"] == p["strides_1"] and p["kernel_shape_0"] == p["kernel_shape_1"]
        assert (p["dilations_0"], p["dilations_1"], p["group"], p["mode"]) == (1, 1, 1, 0)
        found.append((p["N"], p["C"], p["H"], p["W"], p["K"], p["kernel_shape_0"], p["pads_0"], p["strides_0"]))
    assert sorted(found) == sorted(resnet_convolutions(BATCH))
    stem = dict(by_type(resnet, "Conv")[0].params)
    assert [d for d, _ in by_type(resnet, "Conv")[0].params][:5] == ["N", "C", "H", "W", "K"]
    assert stem["K"] == 16 and stem["kernel_shape_0"] == 7


def test_weights_are_constant_inputs_and_only_activations_are_operation_shapes(resnet):
    conv = by_type(resnet, "Conv")[0]
    assert conv.constant[0] is False and all(conv.constant[1:])
    operation = resnet.operations()[resnet.nodes.index(conv)]
    assert operation.input_shapes == ((BATCH, 3, 32, 32),)
    assert operation.nodes == (conv.name,)
    # 2 * N * K * OH * OW * C * kh * kw
    assert operation.flops == 2.0 * BATCH * 16 * 16 * 16 * 3 * 7 * 7


def test_resnet_pooling_normalisation_and_classifier_parameters(resnet):
    pool = dict(by_type(resnet, "MaxPool")[0].params)
    assert (pool["N"], pool["C"], pool["H"], pool["W"]) == (BATCH, 16, 16, 16)
    assert (pool["kernel_shape_0"], pool["pads_0"], pool["strides_0"], pool["mode"]) == (3, 1, 2, 0)
    gap = dict(by_type(resnet, "GlobalAveragePool")[0].params)
    assert gap == {"N": BATCH, "C": 64, "H": 2, "W": 2, "mode": 0}
    norms = [dict(n.params) for n in by_type(resnet, "BatchNormalization")]
    assert {(n["epsilon"], n["momentum"], n["mode"]) for n in norms} == {(1e-5, 0.9, 0)}
    assert sorted({n["C"] for n in norms}) == [16, 32, 64]
    gemm = dict(by_type(resnet, "Gemm")[0].params)
    assert gemm == {"M": BATCH, "K": 64, "N": 10, "transA": 0, "transB": 1, "batch": 1}
    add = dict(by_type(resnet, "Add")[-1].params)
    assert add == {"N": BATCH, "C": 64, "H": 2, "W": 2, "N_b": BATCH, "C_b": 64, "H_b": 2, "W_b": 2}


def test_identical_resnet_operations_are_merged_with_their_nodes(resnet):
    operations = deduplicate(resnet.operations())
    assert sum(op.count for op in operations) == len(resnet.compute_nodes) == len(resnet.nodes) - 1  # Flatten
    conv16 = [op for op in operations if op.op_type == "Conv" and op.param_dict["C"] == 16 == op.param_dict["K"]]
    assert len(conv16) == 1 and conv16[0].count == 4  # both convs of both 16-channel blocks
    assert len(set(conv16[0].nodes)) == 4
    assert len(operations) < len(resnet.nodes)


def test_batch_size_sets_the_dynamic_batch_dimension():
    small = extract_operations(exported("resnet"), 3)
    assert {dict(n.params)["N"] for n in by_type(small, "Conv")} == {3}
    assert dict(by_type(small, "Gemm")[0].params)["M"] == 3


def test_inference_extraction_uses_inference_batchnorm():
    inference = extract_operations(exported("resnet"), BATCH, training=False)
    # the model was exported in training mode, so its nodes say training_mode=1: still batch statistics
    assert {dict(n.params)["mode"] for n in by_type(inference, "BatchNormalization")} == {0}
    mlp_eval = extract_operations(exported("mlp"), BATCH, training=False)
    assert mlp_eval.node_counts == {"Gemm": 3, "Relu": 2}


def test_mlp_gemms_at_the_batch_size():
    mlp = extract_operations(exported("mlp"), BATCH)
    gemms = [dict(n.params) for n in by_type(mlp, "Gemm")]
    assert [(g["M"], g["K"], g["N"]) for g in gemms] == [(BATCH, 784, 256), (BATCH, 256, 128), (BATCH, 128, 10)]
    relus = [dict(n.params) for n in by_type(mlp, "Relu")]
    # rank 2 padded to rank 4 with leading ones
    assert relus[0] == {"N": 1, "C": 1, "H": BATCH, "W": 256, "mode": 0}


@pytest.fixture(scope="module")
def encoder():
    return extract_operations(exported("encoder"), BATCH)


def test_encoder_matmuls_fold_tokens_into_m_and_batch_heads(encoder):
    matmuls = sorted(tuple(dict(n.params).values()) for n in by_type(encoder, "MatMul"))
    tokens = BATCH * 16
    assert matmuls == sorted(
        [
            (tokens, 64, 192, 0, 0, 1),  # qkv projection: weight B, so (batch, seq) fold into M
            (16, 16, 16, 0, 0, BATCH * 4),  # q @ k^T per (batch, head)
            (16, 16, 16, 0, 0, BATCH * 4),  # scores @ v
            (tokens, 64, 64, 0, 0, 1),  # output projection
            (tokens, 64, 256, 0, 0, 1),
            (tokens, 256, 64, 0, 0, 1),
        ]
    )


def test_encoder_shapes_behind_reshapes_are_inferred(encoder):
    # head_dim comes from a Div of shape values: ONNX inference leaves it open, the folding sweep fills it
    assert encoder.skipped == ()
    softmax = dict(by_type(encoder, "Softmax")[0].params)
    assert softmax == {"N": BATCH, "C": 4, "H": 16, "W": 16, "axis": 3, "mode": 0}
    norms = {tuple(dict(n.params).items()) for n in by_type(encoder, "LayerNormalization")}
    assert norms == {(("N", 1), ("C", BATCH), ("H", 16), ("W", 64), ("axis", 3), ("epsilon", 1e-5), ("mode", 0))}


class ArgMax(nn.Module):
    """An operator dlbench has no descriptors for."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=1)


def test_unknown_operators_get_positional_dims_and_flattened_attributes(tmp_path):
    path = tmp_path / "argmax.onnx"
    torch.onnx.export(
        ArgMax(), (torch.randn(2, 5, 3),), str(path), dynamo=False, input_names=["x"], dynamic_axes={"x": {0: "n"}}
    )
    extraction = extract_operations(path, BATCH)
    (argmax,) = by_type(extraction, "ArgMax")
    assert [d for d, _ in argmax.params] == ["?"] * 3 + ["axis", "keepdims", "select_last_index"]
    assert [v for d, v in argmax.params if d == "?"] == [BATCH, 5, 3]
    assert dict(argmax.attributes)["axis"] == 1
    (operation,) = [op for op in extraction.operations() if op.op_type == "ArgMax"]
    assert operation.flops is None and operation.bytes_moved is None  # no cost for an unknown operator


def test_torch_transformer_layer_is_fully_extracted():
    extraction = extract_operations(exported("torch_encoder"), BATCH)
    assert extraction.skipped == ()
    problems = sorted(
        (p["M"], p["K"], p["N"], p["batch"])
        for n in extraction.nodes
        if n.op_type in ("MatMul", "Gemm")
        for p in [dict(n.params)]
    )
    tokens = BATCH * 16
    # in-projection, q @ k^T and scores @ v per (batch, head), out-projection, feed-forward
    assert problems == sorted(
        [(tokens, 64, 192, 1), (16, 16, 16, BATCH * 4), (16, 16, 16, BATCH * 4), (tokens, 64, 64, 1)]
        + [(tokens, 64, 128, 1), (tokens, 128, 64, 1)]
    )
    softmax = dict(by_type(extraction, "Softmax")[0].params)
    assert (softmax["N"], softmax["C"], softmax["H"], softmax["W"]) == (BATCH, 4, 16, 16)


@pytest.mark.slow
def test_dynamo_export_extracts_the_same_gemms():
    dynamo = extract_operations(exported("encoder", dynamo=True), BATCH)
    assert dynamo.skipped == ()
    problems = sorted(
        (p["M"], p["K"], p["N"], p["batch"])
        for n in dynamo.nodes
        if n.op_type in ("MatMul", "Gemm")
        for p in [dict(n.params)]
    )
    assert (16, 16, 16, BATCH * 4) in problems
    assert sum(m * k * n * b for m, k, n, b in problems) == (
        2 * 16 * 16 * 16 * BATCH * 4 + BATCH * 16 * 64 * (192 + 64 + 256 + 256)
    )


# ------------------------------------------------------------------------------------------- bad input


def test_a_file_that_is_not_onnx_is_rejected_naming_it(tmp_path: Path):
    path = tmp_path / "notes.onnx"
    path.write_text("this is a text file, not a model\n" * 20)
    with pytest.raises(ExtractionError, match=r"notes\.onnx.*not"):
        extract_operations(path, BATCH)


def test_a_truncated_file_is_rejected_naming_it(tmp_path: Path):
    path = tmp_path / "truncated.onnx"
    data = exported("mlp").read_bytes()
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(ExtractionError, match=r"truncated\.onnx"):
        extract_operations(path, BATCH)


def test_a_missing_file_is_named(tmp_path: Path):
    with pytest.raises(ExtractionError, match=r"absent\.onnx: no such ONNX file"):
        extract_operations(tmp_path / "absent.onnx", BATCH)


def test_a_fixed_batch_is_changed_when_every_node_follows_it():
    fixed = exported("mlp", dynamic_batch=False)
    assert dict(by_type(extract_operations(fixed, 2), "Gemm")[0].params)["M"] == 2
    rebatched = extract_operations(fixed, 8)
    assert rebatched.rebatched_from == 2
    assert [dict(n.params)["M"] for n in by_type(rebatched, "Gemm")] == [8, 8, 8]


def _with_custom_node(source: Path, target: Path, replace: str | None, attributes=()) -> Path:
    """The model with a node of an unknown domain: replacing node ``replace`` (its output shape is then
    unknown), or, when None, reading the graph input beside the rest."""
    model = onnx.load(str(source))
    nodes = list(model.graph.node)
    if replace is not None:
        index = next(i for i, n in enumerate(nodes) if n.name == replace)
        old = nodes[index]
        nodes[index] = helper.make_node("Mystery", list(old.input), list(old.output), name="mystery", domain="x.test")
    probe = helper.make_node("Probe", ["x"], ["probe_out"], name="probe", domain="x.test")
    probe.attribute.extend(attributes)
    nodes.append(probe)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    model.opset_import.append(helper.make_opsetid("x.test", 1))
    onnx.save(model, str(target))
    return target


def test_nodes_whose_shapes_cannot_be_inferred_are_listed_and_the_rest_extracted(tmp_path: Path):
    path = _with_custom_node(exported("mlp"), tmp_path / "mystery.onnx", replace="/layers/layers.1/Relu")
    extraction = extract_operations(path, BATCH)
    extracted = {n.name for n in extraction.nodes}
    skipped = {s.name: s.reason for s in extraction.skipped}
    assert "/layers/layers.0/Gemm" in extracted and "mystery" in extracted and "probe" in extracted
    assert set(skipped) == {"/layers/layers.2/Gemm", "/layers/layers.3/Relu", "/layers/layers.4/Gemm"}
    reason = skipped["/layers/layers.2/Gemm"]
    assert "mystery.onnx" in reason and "/layers/layers.2/Gemm" in reason and "unknown" in reason
    with pytest.raises(ExtractionError, match=r"mystery\.onnx: node '/layers/layers\.2/Gemm'"):
        extract_operations(path, BATCH, strict=True)


def test_incomplete_inference_leaves_the_working_directory_alone(tmp_path: Path, monkeypatch):
    # onnxruntime's symbolic inference would drop sym_shape_infer_temp.onnx and weight files here
    path = _with_custom_node(exported("mlp"), tmp_path / "mystery.onnx", replace="/layers/layers.1/Relu")
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    extraction = extract_operations(path, BATCH)
    assert extraction.skipped and "symbolic shape inference left some shapes open" in extraction.notes
    assert list(workdir.iterdir()) == []


def _attribute(kind: int) -> onnx.AttributeProto:
    """An attribute named ``a`` of each AttributeProto type."""
    tensor = helper.make_tensor("t", onnx.TensorProto.FLOAT, [2], [1.5, 2.5])
    sparse = helper.make_sparse_tensor(
        helper.make_tensor("v", onnx.TensorProto.FLOAT, [1], [3.0]),
        helper.make_tensor("i", onnx.TensorProto.INT64, [1], [0]),
        [4],
    )
    graph = helper.make_graph([], "body", [], [])
    type_proto = helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, [1])
    values = {
        onnx.AttributeProto.FLOAT: 0.5,
        onnx.AttributeProto.INT: 3,
        onnx.AttributeProto.STRING: "fast",
        onnx.AttributeProto.TENSOR: tensor,
        onnx.AttributeProto.GRAPH: graph,
        onnx.AttributeProto.SPARSE_TENSOR: sparse,
        onnx.AttributeProto.TYPE_PROTO: type_proto,
        onnx.AttributeProto.FLOATS: [0.5, 0.25],
        onnx.AttributeProto.INTS: [1, 2, 3],
        onnx.AttributeProto.STRINGS: ["a", "b"],
        onnx.AttributeProto.TENSORS: [tensor],
        onnx.AttributeProto.GRAPHS: [graph],
        onnx.AttributeProto.SPARSE_TENSORS: [sparse],
        onnx.AttributeProto.TYPE_PROTOS: [type_proto],
    }
    return helper.make_attribute("a", values[kind], attr_type=kind)


EXTRACTED_PARAMS = {
    onnx.AttributeProto.FLOAT: [("a", 0.5)],
    onnx.AttributeProto.INT: [("a", 3)],
    onnx.AttributeProto.FLOATS: [("a_0", 0.5), ("a_1", 0.25)],
    onnx.AttributeProto.INTS: [("a_0", 1), ("a_1", 2), ("a_2", 3)],
    onnx.AttributeProto.TENSOR: [("a_0", 1.5), ("a_1", 2.5)],
    onnx.AttributeProto.STRING: [],
    onnx.AttributeProto.STRINGS: [],
    onnx.AttributeProto.TENSORS: [],
    onnx.AttributeProto.SPARSE_TENSOR: [],
    onnx.AttributeProto.SPARSE_TENSORS: [],
}
REPORTED = {
    onnx.AttributeProto.GRAPH: "subgraph",
    onnx.AttributeProto.GRAPHS: "subgraph",
    onnx.AttributeProto.TYPE_PROTO: "type TYPE_PROTO",
    onnx.AttributeProto.TYPE_PROTOS: "type TYPE_PROTOS",
}


def test_every_attribute_type_is_handled_or_reported():
    kinds = set(onnx.AttributeProto.AttributeType.values()) - {onnx.AttributeProto.UNDEFINED}
    assert kinds == set(EXTRACTED_PARAMS) | set(REPORTED)


@pytest.mark.parametrize(
    "kind", sorted(set(EXTRACTED_PARAMS) | set(REPORTED)), ids=onnx.AttributeProto.AttributeType.Name
)
def test_attribute_of_each_type(kind: int, tmp_path: Path):
    path = _with_custom_node(exported("mlp"), tmp_path / "attrs.onnx", replace=None, attributes=[_attribute(kind)])
    extraction = extract_operations(path, BATCH)
    if kind in REPORTED:
        [skip] = extraction.skipped
        assert skip.name == "probe" and "attrs.onnx" in skip.reason and "'a'" in skip.reason
        assert REPORTED[kind] in skip.reason
        with pytest.raises(ExtractionError, match=r"attrs\.onnx: node 'probe' \(Probe\): attribute 'a'"):
            extract_operations(path, BATCH, strict=True)
        return
    [probe] = [n for n in extraction.nodes if n.name == "probe"]
    assert list(probe.params) == [("?", BATCH), ("?", 784), *EXTRACTED_PARAMS[kind]]
    assert dict(probe.attributes)["a"] not in (None, "")


def test_string_attributes_stay_readable(tmp_path: Path):
    attrs = [_attribute(onnx.AttributeProto.STRING), _attribute(onnx.AttributeProto.SPARSE_TENSOR)]
    attrs[1].name = "s"
    path = _with_custom_node(exported("mlp"), tmp_path / "s.onnx", replace=None, attributes=attrs)
    [probe] = [n for n in extract_operations(path, BATCH).nodes if n.name == "probe"]
    readable = dict(probe.attributes)
    assert readable["a"] == "fast"
    assert "sparse" in readable["s"] and "[4]" in readable["s"]


def test_the_batch_size_must_be_positive():
    with pytest.raises(ExtractionError, match="batch_size must be >= 1"):
        extract_operations(exported("mlp"), 0)


def test_cost_is_reported_for_known_operators_only(encoder):
    operations = encoder.operations()
    known = [op for op in operations if op.op_type == "MatMul"]
    assert all(op.flops and op.flops > 0 and op.bytes_moved for op in known)
    total = sum(op.flops for op in known)
    assert math.isclose(total, 2 * (2 * 16**3 * BATCH * 4 + BATCH * 16 * 64 * (192 + 64 + 256 + 256)))


class Convolutions(nn.Module):
    """A 1-D convolution with SAME padding and a 3-D one: the first maps onto the 2-D descriptors with H=1,
    the second has no canonical form."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1d = nn.Conv1d(4, 8, 5, stride=2, padding=2)
        self.conv3d = nn.Conv3d(2, 3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv1d(x)  # (N, 8, 10)
        return self.conv3d(y.reshape(-1, 2, 4, 2, 5))


def test_one_dimensional_convolution_uses_h_1_and_three_dimensional_is_described_by_position(tmp_path: Path):
    path = export(Convolutions(), torch.randn(2, 4, 20), tmp_path / "convs.onnx")
    extraction = extract_operations(path, 6)
    conv1d, conv3d = by_type(extraction, "Conv")
    p = dict(conv1d.params)
    assert (p["N"], p["C"], p["H"], p["W"], p["K"]) == (6, 4, 1, 20, 8)
    assert (p["kernel_shape_0"], p["kernel_shape_1"], p["strides_0"], p["strides_1"]) == (1, 5, 1, 2)
    assert (p["pads_0"], p["pads_1"], p["pads_2"], p["pads_3"]) == (0, 2, 0, 2)
    assert [v for d, v in conv3d.params if d == "?"][:5] == [6, 2, 4, 2, 5]  # the activation comes first
    assert dict(conv3d.params)["kernel_shape_2"] == 2
    assert any("only 1-D and 2-D convolutions" in note for note in extraction.notes)


def test_auto_pad_same_upper_becomes_explicit_pads(tmp_path: Path):
    model = onnx.load(
        str(export(nn.Conv2d(3, 4, 3, stride=2, padding=1), torch.randn(1, 3, 9, 9), tmp_path / "c.onnx"))
    )
    [conv] = [n for n in model.graph.node if n.op_type == "Conv"]
    kept = [a for a in conv.attribute if a.name not in ("pads",)]
    del conv.attribute[:]
    conv.attribute.extend([*kept, helper.make_attribute("auto_pad", "SAME_UPPER")])
    onnx.save(model, str(tmp_path / "same.onnx"))
    p = dict(by_type(extract_operations(tmp_path / "same.onnx", 2), "Conv")[0].params)
    # out = ceil(9 / 2) = 5; total pad = (5 - 1) * 2 + 3 - 9 = 2, split evenly
    assert (p["pads_0"], p["pads_1"], p["pads_2"], p["pads_3"]) == (1, 1, 1, 1)


def test_symbolic_inference_of_onnxruntime_resolves_what_onnx_leaves_open():
    from dlbench.onnx import dims, infer, load

    model, _ = load.load_model(exported("encoder"))
    light, weights = load.light_model(model)
    dims.set_dimensions(light, BATCH, {}, exported("encoder"), weights)
    inferred = onnx.shape_inference.infer_shapes(light, data_prop=True)
    assert infer._value_shapes(inferred.graph)["/Reshape_output_0"] is None
    notes: list[str] = []
    symbolic = infer._symbolic_shapes(inferred, notes)
    assert notes == [] and symbolic["/Reshape_output_0"] == (BATCH, 16, 4, 16)


def test_a_weight_with_too_few_bytes_is_named(tmp_path: Path):
    model = onnx.load(str(exported("mlp")))
    weight = model.graph.initializer[0]
    weight.raw_data = weight.raw_data[:100]
    onnx.save(model, str(tmp_path / "damaged.onnx"))
    with pytest.raises(ExtractionError, match=rf"damaged\.onnx: weight '{weight.name}' holds fewer than"):
        extract_operations(tmp_path / "damaged.onnx", BATCH)


def test_weights_beside_the_model_are_not_needed_for_shapes_but_must_exist(tmp_path: Path):
    model = onnx.load(str(exported("mlp")))
    onnx.save(model, str(tmp_path / "ext.onnx"), save_as_external_data=True, location="ext.data", size_threshold=0)
    extraction = extract_operations(tmp_path / "ext.onnx", BATCH)
    assert [dict(n.params)["K"] for n in by_type(extraction, "Gemm")] == [784, 256, 128]
    (tmp_path / "ext.data").unlink()
    with pytest.raises(ExtractionError, match=r"ext\.onnx: weight .* is stored in 'ext\.data' .* missing"):
        extract_operations(tmp_path / "ext.onnx", BATCH)
